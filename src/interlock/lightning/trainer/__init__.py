"""Lightning's ``trainer`` package: ``Trainer``, and the enums of ``trainer.state`` in ``states``."""

from __future__ import annotations

from interlock.lightning.trainer.trainer import Trainer

__all__ = ["Trainer"]
