"""Step outputs to metrics: the loss and every other returned scalar."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from interlock.core.logging import AddLogged, EpochLogged, epoch_values, scalars
from interlock.core.registry import Action, Registry
from interlock.core.run import Run
from interlock.core.updates import AppendHistory, LogMetrics, Update

__all__ = ["batch_end_outputs", "batch_size", "logged_batch_size", "logged_values", "loss_of", "register", "scalars"]


def loss_of(outputs: Any, step: str = "training_step") -> torch.Tensor:
    """The loss tensor in what a training step returned."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, Mapping):
        loss = outputs.get("loss")
        if isinstance(loss, torch.Tensor):
            return loss
    raise TypeError(
        f"{step} returned {type(outputs).__name__}; return the loss tensor or a dict with a 'loss' tensor "
        f"(got keys {sorted(outputs) if isinstance(outputs, Mapping) else 'n/a'})"
    )


def batch_end_outputs(outputs: Any, manual: bool, accumulate: int) -> Any:
    """What Lightning passes to ``on_train_batch_end`` as ``outputs``: a dict whose ``loss`` holds no graph.

    Automatic optimization: ``{"loss": (loss / accumulate).detach().clone(), **the other keys}`` (Lightning
    divides by ``accumulate_grad_batches``), ``{}`` when the step returned ``None``; manual: what the step
    returned as a dict (a tensor as ``{"loss": ...}``), its loss detached. Anything else is passed as it is.
    """
    if outputs is None:
        return {}
    if isinstance(outputs, torch.Tensor):
        loss, extra = outputs, {}
    elif isinstance(outputs, Mapping) and isinstance(outputs.get("loss"), torch.Tensor):
        loss, extra = outputs["loss"], {k: v for k, v in outputs.items() if k != "loss"}
    else:
        return dict(outputs) if isinstance(outputs, Mapping) else outputs
    if manual:
        return {**extra, "loss": loss.detach()} if extra else {"loss": loss.detach()}
    return {"loss": (loss / accumulate if accumulate > 1 else loss).detach().clone(), **extra}


def batch_size(batch: Any) -> int | None:
    """The number of samples in a batch as Lightning infers it; ``None`` when it holds no tensor.

    The first tensor found depth first (a mapping's values, any iterable but a string, a dataclass's
    fields) gives it: its length, 1 for a 0-d tensor. When a later tensor's length differs, or a
    later leaf is not a tensor, Lightning warns that the collection is ambiguous; so does this.
    """
    found: int | None = None
    try:
        for n in _sizes(batch):
            if found is None:
                found = n
            elif n != found:
                _warn_ambiguous(found)
                break
    except RecursionError:
        raise RecursionError(_NO_SIZE) from None
    return found


def logged_batch_size(batch: Any) -> int:
    """The weight of a value ``self.log`` averages over the epoch: the batch's size, or Lightning's error."""
    n = batch_size(batch)
    if n is None:
        raise ValueError(f"{_NO_SIZE} (the batch is a {type(batch).__name__} holding no tensor)")
    return n


_NO_SIZE = (
    "We could not infer the batch_size from the batch. Either simplify its structure or provide the batch_size as "
    "`self.log(..., batch_size=batch_size)`"
)
_warned: set[int] = set()


def _sizes(batch: Any) -> Iterator[int | None]:
    if isinstance(batch, torch.Tensor):
        yield 1 if batch.ndim == 0 else int(batch.size(0))
    elif isinstance(batch, Iterable | Mapping) and not isinstance(batch, str):
        for item in batch.values() if isinstance(batch, Mapping) else batch:
            yield from _sizes(item)
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        for field in dataclasses.fields(batch):
            yield from _sizes(getattr(batch, field.name))
    else:
        yield None


def _warn_ambiguous(found: int) -> None:
    if found in _warned:  # once per size, as Lightning's warning cache keeps each message once
        return
    _warned.add(found)
    warnings.warn(
        f"Trying to infer the `batch_size` from an ambiguous collection. The batch size we found is {found}. To "
        "avoid any miscalculations, use `self.log(..., batch_size=batch_size)`.",
        UserWarning,
        stacklevel=3,
    )


def _logged_metrics(run: Run, loop: str) -> list[tuple[Mapping[str, Any], Any]]:
    """The torchmetrics metrics logged in ``loop`` this epoch, each with its row; no longer live once taken."""
    live = run.module.__dict__.get("_interlock_metrics")
    if not live:
        return []
    prefix, out = f"{loop}/", []
    for key, row in run.facts.logged.items():
        if key.startswith(prefix) and row.get("metric"):
            metric = live.pop(str(row["metric"]), None)
            if metric is not None:
                out.append((row, metric))
    return out


def reset_logged_metrics(run: Run, loop: str) -> None:
    """Reset the torchmetrics metrics logged in ``loop`` without computing them (a sanity check's, as Lightning)."""
    for _, metric in _logged_metrics(run, loop):
        metric.reset()


def logged_values(run: Run, loop: str) -> EpochLogged:
    """What the module logged in ``loop`` this epoch, with the names kept from loggers and shown on the bar.

    ``sync_dist`` values are averaged over processes.
    Names logged with ``logger=False`` stay in ``state.metrics`` but not in the history rows.
    """
    computed = None
    if run.module.__dict__.get("_interlock_metrics"):  # logged torchmetrics: compute() then reset(), as Lightning
        computed = {}
        for row, metric in _logged_metrics(run, loop):  # each syncs itself
            if not row.get("step_only"):
                computed[str(row["metric"])] = float(metric.compute())
            metric.reset()
    logged = epoch_values(run.facts, loop, computed)
    reduce = run.dist.reduce_metrics if run.dist is not None else None
    if logged.sync and reduce is not None:
        logged.values.update(reduce({k: logged.values[k] for k in logged.sync}))
    return logged


def register(reg: Registry) -> None:
    """``metrics.log_train``."""

    @reg.action("metrics.log_train")
    def log_train(run: Run, params: Mapping[str, Any]) -> Action:
        """Log the epoch's training metrics: its latest step's scalars, and the epoch values the module logged.

        Returned scalars are averaged over processes; logged ones when ``sync_dist``.
        """

        def act() -> list[Update] | None:
            outputs = run.feeds["train"].last_outputs
            logged = logged_values(run, "train")
            if outputs is None and not logged.values:
                return None
            metrics = scalars(outputs, "train")
            if metrics and run.dist is not None and run.dist.reduce_metrics is not None:
                metrics = run.dist.reduce_metrics(metrics)
            returned = logged.returned(metrics, run.facts)  # not Lightning's callback_metrics
            metrics.update(logged.values)
            c = run.counters
            kept = {k: v for k, v in metrics.items() if k not in logged.hidden}
            row = {"stage": "train", "epoch": c.epoch, "global_step": c.global_step, **kept}
            updates: list[Update] = [LogMetrics(metrics, logged.shown, logged.to_loggers, returned), AppendHistory(row)]
            if logged.values:
                updates.append(AddLogged(clear="train"))
            return updates

        return act
