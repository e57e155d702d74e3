"""Lightning's public import paths, backed by interlock: switch ``lightning.pytorch`` to ``interlock.lightning``.

A thin adapter onto the native API, not a second trainer: ``LightningModule`` is
:class:`interlock.Module` with Lightning's ``self.trainer`` (a read-only view),
``LightningDataModule`` is :class:`interlock.DataModule`, ``Trainer`` is
:class:`interlock.Trainer` (Lightning's flags) with the attributes Lightning code reads after a
run, and ``callbacks``, ``loggers``, ``cli``, ``utilities`` and ``demos`` mirror Lightning's
modules of those names. ``import pytorch_lightning as pl`` and ``import lightning.pytorch as pl``
both become ``import interlock.lightning as pl``. The native API stays the documented way
(docs/porting.md); this is the on-ramp.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from interlock.lightning import _paths
from interlock.lightning.callback import Callback
from interlock.lightning.core import LightningDataModule, LightningModule
from interlock.lightning.trainer import Trainer
from interlock.lightning.utilities.seed import seed_everything

__all__ = ["Callback", "LightningDataModule", "LightningModule", "Trainer", "seed_everything"]

#: the submodules ``import lightning.pytorch as pl`` makes reachable as ``pl.callbacks``, ``pl.loggers``, ...
#: (imported on first use here, so ``import interlock.lightning`` stays cheap)
_paths.install()  # Lightning's deeper module paths (callbacks.model_checkpoint, utilities.types, ...)

_SUBMODULES = (
    "accelerators",
    "callbacks",
    "cli",
    "core",
    "demos",
    "loggers",
    "plugins",
    "profilers",
    "strategies",
    "tuner",
)


def __getattr__(name: str) -> ModuleType:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
