"""Deciding, apart from doing: which transition a leaf takes, given frozen facts, and what it runs.

:func:`step` is the one decision of the interpreter: from the leaf just entered
(after its entry actions) and the :class:`Facts` (frozen state, frozen counters,
the stage's config), the first ``always`` transition whose guard holds, and the
work it runs in order (exit actions of the states left, its ``do``, its counter
operations, entry actions of the compound states entered). It calls only guards,
and a guard is a pure function of the facts: it writes nothing and runs no
collective. What processes must agree on is agreed by an *agreement action* on
the chart, an entry action of the state whose guards read it (``signals.vote``,
``signals.agree_preempted``, ``dist.agree_stop``); :func:`check_agreement` refuses a
chart whose guard reads an agreed fact its state did not agree first.

:func:`compile_nodes` turns a chart into the per-leaf tables :func:`step` reads;
the runtime binds them to a stage's actions, the tests to random guard outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import attrs

from interlock.core.chart import ActionRef, Chart, Transition
from interlock.core.config import TrainerConfig
from interlock.core.errors import ChartError
from interlock.core.progress import FrozenCounters
from interlock.core.state import TrainerState

__all__ = ["AGREED", "Count", "Edge", "Facts", "GuardFn", "Node", "check_agreement", "compile_nodes", "step"]

A = TypeVar("A")

#: The facts processes agree on, each with the built-in action that agrees it.
AGREED: Mapping[str, str] = {
    "stop": "dist.agree_stop",  # a stop was asked for in some process (``signals.vote`` agrees it too)
    "preempted": "signals.agree_preempted",  # a preemption signal arrived in some process (and ``signals.vote``)
}


class Facts(NamedTuple):
    """What a guard reads: the state as last updated, the loop counters and the stage's config, all frozen.

    ``progress`` has :class:`~interlock.core.state.Progress`'s fields (a :class:`FrozenCounters`).

    ``state.agreed`` holds what the processes agreed (``stop``, ``preempted``), ``state.limits``
    each loader's batch limit, ``state.data`` the training data's position (``exhausted``).
    (A named tuple: immutable, and cheap to build on the per-batch path.)
    """

    state: TrainerState
    progress: FrozenCounters
    config: TrainerConfig


#: A guard: a pure function of the facts.
GuardFn = Callable[[Facts], bool]


@attrs.frozen
class Count:
    """A transition's counter operations (``count:``), as one step of its work."""

    names: tuple[str, ...]


class Edge(Generic[A]):
    """A transition, compiled: its guard, its work in order (``A``: what an action is here), its target."""

    __slots__ = ("actions", "dest", "guard", "names", "source", "transition", "trigger")

    def __init__(self, transition: Transition, guard: GuardFn | None) -> None:
        self.transition, self.trigger, self.source = transition, transition.trigger, transition.source
        self.guard = guard
        self.actions: tuple[A, ...] = ()
        self.dest: Node[A]
        self.names: dict[int, str] = {}  # id of an action -> how a failure names it

    @property
    def guard_name(self) -> str | None:
        return self.transition.guard

    def where(self, action: A) -> str:
        """The transition and its action that raised, e.g. ``a -> b [epoch_end] do module.on_train_epoch_end``."""
        return f"{self.source} -> {self.dest.path} [{self.trigger}] {self.names.get(id(action), 'action')}"


class Node(Generic[A]):
    """A leaf, compiled: its entry actions and its ways out (the runtime adds its event's signal and payload)."""

    __slots__ = ("always", "capture", "checkpoint", "entry", "keys", "later", "on", "once", "path", "signal")

    def __init__(self, path: str, checkpoint: bool) -> None:
        self.path, self.checkpoint = path, checkpoint
        self.signal: Any = None
        self.entry: tuple[A, ...] = ()
        self.once: tuple[A, ...] = ()  # entry_once: after the event, before a save here
        self.always: tuple[Edge[A], ...] = ()
        self.on: dict[str, Edge[A]] = {}
        self.keys: tuple[str, ...] = ()
        self.capture: tuple[Callable[[], Any], ...] = ()
        self.later: tuple[bool, ...] = ()


class _Edge(Protocol):
    @property
    def guard(self) -> GuardFn | None: ...
    @property
    def actions(self) -> tuple[Any, ...]: ...


