"""StochasticWeightAveraging: average the weights of the last epochs and end the fit with the average.

Lightning's ``StochasticWeightAveraging``, as a listener. At the start of each training epoch
from ``swa_epoch_start`` to the last (``max_epochs - 1``) it folds the module's parameters (the
``parameters`` payload of ``#epoch_start``, a copy) into a running average, and from the first
of those epochs it sets the learning rate by ``torch.optim.swa_utils.SWALR``'s schedule
(annealing to ``swa_lrs`` over ``annealing_epochs``, one step per epoch), returning
``SetLearningRate``. When the fit has run its last epoch, it returns ``SetParameters``: the
averaged weights become the module's final weights. The average, the count and the schedule's
step live in the trainer state, so a resumed fit continues them exactly.

As Lightning's, it works with one optimizer. An epoch LR scheduler of the module stops counting
from ``swa_epoch_start``, as Lightning swaps it for ``SWALR``: its steps are overruled by the
rates SWALR sets. A module with a per-batch scheduler or with batch-norm layers is refused at
the fit's start, naming what to do (Lightning recomputes the batch-norm statistics in one extra
epoch; interlock does not).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from interlock.core.config import TrainerConfig
from interlock.core.events import Event, Listener, listen
from interlock.core.state import TrainerState
from interlock.core.updates import SetLearningRate, SetParameters, Update

__all__ = ["StochasticWeightAveraging"]

AvgFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def average(averaged: torch.Tensor, value: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """The equal-weight running mean: ``averaged + (value - averaged) / (count + 1)``."""
    return averaged + (value - averaged) / (count + 1)


def _anneal(strategy: str, t: float) -> float:
    return (1 - math.cos(math.pi * t)) / 2 if strategy == "cos" else t


def swalr(lr: float, swa_lr: float, step: int, epochs: int, strategy: str) -> float:
    """The learning rate ``SWALR`` sets at its ``step``-th step (0: when made) from the current ``lr``."""
    if epochs == 0:
        step = max(1, step)
    prev_alpha = _anneal(strategy, max(0, min(1, (step - 1) / max(1, epochs))))
    start = swa_lr if prev_alpha == 1 else (lr - prev_alpha * swa_lr) / (1 - prev_alpha)
    alpha = _anneal(strategy, max(0, min(1, step / max(1, epochs))))
    return swa_lr * alpha + start * (1 - alpha)


class StochasticWeightAveraging(Listener):
    """Average the weights from ``swa_epoch_start`` on, anneal the learning rate to ``swa_lrs``, end with the average.

    ``swa_lrs``: a positive float, or one per param group. ``swa_epoch_start``: an int >= 1
    (that epoch, 1-based) or a float in [0, 1] (``int(swa_epoch_start * max_epochs)``).
    ``annealing_epochs`` and ``annealing_strategy`` (``"cos"`` or ``"linear"``) are SWALR's.
    ``avg_fn(averaged, value, count)`` replaces the equal-weight mean. ``device``: where the
    average is kept (``None``: the parameters' device).
    """

    def __init__(
        self,
        swa_lrs: float | Sequence[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: AvgFn | None = None,
        device: torch.device | str | None = "cpu",
    ) -> None:
        bad = "StochasticWeightAveraging(swa_epoch_start={!r}) must be an int >= 1 or a float in [0, 1]"
        if isinstance(swa_epoch_start, bool) or not isinstance(swa_epoch_start, int | float):
            raise ValueError(bad.format(swa_epoch_start))
        if (isinstance(swa_epoch_start, int) and swa_epoch_start < 1) or (
            isinstance(swa_epoch_start, float) and not 0 <= swa_epoch_start <= 1
        ):
            raise ValueError(bad.format(swa_epoch_start))
        lrs = [swa_lrs] if isinstance(swa_lrs, int | float) else list(swa_lrs)
        if not lrs or any(isinstance(x, bool) or not isinstance(x, int | float) or x <= 0 for x in lrs):
            raise ValueError(
                f"StochasticWeightAveraging(swa_lrs={swa_lrs!r}) must be a positive float or a list of them "
                "(one per param group)"
            )
        if isinstance(annealing_epochs, bool) or not isinstance(annealing_epochs, int) or annealing_epochs < 0:
            raise ValueError(f"StochasticWeightAveraging(annealing_epochs={annealing_epochs!r}) must be an int >= 0")
        if annealing_strategy not in ("cos", "linear"):
            raise ValueError(
                f"StochasticWeightAveraging(annealing_strategy={annealing_strategy!r}): use 'cos' or 'linear'"
            )
        if avg_fn is not None and not callable(avg_fn):
            raise ValueError(f"StochasticWeightAveraging(avg_fn={avg_fn!r}) must be callable")
        if device is not None and not isinstance(device, torch.device | str):
            raise ValueError(f"StochasticWeightAveraging(device={device!r}) must be a torch.device, a str or None")
        self.swa_lrs = [float(x) for x in lrs]
        self.per_group = not isinstance(swa_lrs, int | float)
        self.swa_epoch_start = swa_epoch_start
        self.annealing_epochs = annealing_epochs
        self.annealing_strategy = annealing_strategy
        self.avg_fn: AvgFn = avg_fn or average
        self.device = None if device is None else torch.device(device)
        self.max_epochs: int | None = None

    def configure(self, config: TrainerConfig) -> None:
        self.max_epochs = config.epochs

    # -- the epochs it averages ----------------------------------------------------
    @property
    def swa_start(self) -> int:
        """The first averaged epoch (0-based)."""
        start = self.swa_epoch_start
        if isinstance(start, float):
            if self.max_epochs is None:
                raise ValueError(
                    f"StochasticWeightAveraging(swa_epoch_start={start}) is a fraction of max_epochs, and the fit has "
                    "no epoch limit; give the epoch as an int (swa_epoch_start=5) or set Trainer(max_epochs=)"
                )
            start = int(self.max_epochs * start)
        return max(start - 1, 0)

    @property
    def swa_end(self) -> float:
        """The last averaged epoch (0-based): the fit's last."""
        return math.inf if self.max_epochs is None else self.max_epochs - 1

    # -- handlers ---------------------------------------------------------------------
    @listen("#fit#stage_start")
    def on_fit_start(self, event: Event) -> None:
        optimizers: Any = event.payload.get("lr")
        summary: Any = event.payload.get("summary")
        if optimizers is None or summary is None:
            raise RuntimeError(
                f"StochasticWeightAveraging needs the 'lr' and 'summary' payload of {event.name!r}, which this chart "
                "does not declare; add `payload: [summary, lr]` to the fit's stage_start state"
            )
        if len(optimizers) != 1:
            raise ValueError(
                f"StochasticWeightAveraging works with one optimizer, and configure_optimizers returned "
                f"{len(optimizers)} (Lightning's limit too)"
            )
        _, groups, interval, *_ = optimizers[0]
        if interval == "step":
            raise ValueError(
                "StochasticWeightAveraging sets the learning rate once an epoch (SWALR), and configure_optimizers "
                "returned an LR scheduler that steps every batch (interval 'step'), which would change it within "
                "the epoch; use an epoch scheduler, or none (Lightning supports SWA with epoch schedulers only too)"
            )
        if self.per_group and len(self.swa_lrs) != len(groups):
            raise ValueError(
                f"StochasticWeightAveraging(swa_lrs={self.swa_lrs}) gives {len(self.swa_lrs)} rates for an optimizer "
                f"with {len(groups)} param groups; give one per group, or one float"
            )
        if summary.batch_norm:
            raise ValueError(
                "StochasticWeightAveraging on a module with batch-norm layers needs their statistics recomputed for "
                "the averaged weights, which interlock does not do (Lightning runs an extra epoch); call "
                "torch.optim.swa_utils.update_bn(train_loader, module) after the fit, with an SWA of your own"
            )
        _ = self.swa_start  # a fraction without an epoch limit fails here, before training

    @listen("#epoch_start")
    def on_train_epoch_start(self, event: Event, state: TrainerState) -> list[Update] | None:
        epoch, stored = state.epoch, self.stored(state)
        if not self.swa_start <= epoch <= self.swa_end:
            return None
        out: list[Update] = []
        steps = int(stored.get("scheduler_steps", 0))
        new: list[float] = list(stored.get("lrs", ()))
        if steps == 0 or epoch > int(stored.get("scheduler_epoch", -1)):
            # SWALR: made at the first averaged epoch (its step 0) from the optimizer's rates, then one step per
            # epoch from the rates it set (an epoch scheduler of the module, which Lightning swaps out, is overruled)
            groups = event.payload["lr"][0][1] if steps == 0 else new
            rates = self.swa_lrs * len(groups) if not self.per_group else self.swa_lrs
            new = [
                swalr(lr, swa, steps, self.annealing_epochs, self.annealing_strategy)
                for lr, swa in zip(groups, rates, strict=True)
            ]
            if len(set(new)) == 1:
                out.append(SetLearningRate(new[0]))
            else:
                out.extend(SetLearningRate(lr, group=i) for i, lr in enumerate(new))
            steps += 1
        count = int(stored.get("n_averaged", 0))
        averaged: Sequence[torch.Tensor] = stored.get("average", ())
        if epoch > int(stored.get("latest_update_epoch", -1)):
            params: Any = event.payload.get("parameters")
            values = [p.to(self.device) if self.device is not None else p for p in params]
            if count == 0:
                averaged = values
            else:
                n = torch.tensor(count, dtype=torch.long, device=values[0].device if values else None)
                averaged = [self.avg_fn(a, v, n) for a, v in zip(averaged, values, strict=True)]
            count += 1
        out.append(
            self.store(
                state,
                n_averaged=count,
                latest_update_epoch=epoch,
                average=tuple(averaged),
                scheduler_steps=steps,
                scheduler_epoch=epoch,
                lrs=tuple(new),
            )
        )
        return out

    @listen("#fit#stage_end")
    def on_fit_end(self, event: Event, state: TrainerState) -> SetParameters | None:
        stored = self.stored(state)
        if not stored.get("n_averaged") or (self.max_epochs is not None and state.epoch != self.swa_end):
            return None  # as Lightning: a fit stopped before its last epoch keeps its own weights
        return SetParameters(tuple(stored["average"]))

    # -- reading the run's state --------------------------------------------------------
    def n_averaged(self, state: TrainerState) -> int:
        """How many epochs' weights the average holds."""
        return int(self.stored(state).get("n_averaged", 0))
