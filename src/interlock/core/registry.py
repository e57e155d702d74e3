"""Named actions, guards, effects and payload keys: what a chart refers to, registered apart.

A chart names its work (``data.fetch``) and its conditions (``schedule.val_due``);
the components that own them register them here. Registered functions are
*binders*: called once per stage with the :class:`~interlock.core.run.Run` and the
state's ``with:`` parameters, they return the zero-argument callable the
interpreter runs, so the per-batch path holds no lookups and no branching on
settings. Plain functions ``fn(run)`` register with :meth:`Registry.add_action` /
:meth:`Registry.add_guard`.

- an action returns ``None``, an :class:`~interlock.core.updates.Update` or a list of them;
- a guard returns a bool and changes nothing;
- an effect handler applies one update type to the run's objects (``SetLearningRate``);
- a payload key gives one value of an event's payload at the moment it is emitted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

if TYPE_CHECKING:
    from interlock.core.run import Run
    from interlock.core.updates import Update

__all__ = ["NOOP", "Action", "Guard", "Registry"]

#: A bound action: runs the work, returns ``None``, an update or a list of updates.
Action = Callable[[], Any]
#: A bound guard: whether a transition may be taken now.
Guard = Callable[[], bool]


def NOOP() -> None:  # a constant: the runtime compares bound actions with it by identity
    """A bound action with nothing to do this stage (an undefined module hook): the runtime skips it."""


ActionBinder = Callable[["Run", Mapping[str, Any]], Action]
GuardBinder = Callable[["Run", Mapping[str, Any]], Guard]
EffectBinder = Callable[["Run"], Callable[[Any], None]]
PayloadBinder = Callable[["Run"], Callable[[], Any]]
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


def _owner(fn: Any) -> str:
    return getattr(fn, "__module__", None) or "user"


def _doc(fn: Any) -> str:
    return (getattr(fn, "__doc__", None) or "").strip().split("\n")[0]


class Registry:
    """Actions, guards, effects and payload keys by name (effects by update type)."""

    def __init__(self) -> None:
        self.actions: dict[str, Entry] = {}
        self.guards: dict[str, Entry] = {}
        self.effects: dict[type, Entry] = {}
        self.payload: dict[str, Entry] = {}

    # -- registering -------------------------------------------------------------
    def _put(self, table: dict[str, Entry], kind: str, name: str, fn: Callable[..., Any], replace: bool) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"{kind} name {name!r} must be dotted 'owner.verb' (letters, digits, _), e.g. 'ema.update'"
            )
        if not callable(fn):
            raise TypeError(f"{kind} {name!r} must be callable, got {fn!r}")
        if name in table and not replace:
            raise ValueError(
                f"{kind} {name!r} is already registered by {table[name].owner}; pass replace=True to override it"
            )
        table[name] = Entry(name, fn, _owner(fn), _doc(fn))

    def action(self, name: str, *, replace: bool = False) -> Callable[[ActionBinder], ActionBinder]:
        """Decorator: register a binder ``(run, params) -> action``."""

        def register(fn: ActionBinder) -> ActionBinder:
            self._put(self.actions, "action", name, fn, replace)
            return fn

        return register

    def guard(self, name: str, *, replace: bool = False) -> Callable[[GuardBinder], GuardBinder]:
        """Decorator: register a binder ``(run, params) -> guard``."""

        def register(fn: GuardBinder) -> GuardBinder:
            self._put(self.guards, "guard", name, fn, replace)
            return fn

        return register

    def add_action(
        self, name: str, fn: Callable[[Run], Update | list[Update] | None], *, replace: bool = False
    ) -> None:
        """Register a plain action ``fn(run)``: called each time the chart runs ``name``."""
        if not callable(fn):
            raise TypeError(f"action {name!r} must be callable, got {fn!r}")

        def bind(run: Run, params: Mapping[str, Any]) -> Action:
            return lambda: fn(run)

        bind.__module__, bind.__doc__ = _owner(fn), fn.__doc__
        self._put(self.actions, "action", name, bind, replace)

    def add_guard(self, name: str, fn: Callable[[Run], bool], *, replace: bool = False) -> None:
        """Register a plain guard ``fn(run) -> bool``."""
        if not callable(fn):
            raise TypeError(f"guard {name!r} must be callable, got {fn!r}")

        def bind(run: Run, params: Mapping[str, Any]) -> Guard:
            return lambda: bool(fn(run))

        bind.__module__, bind.__doc__ = _owner(fn), fn.__doc__
        self._put(self.guards, "guard", name, bind, replace)

    def effect(self, kind: type, *, replace: bool = False) -> Callable[[EffectBinder], EffectBinder]:
        """Decorator: register a binder ``run -> handler(update)`` for updates of type ``kind``."""

        def register(fn: EffectBinder) -> EffectBinder:
            if kind in self.effects and not replace:
                raise ValueError(f"an effect for {kind.__name__} is already registered by {self.effects[kind].owner}")
            self.effects[kind] = Entry(kind.__name__, fn, _owner(fn), _doc(fn))
            return fn

        return register

    def payload_key(self, name: str, *, lazy: bool = False) -> Callable[[PayloadBinder], PayloadBinder]:
        """Decorator: register a binder ``run -> value()`` for payload key ``name``.

        The value is taken when the event is emitted; with ``lazy`` when a handler first
        reads the payload (for values that cost something to build, such as learning rates).
        """

        def register(fn: PayloadBinder) -> PayloadBinder:
            self.payload[name] = Entry(name, fn, _owner(fn), _doc(fn), lazy)
            return fn

        return register

    # -- reading -----------------------------------------------------------------
    def copy(self) -> Registry:
        """An independent registry with the same entries (add to it without touching this one)."""
        out = Registry()
        out.actions, out.guards = dict(self.actions), dict(self.guards)
        out.effects, out.payload = dict(self.effects), dict(self.payload)
        return out

    def describe(self) -> Iterator[tuple[str, str, str, str]]:
        """``(kind, name, owner, summary)`` of every action and guard, sorted by name."""
        for kind, table in (("action", self.actions), ("guard", self.guards)):
            for name in sorted(table):
                e = table[name]
                yield kind, name, e.owner, e.doc
