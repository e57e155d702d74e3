"""Lightning's ``loggers`` names: interlock's loggers, with Lightning's arguments.

``CSVLogger`` and ``TensorBoardLogger`` write where Lightning puts them: ``save_dir/name/version_N``
(the next free ``N`` when ``version`` is not given, chosen when the logger is made).
``logger.log_dir``, ``name`` and ``version`` read as in Lightning. ``MLFlowLogger`` and
``WandbLogger`` are interlock's own (they take Lightning's arguments). A ``Logger`` subclass
written against Lightning's API is called as Lightning calls it. Comet, Neptune and
LitLogger are not here yet: importing them raises ``ImportError`` saying so.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from interlock.core.events import Event, listen
from interlock.core.state import TrainerState
from interlock.core.updates import SetListenerState
from interlock.lightning._refuse import missing, refuse_value
from interlock.lightning.utilities.rank_zero import global_rank
from interlock.listeners import MLFlowLogger, WandbLogger
from interlock.listeners._tracking import TrackingLogger
from interlock.listeners.csv_lightning import LightningCSVLogger
from interlock.listeners.tensorboard_lightning import LightningTensorBoardLogger

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger", "rank_zero_experiment"]

T = TypeVar("T")


class Logger(TrackingLogger):
    """Lightning's ``Logger`` base: a subclass written against Lightning's API is called as Lightning calls it.

    Define ``name``, ``version``, ``log_hyperparams(params)`` and ``log_metrics(metrics, step)``
    (and ``save()``, ``finalize(status)``, ``experiment`` if you use them). interlock calls them at
    Lightning's moments with Lightning's arguments: the hyper-parameters when a stage starts
    (``save_hyperparameters``), a step row every ``log_every_n_steps`` stepped batches, a row per
    epoch, validation and test (``epoch`` an ``int``, at Lightning's step numbers), ``save()`` after
    each call, and ``finalize("success")`` (or ``"failed"``) when the stage ends. Only rank 0
    logs. Unlike interlock's own tracking loggers, an exception in your logger fails the run, as in
    Lightning. ``log_graph`` and ``after_save_checkpoint`` overrides are refused when the class is
    defined (interlock does not call them).
    """

    # TrackingLogger's per-instance settings as class defaults: Lightning's base has no __init__ to call
    _rank_zero: bool | None = None
    log_model: Any = False
    prefix = ""
    log_every_n_steps = 50
    _hparams: dict[str, Any] | None = None
    _checkpoints: tuple[Any, ...] = ()
    _lr_monitors: tuple[Any, ...] = ()
    _run_id: str | None = None
    _off = False
    _warned = False
    _manual = False
    _stage_starts: frozenset[str] = frozenset()
    _step_names: Any = frozenset()  # a set from the first stage start on
    _names_epoch = -1
    where = "the logger"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        uncalled = {
            "log_graph": "call self.logger.log_graph(self) in your module's on_fit_start",
            "after_save_checkpoint": "read the checkpoint files in a Callback's on_save_checkpoint, or use "
            "MLFlowLogger/WandbLogger(log_model=...)",
        }
        for name, instead in uncalled.items():
            if name in vars(cls):
                raise TypeError(f"{cls.__name__}.{name} is never called by interlock: {instead}")

    def __init__(self) -> None:
        TrackingLogger.__init__(self)

    # -- Lightning's Logger API: the defaults of its base ------------------------------------
    @property
    def name(self) -> str | None:
        """The experiment's name (define it)."""
        return None

    @property
    def version(self) -> int | str | None:
        """The experiment's version (define it)."""
        return None

    @property
    def save_dir(self) -> str | None:
        """Where the logger writes (``None``: nowhere on disk), as Lightning's base."""
        return None

    @property
    def root_dir(self) -> str | None:
        return None

    @property
    def log_dir(self) -> str | None:
        return None

    @property
    def group_separator(self) -> str:
        return "/"

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define log_metrics(metrics, step), as in Lightning")

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define log_hyperparams(params), as in Lightning")

    def save(self) -> None:
        """Called after each row and the hyper-parameters (Lightning's base does nothing)."""

    def finalize(self, status: str) -> None:
        """Called when a stage ends, with ``"success"`` or ``"failed"`` (Lightning's base calls :meth:`save`)."""
        self.save()

    # -- TrackingLogger's sends, as Lightning's logger connector makes them -----------------
    @listen("#stage_start")
    def on_stage_start(self, event: Event, state: TrainerState) -> SetListenerState | None:
        """Lightning logs the hyper-parameters of every logger when a stage starts, before anything else."""
        super().on_stage_start(event, state)
        return self._ensure(state) if event.name in self._stage_starts and self._rank_zero else None

    def _open(self, run_id: str | None) -> str:
        return run_id or "lightning"

    def _begin(self, run_id: str | None) -> None:
        if self._run_id is None:  # the hyper-parameters whenever save_hyperparameters recorded them, even none
            self._run_id = self._open(run_id)
            if self._hparams is not None:
                self._send_params(self._hparams)

    def _send_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.log_metrics(dict(metrics), step)
        self.save()

    def _send_params(self, params: Mapping[str, Any]) -> None:
        self.log_hyperparams(dict(params))
        self.save()

    def _send_checkpoints(self, files: Any) -> None:  # log_model is always False here
        pass

    def _close(self, status: str) -> None:
        self.finalize("success" if status == "success" else "failed")

    def _epoch_value(self, epoch: int) -> float:
        return epoch  # Lightning's logger connector passes trainer.current_epoch, an int

    def _safely(self, what: str, call: Callable[[], Any]) -> bool:
        call()  # the user's logger: its exception is the run's, as in Lightning
        return True


def rank_zero_experiment(fn: Callable[[Any], T]) -> Callable[[Any], T | _DummyExperiment]:
    """Lightning's decorator of a logger's ``experiment``: the real one on rank 0, a do-nothing stand-in elsewhere."""

    @functools.wraps(fn)
    def experiment(self: Any) -> T | _DummyExperiment:
        if global_rank() > 0:
            return _DummyExperiment()
        return fn(self)

    return experiment


class _DummyExperiment:
    """Accepts any call and does nothing (the experiment of a process other than rank 0)."""

    def nop(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, _: str) -> Callable[..., None]:
        return self.nop

    def __getitem__(self, _: Any) -> _DummyExperiment:
        return self

    def __setitem__(self, *_: Any) -> None:
        pass


def _version_dir(owner: str, save_dir: Any, name: str | None, version: int | str | None) -> tuple[Path, int | str]:
    """``save_dir/name/version_N`` (Lightning's layout) and the version; ``N`` is the next free one when not given."""
    if save_dir is None:
        raise TypeError(f"{owner}() missing save_dir: pass the folder Lightning would write to, e.g. save_dir='.'")
    root = Path(save_dir) / (name or "")
    if version is None:
        taken = [int(m.group(1)) for p in root.glob("version_*") if (m := re.fullmatch(r"version_(\d+)", p.name))]
        version = max(taken, default=-1) + 1
    sub = version if isinstance(version, str) else f"version_{version}"
    return root / sub, version


class _VersionDirs:
    """``name``, ``save_dir`` and ``log_dir`` as Lightning's loggers have them (files go to ``log_dir``)."""

    folder: Path
    logger_name: str
    _save_dir: str

    def _place(self, save_dir: Any, name: str | None) -> None:
        self.root_dir = str(Path(save_dir) / (name or ""))
        self.logger_name = name or ""
        self._save_dir = str(save_dir)

    @property
    def name(self) -> str:
        """Lightning's ``logger.name``: the folder under ``save_dir``."""
        return self.logger_name

    @property
    def save_dir(self) -> str:
        """The ``save_dir`` given, as Lightning's (the files go to :attr:`log_dir` under it)."""
        return self._save_dir

    @property
    def log_dir(self) -> str:
        """``save_dir/name/version_N`` (``/sub_dir`` for TensorBoard), as Lightning's."""
        return str(self.folder)


class CSVLogger(_VersionDirs, LightningCSVLogger):  # type: ignore[misc]
    """Lightning's ``CSVLogger(save_dir, name="lightning_logs", version=None, prefix="")``.

    ``metrics.csv`` in the version dir has Lightning's rows and columns: a row every
    ``log_every_n_steps`` batches and one per epoch, validation or test end, with ``epoch`` and
    ``step`` in each; the header sorted. Rows are written as they come (Lightning flushes every
    ``flush_logs_every_n_steps``; the file ends the same).
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        if not isinstance(flush_logs_every_n_steps, int) or flush_logs_every_n_steps < 1:
            raise ValueError(f"CSVLogger(flush_logs_every_n_steps={flush_logs_every_n_steps!r}) must be an int >= 1")
        folder, self.version = _version_dir("CSVLogger", save_dir, name, version)
        super().__init__(save_dir=folder, prefix=prefix)
        self._place(save_dir, name)

    @property
    def experiment(self) -> Any:
        raise AttributeError(
            "CSVLogger.experiment (Lightning's ExperimentWriter) is not in interlock: log values with self.log, "
            "they are written to log_dir/metrics.csv"
        )


class TensorBoardLogger(_VersionDirs, LightningTensorBoardLogger):  # type: ignore[misc]
    """Lightning's ``TensorBoardLogger(save_dir, name="lightning_logs", version=None, ...)``.

    The event files hold Lightning's scalars: every value logged on step, every ``log_every_n_steps``
    batches, and every epoch, validation or test value, each with ``epoch``, at Lightning's step; the
    ``hp_metric`` placeholder and ``hparams.yaml``. ``logger.experiment`` is the ``SummaryWriter``
    once a run has started (for ``add_image`` and the like).
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        refuse_value("TensorBoardLogger", "log_graph", log_graph, (False,), "call experiment.add_graph(...) yourself")
        if kwargs:
            raise ValueError(
                f"TensorBoardLogger({', '.join(kwargs)}=...): SummaryWriter arguments are not supported by interlock; "
                "remove them"
            )
        if not isinstance(default_hp_metric, bool):
            raise ValueError(f"TensorBoardLogger(default_hp_metric={default_hp_metric!r}) must be True or False")
        folder, self.version = _version_dir("TensorBoardLogger", save_dir, name, version)
        if sub_dir is not None:
            folder = folder / sub_dir
        super().__init__(save_dir=folder, prefix=prefix, default_hp_metric=default_hp_metric)
        self._place(save_dir, name)


_LATER = "it is not in interlock yet (planned); use MLFlowLogger, WandbLogger, TensorBoardLogger or CSVLogger"
__getattr__ = missing(
    "interlock.lightning.loggers",
    {
        "CometLogger": f"Comet: {_LATER}",
        "NeptuneLogger": f"Neptune: {_LATER}",
        "LitLogger": f"LitLogger: {_LATER}",
    },
)

#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
