"""LearningRateMonitor: log the optimizers' learning rates as metrics.

Listeners never see optimizers, so this reads the rates from the event payload:
``payload["lr"]`` must be a sequence with one ``(optimizer_class_name,
(lr_of_group_0, lr_of_group_1, ...), scheduler_interval)`` entry per optimizer
(the interval ``"step"``, ``"epoch"`` or ``""`` without a scheduler; a pair
without it counts as ``""``), on ``fit.train.epoch_start`` (``logging_interval="epoch"``)
or ``fit.train.batch.optimizer_step`` (``"step"``; the loggers that write Lightning's rows read it
on ``fit.train.batch.step``, as Lightning's monitor logs at the batch start); ``None``, the default as in
Lightning, logs each optimizer at its scheduler's interval, and one without a
scheduler at both. Those states declare the ``lr`` payload key in the chart (built
only when a handler reads it); a custom chart whose states do not gets a
``RuntimeError`` that says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from interlock.core.events import Event, Listener
from interlock.core.updates import LogMetrics

__all__ = ["LR_PAYLOAD_KEY", "LearningRateMonitor", "lr_metric_names"]

LR_PAYLOAD_KEY = "lr"
_EVENTS = {"epoch": "#epoch_start", "step": "#optimizer_step"}


def lr_metric_names(optimizers: Sequence[tuple[Any, ...]]) -> list[str]:
    """Lightning's names: ``lr-<Class>``, ``-<k>`` for the k-th repeat of a class, ``/pg<i>`` per group (1-based)."""
    seen: dict[str, int] = {}
    names: list[str] = []
    for cls, groups, *_ in optimizers:
        k = seen.get(cls, 0)
        seen[cls] = k + 1
        base = f"lr-{cls}" + (f"-{k}" if k else "")
        if len(groups) == 1:
            names.append(base)
        else:
            names.extend(f"{base}/pg{i + 1}" for i in range(len(groups)))
    return names


class LearningRateMonitor(Listener):
    """Return ``LogMetrics({"lr-SGD": 0.1, ...})`` at each scheduler's interval (default), every epoch or step."""

    def __init__(self, logging_interval: str | None = None) -> None:
        if logging_interval is not None and logging_interval not in _EVENTS:
            raise ValueError(
                f"LearningRateMonitor(logging_interval={logging_interval!r}); choose None (each scheduler's own "
                "interval, Lightning's default), 'epoch' or 'step'"
            )
        self.logging_interval = logging_interval

    def subscriptions(self) -> Iterator[tuple[str, Callable[..., Any], int | None, bool | int]]:
        # Callable[..., Any], not events.Handler: these handlers take only the event, which the bus allows
        # (it reads each handler's signature) but Handler, typed as (event, state), does not say
        handlers = {"epoch": self.on_epoch_start, "step": self.on_optimizer_step}
        for interval, pattern in _EVENTS.items():
            if self.logging_interval in (None, interval):
                yield pattern, handlers[interval], None, False

    def on_epoch_start(self, event: Event) -> LogMetrics | None:
        return self._log(event, "epoch")

    def on_optimizer_step(self, event: Event) -> LogMetrics | None:
        return self._log(event, "step")

    def _log(self, event: Event, interval: str) -> LogMetrics | None:
        logged = self.rates(event, interval)
        return LogMetrics(logged) if logged else None

    def rates(self, event: Event, interval: str) -> dict[str, float]:
        """The rates this monitor logs at ``event``, an ``interval`` moment (``"step"`` or ``"epoch"``), by name."""
        optimizers: Any = event.payload.get(LR_PAYLOAD_KEY)
        if optimizers is None:
            raise RuntimeError(
                f"LearningRateMonitor needs the learning rates in the payload of {event.name!r} "
                f"(key {LR_PAYLOAD_KEY!r}: one (optimizer class name, (lr per param group, ...)) per optimizer), "
                "and this trainer does not provide them; remove LearningRateMonitor from the listeners"
            )
        names = iter(lr_metric_names(optimizers))
        logged: dict[str, float] = {}
        for _, groups, *rest in optimizers:
            own = rest[0] if rest else ""
            for lr in groups:
                name = next(names)
                if self.logging_interval is not None or own in ("", interval):
                    logged[name] = float(lr)
        return logged
