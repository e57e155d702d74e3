"""Updates: what handlers, listeners and connectors return instead of mutating.

A handler receives ``(event, state)`` and returns ``None``, one update, or a list
of them. The trainer merges all updates of one event (:func:`merge`), rejects
conflicting ones, and applies them: state updates through :func:`reduce` (a pure
function using ``attrs.evolve``), effects (checkpoint requests, optimizer
changes) through the connectors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from interlock.core.errors import ConflictingUpdates
from interlock.core.state import TrainerState, freeze

__all__ = [
    "LogMetrics",
    "Merged",
    "ReplaceOptimizer",
    "RestoreState",
    "SaveCheckpoint",
    "SetLearningRate",
    "SetListenerState",
    "Stop",
    "Update",
    "as_updates",
    "merge",
    "reduce",
]


class Update:
    """Base class of everything a handler may return."""

    __slots__ = ()


@attrs.frozen
class Stop(Update):
    """Ask the run to stop at the next loop boundary."""

    reason: str = "stop requested"


@attrs.frozen
class LogMetrics(Update):
    """Record metric values (merged into ``state.metrics``)."""

    metrics: Mapping[str, float] = attrs.field(converter=freeze)


@attrs.frozen
class SetListenerState(Update):
    """Replace the stored state of one listener (plain data)."""

    key: str
    value: Mapping[str, Any] = attrs.field(converter=freeze)


@attrs.frozen
class SaveCheckpoint(Update):
    """Request a checkpoint at the next checkpointable state.

    ``path`` is the file to write; ``tag`` names why (e.g. ``"last"``). ``replaces``
    lists files this checkpoint supersedes: they are deleted once it is saved, and
    kept if the save fails (``ModelCheckpoint`` uses it for files leaving the top k).
    """

    path: str
    tag: str = ""
    replaces: tuple[str, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class SetLearningRate(Update):
    """Set the learning rate of every param group of optimizer ``optimizer``."""

    lr: float
    optimizer: int = 0


@attrs.frozen
class ReplaceOptimizer(Update):
    """Swap optimizer ``index`` for the one ``factory(params)`` builds."""

    factory: Callable[[Any], Any]
    index: int = 0


@attrs.frozen
class RestoreState(Update):
    """Replace the whole state: what restoring a checkpoint returns."""

    state: TrainerState


def as_updates(result: Any, source: str) -> list[Update]:
    """Normalise a handler's return value to a list of updates."""
    if result is None:
        return []
    if isinstance(result, Update):
        return [result]
    if isinstance(result, Iterable) and not isinstance(result, str | bytes | Mapping):
        items = list(result)
        bad = [r for r in items if not isinstance(r, Update)]
        if not bad:
            return items
        result = bad[0]
    raise TypeError(
        f"handler {source} returned {result!r}; a handler returns None, an interlock Update "
        "(Stop, LogMetrics, SaveCheckpoint, SetLearningRate, ReplaceOptimizer, SetListenerState) or a list of them"
    )


@attrs.frozen
class Merged:
    """All updates of one event, merged; the keys are in delivery order."""

    stop: str | None = None
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    listeners: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    restore: TrainerState | None = None
    effects: tuple[Update, ...] = ()

    @property
    def changes_state(self) -> bool:
        return bool(self.stop is not None or self.metrics or self.listeners or self.restore is not None)


def _put(table: dict[Any, tuple[Any, str]], key: Any, value: Any, source: str, what: str) -> None:
    if key in table and table[key][0] != value:
        other_value, other = table[key]
        raise ConflictingUpdates(
            f"conflicting updates for {what} {key!r}: {other} set {other_value!r}, {source} set {value!r}; "
            "let one listener own it, or order them with `after=`"
        )
    table[key] = (value, source)


def merge(items: Iterable[tuple[str, Update]]) -> Merged:
    """Merge ``(source, update)`` pairs; raise :class:`ConflictingUpdates` on a clash.

    Stops combine (the first reason wins), metric and listener-state keys must
    agree, at most one restore, effects are kept in order (conflicting learning
    rates for one optimizer are rejected).
    """
    stop: str | None = None
    metrics: dict[str, tuple[float, str]] = {}
    listeners: dict[str, tuple[Any, str]] = {}
    restore: list[tuple[TrainerState, str]] = []
    lrs: dict[int, tuple[float, str]] = {}
    effects: list[Update] = []
    for source, update in items:
        if isinstance(update, Stop):
            stop = update.reason if stop is None else stop
        elif isinstance(update, LogMetrics):
            for k, v in update.metrics.items():
                _put(metrics, k, v, source, "metric")
        elif isinstance(update, SetListenerState):
            _put(listeners, update.key, update.value, source, "listener state")
        elif isinstance(update, RestoreState):
            restore.append((update.state, source))
        else:
            if isinstance(update, SetLearningRate):
                _put(lrs, update.optimizer, update.lr, source, "learning rate of optimizer")
            effects.append(update)
    if len(restore) > 1:
        raise ConflictingUpdates(f"two restores in one event, from {restore[0][1]} and {restore[1][1]}")
    return Merged(
        stop=stop,
        metrics={k: v for k, (v, _) in metrics.items()},
        listeners={k: v for k, (v, _) in listeners.items()},
        restore=restore[0][0] if restore else None,
        effects=tuple(effects),
    )


def reduce(state: TrainerState, merged: Merged) -> TrainerState:
    """Apply the state part of merged updates; pure."""
    if merged.restore is not None:
        state = merged.restore
    changes: dict[str, Any] = {}
    if merged.stop is not None and not state.should_stop:
        changes.update(should_stop=True, stop_reason=merged.stop)
    if merged.metrics:
        changes["metrics"] = {**state.metrics, **merged.metrics}
    if merged.listeners:
        changes["listeners"] = {**state.listeners, **merged.listeners}
    return attrs.evolve(state, **changes) if changes else state
