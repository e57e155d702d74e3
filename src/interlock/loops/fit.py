"""The fit loop: sanity check, then epochs of batches with validation inside.

It is a dispatch on the chart's current state: whatever state the chart is in
(fresh, or restored from a checkpoint), the loop continues from there. Work
that belongs to a transition is done just before it is fired, so a checkpoint
taken in any checkpointable state holds exactly what continuing needs.

Training batch region of the chart::

    fetch -fetched-> step -backward-> backward -optimizer_step-> optimizer_step -stepped-> end
                                      backward -accumulate-> end
    end -next-> fetch | -validate-> val | -epoch_end-> epoch_end
"""

from __future__ import annotations

import signal
from typing import Any

import torch

from interlock.connectors.data import EpochData, num_batches
from interlock.connectors.metrics import loss_of, scalars
from interlock.connectors.optim import step_schedulers
from interlock.loops.context import Preempted, RunContext
from interlock.loops.driver import Driver
from interlock.loops.evaluation import _check_preemption, _restore_rng, run_eval

__all__ = ["TRIGGERS", "run_fit"]

TRIGGERS = frozenset(
    {"sanity_check", "train", "run", "fetched", "exhausted", "validate", "backward", "optimizer_step"}
    | {"accumulate", "stepped", "next", "epoch_end", "resume", "next_epoch", "done"}
)


class _Epoch:
    """Per-epoch facts of the training loader: its iterator and length."""

    def __init__(self, data: EpochData, limit: int | None, ctx: RunContext) -> None:
        self.data = data
        self.limit = limit
        self.it: Any = None
        self.exhausted = False
        cfg = ctx.config
        #: validation is configured at all
        self.validates = "val" in ctx.data and cfg.limit("val") != 0
        #: validate every N finished batches (None: only at the end of the epoch)
        self.every_batches: int | None = None
        #: count ``every_batches`` across epochs (check_val_every_n_epoch=None)
        self.across_epochs = cfg.check_val_every_n_epoch is None
        interval = cfg.val_check_interval
        if isinstance(interval, int):
            self.every_batches = interval
        elif interval != 1.0 and limit is not None:
            self.every_batches = max(1, int(limit * interval))


def run_fit(drv: Driver, ctx: RunContext) -> None:
    """Run the fit stage from the chart's current state until ``fit.end``."""
    cfg = ctx.config
    if drv.at == "fit.start":
        if "val" in ctx.data and cfg.sanity_steps != 0:
            drv.fire("sanity_check")
            run_eval(drv, ctx, "fit.sanity")
            drv.evolve(eval_sums={})
        drv.fire("train", lambda: {"lr": _lrs(ctx)})
    train = ctx.data["train"]
    epoch = _Epoch(train, num_batches(train.loader, cfg.limit("train")), ctx)
    if drv.at in ("fit.train.batch.end",) or drv.at.startswith("fit.train.val"):
        _reenter_epoch(drv, ctx, epoch)
    if not drv.at.startswith("fit.train.val"):
        _restore_rng(ctx)
    while True:
        at = drv.at
        if at == "fit.train.batch.end":
            _after_batch(drv, ctx, epoch)
        elif at == "fit.train.batch.fetch":
            _batches(drv, ctx, epoch)
        elif at == "fit.train.epoch_start":
            epoch.data.set_epoch(drv.counters.epoch)
            epoch.it, epoch.exhausted = epoch.data.iterate(0), False
            drv.fire("run")
        elif at.startswith("fit.train.val"):
            run_eval(drv, ctx, "fit.train.val")
            done = epoch.exhausted or _epoch_over(drv, epoch) or _stopping(drv, ctx)
            if done:
                _end_epoch(drv, ctx, epoch)
            else:
                drv.fire("resume")
        elif at == "fit.train.epoch_end":
            _leave_epoch(drv, ctx)
        elif at == "fit.end":
            if ctx.vote is not None:
                ctx.vote.drain()  # leave no collective in flight
            return
        else:  # pragma: no cover - the chart and this dispatch disagree
            raise RuntimeError(f"the fit loop does not know how to continue from state {at!r}")


