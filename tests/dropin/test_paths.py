"""Lightning's deeper import paths under interlock.lightning: each works, or its import says what to use instead."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
import warnings

import pytest

from interlock.lightning import _paths

pl = pytest.importorskip("pytorch_lightning")


def _lightning_modules() -> list[str]:
    """Lightning's public module paths below the package, e.g. ``callbacks.model_checkpoint``."""
    return sorted(
        m.name.removeprefix("pytorch_lightning.")
        for m in pkgutil.walk_packages(pl.__path__, "pytorch_lightning.")
        if not any(part.startswith("_") for part in m.name.split("."))
    )


def _defined(module: object) -> list[str]:
    """The public names a Lightning module defines (its ``__all__``, else the classes and functions it defines)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    own = vars(module).items()
    return [n for n, v in own if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__  # type: ignore[attr-defined]
            and (inspect.isclass(v) or inspect.isfunction(v))]  # fmt: skip


def test_the_list_of_lightning_modules_is_lightnings() -> None:
    """Every listed path is a Lightning module, and every Lightning module is listed or exists in interlock."""
    theirs = set(_lightning_modules())
    assert theirs >= _paths.LIGHTNING_MODULES
    for path in sorted(theirs - _paths.LIGHTNING_MODULES):  # the areas, and modules interlock has under the name
        importlib.import_module(f"interlock.lightning.{path}")
        assert importlib.util.find_spec(f"interlock.lightning.{path}").loader.__class__.__module__ != _paths.__name__


@pytest.mark.parametrize("path", _lightning_modules())
def test_every_lightning_module_imports_or_says_what_to_use(path: str) -> None:
    """With the import switched, a Lightning module is interlock's module of its area, or an error naming the way."""
    name = f"interlock.lightning.{path}"
    try:
        kind, why = _paths.resolve(path)
    except KeyError:  # a module interlock has under Lightning's name
        kind, why = "own", ""
    if kind == "internal":
        with pytest.raises(
            ModuleNotFoundError, match="internal module lightning.pytorch.* has no interlock equivalent"
        ):
            importlib.import_module(name)
        return
    module = importlib.import_module(name)
    if not isinstance(module.__spec__.loader, _paths._Alias):  # type: ignore[union-attr]
        kind = "own"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lightning = importlib.import_module(f"pytorch_lightning.{path}")
    for attr in _defined(lightning):
        try:
            got = getattr(module, attr)
        except ImportError as exc:  # a refusal: it names Lightning's name and what interlock has
            assert attr in str(exc) and "interlock" in str(exc), str(exc)
            continue
        if kind == "alias":  # the same object as the area's own name
            assert got is getattr(importlib.import_module(f"interlock.lightning.{why}"), attr)


def test_a_deep_name_is_the_areas_object() -> None:
    """``callbacks.model_checkpoint.ModelCheckpoint`` is ``callbacks.ModelCheckpoint``; nested paths resolve too."""
    from interlock.lightning.callbacks.model_checkpoint import ModelCheckpoint as deep
    from interlock.lightning.callbacks.progress.tqdm_progress import TQDMProgressBar as nested
    from interlock.lightning.loggers.csv_logs import CSVLogger as csv

    from interlock.lightning.callbacks import ModelCheckpoint, TQDMProgressBar
    from interlock.lightning.loggers import CSVLogger

    assert deep is ModelCheckpoint and nested is TQDMProgressBar and csv is CSVLogger


def test_a_missing_or_refused_name_says_so() -> None:
    """A name Lightning's module has and interlock lacks is an ImportError naming what the module holds."""
    with pytest.raises(
        ImportError, match=r"DummyLogger .*Lightning's lightning.pytorch.loggers.logger.DummyLogger.*CSVLogger"
    ):
        from interlock.lightning.loggers.logger import DummyLogger  # noqa: F401
    with pytest.raises(ImportError, match="ModelPruning.*has no interlock equivalent"):
        from interlock.lightning.callbacks.pruning import ModelPruning  # noqa: F401
    with pytest.raises(ImportError, match="DDPStrategy.*strategy='ddp'"):
        from interlock.lightning.strategies.ddp import DDPStrategy  # noqa: F401
    module = importlib.import_module("interlock.lightning.callbacks.model_checkpoint")
    assert not hasattr(module, "__wrapped__")  # private and dunder names stay plain AttributeErrors (inspection tools)


def test_a_path_lightning_lacks_is_pythons_error() -> None:
    """A typo under a mirrored area is not resolved: Python's ModuleNotFoundError, as under Lightning."""
    with pytest.raises(ModuleNotFoundError, match="No module named 'interlock.lightning.callbacks.model_checkpointt'"):
        importlib.import_module("interlock.lightning.callbacks.model_checkpointt")
    assert importlib.util.find_spec("interlock.lightning.no_such") is None


def test_the_internal_error_names_the_way() -> None:
    """Lightning's loops and connectors point to the chart and to listeners."""
    with pytest.raises(ModuleNotFoundError, match=r"statecharts/trainer.yaml.*Trainer\(chart=\.\.\.\)"):
        importlib.import_module("interlock.lightning.loops.fit_loop")
    with pytest.raises(ModuleNotFoundError, match="Callback .*or an interlock.Listener"):
        importlib.import_module("interlock.lightning.trainer.connectors.logger_connector.result")


def test_a_fresh_process_resolves_a_deep_import_first() -> None:
    """A script whose first import is a deep path works (the finder is installed by the package's import)."""
    code = (
        "from interlock.lightning.utilities.types import STEP_OUTPUT\n"
        "from interlock.lightning.core.module import LightningModule\n"
        "print(LightningModule.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "LightningModule"
