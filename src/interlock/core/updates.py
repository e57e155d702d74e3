"""Updates: what handlers, listeners, actions and guards return instead of mutating.

A handler receives ``(event, state)`` and returns ``None``, one update, or a list
of them; a chart action returns the same. The runtime merges all updates of one
point (:func:`merge`), rejects conflicting ones, and applies them: state updates
through :func:`reduce` (pure), effects (checkpoint requests, optimizer changes,
and any effect a component registers) through the handler registered for their
type. That is the only way the trainer state changes.

:class:`Change` updates are the runtime's own bookkeeping (stage, status, data
position, evaluation sums, history rows), returned by the chart's actions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from interlock.core import reduce32
from interlock.core.errors import ConflictingUpdates
from interlock.core.state import TrainerState, freeze, mode_of

__all__ = [
    "AddEvalSums",
    "Agree",
    "AppendHistory",
    "BeginStage",
    "Change",
    "Interrupt",
    "LogMetrics",
    "Merged",
    "ReplaceOptimizer",
    "RestoreState",
    "SaveCheckpoint",
    "SetAccumulation",
    "SetDataPosition",
    "SetEvalExhausted",
    "SetFailure",
    "SetLearningRate",
    "SetListenerState",
    "SetLoaderResults",
    "SetParameters",
    "SetRunInfo",
    "SetStageFacts",
    "SetStatus",
    "Stop",
    "Update",
    "as_updates",
    "best_of",
    "merge",
    "reduce",
]


def _paths(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(paths)


class Update:
    """Base class of everything a handler may return."""

    __slots__ = ()


@attrs.frozen
class Stop(Update):
    """Ask the run to stop at the next loop boundary."""

    reason: str = "stop requested"


@attrs.frozen
class LogMetrics(Update):
    """Record metric values (merged into ``state.metrics``).

    ``prog_bar``: for names the module logged, whether the progress bar shows them (``self.log(prog_bar=...)``);
    a name not in it (a listener's metric, a returned scalar) is shown by interlock's bars and is not one of
    Lightning's ``progress_bar_metrics``. ``to_loggers``: the same for ``self.log(logger=...)`` and Lightning's
    ``logged_metrics``. ``to_callbacks``: ``False`` for a name that is not one of Lightning's ``callback_metrics``
    (a value an evaluation loop logged on step); a name logged again without it is one again.
    """

    metrics: Mapping[str, float] = attrs.field(converter=freeze)
    prog_bar: Mapping[str, bool] = attrs.field(factory=dict, converter=freeze)
    to_loggers: Mapping[str, bool] = attrs.field(factory=dict, converter=freeze)
    to_callbacks: Mapping[str, bool] = attrs.field(factory=dict, converter=freeze)


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
    ``weights_only`` leaves out the optimizer, scheduler and gradient state (such a file
    cannot resume a fit).
    """

    path: str
    tag: str = ""
    replaces: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    weights_only: bool = False


@attrs.frozen
class SetLearningRate(Update):
    """Set the learning rate of every param group of optimizer ``optimizer`` (of group ``group`` only when given)."""

    lr: float
    optimizer: int = 0
    group: int | None = None


@attrs.frozen(eq=False)
class SetParameters(Update):
    """Copy ``values`` into the module's parameters, in ``module.parameters()`` order (weight averaging)."""

    values: tuple[Any, ...] = attrs.field(converter=tuple)


@attrs.frozen
class ReplaceOptimizer(Update):
    """Swap optimizer ``index`` for the one ``factory(params)`` builds."""

    factory: Callable[[Any], Any]
    index: int = 0


@attrs.frozen
class RestoreState(Update):
    """Replace the whole state: what restoring a checkpoint returns."""

    state: TrainerState


class Change(Update):
    """A change of fields the runtime owns; :meth:`changes` says which (pure)."""

    __slots__ = ()

    def changes(self, state: TrainerState) -> dict[str, Any]:
        raise NotImplementedError


@attrs.frozen
class BeginStage(Change):
    """A stage starts: it runs, no stop is pending, and the metrics are the new stage's (Lightning resets them)."""

    stage: str
    #: the module's ``metric_modes``: which direction is better for the metrics it names (``best_metrics``)
    metric_modes: Mapping[str, str] = attrs.field(factory=dict, converter=freeze)

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "status": "running",
            "should_stop": False,
            "stop_reason": "",
            "metrics": {},
            "prog_bar": {},
            "to_loggers": {},
            "to_callbacks": {},
            "metric_modes": self.metric_modes,
            "agreed": {},
            "limits": {},
            "eval_exhausted": False,
            "error": "",
            "failed_in": "",
            "loader_results": (),
        }


