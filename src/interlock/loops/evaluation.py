"""The evaluation loops' work (sanity check, validation inside fit, validate, test) and predict.

Chart region (``<loop>`` is ``fit.sanity``, ``fit.train.val``, ``validate``,
``test`` or ``predict``; its ``with:`` names the data, the step and the limit)::

    <loop> [entry: eval.open, exit: eval.close]
    <loop>.start [eval.reset] -run-> batch.fetch [eval.fetch] -fetched-> batch.step [eval.step] -stepped-> batch.end
    batch.end -next-> batch.fetch  |  -exhausted [eval.limit_reached] / eval.log-> <loop>.end
    start -exhausted [eval.empty] / eval.log-> end;  fetch -exhausted / eval.log-> end
    fetch|batch.end -next_loader [eval.more_loaders] / eval.log, eval.next_loader-> batch.fetch

Several loaders (a list of them) run one after another: ``next_loader`` moves to the
next one (the ``eval_loader`` counter), its step gets ``dataloader_idx`` and its
metrics Lightning's suffix ``/dataloader_idx_N``; the limits apply to each loader.

Metrics are batch-size-weighted means of every scalar the steps return; their
running sums live in the state (``eval_sums``) so a run saved inside validation
resumes it exactly.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from interlock.connectors.callbacks import module_writes
from interlock.connectors.data import Feed, feed_key, loader_count
from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.metrics import batch_size, logged_batch_size, logged_values, reset_logged_metrics, scalars
from interlock.core import reduce32
from interlock.core.config import TrainerConfig
from interlock.core.logging import AddLogged, RestoreMetrics, take
from interlock.core.modes import restore_modes, training_modes
from interlock.core.module import overrides, takes_batch_idx
from interlock.core.registry import Action, Guard, Registry
from interlock.core.run import Run
from interlock.core.slots import DeviceSlot, DistSlot, EvalSlot
from interlock.core.step import Facts
from interlock.core.updates import (
    AddEvalSums,
    AppendHistory,
    LogMetrics,
    SetEvalExhausted,
    SetLoaderResults,
    Update,
)

__all__ = ["means", "register"]


def means(sums: Mapping[str, float], f64: bool = False) -> dict[str, float]:
    """The weighted means of running sums (``__count__`` is the weight), in float32 unless ``f64``."""
    count = sums.get("__count__", 0.0)
    return {k: reduce32.div(v, count, f64) for k, v in sums.items() if k != "__count__"} if count else {}


def _f64(run: Run) -> bool:
    """Whether the run's metrics accumulate in float64 (``precision="64-true"``, as Lightning's)."""
    return bool(run.slot(HardwareSlot).precision.param_dtype == torch.float64)


def limit_of(config: TrainerConfig, params: Mapping[str, Any], limit: int | None) -> int | None:
    """The batches the loop takes from a loader whose own limit is ``limit`` (the sanity check takes fewer)."""
    if params.get("limit") == "sanity":
        steps = config.sanity_steps
        if steps == -1:
            return limit
        return steps if limit is None else min(steps, limit)
    return limit


def _limit(run: Run, params: Mapping[str, Any], feed: Feed) -> int | None:
    return limit_of(run.config, params, feed.limit)


def _current(run: Run, key: str) -> Feed:
    """The feed of the loader the loop is on."""
    feed: Feed = run.feeds[feed_key(key, run.counters.eval_loader)]
    return feed


def _loaders(limits: Mapping[str, int | None], key: str) -> int:
    """How many loaders the loop ``key`` has (``val``, ``val#1``, ...)."""
    count = 0
    while feed_key(key, count) in limits:
        count += 1
    return count


def _reached(facts: Facts, params: Mapping[str, Any], key: str) -> bool:
    """The current loader's (sanity-aware) batch limit is reached."""
    c = facts.progress
    limit = limit_of(facts.config, params, facts.state.limits.get(feed_key(key, c.eval_loader)))
    return limit is not None and c.eval_batch_idx >= limit


def _open(run: Run, params: Mapping[str, Any], feed: Feed, start: int) -> SetEvalExhausted:
    feed.it = feed.data.iterate(start) if _limit(run, params, feed) != 0 else iter(())
    return SetEvalExhausted(False)


def _check_takes_index(module: Any, name: str, count: int) -> None:
    """``TypeError`` when the step cannot take the ``dataloader_idx`` that several loaders pass (as Lightning)."""
    try:
        inspect.signature(getattr(module, name)).bind(None, 0, 0)
    except TypeError:
        raise TypeError(
            f"{type(module).__name__}.{name}() gets {count} loaders but takes no dataloader_idx: define "
            f"{name}(self, batch, batch_idx, dataloader_idx=0) (Lightning passes it when there is more than one "
            "loader), or pass one loader"
        ) from None
    except ValueError:  # no signature to read (a builtin): let the call tell
        return


_LOOPS = {"val": "validation", "test": "test", "predict": "predict"}
_CPU = torch.device("cpu")


def _own_hook(module: Any, name: str) -> Any:
    """The module's bound method ``name`` when its class overrides (or defines) one, else ``None``."""
    return getattr(module, name) if overrides(module, name) else None


def _params(params: Mapping[str, Any], action: str) -> tuple[str, str]:
    try:
        return str(params["data"]), str(params["step"])
    except KeyError as exc:
        raise KeyError(f"{action} needs `with: {{data: ..., step: ...}}` on a state above it; missing {exc}") from None


def register(reg: Registry) -> None:
    """The ``eval.*`` actions and guards."""

    @reg.action("eval.open", reads=("eval",))
    def open_(run: Run, params: Mapping[str, Any]) -> Action:
        """Put the module in eval mode (its ``on_<loop>_model_eval`` if it has one), gradients off; open the data.

        The loop's hooks run without gradients too (``on_validation_start`` ... ``on_validation_end``), as
        Lightning runs its whole evaluation loop under ``torch.no_grad()``.
        """
        key, _ = _params(params, "eval.open")
        to_eval = _own_hook(run.module, f"on_{_LOOPS.get(key, key)}_model_eval") or run.module.eval
        slot = run.slot(EvalSlot)
        was_training, grad_was, sanity = slot.was_training, slot.grad_was, params.get("limit") == "sanity"

        def act() -> Update:
            if sanity:  # what the sanity check logs is dropped when it ends (Lightning resets the metrics)
                slot.before_sanity = RestoreMetrics.of(run.facts)
            was_training[key] = training_modes(run.module)
            grad_was.setdefault(key, torch.is_grad_enabled())
            torch.set_grad_enabled(False)
            to_eval()  # the module's on_validation_model_eval / on_test_model_eval / ... when it has one
            return _open(run, params, _current(run, key), run.counters.eval_batch_idx)

        return act

    @reg.action("eval.next_loader")
    def next_loader(run: Run, params: Mapping[str, Any]) -> Action:
        """Close the loader that finished; open the next one at its start."""
        key, _ = _params(params, "eval.next_loader")

        def act() -> Update:
            _current(run, key).it = None
            return _open(run, params, run.feeds[feed_key(key, run.counters.eval_loader + 1)], 0)

        return act

    @reg.guard("eval.more_loaders")
    def more_loaders(params: Mapping[str, Any]) -> Guard:
        """The loader ran out or reached its limit, and another loader follows it."""
        key, _ = _params(params, "eval.more_loaders")

        def more(facts: Facts) -> bool:
            if facts.progress.eval_loader + 1 >= _loaders(facts.state.limits, key):
                return False
            return facts.state.eval_exhausted or _reached(facts, params, key)

        return more

    @reg.action("eval.close", reads=("eval",))
    def close(run: Run, params: Mapping[str, Any]) -> Action:
        """Put back the module's modes (each submodule's) and gradients as before the loop; drop its iterator."""
        key, _ = _params(params, "eval.close")
        to_train = _own_hook(run.module, f"on_{_LOOPS.get(key, key)}_model_train")
        slot = run.slot(EvalSlot)
        was_training, grad_was = slot.was_training, slot.grad_was

        def act() -> Update | None:
            for i in range(loader_count(run.feeds, key)):
                run.feeds[feed_key(key, i)].it = None
            torch.set_grad_enabled(grad_was.pop(key, True))
            was = was_training.pop(key, None)
            if to_train is not None:  # the module's on_validation_model_train / on_test_model_train
                to_train()
            elif was is not None:  # each submodule's own mode, as Lightning puts them back (a frozen part stays so)
                restore_modes(was)
            restore, slot.before_sanity = slot.before_sanity, None
            return restore  # type: ignore[no-any-return]

        return act

    @reg.action("eval.reset")
    def reset(run: Run, params: Mapping[str, Any]) -> Action:
        """Start the loop's metric sums (and what the module logs in it) from zero."""
        return lambda: [AddEvalSums(None), AddLogged(clear="eval")]

    @reg.action("eval.fetch", reads=("device",))
    def fetch(run: Run, params: Mapping[str, Any]) -> Action:
        """Take the loop's next batch (moved to the device)."""
        key, _ = _params(params, "eval.fetch")
        step, counters = run.step, run.counters
        prepare = run.slot(DeviceSlot).prepare_batch

        def act() -> Update | None:
            feed = _current(run, key)
            try:
                batch = next(feed.it)  # type: ignore[arg-type]
            except StopIteration:
                return SetEvalExhausted(True)
            step.batch = batch if prepare is None else prepare(batch, counters.eval_loader)
            step.index = counters.eval_batch_idx
            return None

        return act

    @reg.guard("eval.fetched")
    def fetched(params: Mapping[str, Any]) -> Guard:
        """A batch was fetched (the loader did not run out)."""

        def fetched_(facts: Facts) -> bool:
            return not facts.state.eval_exhausted

        return fetched_

    @reg.action("eval.step", reads=("device", "dist", "hardware"))
    def step_(run: Run, params: Mapping[str, Any]) -> Action:
        """Run the loop's step without gradients; add its scalars to the sums (or keep the prediction)."""
        key, name = _params(params, "eval.step")
        prefix = str(params.get("metrics", ""))
        collect = bool(params.get("collect", False))  # the predict loop: outputs are predictions, not metrics
        # an epoch-interval prediction writer is given them too, as Lightning keeps them for it
        keep = collect and (
            run.plan.return_predictions or any(getattr(c, "keeps_predictions", False) for c in run.callbacks)
        )
        step, counters = run.step, run.counters
        mdict = run.module.__dict__
        count = 0
        own = getattr(type(run.module), name, None)
        with_idx = own is None or takes_batch_idx(getattr(run.module, name))
        steps, device = run.slot(DistSlot).steps, run.slot(DeviceSlot).device.type

        def infer() -> int:
            return logged_batch_size(step.batch)

        def act() -> Update | list[Update] | None:
            nonlocal count
            if not count:
                count = loader_count(run.feeds, key)
                if count > 1:
                    _check_takes_index(run.module, name, count)
            fn = steps.get(name) or getattr(run.module, name)
            call = run.slot(HardwareSlot).precision.forward(fn, device)
            extra = (counters.eval_loader,) if count > 1 else ()  # Lightning: only with several loaders
            with torch.no_grad():
                if with_idx:
                    step.outputs = outputs = call(step.batch, step.index, *extra)
                else:  # step(self, batch[, dataloader_idx]): Lightning leaves batch_idx out
                    step.outputs = outputs = call(step.batch, *extra)
            if collect:
                if not keep:
                    return None
                if device != "cpu":  # Lightning keeps predictions on the CPU (the device's memory stays free)
                    outputs = run.slot(HardwareSlot).accelerator.move_to_device(outputs, _CPU)
                if count > 1:  # one list of predictions per loader
                    while len(run.predictions) <= counters.eval_loader:
                        run.predictions.append([])
                    run.predictions[counters.eval_loader].append(outputs)
                else:
                    run.predictions.append(outputs)
                return None
            logs = mdict.get("_interlock_logs")
            suffix = f"/dataloader_idx_{counters.eval_loader}" if count > 1 else ""  # Lightning's step-level names
            logged = take(logs, name, "eval", infer, suffix=suffix) if logs else []
            values = scalars(outputs, prefix or "val")
            if not values:
                return logged or None
            n, f64 = batch_size(step.batch) or 1, _f64(run)
            sums = {k: reduce32.mul(v, n, f64) for k, v in values.items()}
            return [AddEvalSums({**sums, "__count__": float(n)}, f64), *logged]

        return module_writes(run, act, f"{type(run.module).__name__}.{name}")

    @reg.guard("eval.empty")
    def empty(params: Mapping[str, Any]) -> Guard:
        """The loop takes no batches (the limit of every loader is 0)."""
        key, _ = _params(params, "eval.empty")

        def empty_(facts: Facts) -> bool:
            limits, cfg = facts.state.limits, facts.config
            keys = [feed_key(key, i) for i in range(_loaders(limits, key))]
            return all(limit_of(cfg, params, limits[k]) == 0 for k in keys)

        return empty_

    @reg.guard("eval.limit_reached")
    def limit_reached(params: Mapping[str, Any]) -> Guard:
        """The loop's batch limit is reached."""
        key, _ = _params(params, "eval.limit_reached")
        return lambda facts: _reached(facts, params, key)

    @reg.action("eval.log", reads=("hardware",))
    def log(run: Run, params: Mapping[str, Any]) -> Action:
        """Log the loader's metrics (averaged over processes) and add them to the history; clear the sums.

        With several loaders each metric gets Lightning's suffix ``/dataloader_idx_N``.
        """
        prefix = params.get("metrics")
        key = str(params.get("data", ""))

        def act() -> list[Update]:
            if not prefix:  # the sanity check: what it logged is dropped, its metric objects reset (Lightning's)
                reset_logged_metrics(run, "eval")
                return [AddEvalSums(None), AddLogged(clear="eval")]
            metrics = means(run.facts.eval_sums, _f64(run))
            reduce = run.dist.reduce_metrics if run.dist is not None else None
            if reduce is not None:
                metrics = reduce(metrics)
            logged = logged_values(run, "eval")
            returned = logged.returned(metrics, run.facts)  # not Lightning's callback_metrics
            metrics.update(logged.values)
            hidden, shown, loggers = logged.hidden, logged.shown, logged.to_loggers
            idx, count = run.counters.eval_loader, loader_count(run.feeds, key)
            if count > 1:
                _no_repeat(logged.plain - logged.every, run.facts.loader_results[:idx], idx)
                metrics = {logged.loader_name(k, idx): v for k, v in metrics.items()}
                returned = {logged.loader_name(k, idx): v for k, v in returned.items()}
                named = logged.for_loader(idx)
                hidden, shown, loggers = named.hidden, named.shown, named.to_loggers
            c = run.counters
            kept = {k: v for k, v in metrics.items() if k not in hidden}
            row = {"stage": prefix, "epoch": c.epoch, "global_step": c.global_step, **kept}
            # what the loop's epoch hooks logged belongs to no loader: Lightning returns it in every loader's results
            # (kept for the loaders to come; given to those done)
            every = {k: metrics[k] for k in logged.every if k in metrics} if idx else {}
            done = run.facts.loader_results[:idx] if every else ()
            earlier = [SetLoaderResults(i, {**r, **every}) for i, r in enumerate(done)]
            return [
                LogMetrics(metrics, shown, loggers, returned),
                AppendHistory(row),
                AddEvalSums(None),
                AddLogged(clear="eval", keep_every=idx + 1 < count),
                *earlier,
                SetLoaderResults(idx, metrics),
            ]

        return act


def _no_repeat(plain: frozenset[str], earlier: Any, idx: int) -> None:
    """Refuse a name logged with ``add_dataloader_idx=False`` by an earlier loader of this loop (as Lightning does)."""
    for before, results in enumerate(earlier):
        twice = sorted(plain & set(results))
        if twice:
            raise ValueError(
                f"self.log({twice[0]!r}, add_dataloader_idx=False) was logged by dataloader {before} and again by "
                f"dataloader {idx}: one name would hold both loaders' values. Name it per loader "
                f"(e.g. f'{twice[0]}_{{dataloader_idx}}') or leave add_dataloader_idx=True"
            )
