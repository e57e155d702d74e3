"""Events, their blinker signals, and ordered handler registration.

Every chart transition emits the blinker signal named after the leaf state it
enters (``fit.train.batch.end``), carrying an :class:`Event`. Handlers are
registered with a glob ``pattern`` over those names, or a tag pattern ``"#tag"``
(``"#a#b"``: the events carrying every one of the tags; tags come from the chart's
``tags:``, a leaf's own and those of the states above it), optionally filtered with
``every=N`` (the event's N-th, 2N-th, ... occurrence) or ``once`` (only its first,
or its ``once``-th, occurrence). Each signal has one blinker receiver, the bus's
dispatcher, which calls that event's handlers in registration order: delivery is
deterministic. When an event has no handler its signal has no receiver, and the
trainer builds no event and no state snapshot for it.

An *observer* (:meth:`EventBus.observe`, or a :class:`Listener` method marked
:func:`observe`) sees every transition as plain values,
``(name, trigger, source, count, epoch, global_step, batch_idx)``, before the
event's handlers. It returns nothing and gets no state, so the trainer builds no
:class:`Event` for it: watching every transition costs a call.

A *recorder* (:meth:`EventBus.record`, a :class:`Listener`'s :meth:`~Listener.recorders`)
costs less: the runtime appends each transition to its ``rows`` as a :data:`Row`, after the
observers, with no call, and calls its ``flush_due(name)`` once ``time.time()`` reaches its ``due``
or its rows reach its ``limit`` (``EventTrace`` records so).
"""

from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

import attrs
import blinker
import torch

from interlock.core.config import TrainerConfig
from interlock.core.state import TrainerState
from interlock.core.updates import SetListenerState, Update, as_updates

__all__ = [
    "Event",
    "EventBus",
    "Handler",
    "Listener",
    "Observer",
    "Recorder",
    "Row",
    "Subscription",
    "listen",
    "observe",
    "read_only",
]

Handler = Callable[["Event", TrainerState], Any]
#: ``observer(name, trigger, source, count, epoch, global_step, batch_idx)``: see every transition.
Observer = Callable[[str, str, str, int, int, int, int], None]
F = TypeVar("F", bound=Callable[..., Any])
#: A transition as a recorder keeps it: ``(time, name, trigger, source, count, epoch, global_step, batch_idx)``.
Row = tuple[float, str, str, str, int, int, int, int]


class Recorder(Protocol):
    """Keeps every transition: the runtime appends a :data:`Row` to ``rows``, with no call per transition."""

    #: The transitions kept since the last :meth:`flush_due` (the runtime appends; the recorder empties it).
    rows: list[Any]
    #: ``time.time()`` at which the runtime calls :meth:`flush_due` (``math.inf``: never by time).
    due: float
    #: The number of rows at which the runtime calls :meth:`flush_due`.
    limit: int

    def flush_due(self, name: str) -> None:
        """Called by the runtime after appending the row of entering ``name``, once ``due`` or ``limit`` is reached."""


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def read_only(value: Any) -> Any:
    """A copy nobody can use to change the run: tensors cloned (detached), containers frozen."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Mapping):
        return MappingProxyType({k: read_only(v) for k, v in value.items()})
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple: keep its type
        return type(value)(*(read_only(v) for v in value))
    if isinstance(value, list | tuple):
        return tuple(read_only(v) for v in value)
    return value


@attrs.frozen(slots=True)
class Event:
    """One transition: the leaf state entered, how, why, and what it carries.

    ``guard`` names the condition that chose this transition (empty for a
    default or an external event). ``payload`` holds what the state declares in
    the chart: ``batch``, ``outputs`` (what a step returned), ``lr``,
    ``exception``. It is read-only and built the first time a handler reads it,
    as a copy (tensors cloned), so a handler cannot change what the step sees and
    handlers that never look cost nothing.
    """

    name: str
    trigger: str
    source: str
    count: int
    epoch: int
    global_step: int
    batch_idx: int
    _payload: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = attrs.field(default=None, eq=False)
    guard: str = ""

    @property
    def dest(self) -> str:
        return self.name

    @property
    def payload(self) -> Mapping[str, Any]:
        """The transition's data, read-only (built and copied on first access)."""
        payload = self._payload
        if isinstance(payload, MappingProxyType) or payload is None:
            return payload if payload is not None else _EMPTY
        built = payload() if callable(payload) else payload
        frozen = MappingProxyType({k: read_only(v) for k, v in built.items()})
        object.__setattr__(self, "_payload", frozen)  # a one-time cache on a frozen event
        return frozen


