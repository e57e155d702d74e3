"""Lightning's deeper import paths (``lightning.pytorch.callbacks.model_checkpoint``, ...) in ``interlock.lightning``.

Lightning code imports names from the module that defines them as often as from the package
(``from lightning.pytorch.loggers.logger import Logger``,
``from lightning.pytorch.utilities.types import STEP_OUTPUT``). With its imports switched, each of
Lightning 2.6's public module paths resolves here:

- a path under an area interlock mirrors (``callbacks``, ``loggers``, ``core``, ``utilities``, ...)
  is that area's module under a second name: ``interlock.lightning.callbacks.model_checkpoint`` *is*
  ``interlock.lightning.callbacks`` (the same names, the same objects, the same refusals);
- a path to Lightning's internals (its loops, connectors, launchers, migration) is found, and
  importing it is a ``ModuleNotFoundError`` naming what interlock has instead;
- a path Lightning does not have either is Python's own ``ModuleNotFoundError``.

A module that exists in interlock (``utilities.types``, ``trainer.states``, ...) is found the usual
way; this finder sits last on ``sys.meta_path`` and sees only what no other finder found.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["LIGHTNING_MODULES", "install", "resolve"]

_ROOT = "interlock.lightning"

#: Lightning 2.6's public modules below ``lightning.pytorch`` (tests/dropin/test_paths.py checks the list)
LIGHTNING_MODULES = frozenset(
    [
        "accelerators.accelerator",
        "accelerators.cpu",
        "accelerators.cuda",
        "accelerators.mps",
        "accelerators.xla",
        "callbacks.batch_size_finder",
        "callbacks.callback",
        "callbacks.checkpoint",
        "callbacks.device_stats_monitor",
        "callbacks.early_stopping",
        "callbacks.finetuning",
        "callbacks.gradient_accumulation_scheduler",
        "callbacks.lambda_function",
        "callbacks.lr_finder",
        "callbacks.lr_monitor",
        "callbacks.model_checkpoint",
        "callbacks.model_summary",
        "callbacks.on_exception_checkpoint",
        "callbacks.prediction_writer",
        "callbacks.progress",
        "callbacks.progress.progress_bar",
        "callbacks.progress.rich_progress",
        "callbacks.progress.tqdm_progress",
        "callbacks.pruning",
        "callbacks.rich_model_summary",
        "callbacks.spike",
        "callbacks.stochastic_weight_avg",
        "callbacks.throughput_monitor",
        "callbacks.timer",
        "callbacks.weight_averaging",
        "core.datamodule",
        "core.hooks",
        "core.mixins",
        "core.mixins.hparams_mixin",
        "core.module",
        "core.optimizer",
        "core.saving",
        "demos.mnist_datamodule",
        "loggers.comet",
        "loggers.csv_logs",
        "loggers.litlogger",
        "loggers.logger",
        "loggers.mlflow",
        "loggers.neptune",
        "loggers.tensorboard",
        "loggers.utilities",
        "loggers.wandb",
        "loops",
        "loops.evaluation_loop",
        "loops.fetchers",
        "loops.fit_loop",
        "loops.loop",
        "loops.optimization",
        "loops.optimization.automatic",
        "loops.optimization.closure",
        "loops.optimization.manual",
        "loops.prediction_loop",
        "loops.progress",
        "loops.training_epoch_loop",
        "loops.utilities",
        "overrides",
        "overrides.distributed",
        "plugins.environments",
        "plugins.io",
        "plugins.io.async_plugin",
        "plugins.io.checkpoint_plugin",
        "plugins.io.torch_plugin",
        "plugins.io.wrapper",
        "plugins.io.xla_plugin",
        "plugins.layer_sync",
        "plugins.precision",
        "plugins.precision.amp",
        "plugins.precision.bitsandbytes",
        "plugins.precision.deepspeed",
        "plugins.precision.double",
        "plugins.precision.fsdp",
        "plugins.precision.half",
        "plugins.precision.precision",
        "plugins.precision.transformer_engine",
        "plugins.precision.xla",
        "profilers.advanced",
        "profilers.base",
        "profilers.profiler",
        "profilers.pytorch",
        "profilers.simple",
        "profilers.xla",
        "serve",
        "serve.servable_module",
        "serve.servable_module_validator",
        "strategies.ddp",
        "strategies.deepspeed",
        "strategies.fsdp",
        "strategies.launchers",
        "strategies.launchers.launcher",
        "strategies.launchers.multiprocessing",
        "strategies.launchers.subprocess_script",
        "strategies.launchers.xla",
        "strategies.model_parallel",
        "strategies.parallel",
        "strategies.single_device",
        "strategies.single_xla",
        "strategies.strategy",
        "strategies.xla",
        "trainer.call",
        "trainer.configuration_validator",
        "trainer.connectors",
        "trainer.connectors.accelerator_connector",
        "trainer.connectors.callback_connector",
        "trainer.connectors.checkpoint_connector",
        "trainer.connectors.data_connector",
        "trainer.connectors.logger_connector",
        "trainer.connectors.logger_connector.fx_validator",
        "trainer.connectors.logger_connector.logger_connector",
        "trainer.connectors.logger_connector.result",
        "trainer.connectors.signal_connector",
        "trainer.setup",
        "tuner.batch_size_scaling",
        "tuner.lr_finder",
        "tuner.tuning",
        "utilities.argparse",
        "utilities.combined_loader",
        "utilities.compile",
        "utilities.consolidate_checkpoint",
        "utilities.deepspeed",
        "utilities.enums",
        "utilities.exceptions",
        "utilities.imports",
        "utilities.memory",
        "utilities.migration",
        "utilities.migration.migration",
        "utilities.migration.utils",
        "utilities.model_helpers",
        "utilities.model_registry",
        "utilities.model_summary.model_summary",
        "utilities.model_summary.model_summary_deepspeed",
        "utilities.parameter_tying",
        "utilities.parsing",
        "utilities.signature_utils",
        "utilities.testing",
        "utilities.upgrade_checkpoint",
        "utilities.warnings",
    ]
)

_CHART = (
    "interlock's loops are its statechart (statecharts/trainer.yaml): edit a copy and pass Trainer(chart=...), "
    "see docs/extending.md"
)
#: Lightning's internals, by path prefix (the longest that matches wins): what interlock has instead
_INTERNAL = {
    "loops": _CHART,
    "trainer.connectors": "interlock's connectors take (event, state) and return updates; to react to the run, "
    "write a Callback (interlock.lightning.Callback) or an interlock.Listener (docs/listeners.md)",
    "trainer.call": "Trainer.fit/validate/test/predict run the chart; hooks are called at Lightning's moments",
    "trainer.setup": "pass the Trainer's flags by name (docs/porting.md, Trainer flags)",
    "trainer.configuration_validator": "the Trainer checks its flags and the module when it is built and at "
    "the stage's start, with errors that name the fix",
    "overrides": "interlock wraps the module for DDP and FSDP itself (Trainer(strategy='ddp'|'fsdp'))",
    "serve": "interlock has no serving module; export the trained module with torch.export or TorchScript",
    "strategies.launchers": "interlock runs under torchrun or SLURM (one process a device), see docs/distributed.md",
    "utilities.migration": "interlock reads Lightning 2.x checkpoints as they are: interlock.load_lightning_weights",
    "utilities.upgrade_checkpoint": "interlock reads Lightning 2.x checkpoints as they are: "
    "interlock.load_lightning_weights",
    "utilities.consolidate_checkpoint": "convert sharded checkpoints with `interlock convert` (docs/checkpoints.md)",
    "utilities.deepspeed": "interlock has no DeepSpeed; use Trainer(strategy='fsdp')",
    "utilities.model_summary.model_summary_deepspeed": "interlock has no DeepSpeed",
    "utilities.testing": "Lightning's test helpers are not part of interlock",
    "utilities.model_registry": "interlock has no model registry client; load files with Module.load_from_checkpoint",
}

#: areas whose modules are each a second name for the area's interlock module (``utilities.model_summary.*``:
#: ``interlock.lightning.utilities.model_summary``)
_AREAS = ("utilities.model_summary", "callbacks", "loggers", "core", "demos", "plugins", "profilers",
          "strategies", "accelerators", "tuner", "utilities", "trainer")  # fmt: skip


def resolve(path: str) -> tuple[str, str]:
    """For Lightning's module ``path`` (below ``lightning.pytorch``): ``("alias", area)`` or ``("internal", why)``.

    ``KeyError`` when Lightning has no such module.
    """
    if path not in LIGHTNING_MODULES:
        raise KeyError(path)
    for prefix, why in sorted(_INTERNAL.items(), key=lambda kv: -len(kv[0])):
        if path == prefix or path.startswith(prefix + "."):
            return "internal", why
    for area in _AREAS:
        if path.startswith(area + "."):
            return "alias", area
    raise KeyError(path)  # pragma: no cover - every listed module is internal or under an area (tested)


class _Alias(importlib.abc.Loader):
    """Load Lightning's module path as a second name of the interlock module of its area."""

    def __init__(self, area: str) -> None:
        self.area = area

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        target = importlib.import_module(f"{_ROOT}.{self.area}")
        lightning = module.__name__.replace(_ROOT, "lightning.pytorch", 1)
        module.__doc__ = f"Lightning's ``{lightning}``: the names of ``{target.__name__}`` under Lightning's path."
        module.__path__ = []  # Lightning's subpackages of it (callbacks.progress.tqdm_progress) resolve too

        def __getattr__(name: str) -> Any:
            try:
                return getattr(target, name)
            except AttributeError:
                if name.startswith("_"):
                    raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}") from None
            public = sorted(n for n in getattr(target, "__all__", ()) if not n.startswith("_"))
            raise ImportError(
                f"{module.__name__}.{name} (Lightning's {lightning}.{name}) has no interlock equivalent: "
                f"{module.__name__} holds the names of {target.__name__} ({', '.join(public) or 'none'}); "
                "see docs/porting.md",
                name=module.__name__,
            )

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        module.__dir__ = lambda: dir(target)  # type: ignore[method-assign]


class _Refused(importlib.abc.Loader):
    """Fail the import of one of Lightning's internal modules, saying what interlock has instead."""

    def __init__(self, why: str) -> None:
        self.why = why

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        lightning = name.replace(_ROOT, "lightning.pytorch", 1)
        raise ModuleNotFoundError(
            f"{name} (Lightning's internal module {lightning}) has no interlock equivalent: {self.why}", name=name
        )


class _Finder(importlib.abc.MetaPathFinder):
    """Resolve ``interlock.lightning.<Lightning's module path>`` when no other finder has found it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_ROOT + "."):
            return None
        rel = fullname[len(_ROOT) + 1 :]
        try:
            kind, what = resolve(rel)
        except KeyError:
            return None
        loader = _Refused(what) if kind == "internal" else _Alias(what)
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=True)


_FINDER = _Finder()


def install() -> None:
    """Put the finder last on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_FINDER)
