"""LRSweep: the learning-rate finder's sweep, as a listener (Lightning's ``_LRCallback`` and scheduler).

Each optimizer step ``k`` of the sweep trains at ``lr_k``: ``min_lr`` for the first, then
``min_lr * (max_lr / min_lr) ** ((k + 1) / num_training)`` (``"exponential"``) or
``min_lr + (k + 1) / num_training * (max_lr - min_lr)`` (``"linear"``), the rates Lightning's
finder schedules (its scheduler's first step skips ``k = 0``'s rate). After each step's batch the
loss is smoothed (``beta = 0.98``, bias-corrected by the step count as Lightning's) and kept with
its rate; the sweep stops (``Stop``) once the smoothed loss exceeds ``early_stop_threshold``
times the best so far. Rates and losses live in the trainer state (:meth:`LRSweep.results`).
"""

from __future__ import annotations

import math
from typing import Any

from interlock.core.events import Event, Listener, listen
from interlock.core.state import TrainerState
from interlock.core.updates import SetLearningRate, Stop, Update
from interlock.listeners._util import loss_tensor

__all__ = ["LRSweep", "sweep_rate"]

MODES = ("exponential", "linear")


def sweep_rate(k: int, min_lr: float, max_lr: float, num_training: int, mode: str) -> float:
    """The learning rate of the sweep's ``k``-th optimizer step (0-based)."""
    if k == 0:
        return min_lr
    r = (k + 1) / num_training
    return min_lr * (max_lr / min_lr) ** r if mode == "exponential" else min_lr + r * (max_lr - min_lr)


class LRSweep(Listener):
    """Set each step's rate of the sweep and record the smoothed loss after it (see the module docs)."""

    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1.0,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        accumulate_grad_batches: int = 1,
        beta: float = 0.98,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"lr_find(mode={mode!r}): use 'exponential' or 'linear'")
        for name, value in (("min_lr", min_lr), ("max_lr", max_lr)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"lr_find({name}={value!r}) must be a positive number")
        if not min_lr < max_lr:
            raise ValueError(f"lr_find(min_lr={min_lr}, max_lr={max_lr}): min_lr must be below max_lr")
        if isinstance(num_training, bool) or not isinstance(num_training, int) or num_training < 1:
            raise ValueError(f"lr_find(num_training={num_training!r}) must be an int >= 1 (the rates to try)")
        if early_stop_threshold is not None and (
            isinstance(early_stop_threshold, bool) or not isinstance(early_stop_threshold, int | float)
        ):
            raise ValueError(f"lr_find(early_stop_threshold={early_stop_threshold!r}) must be a number or None")
        self.min_lr, self.max_lr = float(min_lr), float(max_lr)
        self.num_training, self.mode = num_training, mode
        self.early_stop_threshold = early_stop_threshold
        self.accumulate_grad_batches = accumulate_grad_batches
        self.beta = beta

    @listen("#fit#stage_start")
    def on_fit_start(self, event: Event) -> None:
        optimizers: Any = event.payload.get("lr")
        if optimizers is not None and len(optimizers) != 1:
            raise ValueError(
                f"the learning-rate finder works with one optimizer, and configure_optimizers returned "
                f"{len(optimizers)} (Lightning's limit too)"
            )

    @listen("#optimizer_step")
    def on_optimizer_step(self, event: Event, state: TrainerState) -> list[Update]:
        lr = sweep_rate(state.global_step, self.min_lr, self.max_lr, self.num_training, self.mode)
        return [SetLearningRate(lr), self.store(state, lrs=(*self.stored(state).get("lrs", ()), lr))]

    @listen("#train_batch_end")
    def on_train_batch_end(self, event: Event, state: TrainerState) -> list[Update] | None:
        index: Any = event.payload.get("batch_idx")
        if (int(index) + 1) % self.accumulate_grad_batches:
            return None
        stored = self.stored(state)
        losses = tuple(stored.get("losses", ()))
        loss = loss_tensor(event.payload.get("outputs"))
        if loss is None:
            return [self.store(state, losses=(*losses, math.nan))]
        step = state.global_step
        avg = self.beta * float(stored.get("avg_loss", 0.0)) + (1 - self.beta) * loss.item()
        smoothed = avg / (1 - self.beta ** (step + 1))
        best = float(stored.get("best_loss", 0.0))
        out: list[Update] = []
        if self.early_stop_threshold is not None and step > 1 and smoothed > self.early_stop_threshold * best:
            out.append(Stop(f"learning-rate finder: the loss diverged ({smoothed:.4g} > {self.early_stop_threshold} x "
                            f"best {best:.4g})"))  # fmt: skip
        if smoothed < best or step == 1:
            best = smoothed
        out.append(self.store(state, avg_loss=avg, best_loss=best, losses=(*losses, smoothed)))
        return out

    def results(self, state: TrainerState) -> dict[str, list[float]]:
        """``{"lr": [...], "loss": [...]}``: each step's rate and smoothed loss, as Lightning's ``results``."""
        stored = self.stored(state)
        lrs, losses = list(stored.get("lrs", ())), list(stored.get("losses", ()))
        n = min(len(lrs), len(losses))
        return {"lr": [float(x) for x in lrs[:n]], "loss": [float(x) for x in losses[:n]]}
