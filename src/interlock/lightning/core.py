"""Lightning's ``core`` path: ``LightningModule`` and ``LightningDataModule``."""

from __future__ import annotations

from interlock.core.datamodule import DataModule as LightningDataModule
from interlock.core.module import Module as LightningModule

__all__ = ["LightningDataModule", "LightningModule"]
