"""The interpreter: it runs the chart, and it alone writes the trainer state.

:meth:`Runtime.run` walks the compiled chart for one stage: it enters a leaf
(counter changes, observers, the leaf's event), runs the leaf's entry actions,
then takes the first ``always`` transition whose guard holds, running the
transition's actions on the way (exits, ``do``, entries of compound states). It
stops in a state that waits for an event from outside (a final state). Which
transition is taken is decided by :func:`~interlock.core.step.step`, from the leaf
and the frozen :class:`~interlock.core.step.Facts` (state, counters, config): the
guards are pure; what processes agree on, agreement actions on the chart agreed. An
exception from any action or handler sends ``fail`` (``interrupt`` for Ctrl-C or
preemption) from the state the chart is in; the stage then ends through the
chart's teardown and the exception is raised with a note naming where it was
raised: the state whose entry action or event handler raised, or the transition
whose action did (``a -> b [trigger] do action``, ``... entry of c: action``).

Every update (from actions, guards' owners, handlers) goes through
:meth:`Runtime.apply`: merged, reduced into the state, effects to the handlers
registered for their type. ``SaveCheckpoint`` waits for a ``checkpoint: true``
state. A ``RestoreState`` moves the cursor to the saved state (entering the
states below the current stage, without their events); the effects returned with
it apply once those states are entered.

Hot path: actions and guards are bound once per stage to zero-argument
callables; an event object and a state snapshot are built only for an event
somebody handles. An action or guard that declared reading a slot
(:mod:`interlock.core.slots`) is bound once that slot is filled, and again when an
action replaces it (``Fill``): the bound callables of the chart are then swapped in
place, and the rest of a sequence of actions in flight runs the new ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import attrs

from interlock.core.chart import ActionRef, Chart, Transition, TransitionSpec
from interlock.core.config import TrainerConfig
from interlock.core.errors import ChartEvent, Paused, Preempted, add_note
from interlock.core.events import Event, EventBus
from interlock.core.progress import Counters, compose
from interlock.core.registry import NOOP, Registry
from interlock.core.run import Run, stage_def
from interlock.core.slots import Fill, SlotError
from interlock.core.state import Progress, TrainerState
from interlock.core.step import Facts, GuardFn, check_agreement, step
from interlock.core.updates import (
    BeginStage,
    Change,
    Interrupt,
    Merged,
    SaveCheckpoint,
    SetFailure,
    SetStatus,
    Update,
    as_updates,
    merge,
    reduce,
)
from interlock.trainer.compiled import compile_arrival

__all__ = ["Runtime"]

_Apply = Callable[[Any], None]

#: Arrivals at a leaf, in one stage, after which its step runs compiled (set-up states, entered once, never are)
HOT = 3
_clock = time.time  # a recorder's row time
_facts = tuple.__new__  # builds the Facts named tuple without a Python-level call
#: State fields that are facts of the process and stage running now: a restore keeps them
_LIVE = ("agreed", "limits", "manual_optimization", "eval_exhausted", "metric_modes", "error", "failed_in")


class _Node:
    """A leaf, bound to one stage's run."""

    __slots__ = (
        "always", "arrive", "capture", "checkpoint", "entry", "entry_refs", "keys", "later", "on", "once", "once_refs",
        "path", "signal", "visits",
    )  # fmt: skip

    def __init__(self, path: str, signal: Any, checkpoint: bool) -> None:
        self.path, self.signal, self.checkpoint = path, signal, checkpoint
        #: entering this leaf and taking its next transition: the generic step, or its compiled form once hot
        self.arrive: Callable[[_Edge], _Edge | None] = _unbound
        self.visits = 0  # arrivals through the generic step since the stage was bound (compiled at HOT)
        self.entry: tuple[Callable[[], Any], ...] = ()
        self.once: tuple[Callable[[], Any], ...] = ()  # entry_once: after the event, before a save here
        self.always: tuple[_Edge, ...] = ()
        self.on: dict[str, _Edge] = {}
        self.keys: tuple[str, ...] = ()
        self.capture: tuple[Callable[[], Any], ...] = ()
        self.later: tuple[bool, ...] = ()
        self.entry_refs: tuple[ActionRef, ...] = ()  # what entry / once are bound from (a rebinding reads them)
        self.once_refs: tuple[ActionRef, ...] = ()


