"""Lightning's public import paths, backed by interlock: switch ``lightning.pytorch`` to ``interlock.lightning``.

A thin adapter onto the native API, not a second trainer: ``LightningModule`` is
:class:`interlock.Module`, ``Trainer`` is :class:`interlock.Trainer` taking Lightning's
arguments, and a Lightning-style ``Callback`` is run by an adapter listener at Lightning's
moments. The native API stays the documented way (docs/porting.md); this is the on-ramp.
"""

from __future__ import annotations

from interlock.connectors.rng import seed_everything
from interlock.core.datamodule import DataModule as LightningDataModule
from interlock.core.module import Module as LightningModule
from interlock.trainer.trainer import Trainer

__all__ = ["LightningDataModule", "LightningModule", "Trainer", "seed_everything"]
