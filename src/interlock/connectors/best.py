"""``ckpt_path="best"`` of validate/test/predict: the best checkpoint of this trainer's fit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from interlock.core.errors import CheckpointError
from interlock.core.state import TrainerState

__all__ = ["best_checkpoint"]


def best_checkpoint(listeners: Iterable[Any], state: TrainerState, method: str) -> str:
    """``ckpt_path="best"``: the best file of the first ``ModelCheckpoint`` in this trainer's fit (as Lightning)."""
    keepers = [item for item in listeners if hasattr(type(item), "best_model_path")]
    if not keepers:
        raise CheckpointError(
            f'Trainer.{method}(ckpt_path="best") needs a ModelCheckpoint listener, and this trainer has none: '
            "add ModelCheckpoint(monitor=...) to listeners, or pass a checkpoint path"
        )
    found = keepers[0].best_model_path  # a method of the state, or (interlock.lightning's) an attribute
    best = str(found(state) if callable(found) else found)
    if not best:
        raise CheckpointError(
            f'Trainer.{method}(ckpt_path="best"): this trainer\'s ModelCheckpoint has saved no checkpoint yet '
            "(fit this trainer first, with validation or a monitored metric), or pass a checkpoint path"
        )
    return best
