"""GradientAccumulationScheduler: change how many batches each optimizer step accumulates, by epoch."""

from __future__ import annotations

from collections.abc import Mapping

from interlock.core.config import TrainerConfig
from interlock.core.events import Event, Listener, listen
from interlock.core.state import TrainerState
from interlock.core.updates import SetAccumulation

__all__ = ["GradientAccumulationScheduler"]


class GradientAccumulationScheduler(Listener):
    """Lightning's ``GradientAccumulationScheduler(scheduling={epoch: factor})``.

    Epochs are 0-based; from each listed epoch on, gradients are accumulated over its factor of
    batches (the loss divided by it, the optimizer stepping at every factor-th batch and at the
    epoch's last). Before the first listed epoch the factor is 1. At each ``#epoch_start`` it
    returns ``SetAccumulation``: the factor is trainer state, so a resumed run keeps it. It cannot
    be combined with ``Trainer(accumulate_grad_batches=N > 1)`` nor with manual optimization (as in
    Lightning).
    """

    schedules_accumulation = True

    def __init__(self, scheduling: Mapping[int, int]) -> None:
        if not isinstance(scheduling, Mapping) or not scheduling:
            raise TypeError(
                f"GradientAccumulationScheduler(scheduling={scheduling!r}) must be a non-empty dict {{epoch: factor}}"
            )
        if any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in scheduling):
            raise ValueError(
                f"GradientAccumulationScheduler: epochs must be ints >= 0 (0-based), got {list(scheduling)}"
            )
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in scheduling.values()):
            raise ValueError(
                f"GradientAccumulationScheduler: factors must be ints >= 1, got {list(scheduling.values())}"
            )
        self.scheduling = {0: 1, **dict(scheduling)}
        self.epochs = sorted(self.scheduling)

    def configure(self, config: TrainerConfig) -> None:
        if config.accumulate_grad_batches != 1:
            raise ValueError(
                f"Trainer(accumulate_grad_batches={config.accumulate_grad_batches}) with a "
                "GradientAccumulationScheduler: remove one of them (the scheduler sets the factor of each epoch; "
                "Lightning refuses both too)"
            )

    def factor(self, epoch: int) -> int:
        """The accumulation factor of ``epoch`` (0-based)."""
        return self.scheduling[max(e for e in self.epochs if e <= epoch)]

    @listen("#epoch_start")
    def on_train_epoch_start(self, event: Event, state: TrainerState) -> SetAccumulation:
        return SetAccumulation(self.factor(state.epoch))