@attrs.define
class Subscription:
    """A registered handler; ``remove()`` unregisters it."""

    pattern: str
    handler: Callable[..., Any]
    source: str
    every: int | None = None
    once: int | None = None
    names: tuple[str, ...] = ()
    bus: EventBus | None = attrs.field(default=None, repr=False)

    wants_state: bool = True

    def wants(self, count: int) -> bool:
        if self.once is not None:
            return count == self.once
        return self.every is None or count % self.every == 0

    def remove(self) -> None:
        if self.bus is not None:
            self.bus._remove(self)
            self.bus = None


def _takes_state(handler: Any) -> bool:
    """Whether ``handler`` accepts ``(event, state)`` rather than just ``(event)``."""
    try:
        params = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2:
        return True
    if len(positional) == 1:
        return False
    raise TypeError(f"handler {handler!r} must accept (event) or (event, state)")


def _describe(handler: Any) -> str:
    owner = getattr(handler, "__self__", None)
    name = getattr(handler, "__qualname__", None) or repr(handler)
    return f"{type(owner).__name__}.{handler.__name__}" if owner is not None else name


class EventBus:
    """The signals of one chart and the handlers registered on them."""

    def __init__(self, names: Sequence[str], tags: Mapping[str, frozenset[str]] | None = None) -> None:
        self.names = tuple(names)
        #: Each event name's tags (the chart's ``tags:``, inherited down to the leaves).
        self.tags: Mapping[str, frozenset[str]] = MappingProxyType(
            {n: frozenset((tags or {}).get(n, ())) for n in self.names}
        )
        self._namespace = blinker.Namespace()
        self.signals: dict[str, blinker.NamedSignal] = {n: self._namespace.signal(n) for n in self.names}
        self._handlers: dict[str, list[Subscription]] = {n: [] for n in self.names}
        #: The observers' callables, in registration order; the runtime calls them on every transition.
        self.observers: list[Observer] = []
        self._observer_sources: list[str] = []
        #: The recorders, in registration order; the runtime appends every transition to their rows.
        self.recorders: list[Recorder] = []
        self._recorder_sources: list[str] = []

    def match(self, pattern: str) -> tuple[str, ...]:
        """Event names the glob ``pattern`` selects; an error when it selects none."""
        if not isinstance(pattern, str):
            raise TypeError(f"pattern must be a glob string such as 'fit.train.*', got {pattern!r}")
        if pattern.startswith("#"):
            return self.tagged(pattern)
        names = tuple(n for n in self.names if fnmatch.fnmatchcase(n, pattern))
        if not names:
            close = [n for n in self.names if pattern.split(".", maxsplit=1)[0] in n][:8]
            hint = f" (similar: {', '.join(close)})" if close else ""
            raise ValueError(
                f"pattern {pattern!r} matches no event{hint}; events are chart leaf paths such as "
                f"'fit.train.batch.end'; run `interlock chart` to see them all"
            )
        return names

    def tagged(self, pattern: str) -> tuple[str, ...]:
        """Event names carrying every tag of ``"#a#b"``; an error naming the chart's tags when none does."""
        wanted = frozenset(pattern.split("#")[1:])
        if not wanted or "" in wanted:
            raise ValueError(f"tag pattern {pattern!r} is malformed; write '#tag' or '#tag#other'")
        names = tuple(n for n in self.names if wanted <= self.tags[n])
        if not names:
            known = sorted(set().union(*self.tags.values()))
            raise ValueError(
                f"tag pattern {pattern!r} matches no event: no state of this chart carries "
                f"{'the tags' if len(wanted) > 1 else 'the tag'} {sorted(wanted)} together; "
                f"the chart's tags: {known}"
            )
        return names

    def on(
        self,
        pattern: str,
        handler: Handler | None = None,
        *,
        every: int | None = None,
        once: bool | int = False,
        source: str | None = None,
    ) -> Any:
        """Register ``handler`` for the events ``pattern`` selects; a decorator without ``handler``."""
        if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise ValueError(f"every={every!r}: must be an int >= 1 (call the handler on every N-th event)")
        if once is not False and every is not None:
            raise ValueError("pass either every= or once=, not both")
        if isinstance(once, bool):
            once_at = 1 if once else None
        elif isinstance(once, int) and once >= 1:
            once_at = once
        else:
            raise ValueError(f"once={once!r}: must be True or an int >= 1 (the occurrence to handle)")
        names = self.match(pattern)

        def register(fn: F) -> F:
            if not callable(fn):
                raise TypeError(f"handler for {pattern!r} must be callable, got {fn!r}")
            sub = Subscription(pattern, fn, source or _describe(fn), every, once_at, names, self, _takes_state(fn))
            for name in names:
                if not self._handlers[name]:
                    self.signals[name].connect(self._dispatch, weak=False)
                self._handlers[name].append(sub)
            return fn

        if handler is None:
            return register
        register(handler)
        return self._handlers[names[0]][-1]

    def observe(self, observer: Observer, *, source: str | None = None) -> Observer:
        """Call ``observer(name, trigger, source, count, epoch, global_step, batch_idx)`` on every transition.

        Observers run before the event's handlers, in registration order; what they
        return is ignored (they watch the run, they do not change it).
        """
        if not callable(observer):
            raise TypeError(f"observer must be callable, got {observer!r}")
        self.observers.append(observer)
        name = getattr(observer, "__name__", "observer")
        self._observer_sources.append(f"{source}.{name}" if source else _describe(observer))
        return observer

    def record(self, recorder: Recorder, *, source: str | None = None) -> Recorder:
        """Append every transition to ``recorder.rows`` (after the observers); see :class:`Recorder`."""
        for attr in ("rows", "due", "limit", "flush_due"):
            if not hasattr(recorder, attr):
                raise TypeError(f"a recorder needs rows, due, limit and flush_due(name); {recorder!r} has no {attr!r}")
        self.recorders.append(recorder)
        self._recorder_sources.append(f"{source or type(recorder).__name__}.record")
        return recorder

    def observer_sources(self) -> list[str]:
        """Each observer as ``listener_key.method`` (or the function's name), then each recorder, in call order."""
        return [*self._observer_sources, *self._recorder_sources]

    def remove_sources(self, sources: set[str]) -> None:
        """Unregister every handler and observer registered with one of ``sources`` (listener keys)."""
        for name in self.names:
            for sub in list(self._handlers[name]):
                if sub.source in sources:
                    sub.remove()
        kept = [(o, src) for o, src in zip(self.observers, self._observer_sources, strict=True)
                if src.split(".")[0] not in sources]  # fmt: skip
        self.observers[:] = [o for o, _ in kept]
        self._observer_sources[:] = [src for _, src in kept]
        recorders = [(r, src) for r, src in zip(self.recorders, self._recorder_sources, strict=True)
                     if src.split(".")[0] not in sources]  # fmt: skip
        self.recorders[:] = [r for r, _ in recorders]
        self._recorder_sources[:] = [src for _, src in recorders]

    def _remove(self, sub: Subscription) -> None:
        for name in sub.names:
            handlers = self._handlers[name]
            if sub in handlers:
                handlers.remove(sub)
            if not handlers:
                self.signals[name].disconnect(self._dispatch)

    def handlers(self, name: str) -> list[Subscription]:
        """The handlers of one event, in delivery order."""
        return list(self._handlers[name])

    def _dispatch(self, event: Event, *, state_ref: Callable[[], TrainerState]) -> list[tuple[str, Update]]:
        out: list[tuple[str, Update]] = []
        for sub in self._handlers[event.name]:
            if sub.wants(event.count):
                result = sub.handler(event, state_ref()) if sub.wants_state else sub.handler(event)
                if result is not None:
                    out.extend((sub.source, u) for u in as_updates(result, sub.source))
        return out

    def send(self, event: Event, state_ref: Callable[[], TrainerState]) -> list[tuple[str, Update]]:
        """Emit ``event`` on its signal; returns ``(source, update)`` pairs in order.

        ``state_ref()`` gives the current state; it is only built when a handler
        takes it. When the bus's dispatcher is the signal's only receiver it is
        called directly (the same delivery, without blinker's per-send overhead).
        Receivers connected to the blinker signal directly (not through
        :meth:`on`) are called as ``receiver(event, state_ref=...)`` after the
        ordered handlers, and may also return updates.
        """
        signal = self.signals[event.name]
        if len(signal.receivers) == 1 and self._handlers[event.name]:
            # the bus's own dispatcher is the signal's only receiver: call it without blinker's bookkeeping
            return self._dispatch(event, state_ref=state_ref)
        out: list[tuple[str, Update]] = []
        for receiver, result in signal.send(event, state_ref=state_ref):
            if receiver == self._dispatch:
                out.extend(result)
            else:
                source = _describe(receiver)
                out.extend((source, u) for u in as_updates(result, source))
        return out


