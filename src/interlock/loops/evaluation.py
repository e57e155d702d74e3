"""The evaluation loop (sanity check, validation inside fit, validate, test) and predict.

Chart region (``<loop>`` is ``fit.sanity``, ``fit.train.val``, ``validate``,
``test`` or ``predict``)::

    <loop>.start -run-> batch.fetch -fetched-> batch.step -stepped-> batch.end
    batch.end -next-> batch.fetch  |  -exhausted-> <loop>.end
    start/fetch -exhausted-> <loop>.end

Metrics are batch-size-weighted means of every scalar the steps return; their
running sums live in the state (``eval_sums``) so a run saved inside validation
resumes it exactly.
"""

from __future__ import annotations

import signal
from typing import Any

import torch

from interlock.connectors.data import num_batches
from interlock.connectors.metrics import batch_size, scalars
from interlock.loops.context import Preempted, RunContext
from interlock.loops.driver import Driver

__all__ = ["TRIGGERS", "run_eval"]

TRIGGERS = frozenset({"run", "fetched", "stepped", "next", "exhausted"})

_STEPS = {"fit.sanity": "validation_step", "fit.train.val": "validation_step", "validate": "validation_step"}
_PREFIX = {"fit.sanity": "val", "fit.train.val": "val", "validate": "val", "test": "test", "predict": "predict"}
_DATA = {"fit.sanity": "val", "fit.train.val": "val", "validate": "val", "test": "test", "predict": "predict"}


def _limit(ctx: RunContext, loop: str) -> int | float | None:
    if loop == "fit.sanity":
        steps = ctx.config.sanity_steps
        return None if steps == -1 else steps
    return ctx.config.limit(_DATA[loop])


def run_eval(drv: Driver, ctx: RunContext, loop: str) -> dict[str, float]:
    """Run (or, when the chart is inside it, resume) evaluation loop ``loop``; return its metrics.

    Predictions of the ``predict`` loop are appended to ``ctx.predictions``.
    """
    data = ctx.data[_DATA[loop]]
    limit = num_batches(data.loader, _limit(ctx, loop))
    step = ctx.step(_STEPS.get(loop, f"{loop}_step"))
    prefix = _PREFIX[loop]
    module, precision, move, fire = ctx.module, ctx.precision, ctx.move, drv.fire
    was_training = module.training
    module.eval()

    def finish() -> None:
        """Log the loop's metrics (not for the sanity check), then enter ``<loop>.end``."""
        if loop not in ("fit.sanity", "predict"):
            metrics = ctx.reduce_metrics(_means(drv.state.eval_sums))
            result.update(metrics)
            drv.log(metrics, stage=prefix, epoch=drv.counters.epoch, global_step=drv.counters.global_step)
        fire("exhausted")

    result: dict[str, float] = {}
    preemptible = loop == "fit.train.val" and ctx.preemption is not None
    try:
        with torch.no_grad():
            if drv.at == f"{loop}.end":  # resumed after the loop had finished: nothing left to run
                _restore_rng(ctx)
                return result
            if drv.at == f"{loop}.start":
                _restore_rng(ctx)  # resumed at <loop>.start: the iterator draws from the restored RNG
                drv.evolve(eval_sums={})
                if limit == 0:
                    finish()
                    return result
                it = data.iterate(0)
                fire("run")
            else:  # resumed at <loop>.batch.end
                it = data.iterate(drv.counters.eval_batch_idx)
                _restore_rng(ctx)
                if limit is not None and drv.counters.eval_batch_idx >= limit:
                    finish()
                else:
                    fire("next")
            while drv.at.endswith(".batch.fetch"):
                try:
                    batch = next(it)
                except StopIteration:
                    finish()
                    break
                batch = precision.convert_input(batch if move is None else move(batch))
                idx = drv.counters.eval_batch_idx
                fire("fetched", {"batch": batch, "batch_idx": idx})
                with precision.autocast(ctx.device.type):
                    outputs = step(batch, idx)
                if loop == "predict":
                    ctx.predictions.append(outputs)
                else:
                    _accumulate(drv, outputs, prefix, batch_size(batch))
                fire("stepped", {"outputs": outputs, "batch_idx": idx})
                if preemptible:
                    _check_preemption(ctx)
                if limit is not None and drv.counters.eval_batch_idx >= limit:
                    finish()
                else:
                    fire("next")
    finally:
        module.train(was_training)
    return result


def _accumulate(drv: Driver, outputs: Any, prefix: str, n: int) -> None:
    values = scalars(outputs, prefix)
    if not values:
        return
    sums = dict(drv.state.eval_sums)
    for key, value in values.items():
        sums[key] = sums.get(key, 0.0) + value * n
    sums["__count__"] = sums.get("__count__", 0.0) + n
    drv.evolve(eval_sums=sums)


def _means(sums: Any) -> dict[str, float]:
    count = sums.get("__count__", 0.0)
    return {k: v / count for k, v in sums.items() if k != "__count__"} if count else {}


def _check_preemption(ctx: RunContext) -> None:
    """After a preemption signal: save at this batch boundary, then raise :class:`Preempted`.

    Called at the checkpointable boundaries of the fit stage (training and validation
    batch ends, epoch end); the signal handler itself only recorded the signal.
    """
    flag = ctx.preemption
    if flag is None:
        return
    received = flag.received is not None
    if ctx.agree(received) if ctx.agree is not None else received:
        ctx.request_preemption_save()
        raise Preempted(flag.received or int(signal.SIGTERM))


def _restore_rng(ctx: RunContext) -> None:
    from interlock.connectors.rng import set_rng_states

    if ctx.rng_to_restore is not None:
        set_rng_states(ctx.rng_to_restore)
        ctx.rng_to_restore = None