def _reenter_epoch(drv: Driver, ctx: RunContext, epoch: _Epoch) -> None:
    """Re-open the training iterator at the saved position (resume).

    Also brings back what the epoch had seen: whether its data ran out, and the
    scalars of its latest step (the epoch's train metrics), which a checkpoint
    stores beside the data position.
    """
    data = drv.state.data
    epoch.data.set_epoch(drv.counters.epoch)
    epoch.exhausted = bool(data.get("exhausted"))
    if epoch.exhausted or _epoch_over(drv, epoch):  # nothing left to read: leave the loader's own state alone
        epoch.it = iter(())
    else:
        epoch.it = epoch.data.iterate(drv.counters.batch_idx, data.get("seed"), data.get("dataset"))
    epoch.data.last_outputs = data.get("last_train")
    drv.evolve(data={k: v for k, v in data.items() if k not in ("dataset", "last_train")})


def _epoch_over(drv: Driver, epoch: _Epoch) -> bool:
    return epoch.limit is not None and drv.counters.batch_idx >= epoch.limit


def _stopping(drv: Driver, ctx: RunContext) -> bool:
    max_steps = ctx.config.max_steps
    stop = drv.should_stop or (max_steps != -1 and drv.counters.global_step >= max_steps)
    return ctx.agree(stop) if ctx.agree is not None else stop


def _val_due(drv: Driver, ctx: RunContext, epoch: _Epoch, at_epoch_end: bool, batch_done: bool = True) -> bool:
    """Whether validation runs now: after a batch, or (``batch_done=False``) when the data ran out."""
    if not epoch.validates:
        return False
    every_epochs = ctx.config.check_val_every_n_epoch
    if every_epochs is not None and (drv.counters.epoch + 1) % every_epochs:
        return False
    every = epoch.every_batches
    if every is None:
        return at_epoch_end
    if isinstance(ctx.config.val_check_interval, float) and at_epoch_end:
        return True  # a fraction of the epoch always includes its end
    if not batch_done:
        return False
    done = drv.counters.train_batches if epoch.across_epochs else drv.counters.batch_idx
    return done % every == 0


def _after_batch(drv: Driver, ctx: RunContext, epoch: _Epoch) -> None:
    """Leave ``batch.end``: next batch, validation, or the end of the epoch.

    In one process a stop request or a preemption signal acts at this boundary.
    Across processes the ranks vote without blocking (``ctx.vote``, every few
    batches): what any rank asked for acts on every rank at the same later batch.
    Validation and epoch ends agree at once (a blocking ``ctx.agree``).
    """
    flag = ctx.preemption
    preempted = flag is not None and flag.received is not None
    stop = drv.should_stop
    if ctx.vote is not None:
        stop, preempted = ctx.vote(drv.counters.train_batches, stop, preempted)
    if preempted:
        ctx.request_preemption_save()
        raise Preempted(flag.received if flag is not None and flag.received is not None else int(signal.SIGTERM))
    counters, max_steps = drv.counters, ctx.config.max_steps
    over = epoch.limit is not None and counters.batch_idx >= epoch.limit
    if epoch.validates and _val_due(drv, ctx, epoch, at_epoch_end=over):
        drv.fire("validate")
    elif over or stop or (max_steps != -1 and counters.global_step >= max_steps):
        _end_epoch(drv, ctx, epoch)
    else:
        drv.fire("next")


