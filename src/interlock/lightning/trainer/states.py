"""Lightning's ``trainer.states``: the enums of ``trainer.state`` and its class (read-only here)."""

from __future__ import annotations

from interlock.connectors.lightning_state import LightningState as TrainerState
from interlock.connectors.lightning_state import RunningStage, TrainerFn, TrainerStatus

__all__ = ["RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"]