@attrs.frozen
class SetStatus(Change):
    """How the stage is going: ``running``, ``finished``, ``interrupted`` or ``failed``."""

    status: str

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {"status": self.status}


@attrs.frozen
class SetAccumulation(Change):
    """Accumulate gradients over ``factor`` batches per optimizer step from now on (``0``: the Trainer's flag)."""

    factor: int

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {"accumulate_grad_batches": self.factor}


@attrs.frozen
class SetRunInfo(Change):
    """Facts of this process and run: output directory, seed, rank and world size (``None``: unchanged)."""

    run_dir: str | None = None
    seed: int | None = None
    global_rank: int | None = None
    world_size: int | None = None

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}


@attrs.frozen
class SetDataPosition(Change):
    """Where the training data stands (epoch seed, exhausted); merged into ``state.data`` unless ``replace``."""

    data: Mapping[str, Any] = attrs.field(converter=freeze)
    replace: bool = False

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {"data": self.data if self.replace else {**state.data, **self.data}}


@attrs.frozen
class AddEvalSums(Change):
    """Add batch-size-weighted sums to the running evaluation sums (``None``: reset them).

    Sums add in float32 (``f64``: float64), as Lightning's epoch means accumulate.
    """

    sums: Mapping[str, float] | None = None
    f64: bool = False

    def changes(self, state: TrainerState) -> dict[str, Any]:
        if self.sums is None:
            return {"eval_sums": {}}
        sums = dict(state.eval_sums)
        for key, value in self.sums.items():
            sums[key] = reduce32.add(sums.get(key, 0.0), value, self.f64)
        return {"eval_sums": sums}


@attrs.frozen
class AppendHistory(Change):
    """Append one row (stage, epoch, step and metrics) to the metric history."""

    row: Mapping[str, Any] = attrs.field(converter=freeze)

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {"history": state.history.append(self.row)}


@attrs.frozen
class Agree(Change):
    """What the processes agreed (``stop``, ``preempted``): what an agreement action returns for the guards."""

    agreed: Mapping[str, bool] = attrs.field(converter=freeze)

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {"agreed": {**state.agreed, **self.agreed}}


@attrs.frozen
class SetStageFacts(Change):
    """Facts of the stage that set-up found (``None``: unchanged): each loader's batch limit, manual optimization."""

    limits: Mapping[str, int | None] | None = attrs.field(default=None, converter=attrs.converters.optional(freeze))
    manual_optimization: bool | None = None

    def changes(self, state: TrainerState) -> dict[str, Any]:
        pairs = (("limits", self.limits), ("manual_optimization", self.manual_optimization))
        return {k: v for k, v in pairs if v is not None}


@attrs.frozen
class SetEvalExhausted(Change):
    """The evaluation loop's current loader ran out (``True``), or a loader was opened (``False``)."""

    exhausted: bool

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {"eval_exhausted": self.exhausted}


@attrs.frozen
class SetLoaderResults(Change):
    """The metrics of loader ``index`` of the evaluation loop that just ended one (Lightning's return value)."""

    index: int
    metrics: Mapping[str, float] = attrs.field(converter=freeze)

    def changes(self, state: TrainerState) -> dict[str, Any]:
        results = list(state.loader_results)
        results += [{}] * (self.index + 1 - len(results))
        results[self.index] = self.metrics
        return {"loader_results": results}


@attrs.frozen
class SetFailure(Change):
    """The stage is ending with an exception: ``"Type: message"`` and the state or transition it was raised in."""

    error: str
    failed_in: str

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {"error": self.error, "failed_in": self.failed_in}