def listen(pattern: str, *, every: int | None = None, once: bool | int = False) -> Callable[[F], F]:
    """Mark a :class:`Listener` method as the handler of ``pattern``."""

    def mark(fn: F) -> F:
        marks = list(getattr(fn, "__interlock_listen__", ()))
        marks.append((pattern, every, once))
        fn.__interlock_listen__ = marks  # type: ignore[attr-defined]
        return fn

    return mark


def observe(fn: F) -> F:
    """Mark a :class:`Listener` method as an observer of every transition (see :meth:`EventBus.observe`)."""
    fn.__interlock_observe__ = True  # type: ignore[attr-defined]
    return fn


class Listener:
    """Base class of listeners: handlers declared with :func:`listen`, observers with :func:`observe`.

    A listener keeps no run state on itself: it reads its stored state with
    :meth:`stored` and returns :meth:`store` updates, so its state lives in the
    trainer state and is checkpointed and resumed with it. ``key`` names that
    state (the class name unless given); ``after`` lists keys of listeners that
    must handle an event before this one.
    """

    after: tuple[str, ...] = ()
    #: True for a listener that returns ``SetAccumulation``: the loop then reads the accumulation
    #: factor from the state at every batch instead of fixing the Trainer's at set-up
    schedules_accumulation: bool = False

    @property
    def key(self) -> str:
        return getattr(self, "_key", None) or type(self).__name__

    @key.setter
    def key(self, value: str) -> None:
        self._key = value

    def subscriptions(self) -> Iterator[tuple[str, Handler, int | None, bool | int]]:
        """``(pattern, bound method, every, once)`` for each declared handler."""
        for name in dir(type(self)):
            fn = getattr(type(self), name, None)
            for pattern, every, once in getattr(fn, "__interlock_listen__", ()):
                yield pattern, getattr(self, name), every, once

    def observers(self) -> Iterator[Observer]:
        """The bound methods marked with :func:`observe`."""
        for name in dir(type(self)):
            if getattr(getattr(type(self), name, None), "__interlock_observe__", False):
                yield getattr(self, name)

    def recorders(self) -> Iterator[Recorder]:
        """What records every transition for this listener (:class:`Recorder`); none by default."""
        return iter(())

    def bind_tags(self, tags: Mapping[str, frozenset[str]]) -> None:
        """Called with each event name's tags (the chart the trainer runs) before :meth:`subscriptions`.

        For listeners that treat events by what they mean (the progress bar's label of an
        evaluation loop): read ``tags[event.name]`` in a handler. The default does nothing.
        """

    def configure(self, config: TrainerConfig) -> None:
        """Called once with the trainer's flags when a Trainer installs this listener (Lightning's ``setup``).

        For settings that follow the trainer's schedule (``EarlyStopping(check_on_train_epoch_end=None)``);
        run state still belongs in the trainer state. The default does nothing.
        """

    def stored(self, state: TrainerState) -> Mapping[str, Any]:
        """The state of this listener, as stored in the trainer state."""
        return state.listener_state(self.key)

    def store(self, state: TrainerState, **values: Any) -> SetListenerState:
        """An update that merges ``values`` into this listener's stored state."""
        return SetListenerState(self.key, {**self.stored(state), **values})

    def check_restored(self, stored: Mapping[str, Any], run_dir: str) -> Mapping[str, Any]:
        """Check this listener's state as a checkpoint brings it back, before the run resumes.

        ``run_dir`` is the run directory the resumed run continues in (``""``: a new one, not
        claimed yet). Return the state to resume with (normalised if need be) or raise
        ``ValueError`` saying what does not fit: the checkpoint is then refused, naming the
        file, before anything is loaded. The default accepts the state as it is.
        """
        return stored


def order_listeners(listeners: Iterable[Listener]) -> list[Listener]:
    """Stable topological order: list order, except each runs after its ``after`` keys."""
    pending = list(listeners)
    keys = [lst.key for lst in pending]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ValueError(f"two listeners share the state key(s) {dupes}; give each instance its own `key=`")
    known = set(keys)
    for lst in pending:
        missing = [a for a in lst.after if a not in known]
        if missing:
            raise ValueError(f"listener {lst.key!r} runs after {missing}, but no listener has that key")
    done: list[Listener] = []
    placed: set[str] = set()
    while pending:
        for lst in pending:
            if all(a in placed for a in lst.after):
                done.append(lst)
                placed.add(lst.key)
                pending.remove(lst)
                break
        else:
            raise ValueError(f"listeners {[lst.key for lst in pending]} have a cycle in their `after` declarations")
    return done