def _batches(drv: Driver, ctx: RunContext, epoch: _Epoch) -> None:
    """The hot path: run training batches from ``batch.fetch`` until the region is left.

    With a plain precision (``Precision.is_plain``), no gradient clipping and no device move,
    a batch costs the plain loop's calls plus the five transitions and this function's bookkeeping.
    """
    fire, counters, cfg = drv.fire, drv.counters, ctx.config
    module, precision, move = ctx.module, ctx.precision, ctx.move
    training_step = ctx.step("training_step")
    accumulate = cfg.accumulate_grad_batches
    clip, clip_by_norm = cfg.gradient_clip_val, cfg.gradient_clip_algorithm == "norm"
    plain = precision.is_plain and clip is None
    device_type = ctx.device.type
    it, limit = epoch.it, epoch.limit
    first_of_epoch = counters.batch_idx == 0
    module.train()
    while True:  # at fit.train.batch.fetch
        try:
            batch = next(it)
        except StopIteration:
            epoch.exhausted = True
            drv.evolve(data={**drv.state.data, "exhausted": True})
            if _val_due(drv, ctx, epoch, at_epoch_end=True, batch_done=False):
                fire("validate")
            else:
                _end_epoch(drv, ctx, epoch, via="exhausted")
            return
        if first_of_epoch:
            first_of_epoch = False
            drv.evolve(data={"seed": epoch.data.seed, "epoch": counters.epoch})
        if move is not None:
            batch = move(batch)
        if not plain:
            batch = precision.convert_input(batch)
        batch_idx = counters.batch_idx
        fire("fetched", {"batch": batch, "batch_idx": batch_idx})
        if plain:
            outputs = training_step(batch, batch_idx)
        else:
            with precision.autocast(device_type):
                outputs = training_step(batch, batch_idx)
        loss = loss_of(outputs)
        epoch.data.last_outputs = outputs
        fire("backward", {"outputs": outputs, "batch_idx": batch_idx})
        if accumulate > 1:
            loss = loss / accumulate
        if plain:
            loss.backward()
        else:
            precision.backward(loss)
        if (batch_idx + 1) % accumulate == 0 or (limit is not None and batch_idx + 1 >= limit):
            fire("optimizer_step", lambda o=outputs, i=batch_idx: {"outputs": o, "batch_idx": i, "lr": _lrs(ctx)})
            for optimizer in ctx.optimizers:
                if plain:
                    optimizer.step()
                else:
                    _clip_and_step(precision, optimizer, clip, clip_by_norm)
                optimizer.zero_grad(set_to_none=True)
            if ctx.schedulers:
                step_schedulers(ctx.schedulers, "step", counters.global_step + 1, drv.state.metrics)
            fire("stepped", {"outputs": outputs, "batch_idx": batch_idx})
        else:
            fire("accumulate", {"outputs": outputs, "batch_idx": batch_idx})
        _after_batch(drv, ctx, epoch)
        if drv.at != "fit.train.batch.fetch":
            return


def _clip_and_step(precision: Any, optimizer: torch.optim.Optimizer, clip: float | None, by_norm: bool) -> None:
    """Unscale and clip the gradients (when ``clip``), then step through the precision plugin."""
    if clip is not None:
        precision.unscale_gradients(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if by_norm:
            torch.nn.utils.clip_grad_norm_(params, clip)
        else:
            torch.nn.utils.clip_grad_value_(params, clip)
    precision.optimizer_step(optimizer)


def _end_epoch(drv: Driver, ctx: RunContext, epoch: _Epoch, via: str = "epoch_end") -> None:
    """Record the epoch's training metrics, then enter ``epoch_end``."""
    if epoch.data.last_outputs is not None:
        metrics = ctx.reduce_metrics(scalars(epoch.data.last_outputs, "train"))
        drv.log(metrics, stage="train", epoch=drv.counters.epoch, global_step=drv.counters.global_step)
    drv.fire(via)


def _leave_epoch(drv: Driver, ctx: RunContext) -> None:
    """Leave ``epoch_end``: step epoch schedulers, then the next epoch or the end."""
    _check_preemption(ctx)
    epochs = ctx.config.epochs
    if ctx.schedulers:
        step_schedulers(ctx.schedulers, "epoch", drv.counters.epoch + 1, drv.state.metrics)
    if _stopping(drv, ctx) or (epochs is not None and drv.counters.epoch + 1 >= epochs):
        drv.fire("done")
    else:
        drv.fire("next_epoch", lambda: {"lr": _lrs(ctx)})


def _lrs(ctx: RunContext) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """``(optimizer class name, learning rate of each param group)`` for each optimizer."""
    return tuple((type(o).__name__, tuple(float(g["lr"]) for g in o.param_groups)) for o in ctx.optimizers)