class _Edge:
    """A transition, bound: its guard and actions as callables, its counter change, its target node."""

    __slots__ = (
        "action_refs", "actions", "dest", "enter_refs", "enters", "guard", "guard_name", "names", "ops", "source",
        "spec", "trigger", "work",
    )  # fmt: skip

    def __init__(self, trigger: str, guard_name: str | None, spec: Transition | None = None) -> None:
        self.trigger, self.guard_name, self.spec = trigger, guard_name, spec
        self.action_refs: tuple[ActionRef, ...] = ()
        self.enter_refs: tuple[ActionRef, ...] = ()
        self.guard: GuardFn | None = None
        self.actions: tuple[Callable[[], Any], ...] = ()
        self.enters: tuple[Callable[[], Any], ...] = ()
        self.ops: Callable[[Counters], None] | None = None
        self.work = False  # whether it has actions, enters or counter operations (set with them)
        self.dest: _Node
        self.source = ""
        self.names: dict[int, str] = {}  # id of a bound action -> how a failure names it

    def where(self, action: Callable[[], Any]) -> str:
        """The transition and its action that raised, e.g. ``a -> b [epoch_end] do module.on_train_epoch_end``."""
        return f"{self.source} -> {self.dest.path} [{self.trigger}] {self.names.get(id(action), 'action')}"