@attrs.frozen
class Interrupt(Update):
    """The stage is being interrupted by ``exception`` (a preemption).

    The chart goes on to its teardown, and the stage raises ``exception`` when it ends.
    """

    exception: BaseException


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
    prog_bar: Mapping[str, bool] = attrs.field(factory=dict)
    to_loggers: Mapping[str, bool] = attrs.field(factory=dict)
    to_callbacks: Mapping[str, bool] = attrs.field(factory=dict)
    listeners: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    restore: TrainerState | None = None
    effects: tuple[Update, ...] = ()
    changes: tuple[Change, ...] = ()

    @property
    def changes_state(self) -> bool:
        return bool(self.stop is not None or self.metrics or self.listeners or self.restore is not None or self.changes)


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
    prog_bar: dict[str, bool] = {}
    to_loggers: dict[str, bool] = {}
    to_callbacks: dict[str, bool] = {}
    listeners: dict[str, tuple[Any, str]] = {}
    restore: list[tuple[TrainerState, str]] = []
    lrs: dict[Any, tuple[float, str]] = {}
    effects: list[Update] = []
    changes: list[Change] = []
    for source, update in items:
        if isinstance(update, Change):
            changes.append(update)
        elif isinstance(update, Stop):
            stop = update.reason if stop is None else stop
        elif isinstance(update, LogMetrics):
            for k, v in update.metrics.items():
                _put(metrics, k, v, source, "metric")
            prog_bar.update(update.prog_bar)
            to_loggers.update(update.to_loggers)
            to_callbacks.update(update.to_callbacks)
        elif isinstance(update, SetListenerState):
            _put(listeners, update.key, update.value, source, "listener state")
        elif isinstance(update, RestoreState):
            restore.append((update.state, source))
        else:
            if isinstance(update, SetLearningRate):
                where = update.optimizer if update.group is None else (update.optimizer, update.group)
                _put(lrs, where, update.lr, source, "learning rate of optimizer")
            effects.append(update)
    if len(restore) > 1:
        raise ConflictingUpdates(f"two restores in one event, from {restore[0][1]} and {restore[1][1]}")
    return Merged(
        stop=stop,
        metrics={k: v for k, (v, _) in metrics.items()},
        prog_bar=prog_bar,
        to_loggers=to_loggers,
        to_callbacks=to_callbacks,
        listeners={k: v for k, (v, _) in listeners.items()},
        restore=restore[0][0] if restore else None,
        effects=tuple(effects),
        changes=tuple(changes),
    )


def best_of(best: Mapping[str, float], metrics: Mapping[str, float], modes: Mapping[str, str]) -> dict[str, float]:
    """``best`` with ``metrics`` folded in: the better value of each (:func:`~interlock.core.state.mode_of`)."""
    out = dict(best)
    for name, value in metrics.items():
        old = out.get(name)
        better = min if mode_of(name, modes) == "min" else max
        out[name] = value if old is None else better(old, value)
    return out


def reduce(state: TrainerState, merged: Merged) -> TrainerState:
    """Apply the state part of merged updates; pure. A restore first, then the rest, changes in order."""
    if merged.restore is not None:
        state = merged.restore
    changes: dict[str, Any] = {}
    if merged.stop is not None and not state.should_stop:
        changes.update(should_stop=True, stop_reason=merged.stop)
    if merged.metrics:
        changes["metrics"] = {**state.metrics, **merged.metrics}
        changes["best_metrics"] = best_of(state.best_metrics, merged.metrics, state.metric_modes)
        if merged.prog_bar:
            changes["prog_bar"] = {**state.prog_bar, **merged.prog_bar}
        if merged.to_loggers:
            changes["to_loggers"] = {**state.to_loggers, **merged.to_loggers}
        hidden = state.to_callbacks  # a name logged again is a callback metric unless it says not
        if merged.to_callbacks or (hidden and not hidden.keys().isdisjoint(merged.metrics)):
            kept = {k: v for k, v in state.to_callbacks.items() if k not in merged.metrics}
            changes["to_callbacks"] = {**kept, **merged.to_callbacks}
    if merged.listeners:
        changes["listeners"] = {**state.listeners, **merged.listeners}
    if changes:
        state = state.replace(**changes)
    for change in merged.changes:
        state = state.replace(**change.changes(state))
    return state
