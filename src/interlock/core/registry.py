"""Named actions, guards, effects and payload keys: what a chart refers to, registered apart.

A chart names its work (``data.fetch``) and its conditions (``schedule.val_due``);
the components that own them register them here. Registered functions are
*binders*: an action's is called once per stage with the :class:`~interlock.core.run.Run`
and the state's ``with:`` parameters and returns the zero-argument callable the
interpreter runs; a guard's gets the parameters only and returns a pure function
of the frozen :class:`~interlock.core.step.Facts`. The per-batch path holds no
lookups and no branching on settings. Plain functions register with
:meth:`Registry.add_action` (``fn(run)``) and :meth:`Registry.add_guard` (``fn(facts)``).

- an action returns ``None``, an :class:`~interlock.core.updates.Update` or a list of them;
  an *agreement action* (``agrees=``) runs a collective and returns what the processes agreed;
- a guard returns a bool, reads only the facts and changes nothing; one that reads an agreed
  fact says so (``agreed=``), and the chart must agree it first (:func:`~interlock.core.step.check_agreement`);
- an effect handler applies one update type to the run's objects (``SetLearningRate``);
- a payload key gives one value of an event's payload at the moment it is emitted;
- a slot type is a typed holder of live objects (:mod:`interlock.core.slots`): actions
  declare the slots they ``reads`` and ``writes``, and are bound once those are filled;
- a counter operation changes the loop counters on a transition (``count: [step]``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from interlock.core.progress import COUNTER_OPS, Counters
from interlock.core.slots import BUILTIN_SLOTS, SlotError, SlotSpec

if TYPE_CHECKING:
    from interlock.core.run import Run
    from interlock.core.step import Facts
    from interlock.core.updates import Update

__all__ = ["NOOP", "Action", "CounterBinder", "Guard", "Registry"]

#: A bound action: runs the work, returns ``None``, an update or a list of updates.
Action = Callable[[], Any]
#: A bound guard: whether a transition may be taken now.
Guard = Callable[["Facts"], bool]


def NOOP() -> None:  # a constant: the runtime compares bound actions with it by identity
    """A bound action with nothing to do this stage (an undefined module hook): the runtime skips it."""


ActionBinder = Callable[["Run", Mapping[str, Any]], Action]
GuardBinder = Callable[[Mapping[str, Any]], Guard]
EffectBinder = Callable[["Run"], Callable[[Any], None]]
PayloadBinder = Callable[["Run"], Callable[[], Any]]
#: ``bind(run) -> op``: a counter operation that needs the run (the ``manual`` steps the optimizer recorded)
CounterBinder = Callable[["Run"], Callable[[Counters], None]]
B = TypeVar("B")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


@attrs.frozen
class Entry:
    """One registered name: its binder, and who registered it (module or ``user``)."""

    name: str
    bind: Callable[..., Any]
    owner: str
    doc: str = ""
    lazy: bool = False
    #: the slots the binder reads (it is bound once they are filled, again when one is replaced)
    reads: tuple[str, ...] = ()
    #: the slots the action fills or replaces (by returning ``Fill``)
    writes: tuple[str, ...] = ()
    #: a guard: the agreed facts it reads (``state.agreed``); an action: the facts it agrees
    agreed: tuple[str, ...] = ()
    agrees: tuple[str, ...] = ()


def _owner(fn: Any) -> str:
    return getattr(fn, "__module__", None) or "user"


def _doc(fn: Any) -> str:
    return (getattr(fn, "__doc__", None) or "").strip().split("\n")[0]


def _names(kind: str, name: str, value: Any, what: str = "slot names", like: str = "'optim'") -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        names = ()
    if (not names and value not in ((), [], None)) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{kind} of {name!r} must be a tuple of {what}, e.g. ({like},), got {value!r}")
    return names


class Registry:
    """Actions, guards, effects, payload keys, counter operations and slot types by name (effects by update type).

    A name registered twice is an error naming both owners, unless ``replace=True``.
    """

    #: who the entries registered here belong to (an extension's name); ``None``: the registering function's module
    owner: str | None = None

    def __init__(self) -> None:
        self.actions: dict[str, Entry] = {}
        self.guards: dict[str, Entry] = {}
        self.effects: dict[type, Entry] = {}
        self.payload: dict[str, Entry] = {}
        self.counters: dict[str, Entry] = {
            name: Entry(name, op, "interlock.core.progress", _doc(op)) for name, op in COUNTER_OPS.items()
        }
        self.slots: dict[str, SlotSpec] = {
            name: SlotSpec(name, kind, owner, _doc(kind)) for name, (kind, owner) in BUILTIN_SLOTS.items()
        }

    # -- registering -------------------------------------------------------------
    def _put(
        self,
        table: dict[str, Entry],
        kind: str,
        name: str,
        fn: Callable[..., Any],
        replace: bool,
        reads: Any = (),
        writes: Any = (),
        owner: str | None = None,
        agreed: Any = (),
        agrees: Any = (),
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"{kind} name {name!r} must be dotted 'owner.verb' (letters, digits, _), e.g. 'ema.update'"
            )
        if not callable(fn):
            raise TypeError(f"{kind} {name!r} must be callable, got {fn!r}")
        who = owner or self.owner or _owner(fn)
        if name in table and not replace:
            raise ValueError(
                f"{kind} {name!r} is registered twice: by {table[name].owner} and by {who}; "
                "rename one, or pass replace=True to override it"
            )
        table[name] = Entry(
            name,
            fn,
            who,
            _doc(fn),
            reads=_names("reads", name, reads),
            writes=_names("writes", name, writes),
            agreed=_names("agreed", name, agreed, "agreed facts", "'stop'"),
            agrees=_names("agrees", name, agrees, "agreed facts", "'stop'"),
        )

    def action(
        self,
        name: str,
        *,
        reads: tuple[str, ...] = (),
        writes: tuple[str, ...] = (),
        agrees: tuple[str, ...] = (),
        replace: bool = False,
    ) -> Callable[[ActionBinder], ActionBinder]:
        """Decorator: register a binder ``(run, params) -> action`` reading and writing the named slots.

        ``agrees``: the facts the action agrees across processes (an agreement action, ``state.agreed``).
        """

        def register(fn: ActionBinder) -> ActionBinder:
            self._put(self.actions, "action", name, fn, replace, reads, writes, agrees=agrees)
            return fn

        return register

    def guard(
        self, name: str, *, agreed: tuple[str, ...] = (), replace: bool = False
    ) -> Callable[[GuardBinder], GuardBinder]:
        """Decorator: register a guard binder, ``params`` to a pure ``guard(facts)``.

        ``agreed``: the agreed facts it reads (its state must agree them first).
        """

        def register(fn: GuardBinder) -> GuardBinder:
            self._put(self.guards, "guard", name, fn, replace, agreed=agreed)
            return fn

        return register

    def add_action(
        self,
        name: str,
        fn: Callable[[Run], Update | list[Update] | None],
        *,
        reads: tuple[str, ...] = (),
        writes: tuple[str, ...] = (),
        replace: bool = False,
    ) -> None:
        """Register a plain action ``fn(run)``: called each time the chart runs ``name``."""
        if not callable(fn):
            raise TypeError(f"action {name!r} must be callable, got {fn!r}")

        def bind(run: Run, params: Mapping[str, Any]) -> Action:
            return lambda: fn(run)

        bind.__module__, bind.__doc__ = _owner(fn), fn.__doc__
        self._put(self.actions, "action", name, bind, replace, reads, writes)

    def add_guard(
        self, name: str, fn: Callable[[Facts], bool], *, agreed: tuple[str, ...] = (), replace: bool = False
    ) -> None:
        """Register a plain guard ``fn(facts) -> bool``: a pure function of the frozen facts."""
        if not callable(fn):
            raise TypeError(f"guard {name!r} must be callable, got {fn!r}")

        def bind(params: Mapping[str, Any]) -> Guard:
            return lambda facts: bool(fn(facts))

        bind.__module__, bind.__doc__ = _owner(fn), fn.__doc__
        self._put(self.guards, "guard", name, bind, replace, agreed=agreed)

    def effect(self, kind: type, *, replace: bool = False) -> Callable[[EffectBinder], EffectBinder]:
        """Decorator: register a binder ``run -> handler(update)`` for updates of type ``kind``."""

        def register(fn: EffectBinder) -> EffectBinder:
            who = self.owner or _owner(fn)
            if kind in self.effects and not replace:
                raise ValueError(
                    f"an effect for {kind.__name__} is registered twice: by {self.effects[kind].owner} and by "
                    f"{who}; pass replace=True to override it"
                )
            self.effects[kind] = Entry(kind.__name__, fn, who, _doc(fn))
            return fn

        return register

    def payload_key(
        self, name: str, *, lazy: bool = False, replace: bool = False
    ) -> Callable[[PayloadBinder], PayloadBinder]:
        """Decorator: register a binder ``run -> value()`` for payload key ``name``.

        The value is taken when the event is emitted; with ``lazy`` when a handler first
        reads the payload (for values that cost something to build, such as learning rates).
        """

        def register(fn: PayloadBinder) -> PayloadBinder:
            who = self.owner or _owner(fn)
            if name in self.payload and not replace:
                raise ValueError(
                    f"payload key {name!r} is registered twice: by {self.payload[name].owner} and by {who}; "
                    "rename one, or pass replace=True to override it"
                )
            self.payload[name] = Entry(name, fn, who, _doc(fn), lazy)
            return fn

        return register

    def counter(
        self, name: str, op: Callable[[Counters], None] | CounterBinder, *, bind: bool = False, replace: bool = False
    ) -> None:
        """Register a counter operation ``op(counters)`` a chart may name in ``count:``.

        With ``bind``, ``op`` is a binder ``op(run) -> fn(counters)`` (bound at each stage's start).
        """
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"counter operation name {name!r} must be an identifier, e.g. 'ema_step'")
        if not callable(op):
            raise TypeError(f"counter operation {name!r} must be callable, got {op!r}")
        who = self.owner or _owner(op)
        if name in self.counters and not replace:
            raise ValueError(
                f"counter operation {name!r} is registered twice: by {self.counters[name].owner} and by "
                f"{who}; rename one, or pass replace=True to override it"
            )
        self.counters[name] = Entry(name, op, who, _doc(op), lazy=bind)

    def slot(self, name: str, kind: type, *, owner: str | None = None, replace: bool = False) -> None:
        """Register slot type ``kind`` under ``name``: actions name it in ``reads``/``writes``."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"slot name {name!r} must be an identifier, e.g. 'ema'")
        if not isinstance(kind, type):
            raise TypeError(f"slot {name!r} must be a class (an attrs class of live objects), got {kind!r}")
        who = owner or self.owner or _owner(kind)
        taken = next((s for s in self.slots.values() if s.kind is kind and s.name != name), None)
        if taken is not None:
            raise ValueError(f"slot type {kind.__name__} is registered twice: as {taken.name!r} and as {name!r}")
        if name in self.slots and not replace:
            raise ValueError(
                f"slot {name!r} is registered twice: by {self.slots[name].owner} ({self.slots[name].kind.__name__}) "
                f"and by {who} ({kind.__name__}); rename one, or pass replace=True to override it"
            )
        self.slots[name] = SlotSpec(name, kind, who, _doc(kind))

    def extend(self, other: Registry) -> None:
        """Add every entry of ``other`` (an :class:`~interlock.Extension`); a taken name is an error naming both."""
        tables: tuple[tuple[str, dict[Any, Any], dict[Any, Any]], ...] = (
            ("action", self.actions, other.actions),
            ("guard", self.guards, other.guards),
            ("effect for", self.effects, other.effects),
            ("payload key", self.payload, other.payload),
            ("counter operation", self.counters, other.counters),
            ("slot", self.slots, other.slots),
        )
        for kind, mine, theirs in tables:
            for key, entry in theirs.items():
                if key in mine and mine[key] is not entry:
                    label = key.__name__ if isinstance(key, type) else repr(key)
                    raise ValueError(
                        f"{kind} {label} is registered twice: by {mine[key].owner} and by {entry.owner}; "
                        "rename one (an extension cannot replace a name another owner registered)"
                    )
        for spec in other.slots.values():
            taken = next((s for s in self.slots.values() if s.kind is spec.kind and s.name != spec.name), None)
            if taken is not None:
                raise ValueError(
                    f"slot type {spec.kind.__name__} is registered twice: as {taken.name!r} by {taken.owner} and as "
                    f"{spec.name!r} by {spec.owner}"
                )
        for _, mine, theirs in tables:
            mine.update(theirs)

    # -- reading -----------------------------------------------------------------
    def slot_name(self, kind: type) -> str:
        """The registered name of slot type ``kind``."""
        for spec in self.slots.values():
            if spec.kind is kind:
                return spec.name
        known = ", ".join(f"{s.name} ({s.kind.__name__})" for s in self.slots.values())
        raise SlotError(
            f"{kind.__name__} is not a registered slot type; register it with Registry.slot(name, "
            f"{kind.__name__}) or in an Extension(slots=...); registered: {known}"
        )

    def writers(self, slot: str) -> list[str]:
        """The actions that declared writing ``slot``."""
        return sorted(name for name, e in self.actions.items() if slot in e.writes)

    def check_slots(self) -> None:
        """Every slot an action or guard declared is registered; raise ``SlotError`` naming it otherwise."""
        for kind, table in (("action", self.actions), ("guard", self.guards)):
            for name, e in table.items():
                for slot in (*e.reads, *e.writes):
                    if slot not in self.slots:
                        raise SlotError(
                            f"{kind} {name!r} (by {e.owner}) names slot {slot!r}, which nobody registered; "
                            f"registered slots: {', '.join(sorted(self.slots))}"
                        )

    def copy(self) -> Registry:
        """An independent registry with the same entries (add to it without touching this one)."""
        out = Registry()
        out.actions, out.guards = dict(self.actions), dict(self.guards)
        out.effects, out.payload = dict(self.effects), dict(self.payload)
        out.counters, out.slots = dict(self.counters), dict(self.slots)
        return out

    def describe(self) -> Iterator[tuple[str, str, str, str]]:
        """``(kind, name, owner, summary)`` of every action and guard, sorted by name."""
        for kind, table in (("action", self.actions), ("guard", self.guards)):
            for name in sorted(table):
                e = table[name]
                yield kind, name, e.owner, e.doc