class Runtime:
    """Chart cursor + event bus + the state: runs stages, applies every update."""

    def __init__(self, chart: Chart, bus: EventBus, registry: Registry, state: TrainerState | None = None) -> None:
        self.chart = chart
        self.bus = bus
        self.registry = registry
        registry.check_slots()
        chart.check_names(registry.actions, registry.guards, registry.counters, registry.payload)
        check_agreement(
            chart,
            {n: e.agreed for n, e in registry.guards.items()},
            {n: e.agrees for n, e in registry.actions.items()},
        )
        self.counters = Counters()
        self._counts: dict[str, int] = dict.fromkeys(chart.leaves, 0)
        self._base = TrainerState()
        self._snapshot: TrainerState | None = None
        self._at = chart.initial
        self._observers = bus.observers  # the bus's own list: observers added later are seen
        self._recorders = bus.recorders  # likewise
        self._pending_saves: list[SaveCheckpoint] = []
        self._checkpointable = chart.checkpoint_states
        self._effects: dict[type, _Apply] = {}
        self._facts: Facts | None = None
        self._progress: Progress | None = None  # the counters frozen, until a counter operation
        self._config = TrainerConfig()
        self._run: Run | None = None
        self._nodes: dict[str, _Node] = {}
        self._jump: str | None = None
        self._deferred: tuple[Update, ...] = ()
        self._error: tuple[BaseException, str] | None = None
        self._where: str | None = None  # set when a transition's action raised: where it was
        self._holding = False  # a state's entry_once actions are running: saves wait for them
        self._taken: Callable[[], None] | None = None  # called after each transition is taken (a replay's check)
        self._filled: set[str] = set()  # the slots of the stage's run that are filled
        self._bound: dict[tuple[str, str], Callable[[], Any]] = {}  # (action, state) -> bound, this stage
        self._bound_guards: dict[tuple[str, str], GuardFn] = {}
        self._key_of: dict[int, tuple[str, str]] = {}  # id of a bound action -> its key (kept alive in _retired)
        self._retired: list[Callable[[], Any]] = []
        if state is not None:
            self.restore(state)

    # -- reading -------------------------------------------------------------------
    @property
    def at(self) -> str:
        """The current leaf state of the chart."""
        return self._at

    @property
    def current_run(self) -> Run | None:
        """The run of the stage being interpreted (``None`` between stages)."""
        return self._run

    @property
    def should_stop(self) -> bool:
        return self._base.should_stop

    @property
    def state(self) -> TrainerState:
        """The current state, folded from the applied state and the live counters."""
        snap = self._snapshot
        if snap is None:
            progress = self._progress
            if progress is None:
                progress = self._progress = self.counters.freeze()
            snap = self._snapshot = self._base.replace(chart=self._at, progress=progress, counts=dict(self._counts))
        return snap

    @property
    def metrics(self) -> Mapping[str, float]:
        """The latest metrics (no snapshot built)."""
        return self._base.metrics

    # -- running a stage -------------------------------------------------------------
    def run(self, stage: str, run: Run) -> None:
        """Run ``stage`` through the chart from its ``setup`` event to a final state.

        Raises the exception that ended the stage, if any, once the chart has torn it down.
        """
        stage_def(self.chart, stage)  # a stage of this chart, or an error naming its stages
        run.counters = self.counters
        run.chart = self.chart
        run.state_ref = lambda: self.state
        run.facts_ref = partial(getattr, self, "_base")  # called per batch: no Python frame
        self._bind(run)
        self._error = None
        self._config = run.plan.config
        paused = False
        try:
            self.apply(BeginStage(stage, getattr(run.module, "metric_modes", {})))
            edge = self._nodes[self._at].on.get("setup")
            if edge is None:
                raise RuntimeError(f"a stage cannot start in state {self._at!r}: it has no 'setup' transition")
            self._interpret(edge)
        except Paused:  # a replay stopped here: the stage stays bound for inspection until release()
            paused = True
            raise
        finally:  # nothing of the run outlives its stage here: wrappers and collectives are released now
            if not paused:
                self._unbind()
        if self._error is not None:
            exc, where = self._error
            if not isinstance(exc, KeyboardInterrupt):
                verb = "was interrupted" if isinstance(exc, Preempted) else "failed"
                place = f"transition {where!r}" if " -> " in where else f"state {where!r}"
                add_note(exc, f"interlock: the run {verb} in {place}")
            raise exc

    def _interpret(self, edge: _Edge) -> None:
        take = edge
        while True:
            try:
                self._walk(take)
                return
            except Paused:
                raise
            except ChartEvent as sent:  # an action sent the chart an event: its `on` transition, or a failure
                take = self._sent(sent)
            except BaseException as exc:  # every failure ends the stage through the chart
                take = self._fail(exc)

    def _sent(self, sent: ChartEvent) -> _Edge:
        """The ``on`` transition of the current state for the event an action sent (fail without one)."""
        self._where, self._jump, self._deferred, self._holding = None, None, (), False
        edge = self._nodes[self._at].on.get(sent.name)
        if edge is None or sent.name in ("setup", "fail", "interrupt"):
            ways = sorted(k for k in self._nodes[self._at].on if k not in ("setup", "fail", "interrupt"))
            return self._fail(
                RuntimeError(
                    f"{sent.reason}, but state {self._at!r} has no {sent.name!r} transition in this chart (it has "
                    f"{ways or 'none'}): declare `on: {{{sent.name}: <target>}}` on it or a state above it"
                )
            )
        if sent.updates:
            try:
                self.apply(*sent.updates, source=sent.name)  # type: ignore[arg-type]
            except BaseException as exc:
                return self._fail(exc)
        return edge

    def release(self) -> None:
        """Unbind a stage a :class:`~interlock.core.errors.Paused` stopped (a replay is done with it)."""
        self._unbind()

    def _walk(self, edge: _Edge) -> None:
        """Take ``edge``, then every transition :func:`step` decides, until a state that waits.

        Taking a transition: its work (:meth:`_work`), then entering its target (:meth:`_arrive`,
        or the target's compiled form of it): the move, the event to its observers and receivers,
        the target's ``entry_once`` actions, the saves asked for when it is a checkpoint state, its
        entry actions (or a restore's jump), the decision and the work of the transition decided.
        """
        if edge.work:
            self._work(edge)
        taken: _Edge | None = edge
        while taken is not None:
            taken = taken.dest.arrive(taken)

    def _arrive(self, node: _Node, edge: _Edge) -> _Edge | None:
        """Enter ``node`` by ``edge`` (its work done); return the transition it takes next, its work done, or None.

        The generic step of a walk; a leaf entered :data:`HOT` times in a stage is given its compiled
        form (:func:`~interlock.trainer.compiled.compile_arrival`, the same step unrolled for it).
        """
        visits = node.visits = node.visits + 1
        if visits == HOT and self._compilable(node):
            node.arrive = compile_arrival(self, node)
        dest = node.path
        source, self._at = self._at, dest
        count = self._counts[dest] = self._counts[dest] + 1
        self._snapshot = None
        observers = self._observers
        if observers:
            c = self.counters
            for observe in observers:
                observe(dest, edge.trigger, source, count, c.epoch, c.global_step, c.batch_idx)
        recorders = self._recorders
        if recorders:  # a row each, no call (EventTrace); flush_due() once its time or row count is reached
            c = self.counters
            now = _clock()
            row = (now, dest, edge.trigger, source, count, c.epoch, c.global_step, c.batch_idx)
            for recorder in recorders:
                rows = recorder.rows
                rows.append(row)
                if now >= recorder.due or len(rows) >= recorder.limit:
                    recorder.flush_due(dest)
        if node.once:  # entry_once: after the event; a save asked for by its handlers waits for them
            self._holding = True
            if node.signal.receivers:
                self._emit(node, edge, source, count)
            self._holding = False
            for action in node.once:
                out = action()
                if out is not None and self._apply_result(out, action):
                    self._rest(node.once_refs, action)
                    break
        elif node.signal.receivers:
            self._emit(node, edge, source, count)
        if self._pending_saves and node.checkpoint:
            self._flush_saves()
        if self._taken is not None:
            self._taken()
        return self._settle(node)

    def _settle(self, node: _Node) -> _Edge | None:
        """Run ``node``'s entry actions (entering a restore's target, if one jumps), decide, do the work decided."""
        while True:
            for action in node.entry:
                out = action()
                if out is not None and self._apply_result(out, action):
                    self._rest(node.entry_refs, action)
                    break
            if self._jump is None:
                break
            node = self._do_jump()
        facts = self._facts
        if facts is None:
            facts = self._facts = _facts(Facts, (self._base, self.counters.view(), self._config))
        decided = step(node, facts)
        if decided is None:
            return None
        edge = decided[0]
        if edge.work:
            self._work(edge)
        return edge

    def _compilable(self, node: _Node) -> bool:
        """Whether ``node``'s step may be compiled: none of its actions can fill a slot (which rebinds the chart)."""
        fns = [*node.once, *node.entry]
        for e in node.always:
            fns += [*e.actions, *e.enters]
        actions = self.registry.actions
        for fn in fns:
            key = self._key_of.get(id(fn))
            if key is None or actions[key[0]].writes:
                return False
        return True

    def _work(self, edge: _Edge) -> None:
        """A transition's work: its exits and ``do`` actions, its counter operations, the entries it makes."""
        if edge.actions:
            try:
                for action in edge.actions:
                    out = action()
                    if out is not None and self._apply_result(out, action):
                        self._rest(edge.action_refs, action)
                        break
            except BaseException:
                self._where = edge.where(action)
                raise
        if edge.ops is not None:
            edge.ops(self.counters)
            self._snapshot = self._facts = self._progress = None
        if edge.enters:
            try:
                for action in edge.enters:
                    out = action()
                    if out is not None and self._apply_result(out, action):
                        self._rest(edge.enter_refs, action)
                        break
            except BaseException:
                self._where = edge.where(action)
                raise

    def _emit(self, node: _Node, edge: _Edge, source: str, count: int) -> None:
        """Send the event of entering ``node`` to its signal's receivers; apply what they return."""
        c = self.counters
        event = Event(
            node.path,
            edge.trigger,
            source,
            count,
            c.epoch,
            c.global_step,
            c.batch_idx,
            _payload(node) if node.keys else None,
            edge.guard_name or "",
        )
        self.apply_all(self.bus.send(event, self._state_ref))

    def _state_ref(self) -> TrainerState:
        return self.state

    def _record(self, exc: BaseException) -> bool:
        """Make ``exc`` the outcome of the stage (the first one wins); return whether it is an interruption."""
        where, self._where = self._where or self._at, None
        if self._error is None:
            self._error = (exc, where)
            if self._run is not None:
                self._run.error = exc
            self.apply(SetFailure(f"{type(exc).__name__}: {exc}", where))
        elif self._error[0] is not exc:  # a failure while failing: keep the first, remember this one
            add_note(self._error[0], f"interlock: then, in state {where!r}: {type(exc).__name__}: {exc}")
        interrupted = isinstance(self._error[0], KeyboardInterrupt | Preempted)
        self.apply(SetStatus("interrupted" if interrupted else "failed"))
        return isinstance(exc, KeyboardInterrupt | Preempted)

    def _fail(self, exc: BaseException) -> _Edge:
        """Record ``exc``; the ``fail``/``interrupt`` transition of the current state, to take next (raise without one).

        Its actions note their own errors on ``exc`` instead of raising; a handler of its event that
        raises fails the stage again from where the chart is then.
        """
        interrupted = self._record(exc)
        self._jump, self._deferred, self._holding = None, (), False
        edge = self._nodes[self._at].on.get("interrupt" if interrupted else "fail")
        if edge is None:
            raise exc
        assert self._error is not None
        safe = _Edge(edge.trigger, None, edge.spec)
        safe.dest, safe.ops, safe.source = edge.dest, edge.ops, edge.source
        safe.actions = tuple(_quiet(a, self._error[0]) for a in edge.actions)
        safe.enters = tuple(_quiet(a, self._error[0]) for a in edge.enters)
        safe.work = edge.work
        return safe

    # -- binding a stage's run -----------------------------------------------------------
    def _bind(self, run: Run) -> None:
        """Bind every action, guard, payload key and effect of the chart to ``run``.

        Actions and guards that read a slot not filled yet are bound once it is (:meth:`_fill`).
        """
        self._run = run
        reg, chart = self.registry, self.chart
        self._filled = {reg.slot_name(kind) for kind in run.slots}
        self._bound, self._bound_guards, self._key_of, self._retired = {}, {}, {}, []
        nodes = {leaf: _Node(leaf, self.bus.signals[leaf], spec.checkpoint) for leaf, spec in chart.leaf_specs.items()}
        getters = {key: entry.bind(run) for key, entry in reg.payload.items()}

        def edge(t: Transition) -> _Edge:
            e = _Edge(t.trigger, t.guard, t)
            e.source, e.dest = t.source, nodes[t.dest]
            e.action_refs, e.enter_refs = tuple(t.actions), tuple(t.enters)
            return e

        for leaf, spec in chart.leaf_specs.items():
            node = nodes[leaf]
            node.entry_refs, node.once_refs = tuple(spec.entry), tuple(spec.entry_once)
            node.always = tuple(edge(t) for t in spec.always)
            node.on = {k: edge(t) for k, t in spec.on.items()}
            node.keys = spec.payload
            node.capture = tuple(getters[k] for k in spec.payload)
            node.later = tuple(reg.payload[k].lazy for k in spec.payload)
        self._nodes = nodes
        self._refresh()
        self._effects = {kind: entry.bind(run) for kind, entry in reg.effects.items()}

    def _action(self, ref: ActionRef) -> Callable[[], Any]:
        """``ref`` bound to the run (cached for the stage; an action whose slots are not all filled: a stub)."""
        key = (ref.name, ref.where)
        fn = self._bound.get(key)
        if fn is None:
            assert self._run is not None
            entry = self.registry.actions[ref.name]
            missing = [s for s in entry.reads if s not in self._filled]
            if missing:
                fn = self._unready("action", ref.name, missing)
            else:
                fn = entry.bind(self._run, self.chart.states[ref.where].params)
            self._bound[key] = fn
            self._key_of[id(fn)] = key
            self._retired.append(fn)
        return fn

    def _guard(self, name: str, where: str) -> GuardFn:
        key = (name, where)
        fn = self._bound_guards.get(key)
        if fn is None:  # a pure function of the facts: it gets the state's parameters, never the run
            fn = self._bound_guards[key] = self.registry.guards[name].bind(self.chart.states[where].params)
        return fn

    def _unready(self, kind: str, name: str, missing: list[str]) -> Callable[[], Any]:
        """A stand-in for ``name`` while a slot it reads is empty: it raises naming the slot and its writers."""
        writers = {slot: self.registry.writers(slot) for slot in missing}

        def unready() -> Any:
            said = "; ".join(
                f"slot {slot!r} is filled by {', '.join(w) if w else 'no registered action'}"
                for slot, w in writers.items()
            )
            raise SlotError(
                f"{kind} {name!r} reads slot(s) {missing} that nothing has filled yet in state {self._at!r} ({said}): "
                "run a writer earlier in the chart"
            )

        return unready

    def _refresh(self) -> None:
        """(Re)assign every node's and edge's bound callables from the stage's bindings, in place."""
        chart, counters = self.chart, self.registry.counters
        assert self._run is not None
        ops = {
            name: (e.bind(self._run) if e.lazy else e.bind)
            for name, e in counters.items()
            if name in self._used_counters()
        }
        action = self._action

        def fill(e: _Edge) -> None:
            t = e.spec
            assert t is not None
            e.guard = self._guard(t.guard, t.source) if t.guard is not None else None
            e.actions = tuple(f for f in (action(a) for a in t.actions) if f is not NOOP)
            e.enters = tuple(f for f in (action(a) for a in t.enters) if f is not NOOP)
            e.names = {
                id(action(a)): (f"exit of {a.where}: " if a.name in chart.states[a.where].exit else "do ") + a.name
                for a in t.actions
            }
            e.names.update({id(action(a)): f"entry of {a.where}: {a.name}" for a in t.enters})
            e.ops = compose(t.count, ops)
            e.work = bool(e.actions or e.enters or e.ops is not None)

        for node in self._nodes.values():
            node.entry = tuple(f for f in (action(a) for a in node.entry_refs) if f is not NOOP)
            node.once = tuple(f for f in (action(a) for a in node.once_refs) if f is not NOOP)
            for e in (*node.always, *node.on.values()):
                fill(e)
            node.arrive, node.visits = partial(self._arrive, node), 0  # compiled again once hot, from these

    def _used_counters(self) -> set[str]:
        specs = self.chart.leaf_specs.values()
        return {name for spec in specs for t in (*spec.always, *spec.on.values()) for name in t.count}

    def _fill(self, slot: Any, action: Callable[[], Any] | None) -> None:
        """Put ``slot`` in the run (filling or replacing its type's slot); bind again what reads it."""
        assert self._run is not None
        reg = self.registry
        name = reg.slot_name(type(slot))
        key = self._key_of.get(id(action)) if action is not None else None
        if key is not None and name not in reg.actions[key[0]].writes:
            raise SlotError(
                f"action {key[0]!r} filled slot {name!r} ({type(slot).__name__}) without declaring it; register it "
                f"with writes=({name!r},) (declared: {reg.actions[key[0]].writes})"
            )
        self._run.slots[type(slot)] = slot
        self._filled.add(name)
        self._bound = {k: f for k, f in self._bound.items() if name not in reg.actions[k[0]].reads}
        self._bound_guards = {k: f for k, f in self._bound_guards.items() if name not in reg.guards[k[0]].reads}
        self._refresh()

    def _rest(self, refs: tuple[ActionRef, ...], done: Callable[[], Any]) -> None:
        """Run the actions of ``refs`` after ``done`` (which filled a slot), bound as they are now."""
        key = self._key_of.get(id(done))
        keys = [(r.name, r.where) for r in refs]
        start = keys.index(key) + 1 if key in keys else len(keys)
        for ref in refs[start:]:
            fn = self._action(ref)
            if fn is NOOP:
                continue
            out = fn()
            if out is not None:
                self._apply_result(out, fn)

    def _unbind(self) -> None:
        """Drop every callable bound to the stage's run.

        The nodes point at each other, so they are cleared: a cycle would keep the run's module
        wrappers alive until a collection, or until interpreter exit.
        """
        for node in self._nodes.values():
            node.entry, node.once, node.always, node.on, node.capture = (), (), (), {}, ()
            node.arrive = _unbound
        self._run, self._effects, self._nodes = None, {}, {}
        self._bound, self._bound_guards, self._key_of, self._retired = {}, {}, {}, []

    def _do_jump(self) -> _Node:
        """Enter the restored state: entry actions of the states entered, the restore's effects, its own work."""
        target, self._jump = self._jump, None
        assert target is not None
        source = self._at
        spec = TransitionSpec("restore", target, eventless=False)
        compiled = self.chart._compile(source, source, spec)
        assert self._run is not None
        for ref in (*compiled.actions, *compiled.enters):
            fn = self._action(ref)
            out = None if fn is NOOP else fn()
            if out is not None:
                self._apply_result(out, fn)
        self._at = compiled.dest
        self._snapshot = None
        deferred, self._deferred = self._deferred, ()
        for effect in deferred:
            self._apply_effect(effect)
        return self._nodes[compiled.dest]

    # -- applying updates ------------------------------------------------------------
    def apply(self, *updates: Update, source: str = "runtime") -> None:
        """Apply updates (the same rules as handlers' updates)."""
        self.apply_all([(source, u) for u in updates])

    def _apply_result(self, out: Any, action: Callable[[], Any] | None = None) -> bool:
        """Apply what an action returned; return whether it filled a slot (its bindings changed)."""
        if isinstance(out, Change):  # the common case of an action: one bookkeeping change
            self._base = self._base.replace(**out.changes(self.state))
            self._snapshot = self._facts = None
            return False
        updates = as_updates(out, "an action")
        fills = [u for u in updates if type(u) is Fill]
        if fills:
            updates = [u for u in updates if type(u) is not Fill]
            for f in fills:
                self._fill(f.slot, action)
        self.apply_all([("action", u) for u in updates])
        return bool(fills)

    def apply_all(self, items: list[tuple[str, Update]]) -> None:
        if not items:
            return
        merged = merge(items)
        if merged.changes_state:
            self._apply_state(merged)
        if merged.restore is not None:
            self._deferred = merged.effects
        else:
            for effect in merged.effects:
                self._apply_effect(effect)
        if self._pending_saves and self._at in self._checkpointable and not self._holding:
            self._flush_saves()

    def _apply_state(self, merged: Merged) -> None:
        state = reduce(self.state, merged)
        if merged.restore is not None:
            self.restore(state, jump=self._run is not None)
            return
        self._base = state
        self._snapshot, self._facts = state, None

    def restore(self, state: TrainerState, jump: bool = False) -> None:
        """Make ``state`` current: counters, event counts and chart position included.

        With ``jump`` (a restore during a stage) the cursor moves to ``state.chart``
        once the current state's work is done, entering the states on the way; a
        ``state.chart`` that is where the cursor is restores in place (the chart decides next).
        """
        if jump:  # the facts of this process and stage stay (agreements, limits, modes, a failure)
            if state.chart != self._at:
                self._jump = self.chart.resume_point(state.chart)
            state = state.replace(chart=self._at, **{k: getattr(self._base, k) for k in _LIVE})
        self._base = state
        self._snapshot = self._facts = self._progress = None
        self.counters.load(state.progress)  # in place: bound actions hold this object
        counts = self._counts  # in place: the interpreter's loop holds this dict
        counts.update(dict.fromkeys(counts, 0))
        counts.update({k: v for k, v in state.counts.items() if k in counts})
        if not jump and state.chart in self.chart.leaf_specs:
            self._at = state.chart

    def _apply_effect(self, effect: Update) -> None:
        if isinstance(effect, SaveCheckpoint):  # written once the other effects are applied, at a checkpoint state
            self._pending_saves.append(effect)
            return
        if isinstance(effect, Interrupt):
            self._record(effect.exception)
            return
        handler = self._effects.get(type(effect))
        if handler is None:
            known = ", ".join(sorted(k.__name__ for k in self.registry.effects)) or "none"
            raise TypeError(
                f"no effect handler for {type(effect).__name__} ({effect!r}) in state {self._at!r}: "
                f"register one with Registry.effect({type(effect).__name__}); registered: {known}"
            )
        handler(effect)

    def _flush_saves(self) -> None:
        """Write the saves asked for since the last checkpoint state (one write per file).

        A documented rule: saves are written only in ``fit``, the only stage with checkpoint states
        (a resumable position); the built-in listeners ask for saves only on fit's events
        (``epoch_end``, ``train_batch_end``, ``eval_end`` in ``fit``), and a save asked for in
        another stage is dropped, as Lightning's ModelCheckpoint does not save outside fit.
        """
        saves, self._pending_saves = self._pending_saves, []
        writer = self._effects.get(SaveCheckpoint)
        if writer is None or self._base.stage != "fit":
            return
        by_path: dict[str, SaveCheckpoint] = {}  # one write per file; the files it replaces, from every request
        for save in saves:
            seen = by_path.get(save.path)
            by_path[save.path] = save if seen is None else attrs.evolve(seen, replaces=seen.replaces + save.replaces)
        for save in by_path.values():
            writer(save)


def _unbound(edge: _Edge) -> _Edge | None:
    raise RuntimeError(f"the chart is not bound to a stage's run: cannot enter {edge.dest.path!r}")


def _payload(node: _Node) -> Callable[[], dict[str, Any]]:
    """The event's payload builder: values taken now, lazy ones when a handler first reads them."""
    values = tuple(get if later else get() for get, later in zip(node.capture, node.later, strict=True))
    keys, later = node.keys, node.later
    return lambda: {k: (v() if lz else v) for k, v, lz in zip(keys, values, later, strict=True)}


def _quiet(action: Callable[[], Any], first: BaseException) -> Callable[[], Any]:
    """``action`` for a failure path: its own error is noted on the first one, not raised."""

    def run() -> Any:
        try:
            return action()
        except Exception as exc:
            add_note(first, f"interlock: while failing, {type(exc).__name__}: {exc}")
            return None

    return run
