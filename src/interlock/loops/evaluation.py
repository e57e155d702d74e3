"""The evaluation loops' work (sanity check, validation inside fit, validate, test) and predict.

Chart region (``<loop>`` is ``fit.sanity``, ``fit.train.val``, ``validate``,
``test`` or ``predict``; its ``with:`` names the data, the step and the limit)::

    <loop> [entry: eval.open, exit: eval.close]
    <loop>.start [eval.reset] -run-> batch.fetch [eval.fetch] -fetched-> batch.step [eval.step] -stepped-> batch.end
    batch.end -next-> batch.fetch  |  -exhausted [eval.limit_reached] / eval.log-> <loop>.end
    start -exhausted [eval.empty] / eval.log-> end;  fetch -exhausted / eval.log-> end

Metrics are batch-size-weighted means of every scalar the steps return; their
running sums live in the state (``eval_sums``) so a run saved inside validation
resumes it exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from interlock.connectors.data import Feed
from interlock.connectors.metrics import batch_size, logged_values, scalars
from interlock.core.logging import AddLogged, take
from interlock.core.registry import Action, Guard, Registry
from interlock.core.run import Run
from interlock.core.updates import AddEvalSums, AppendHistory, LogMetrics, Update

__all__ = ["means", "register"]


def means(sums: Mapping[str, float]) -> dict[str, float]:
    """The weighted means of running sums (``__count__`` is the weight)."""
    count = sums.get("__count__", 0.0)
    return {k: v / count for k, v in sums.items() if k != "__count__"} if count else {}


def _limit(run: Run, params: Mapping[str, Any], feed: Feed) -> int | None:
    if params.get("limit") == "sanity":
        steps = run.config.sanity_steps
        if steps == -1:
            return feed.limit
        return steps if feed.limit is None else min(steps, feed.limit)
    return feed.limit


def _params(params: Mapping[str, Any], action: str) -> tuple[str, str]:
    try:
        return str(params["data"]), str(params["step"])
    except KeyError as exc:
        raise KeyError(f"{action} needs `with: {{data: ..., step: ...}}` on a state above it; missing {exc}") from None


def register(reg: Registry) -> None:
    """The ``eval.*`` actions and guards."""

    @reg.action("eval.open")
    def open_(run: Run, params: Mapping[str, Any]) -> Action:
        """Switch the module to eval mode and open the loop's data at its position."""
        key, _ = _params(params, "eval.open")

        def act() -> None:
            feed: Feed = run.feeds[key]
            run.extras[f"interlock.was_training.{key}"] = run.module.training
            run.module.eval()
            feed.exhausted = False
            feed.it = feed.data.iterate(run.counters.eval_batch_idx) if _limit(run, params, feed) != 0 else iter(())

        return act

    @reg.action("eval.close")
    def close(run: Run, params: Mapping[str, Any]) -> Action:
        """Put the module back in the mode it had before the loop; drop the loop's iterator."""
        key, _ = _params(params, "eval.close")

        def act() -> None:
            run.feeds[key].it = None
            was = run.extras.pop(f"interlock.was_training.{key}", None)
            if was is not None:
                run.module.train(was)

        return act

    @reg.action("eval.reset")
    def reset(run: Run, params: Mapping[str, Any]) -> Action:
        """Start the loop's metric sums (and what the module logs in it) from zero."""
        return lambda: [AddEvalSums(None), AddLogged(clear="eval")]

    @reg.action("eval.fetch")
    def fetch(run: Run, params: Mapping[str, Any]) -> Action:
        """Take the loop's next batch (moved to the device)."""
        key, _ = _params(params, "eval.fetch")
        step, counters = run.step, run.counters

        def act() -> None:
            feed: Feed = run.feeds[key]
            try:
                batch = next(feed.it)  # type: ignore[arg-type]
            except StopIteration:
                step.fetched, feed.exhausted = False, True
                return
            prepare = run.prepare_batch
            step.batch = batch if prepare is None else prepare(batch)
            step.index, step.fetched = counters.eval_batch_idx, True

        return act

    @reg.guard("eval.fetched")
    def fetched(run: Run, params: Mapping[str, Any]) -> Guard:
        """A batch was fetched."""
        step = run.step
        return lambda: step.fetched

    @reg.action("eval.step")
    def step_(run: Run, params: Mapping[str, Any]) -> Action:
        """Run the loop's step without gradients; add its scalars to the sums (or keep the prediction)."""
        _, name = _params(params, "eval.step")
        prefix = str(params.get("metrics", ""))
        collect = bool(params.get("collect", False))
        step = run.step
        mdict = run.module.__dict__

        def infer() -> int:
            return batch_size(step.batch)

        def act() -> Update | list[Update] | None:
            fn = run.steps.get(name) or getattr(run.module, name)
            call = run.hardware.precision.forward(fn, run.device.type)
            with torch.no_grad():
                step.outputs = outputs = call(step.batch, step.index)
            if collect:
                run.predictions.append(outputs)
                return None
            logs = mdict.get("_interlock_logs")
            logged = take(logs, name, "eval", infer) if logs else []
            values = scalars(outputs, prefix or "val")
            if not values:
                return logged or None
            n = batch_size(step.batch)
            return [AddEvalSums({**{k: v * n for k, v in values.items()}, "__count__": float(n)}), *logged]

        return act

    @reg.guard("eval.empty")
    def empty(run: Run, params: Mapping[str, Any]) -> Guard:
        """The loop takes no batches (its limit is 0)."""
        key, _ = _params(params, "eval.empty")
        return lambda: _limit(run, params, run.feeds[key]) == 0

    @reg.guard("eval.limit_reached")
    def limit_reached(run: Run, params: Mapping[str, Any]) -> Guard:
        """The loop's batch limit is reached."""
        key, _ = _params(params, "eval.limit_reached")

        def reached() -> bool:
            limit = _limit(run, params, run.feeds[key])
            return limit is not None and run.counters.eval_batch_idx >= limit

        return reached

    @reg.action("eval.log")
    def log(run: Run, params: Mapping[str, Any]) -> Action:
        """Log the loop's metrics (averaged over processes) and add them to the history; clear the sums."""
        prefix = params.get("metrics")

        def act() -> list[Update]:
            if not prefix:
                return [AddEvalSums(None), AddLogged(clear="eval")]
            metrics = means(run.facts.eval_sums)
            reduce = run.dist.reduce_metrics if run.dist is not None else None
            if reduce is not None:
                metrics = reduce(metrics)
            logged, hidden = logged_values(run, "eval")
            metrics.update(logged)
            run.results.update(metrics)
            c = run.counters
            shown = {k: v for k, v in metrics.items() if k not in hidden}
            row = {"stage": prefix, "epoch": c.epoch, "global_step": c.global_step, **shown}
            return [LogMetrics(metrics), AppendHistory(row), AddEvalSums(None), AddLogged(clear="eval")]

        return act