E = TypeVar("E", bound=_Edge)
E_co = TypeVar("E_co", bound=_Edge, covariant=True)


class _Leaf(Protocol[E_co]):
    @property
    def always(self) -> tuple[E_co, ...]: ...


def step(node: _Leaf[E], facts: Facts) -> tuple[E, tuple[Any, ...]] | None:
    """The transition ``node`` takes given ``facts`` and the work it runs; ``None``: the leaf waits (final).

    Pure when the guards are: the first ``always`` transition whose guard holds (the last one
    has no guard), with the work it runs. For a :func:`compile_nodes` edge that is its exits,
    ``do``, counter operations and entries in order; the runtime's bound edge carries its
    exits and ``do`` there, and its counter operations and entries beside them.
    """
    for edge in node.always:
        guard = edge.guard
        if guard is None or guard(facts):
            return edge, edge.actions
    return None


def compile_nodes(
    chart: Chart,
    guard: Callable[[str, str], GuardFn],
    action: Callable[[ActionRef], A | None],
    count: Callable[[tuple[str, ...]], A | None],
) -> dict[str, Node[A]]:
    """Every leaf of ``chart`` as a :class:`Node`, its transitions as :class:`Edge` s.

    ``guard(name, state)`` gives the guard named on a state, ``action(ref)`` one use of an action
    (``None``: nothing to run), ``count(names)`` a transition's counter operations (``None``: none).
    """
    nodes: dict[str, Node[A]] = {leaf: Node(leaf, spec.checkpoint) for leaf, spec in chart.leaf_specs.items()}

    def edge(t: Transition) -> Edge[A]:
        e: Edge[A] = Edge(t, guard(t.guard, t.source) if t.guard is not None else None)
        work: list[A] = []
        for ref in t.actions:
            bound = action(ref)
            if bound is not None:
                work.append(bound)
                kind = "exit of " + ref.where + ": " if ref.name in chart.states[ref.where].exit else "do "
                e.names[id(bound)] = kind + ref.name
        ops = count(t.count) if t.count else None
        if ops is not None:
            work.append(ops)
            e.names[id(ops)] = "count " + ", ".join(t.count)
        for ref in t.enters:
            bound = action(ref)
            if bound is not None:
                work.append(bound)
                e.names[id(bound)] = f"entry of {ref.where}: {ref.name}"
        e.actions = tuple(work)
        e.dest = nodes[t.dest]
        return e

    for leaf, spec in chart.leaf_specs.items():
        node = nodes[leaf]
        node.entry = tuple(f for f in (action(a) for a in spec.entry) if f is not None)
        node.once = tuple(f for f in (action(a) for a in spec.entry_once) if f is not None)
        node.always = tuple(edge(t) for t in spec.always)
        node.on = {k: edge(t) for k, t in spec.on.items()}
        node.keys = spec.payload
    return nodes


def check_agreement(chart: Chart, reads: Mapping[str, Iterable[str]], agrees: Mapping[str, Iterable[str]]) -> None:
    """Raise :class:`ChartError` where a guard reads an agreed fact its state does not agree first.

    ``reads`` maps guard names to the agreed facts they read, ``agrees`` action names to the
    facts they agree. The agreement must be an entry action of the state whose transition the
    guard decides: entry actions run before the guards, and again when a run resumes there, so
    every process runs the same collectives in the same order whatever order the guards are in.
    """
    agreeing: dict[str, list[str]] = {}
    for name, facts in agrees.items():
        for fact in facts:
            agreeing.setdefault(fact, []).append(name)
    errors: list[str] = []
    for leaf, spec in chart.leaf_specs.items():
        agreed = {fact for ref in spec.entry for fact in agrees.get(ref.name, ())}
        for t in spec.always:
            if t.guard is None:
                continue
            for fact in sorted(set(reads.get(t.guard, ())) - agreed):
                fixes = " or ".join(repr(a) for a in sorted(agreeing.get(fact, ()))) or "an action that agrees it"
                errors.append(
                    f"state {leaf!r}: guard {t.guard!r} (trigger {t.trigger!r}) reads the agreed fact {fact!r}, "
                    f"but no entry action of the state agrees it first; add {fixes} to the state's entry "
                    "(agreement is a collective every process runs: it is on the chart, before the guards)"
                )
    if errors:
        raise ChartError(chart.source, errors)
