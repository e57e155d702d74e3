"""LearningRateMonitor: log the optimizers' learning rates as metrics.

Listeners never see optimizers, so this reads the rates from the event payload:
``payload["lr"]`` must be a sequence with one ``(optimizer_class_name,
(lr_of_group_0, lr_of_group_1, ...), scheduler_interval, (group names...),
((position, name, interval) of each of its schedulers...), ((momentum, weight_decay) of each
group...))`` entry per optimizer (the interval ``"step"``, ``"epoch"`` or ``""`` without a
scheduler; the last three may be left out), on
``fit.train.epoch_start`` (``logging_interval="epoch"``) or ``fit.train.batch.optimizer_step``
(``"step"``; the loggers that write Lightning's rows read it on ``fit.train.batch.step``, as
Lightning's monitor logs at the batch start); ``None``, the default as in Lightning, logs each
optimizer at its scheduler's interval, and one without a scheduler at both. Those states declare
the ``lr`` payload key in the chart (built only when a handler reads it); a custom chart whose
states do not gets a ``RuntimeError`` that says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from interlock.core.events import Event, Listener
from interlock.core.updates import LogMetrics

__all__ = ["LR_PAYLOAD_KEY", "LearningRateMonitor", "lightning_rates", "lr_metric_names"]

LR_PAYLOAD_KEY = "lr"
_EVENTS = {"epoch": "#epoch_start", "step": "#optimizer_step"}


def _schedulers(index: int, entry: Sequence[Any]) -> tuple[tuple[int, str | None, str], ...]:
    """An optimizer's schedulers as ``(position, name, interval)`` (a short entry: one unnamed, by its interval)."""
    if len(entry) > 4:
        return tuple(entry[4])
    interval = entry[2] if len(entry) > 2 else ""
    return ((index, None, interval),) if interval else ()


def lightning_rates(
    optimizers: Sequence[Sequence[Any]], interval: str, momentum: bool = False, weight_decay: bool = False
) -> dict[str, float]:
    """Lightning's ``LearningRateMonitor`` names and rates at ``interval`` (``"any"``: every scheduler).

    The schedulers due at ``interval`` and the optimizers without one are logged. A scheduler's rates
    are named by its ``name`` or ``lr-<optimizer class>`` (``-<k>`` for the k-th repeat
    of a class among unnamed ones), first in the order ``configure_optimizers`` gave the schedulers; then
    the optimizers without one, in their order. A param group adds ``/<its name>`` (``/pg<i>``, 1-based,
    when there are several and it has none). Two groups of one optimizer with one name are an error.
    ``momentum`` / ``weight_decay``: each group's also, as ``<name>-momentum`` and ``<name>-weight_decay``
    right after its rate (Lightning's ``log_momentum`` / ``log_weight_decay``; a missing value is 0).
    """
    seen: list[int] = []
    counts: dict[str, int] = {}
    logged: dict[str, float] = {}

    def names_of(index: int, name: str, counted: bool) -> list[str]:
        cls, lrs = optimizers[index][0], optimizers[index][1]
        given = tuple(optimizers[index][3]) if len(optimizers[index]) > 3 else (None,) * len(lrs)
        seen.append(index)
        if counted:
            counts[cls] = counts.get(cls, 0) + 1
        groups = [g if g is not None else f"pg{i + 1}" for i, g in enumerate(given)]
        twice = sorted({g for g in groups if groups.count(g) > 1})
        if twice:
            raise ValueError(
                f"LearningRateMonitor: an optimizer ({cls}) has several param groups named {twice}; give each param "
                "group a different 'name' (Lightning refuses it too)"
            )
        if counts.get(cls, 0) > 1:
            name = f"{name}-{counts[cls] - 1}"
        if len(lrs) > 1:
            return [f"{name}/{g}" for g in groups]
        return [f"{name}/{given[0]}" if given[0] else name]

    def put(index: int, names: list[str]) -> None:
        entry = optimizers[index]
        extra = entry[5] if len(entry) > 5 else ((None, None),) * len(entry[1])
        for name, lr, (m, wd) in zip(names, entry[1], extra, strict=True):
            logged[name] = float(lr)
            if momentum:  # as the param group holds them (an int 0 is written "0", as Lightning's)
                logged[f"{name}-momentum"] = 0 if m is None else m
            if weight_decay:
                logged[f"{name}-weight_decay"] = 0 if wd is None else wd

    configs = sorted(
        (pos, i, name, iv) for i, entry in enumerate(optimizers) for pos, name, iv in _schedulers(i, entry)
    )
    for _, index, name, due in configs:
        names = names_of(index, name if name is not None else f"lr-{optimizers[index][0]}", name is None)
        if interval in (due, "any"):
            put(index, names)
    for index, entry in enumerate(optimizers):
        if index not in seen:
            put(index, names_of(index, f"lr-{entry[0]}", True))
    return logged


def lr_metric_names(optimizers: Sequence[Sequence[Any]]) -> list[str]:
    """Every name :func:`lightning_rates` gives (Lightning's ``LearningRateMonitor`` keys), in its order."""
    return list(lightning_rates(optimizers, "any"))


class LearningRateMonitor(Listener):
    """Return ``LogMetrics({"lr-SGD": 0.1, ...})`` at each scheduler's interval (default), every epoch or step.

    ``log_momentum`` / ``log_weight_decay`` add each group's momentum (``betas[0]`` for Adam-like
    optimizers) and weight decay, named ``<name>-momentum`` and ``<name>-weight_decay``, as Lightning's;
    an optimizer without momentum logs 0, with Lightning's warning.
    """

    def __init__(
        self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False
    ) -> None:
        if logging_interval is not None and logging_interval not in _EVENTS:
            raise ValueError(
                f"LearningRateMonitor(logging_interval={logging_interval!r}); choose None (each scheduler's own "
                "interval, Lightning's default), 'epoch' or 'step'"
            )
        for name, value in (("log_momentum", log_momentum), ("log_weight_decay", log_weight_decay)):
            if not isinstance(value, bool):
                raise ValueError(f"LearningRateMonitor({name}={value!r}) must be True or False")
        self.logging_interval = logging_interval
        self.log_momentum, self.log_weight_decay = log_momentum, log_weight_decay
        self._warned = False

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
        if self.log_momentum and not self._warned:
            self._warned = True
            if any(len(e) > 5 and any(m is None for m, _ in e[5]) for e in optimizers):
                warnings.warn(
                    "You have set log_momentum=True, but some optimizers do not have momentum. This will log a value 0 "
                    "for the momentum.",
                    UserWarning,
                    stacklevel=2,
                )
        due = interval if self.logging_interval is None else "any"
        return lightning_rates(optimizers, due, self.log_momentum, self.log_weight_decay)
