"""Tuning before training: the learning-rate finder (``lr_find``), as Lightning's ``Tuner.lr_find``."""

from __future__ import annotations

from interlock.trainer.lr_find import LRFinder, lr_find

__all__ = ["LRFinder", "lr_find"]
