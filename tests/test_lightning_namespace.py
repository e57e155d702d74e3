"""``import interlock.lightning as pl`` reaches what ``import lightning.pytorch as pl`` reaches: ``pl.callbacks.X``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types

import pytest

from interlock.lightning._paths import LIGHTNING_MODULES


def test_the_submodules_lightning_exposes_are_attributes_here_too() -> None:
    """Every submodule pytorch-lightning's package makes an attribute, and interlock.lightning has, is one here."""
    pl = pytest.importorskip("pytorch_lightning")
    import interlock.lightning as il

    theirs = {n for n, v in vars(pl).items() if isinstance(v, types.ModuleType) and not n.startswith("_")}
    ours = {n for n in theirs if importlib.util.find_spec(f"interlock.lightning.{n}") is not None}
    assert {"callbacks", "loggers", "strategies", "accelerators", "plugins", "profilers", "core", "tuner"} <= ours
    internal = {n for n in ours if n in LIGHTNING_MODULES}  # Lightning's internals (loops): the import says why not
    assert "loops" in internal
    for name in internal:
        with pytest.raises(ModuleNotFoundError, match="internal module .* has no interlock equivalent"):
            importlib.import_module(f"interlock.lightning.{name}")
    for name in ours - internal:
        assert getattr(il, name).__name__ == f"interlock.lightning.{name}"
    assert il.callbacks.ModelCheckpoint is importlib.import_module("interlock.lightning.callbacks").ModelCheckpoint
    with pytest.raises(AttributeError, match="has no attribute 'kallbacks'"):
        il.kallbacks  # noqa: B018


def test_importing_the_package_does_not_import_the_loggers() -> None:
    """The submodules load on first use: a bare import stays cheap (no logger or callback modules)."""
    code = "import sys, interlock.lightning; print('interlock.lightning.loggers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
