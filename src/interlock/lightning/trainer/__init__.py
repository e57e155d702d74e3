"""Lightning's ``trainer`` package: ``Trainer``, and the enums of ``trainer.state`` in ``states``."""

from __future__ import annotations

from interlock.lightning.trainer.trainer import Trainer
from interlock.lightning.utilities.seed import seed_everything

__all__ = ["Trainer", "seed_everything"]
