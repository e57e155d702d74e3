"""Lightning's type aliases used in signatures (``STEP_OUTPUT``, ``OptimizerLRScheduler``, ...)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, Union

import torch

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "DistributedDataParallel",
    "LRSchedulerConfig",
    "LRSchedulerConfigType",
    "LRSchedulerPLType",
    "LRSchedulerTypeUnion",
    "OptimizerConfig",
    "OptimizerLRScheduler",
    "OptimizerLRSchedulerConfig",
]

STEP_OUTPUT = Union[torch.Tensor, Mapping[str, Any], None]  # noqa: UP007 (a runtime alias, as Lightning's)
TRAIN_DATALOADERS = Any
EVAL_DATALOADERS = Any
OptimizerLRScheduler = Union[  # noqa: UP007
    torch.optim.Optimizer, Sequence[torch.optim.Optimizer], tuple[Sequence[Any], Sequence[Any]], Mapping[str, Any], None
]

LRSchedulerTypeUnion = Union[torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau]  # noqa: UP007
LRSchedulerPLType = LRSchedulerTypeUnion
LRSchedulerConfigType = dict[str, Any]


class OptimizerLRSchedulerConfig(TypedDict, total=False):
    """``configure_optimizers``' dict form: ``{"optimizer": ..., "lr_scheduler": ...}``, as Lightning's."""

    optimizer: torch.optim.Optimizer
    lr_scheduler: Any
    monitor: str


class OptimizerConfig(TypedDict):
    """``{"optimizer": ...}``: ``configure_optimizers``' dict form without a scheduler."""

    optimizer: torch.optim.Optimizer


class LRSchedulerConfig(TypedDict, total=False):
    """The ``lr_scheduler`` dict of ``configure_optimizers`` (``scheduler``, ``interval``, ``frequency``, ...)."""

    scheduler: Any
    name: str | None
    interval: str
    frequency: int
    reduce_on_plateau: bool
    monitor: str | None
    strict: bool


DistributedDataParallel = torch.nn.parallel.DistributedDataParallel
