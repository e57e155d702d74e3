"""The one writer of the trainer state: steps the chart, emits, applies updates.

Hot path: :meth:`Runtime.fire` looks the trigger up in the compiled table (one
dict lookup), bumps the counters the transition implies, calls the bus's
observers with plain values, and emits the event's blinker signal only if it has
a receiver. No event object and no state snapshot is built for an event nobody
listens to. The frozen :class:`TrainerState` is folded from the last applied
state plus the live counters when someone asks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from interlock.core.chart import Chart
from interlock.core.errors import IllegalTransition
from interlock.core.events import Event, EventBus
from interlock.core.progress import Counters, compile_counter_ops
from interlock.core.state import TrainerState
from interlock.core.updates import (
    LogMetrics,
    Merged,
    ReplaceOptimizer,
    SaveCheckpoint,
    SetLearningRate,
    Update,
    merge,
    reduce,
)

__all__ = ["Runtime"]


class Runtime:
    """Chart cursor + event bus + the state; implements the loops' ``Driver``."""

    def __init__(self, chart: Chart, bus: EventBus, state: TrainerState | None = None) -> None:
        self.chart = chart
        self.bus = bus
        self.counters = Counters()
        self._counts: dict[str, int] = dict.fromkeys(chart.leaves, 0)
        self._base = TrainerState()
        self._snapshot: TrainerState | None = None
        self._at = chart.initial
        ops = compile_counter_ops(chart)
        self._table: dict[str, dict[str, tuple[str, Any, Any]]] = {
            src: {trig: (dst, bus.signals[dst], ops.get((src, trig))) for trig, dst in row.items()}
            for src, row in chart.table.items()
        }
        self._checkpointable = chart.checkpoint_states
        self._observers = bus.observers  # the bus's own list: observers added later are seen
        self._pending_saves: list[SaveCheckpoint] = []
        self.effects: dict[type, Callable[[Any], None]] = {}
        self.save_checkpoint: Callable[[SaveCheckpoint, TrainerState], None] | None = None
        self.metric_mode: Callable[[str], str] = lambda name: "min"
        self.trace: list[tuple[str, str, str]] | None = None
        if state is not None:
            self.restore(state)

    # -- reading -------------------------------------------------------------------
    @property
    def at(self) -> str:
        """The current leaf state of the chart."""
        return self._at

    @property
    def should_stop(self) -> bool:
        return self._base.should_stop

    @property
    def state(self) -> TrainerState:
        """The current state, folded from the applied state and the live counters."""
        snap = self._snapshot
        if snap is None:
            snap = self._snapshot = attrs.evolve(
                self._base, chart=self._at, progress=self.counters.freeze(), counts=dict(self._counts)
            )
        return snap

    # -- the hot path ----------------------------------------------------------------
    def fire(self, trigger: str, payload: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None) -> None:
        """Take the transition ``trigger`` from the current state and emit its event.

        ``payload`` is the event's data, or a function that builds it: that is only
        called when a handler reads ``event.payload``.
        """
        source = self._at
        try:
            dest, signal, ops = self._table[source][trigger]
        except KeyError:
            raise IllegalTransition(source, trigger, sorted(self._table.get(source, ()))) from None
        self._at = dest
        if ops is not None:
            ops(self.counters)
        count = self._counts[dest] = self._counts[dest] + 1
        self._snapshot = None
        if self.trace is not None:
            self.trace.append((source, trigger, dest))
        if self._observers:
            c = self.counters
            for observe in self._observers:
                observe(dest, trigger, source, count, c.epoch, c.global_step, c.batch_idx)
        if signal.receivers:
            c = self.counters
            event = Event(dest, trigger, source, count, c.epoch, c.global_step, c.batch_idx, payload)
            self.apply_all(self.bus.send(event, self._state_ref))
        if self._pending_saves and dest in self._checkpointable:
            self._flush_saves()

    def _state_ref(self) -> TrainerState:
        return self.state

    # -- applying updates ------------------------------------------------------------
    def apply(self, *updates: Update, source: str = "loop") -> None:
        """Apply updates the loops return (same rules as handlers' updates)."""
        self.apply_all([(source, u) for u in updates])

    def apply_all(self, items: list[tuple[str, Update]]) -> None:
        if not items:
            return
        merged = merge(items)
        if merged.changes_state:
            self._apply_state(merged)
        for effect in merged.effects:
            self._apply_effect(effect)
        if self._pending_saves and self._at in self._checkpointable:
            self._flush_saves()

    def _apply_state(self, merged: Merged) -> None:
        state = reduce(self.state, merged)
        if merged.restore is not None:
            self.restore(state)
            return
        if merged.metrics:
            best = dict(state.best_metrics)
            for name, value in merged.metrics.items():
                old = best.get(name)
                better = min if self.metric_mode(name) == "min" else max
                best[name] = value if old is None else better(old, value)
            state = attrs.evolve(state, best_metrics=best)
        self._base = state
        self._snapshot = state

    def restore(self, state: TrainerState) -> None:
        """Make ``state`` current: counters, event counts and chart position included."""
        self._base = state
        self._snapshot = None
        self.counters = Counters.from_progress(state.progress)
        self._counts = dict.fromkeys(self.chart.leaves, 0)
        self._counts.update({k: v for k, v in state.counts.items() if k in self._counts})
        if state.chart in self._table:
            self._at = state.chart

    def _apply_effect(self, effect: Update) -> None:
        if isinstance(effect, SaveCheckpoint):  # written once the other effects are applied, at a checkpoint state
            self._pending_saves.append(effect)
            return
        handler = self.effects.get(type(effect))
        if handler is None:
            kinds = (SetLearningRate, ReplaceOptimizer)
            if isinstance(effect, kinds):
                raise RuntimeError(f"{type(effect).__name__} cannot be applied outside a fit (no optimizer yet)")
            raise TypeError(f"no effect handler for {effect!r}")
        handler(effect)

    def _flush_saves(self) -> None:
        saves, self._pending_saves = self._pending_saves, []
        if self.save_checkpoint is None or self._base.stage != "fit":
            return
        by_path: dict[str, SaveCheckpoint] = {}  # one write per file; the files it replaces, from every request
        for save in saves:
            seen = by_path.get(save.path)
            by_path[save.path] = save if seen is None else attrs.evolve(seen, replaces=seen.replaces + save.replaces)
        for save in by_path.values():
            self.save_checkpoint(save, self.state)

    def log(self, metrics: Mapping[str, float], **history: Any) -> None:
        """Record metrics (and a history row, when ``history`` is given)."""
        self.apply(LogMetrics(dict(metrics)))
        if history:
            row = {**history, **metrics}
            self._base = attrs.evolve(self._base, history=(*self._base.history, row))
            self._snapshot = None

    def evolve(self, **changes: Any) -> None:
        """Change fields of the state owned by the loop (stage, status, data position)."""
        self._base = attrs.evolve(self.state, **changes)
        self._snapshot = self._base
