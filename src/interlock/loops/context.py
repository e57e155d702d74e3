"""The objects of one run, handed down by the trainer: model, optimizers, data, plugins."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch

from interlock.connectors.data import EpochData
from interlock.connectors.optim import Scheduler
from interlock.connectors.signals import PreemptionFlag
from interlock.core.config import TrainerConfig
from interlock.core.module import Module

__all__ = ["Preempted", "RunContext"]


class Preempted(Exception):
    """Raised by the fit loop after a preemption signal, once the checkpoint is saved."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"preempted by signal {signum}; a checkpoint was saved at the last batch boundary")


@attrs.define
class RunContext:
    """Mutable holder of the run's objects (not of what the trainer knows: that is the state)."""

    module: Module
    config: TrainerConfig
    precision: Any
    device: torch.device = attrs.field(factory=lambda: torch.device("cpu"))
    move: Callable[[Any], Any] | None = None  # to the device; None: batches stay where they are
    steps: dict[str, Callable[..., Any]] = attrs.field(factory=dict)
    optimizers: list[torch.optim.Optimizer] = attrs.field(factory=list)
    schedulers: list[Scheduler] = attrs.field(factory=list)
    data: dict[str, EpochData] = attrs.field(factory=dict)
    preemption: PreemptionFlag | None = None
    request_preemption_save: Callable[[], None] = lambda: None
    rng_to_restore: dict[str, Any] | None = None
    reduce_metrics_fn: Callable[[dict[str, float]], dict[str, float]] | None = None
    agree: Callable[[bool], bool] | None = None
    vote: Any = None
    predictions: list[Any] = attrs.field(factory=list)

    def reduce_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Metrics averaged over processes (as they are, in one process)."""
        return self.reduce_metrics_fn(metrics) if self.reduce_metrics_fn is not None else metrics

    def step(self, name: str) -> Callable[..., Any]:
        """The callable that runs a module step (through the strategy's wrapper, if any)."""
        fn = self.steps.get(name)
        return fn if fn is not None else getattr(self.module, name)
