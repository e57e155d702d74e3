"""One extension object: everything an edited chart needs from you, bundled and named.

An :class:`Extension` is a small registry of its own (actions, binders, guards, effects,
payload keys, counter operations and slot types), every entry owned by the extension's
name. ``Trainer(chart=..., extensions=[ext])`` adds it to the built-in vocabulary; a
name another owner has registered is an error naming both::

    ema = interlock.Extension("ema", slots={"ema": EMASlot})

    @ema.action("ema.init", writes=("ema",))
    def init(run, params):              # a binder: called once the slots it reads are filled
        return lambda: Fill(EMASlot(...))

    @ema.action("ema.update", reads=("ema",))
    def update(run, params):
        slot = run.slot(EMASlot)        # captured once; bound again if ema.init replaces the slot
        return lambda: slot.fold(run.module)

Plain functions register with ``actions={"ema.log": fn}`` / ``guards={...}`` (``fn(run)``),
as ``Trainer(actions=..., guards=...)`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from interlock.core.progress import Counters
from interlock.core.registry import Registry
from interlock.core.step import Facts

__all__ = ["Extension"]


class Extension(Registry):
    """A named bundle of chart vocabulary (see the module's doc); pass it as ``Trainer(extensions=[...])``.

    Args:
        name: Who owns the entries (named in clashes and by ``interlock chart --actions``).
        actions: Plain actions ``fn(run)`` by name.
        guards: Plain guards ``fn(facts) -> bool`` by name: pure functions of the frozen
            :class:`~interlock.core.step.Facts` (they read no slot).
        slots: Slot types by name (attrs classes of live objects, :mod:`interlock.core.slots`).
        counters: Counter operations ``op(counters)`` by name (for a chart's ``count:``).
        reads: The slots each of ``actions`` reads, by name.
        writes: The slots each of ``actions`` writes (fills with ``Fill``), by name.

    Binders, effects and payload keys register with the decorators it shares with
    :class:`~interlock.core.registry.Registry`: ``@ext.action(name, reads=..., writes=...)``,
    ``@ext.guard(name, agreed=...)``, ``@ext.effect(UpdateType)``, ``@ext.payload_key(name)``;
    ``ext.counter(name, op)`` and ``ext.slot(name, kind)`` add one more of each.
    """

    def __init__(
        self,
        name: str,
        *,
        actions: Mapping[str, Callable[..., Any]] | None = None,
        guards: Mapping[str, Callable[[Facts], bool]] | None = None,
        slots: Mapping[str, type] | None = None,
        counters: Mapping[str, Callable[[Counters], None]] | None = None,
        reads: Mapping[str, tuple[str, ...]] | None = None,
        writes: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"Extension(name={name!r}): give the extension a name, e.g. Extension('ema')")
        self.name = name
        self.owner = f"extension {name!r}"
        self.actions, self.guards, self.counters, self.slots = {}, {}, {}, {}
        reads, writes = dict(reads or {}), dict(writes or {})
        unknown = sorted((set(reads) | set(writes)) - set(actions or {}) - set(guards or {}))
        if unknown:
            raise ValueError(
                f"Extension({name!r}): reads/writes name {unknown}, which are not among its actions/guards "
                f"{sorted({**(actions or {}), **(guards or {})})}; for a binder, pass reads= to @ext.action"
            )
        for slot, kind in (slots or {}).items():
            self.slot(slot, kind)
        for op_name, op in (counters or {}).items():
            self.counter(op_name, op)
        for action, fn in (actions or {}).items():
            self.add_action(action, fn, reads=reads.get(action, ()), writes=writes.get(action, ()))
        for guard, fn in (guards or {}).items():
            if guard in writes or guard in reads:
                raise ValueError(
                    f"Extension({name!r}): guard {guard!r} cannot read or write slots: a guard is a pure function "
                    "of the facts (state, counters, config); have an action put what it needs in the state"
                )
            self.add_guard(guard, fn)

    def __repr__(self) -> str:
        return (
            f"Extension({self.name!r}: {len(self.actions)} actions, {len(self.guards)} guards, "
            f"{len(self.slots)} slots, {len(self.counters)} counter operations)"
        )
