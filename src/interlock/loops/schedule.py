"""The fit loop's decisions, as the chart's guards: when to validate, when an epoch or the fit is over.

Each guard is a pure function of the frozen :class:`~interlock.core.step.Facts`: the
config, the counters, each loader's batch limit (``state.limits``, known after
``data.setup``), whether the training data ran out (``state.data``), and the stop
the processes agreed (``state.agreed["stop"]``, by ``signals.vote`` at a batch end or
``dist.agree_stop``: agreement actions the chart runs before these guards).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from interlock.core.config import TrainerConfig
from interlock.core.registry import Guard, Registry
from interlock.core.step import Facts

__all__ = ["ValSchedule", "register"]


@attrs.frozen
class ValSchedule:
    """When validation runs, from the flags and the training epoch's length."""

    #: validation is configured at all
    validates: bool
    #: validate every N finished batches (None: only at the end of the epoch); a float interval gives
    #: N = int(interval * batches), and validation runs at multiples of N only, as in Lightning
    every_batches: int | None
    #: count ``every_batches`` across epochs (``check_val_every_n_epoch=None``)
    across_epochs: bool
    every_epochs: int | None

    @classmethod
    def of(cls, config: TrainerConfig, limits: Mapping[str, int | None]) -> ValSchedule:
        interval = config.val_check_interval
        limit = limits.get("train")
        every: int | None = None
        if isinstance(interval, int):
            every = interval
        elif interval != 1.0 and limit is not None:
            every = max(1, int(limit * interval))
        return cls(
            validates="val" in limits and config.limit("val") != 0,
            every_batches=every,
            across_epochs=config.check_val_every_n_epoch is None,
            every_epochs=config.check_val_every_n_epoch,
        )

    def due(self, facts: Facts, at_epoch_end: bool, batch_done: bool = True) -> bool:
        """Whether validation runs now: after a batch, or (``batch_done=False``) when the data ran out."""
        if not self.validates:
            return False
        c = facts.progress
        if self.every_epochs is not None and (c.epoch + 1) % self.every_epochs:
            return False
        if batch_done and facts.state.agreed.get("stop") and facts.config.can_stop(c.epoch, c.global_step):
            return True  # a stop agreed mid-epoch validates first (Lightning); reaching max_steps does not
        every = self.every_batches
        if every is None:
            return at_epoch_end
        if not batch_done:
            return False  # validate at multiples of the interval only: int(fraction * epoch) for a float
        done = c.train_batches if self.across_epochs else c.batch_idx
        return done % every == 0


class _Memo:
    """The schedule of the latest config and limits seen (a pure function, computed once per stage)."""

    __slots__ = ("config", "limits", "value")

    def __init__(self) -> None:
        self.config: Any = None
        self.limits: Any = None
        self.value = ValSchedule(False, None, False, None)

    def __call__(self, facts: Facts) -> ValSchedule:
        config, limits = facts.config, facts.state.limits
        if config is not self.config or limits is not self.limits:
            self.config, self.limits, self.value = config, limits, ValSchedule.of(config, limits)
        return self.value


def _stopping(facts: Facts, epochs_done: int) -> bool:
    """A stop was agreed (and ``min_epochs``/``min_steps`` allow it), or ``max_steps`` is reached."""
    cfg, c = facts.config, facts.progress
    if facts.state.agreed.get("stop") and cfg.can_stop(epochs_done, c.global_step):
        return True
    return cfg.max_steps != -1 and c.global_step >= cfg.max_steps


def _epoch_over(facts: Facts) -> bool:
    limit = facts.state.limits.get("train")
    return limit is not None and facts.progress.batch_idx >= limit


def _exhausted(facts: Facts) -> bool:
    """The epoch's training data ran out (``data.fetch`` found no next batch)."""
    return bool(facts.state.data.get("exhausted", False))


