"""The fit loop's decisions, as the chart's guards: when to validate, when an epoch or the fit is over.

Each guard is bound once per stage; what depends on the data (how many batches
an epoch has) is read on the first call, after ``data.setup``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from interlock.core.registry import Guard, Registry
from interlock.core.run import Run
from interlock.core.slots import ScheduleSlot

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
    def of(cls, run: Run) -> ValSchedule:
        cfg = run.config
        interval = cfg.val_check_interval
        limit = run.feeds["train"].limit
        every: int | None = None
        if isinstance(interval, int):
            every = interval
        elif interval != 1.0 and limit is not None:
            every = max(1, int(limit * interval))
        return cls(
            validates="val" in run.feeds and cfg.limit("val") != 0,
            every_batches=every,
            across_epochs=cfg.check_val_every_n_epoch is None,
            every_epochs=cfg.check_val_every_n_epoch,
        )

    def due(self, run: Run, at_epoch_end: bool, batch_done: bool = True) -> bool:
        """Whether validation runs now: after a batch, or (``batch_done=False``) when the data ran out."""
        if not self.validates:
            return False
        c = run.counters
        if self.every_epochs is not None and (c.epoch + 1) % self.every_epochs:
            return False
        if batch_done and run.signals.stop and run.config.can_stop(c.epoch, c.global_step):
            return True  # a stop agreed mid-epoch validates first (Lightning); reaching max_steps does not
        every = self.every_batches
        if every is None:
            return at_epoch_end
        if not batch_done:
            return False  # validate at multiples of the interval only: int(fraction * epoch) for a float
        done = c.train_batches if self.across_epochs else c.batch_idx
        return done % every == 0


def _stopping(run: Run, epochs_done: int) -> bool:
    """A stop was asked for (and ``min_epochs``/``min_steps`` allow it) or ``max_steps`` is reached, agreed by all."""
    cfg, c = run.config, run.counters
    max_steps = cfg.max_steps
    asked = run.facts.should_stop and cfg.can_stop(epochs_done, c.global_step)
    stop = asked or (max_steps != -1 and c.global_step >= max_steps)
    agree = run.dist.agree if run.dist is not None else None
    return agree(stop) if agree is not None else stop


def _never() -> bool:
    return False


def _epoch_over(run: Run) -> bool:
    limit = run.feeds["train"].limit
    return limit is not None and run.counters.batch_idx >= limit


def register(reg: Registry) -> None:
    """``schedule.*`` (validation) and ``limits.*`` (ends of epochs and of the fit) guards."""

    def schedule_of(run: Run) -> ValSchedule:
        slot = run.slot(ScheduleSlot)
        sched = slot.val
        if sched is None:
            sched = slot.val = ValSchedule.of(run)
        assert isinstance(sched, ValSchedule)
        return sched

    @reg.guard("schedule.sanity_due")
    def sanity_due(run: Run, params: Mapping[str, Any]) -> Guard:
        """There is validation data, num_sanity_val_steps is not 0 and limit_val_batches is not 0 (Lightning)."""
        return lambda: "val" in run.feeds and run.config.sanity_steps != 0 and run.config.limit("val") != 0

    @reg.guard("schedule.val_due")
    def val_due(run: Run, params: Mapping[str, Any]) -> Guard:
        """Validation is due after this batch (val_check_interval, check_val_every_n_epoch, end of epoch)."""
        if run.config.limit("val") == 0 or ("val" not in run.feeds and not run.plan.loads_later):
            return _never

        def due() -> bool:
            return schedule_of(run).due(run, at_epoch_end=_epoch_over(run))

        return due

    @reg.guard("schedule.val_due_at_end")
    def val_due_at_end(run: Run, params: Mapping[str, Any]) -> Guard:
        """The data ran out and validation is due at the end of this epoch."""
        step = run.step
        return lambda: not step.fetched and schedule_of(run).due(run, at_epoch_end=True, batch_done=False)

    @reg.guard("limits.epoch_done")
    def epoch_done(run: Run, params: Mapping[str, Any]) -> Guard:
        """The epoch's batch limit is reached, a stop was agreed (min_epochs/min_steps met), or max_steps is reached."""
        if "train" not in run.feeds and not run.plan.loads_later:
            return _never
        counters, signals, feeds, cfg = run.counters, run.signals, run.feeds, run.config
        max_steps = run.config.max_steps if run.config.max_steps != -1 else None

        def done() -> bool:
            limit = feeds["train"].limit
            if limit is not None and counters.batch_idx >= limit:
                return True
            if signals.stop and cfg.can_stop(counters.epoch, counters.global_step):  # min_epochs: the epoch runs on
                return True
            return max_steps is not None and counters.global_step >= max_steps

        return done

    @reg.guard("limits.epoch_done_after_val")
    def epoch_done_after_val(run: Run, params: Mapping[str, Any]) -> Guard:
        """After validation: the epoch's data ran out or its limit is reached, or the fit is stopping."""
        return lambda: run.feeds["train"].exhausted or _epoch_over(run) or _stopping(run, run.counters.epoch)

    @reg.guard("limits.nothing_to_train")
    def nothing_to_train(run: Run, params: Mapping[str, Any]) -> Guard:
        """max_epochs=0, max_steps=0 or a training batch limit of 0: the fit trains nothing (as in Lightning)."""

        def nothing() -> bool:
            cfg, feed = run.config, run.feeds.get("train")
            return cfg.epochs == 0 or cfg.max_steps == 0 or (feed is not None and feed.limit == 0)

        return nothing

    @reg.guard("limits.fit_done")
    def fit_done(run: Run, params: Mapping[str, Any]) -> Guard:
        """A stop was agreed, max_steps is reached, or this was the last epoch (max_epochs)."""

        def done() -> bool:
            epochs = run.config.epochs
            return _stopping(run, run.counters.epoch + 1) or (epochs is not None and run.counters.epoch + 1 >= epochs)

        return done
