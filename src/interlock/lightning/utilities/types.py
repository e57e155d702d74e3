"""Lightning's type aliases used in signatures (``STEP_OUTPUT``, ``OptimizerLRScheduler``, ...)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

import torch

__all__ = ["EVAL_DATALOADERS", "STEP_OUTPUT", "TRAIN_DATALOADERS", "OptimizerLRScheduler"]

STEP_OUTPUT = Union[torch.Tensor, Mapping[str, Any], None]  # noqa: UP007 (a runtime alias, as Lightning's)
TRAIN_DATALOADERS = Any
EVAL_DATALOADERS = Any
OptimizerLRScheduler = Union[  # noqa: UP007
    torch.optim.Optimizer, Sequence[torch.optim.Optimizer], tuple[Sequence[Any], Sequence[Any]], Mapping[str, Any], None
]