def register(reg: Registry) -> None:
    """``schedule.*`` (validation) and ``limits.*`` (ends of epochs and of the fit) guards."""

    @reg.guard("schedule.sanity_due")
    def sanity_due(params: Mapping[str, Any]) -> Guard:
        """There is validation data, num_sanity_val_steps is not 0 and limit_val_batches is not 0 (Lightning)."""

        def due(facts: Facts) -> bool:
            cfg = facts.config
            return "val" in facts.state.limits and cfg.sanity_steps != 0 and cfg.limit("val") != 0

        return due

    @reg.guard("schedule.val_due", agreed=("stop",))
    def val_due(params: Mapping[str, Any]) -> Guard:
        """Validation is due after this batch (val_check_interval, check_val_every_n_epoch, end of epoch)."""
        memo = _Memo()

        def due(facts: Facts) -> bool:
            limits = facts.state.limits
            if "val" not in limits:
                return False
            limit = limits.get("train")
            over = limit is not None and facts.progress.batch_idx >= limit
            sched = memo.value if facts.config is memo.config and limits is memo.limits else memo(facts)
            return sched.due(facts, at_epoch_end=over)

        return due

    @reg.guard("schedule.val_due_at_end")
    def val_due_at_end(params: Mapping[str, Any]) -> Guard:
        """The data ran out and validation is due at the end of this epoch."""
        schedule = _Memo()
        return lambda facts: _exhausted(facts) and schedule(facts).due(facts, at_epoch_end=True, batch_done=False)

    @reg.guard("limits.epoch_done", agreed=("stop",))
    def epoch_done(params: Mapping[str, Any]) -> Guard:
        """The epoch's batch limit is reached, a stop was agreed (min_epochs/min_steps met), or max_steps is reached."""

        def done(facts: Facts) -> bool:
            limits, c, cfg = facts.state.limits, facts.progress, facts.config
            if "train" not in limits:
                return False
            limit = limits["train"]
            if limit is not None and c.batch_idx >= limit:
                return True
            if facts.state.agreed.get("stop") and cfg.can_stop(c.epoch, c.global_step):  # min_epochs: runs on
                return True
            return cfg.max_steps != -1 and c.global_step >= cfg.max_steps

        return done

    @reg.guard("limits.epoch_done_after_val", agreed=("stop",))
    def epoch_done_after_val(params: Mapping[str, Any]) -> Guard:
        """After validation: the epoch's data ran out or its limit is reached, or the fit is stopping."""
        return lambda facts: _exhausted(facts) or _epoch_over(facts) or _stopping(facts, facts.progress.epoch)

    @reg.guard("limits.nothing_to_train", agreed=("stop",))
    def nothing_to_train(params: Mapping[str, Any]) -> Guard:
        """The fit trains nothing (as in Lightning, which then runs no training hooks either).

        max_epochs=0, max_steps=0, a training batch limit of 0, a stop agreed before training (a
        callback's ``trainer.should_stop = True`` in the sanity check) that min_epochs/min_steps allow,
        or progress that has reached the limits already (a finished run resumed, or a trainer fitted
        again: ``checkpoint.restore`` restores it in place, and Lightning's fit then runs its sanity
        check and ends, with no training hooks).
        """

        def nothing(facts: Facts) -> bool:
            cfg, c = facts.config, facts.progress
            if cfg.epochs == 0 or cfg.max_steps == 0 or facts.state.limits.get("train", None) == 0:
                return True
            if c.train_batches and cfg.max_steps != -1 and c.global_step >= cfg.max_steps:
                return True  # a restored run (or a second fit) whose steps are all taken
            if c.train_batches and cfg.epochs is not None and c.epoch + 1 >= cfg.epochs:
                return True  # ... or whose last epoch has run: a restore with nothing left restores in place
            return bool(facts.state.agreed.get("stop")) and cfg.can_stop(c.epoch, c.global_step)

        return nothing

    @reg.guard("limits.fit_done", agreed=("stop",))
    def fit_done(params: Mapping[str, Any]) -> Guard:
        """A stop was agreed, max_steps is reached, or this was the last epoch (max_epochs)."""

        def done(facts: Facts) -> bool:
            epochs, epoch = facts.config.epochs, facts.progress.epoch
            return _stopping(facts, epoch + 1) or (epochs is not None and epoch + 1 >= epochs)

        return done
