"""The lifecycle statechart: loaded from data, validated, compiled for the interpreter.

The YAML file in ``statecharts/`` is the program. A state names its work
(``entry``/``exit`` actions) and its ways out: ``always`` transitions, tried in
order after the entry actions, each with an optional ``guard`` (the last one has
none: the default), and ``on`` events sent from outside (``setup``, ``fail``,
``interrupt``). Actions and guards are referred to by name and registered apart
(:class:`~interlock.core.registry.Registry`), so a chart parses, validates and
renders without running anything.

:meth:`Chart.transition` is the pure ``(leaf, trigger) -> leaf`` table; each leaf's
compiled work and transitions (with the exit and entry actions of the compound states
they cross) are what :func:`interlock.core.step.compile_nodes` turns into the tables
the one decision function, :func:`interlock.core.step.step`, reads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import yaml

from interlock.core.errors import ChartError, IllegalTransition

__all__ = ["ActionRef", "Chart", "Leaf", "StateSpec", "Transition", "TransitionSpec", "load_chart"]

#: Events the runtime sends from outside: a stage starts, an action failed, the user interrupted.
EXTERNAL_EVENTS = ("setup", "fail", "interrupt")
_STATE_KEYS = {
    "states",
    "initial",
    "on",
    "always",
    "entry",
    "entry_once",
    "exit",
    "final",
    "checkpoint",
    "with",
    "payload",
    "count",
    "doc",
    "resume_at",
    "tags",
}
#: The tag vocabulary built-in listeners subscribe by (``@listen("#epoch_end")``). A leaf's
#: event carries its own tags and those of every state above it. A chart may add its own tags
#: by listing them at its top level (``tags: [my_tag]``); any other tag is a typo and an error.
TAGS: Mapping[str, str] = {
    # scopes: on compound states, inherited by every leaf below
    "fit": "the fit stage",
    "sanity": "the sanity check's evaluation loop",
    "val": "a validation loop (in fit, or the validate stage)",
    "test": "the test stage's loop",
    "predict": "the predict stage's loop",
    # moments: on leaf states
    "stage_start": "the first state of a stage (the rank is known; before a resumed state is restored)",
    "stage_end": "the last state of a stage, before teardown",
    "epoch_start": "a training epoch starts",
    "epoch_end": "a training epoch has ended (after its validation)",
    "train_batch_start": "a training batch was fetched and its step starts",
    "train_batch_end": "a training batch has ended",
    "backward": "the loss's backward pass has run",
    "optimizer_step": "an optimizer is about to step",
    "eval_start": "an evaluation loop starts",
    "eval_batch_start": "an evaluation batch was fetched and its step starts",
    "eval_batch_end": "an evaluation batch has ended",
    "eval_end": "an evaluation loop has ended",
}
_TRANSITION_KEYS = {"trigger", "target", "guard", "do", "count"}


@attrs.frozen
class ActionRef:
    """One use of a named action, with the state whose ``with:`` parameters it gets."""

    name: str
    where: str


@attrs.frozen
class TransitionSpec:
    """A transition as declared on a state (target resolved to a path, maybe compound)."""

    trigger: str
    target: str
    guard: str | None = None
    do: tuple[str, ...] = ()
    count: tuple[str, ...] = ()
    eventless: bool = True


@attrs.frozen
class StateSpec:
    """One state of the chart, with its targets already resolved to paths."""

    path: str
    parent: str | None
    children: tuple[str, ...] = ()
    initial: str | None = None
    on: Mapping[str, str] = attrs.field(factory=dict)
    always: tuple[TransitionSpec, ...] = ()
    entry: tuple[str, ...] = ()
    exit: tuple[str, ...] = ()
    entry_once: tuple[str, ...] = ()
    final: bool = False
    checkpoint: bool = False
    params: Mapping[str, Any] = attrs.field(factory=dict)
    payload: tuple[str, ...] = ()
    count: tuple[str, ...] = ()
    doc: str = ""
    resume_at: str | None = None
    tags: frozenset[str] = frozenset()

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def declared(self) -> Iterator[TransitionSpec]:
        """Every transition declared here: the ``always`` ones in order, then the ``on`` events."""
        yield from self.always
        for trigger, target in self.on.items():
            yield TransitionSpec(trigger, target, eventless=False)


@attrs.frozen
class Transition:
    """A compiled transition between two leaf states.

    ``actions`` run on the way out: exit actions of the states left (innermost
    first), then the transition's own ``do``. Then the counters change (``count``),
    then ``enters`` run: entry actions of the compound states entered (outermost
    first). The target leaf's own entry actions run after its event.
    """

    source: str
    trigger: str
    dest: str
    guard: str | None = attrs.field(default=None, eq=False)
    actions: tuple[ActionRef, ...] = attrs.field(default=(), eq=False)
    count: tuple[str, ...] = attrs.field(default=(), eq=False)
    eventless: bool = attrs.field(default=True, eq=False)
    enters: tuple[ActionRef, ...] = attrs.field(default=(), eq=False)


@attrs.frozen
class Leaf:
    """What the interpreter needs of one leaf: its work and its ways out."""

    path: str
    entry: tuple[ActionRef, ...]
    entry_once: tuple[ActionRef, ...]
    always: tuple[Transition, ...]
    on: Mapping[str, Transition]
    payload: tuple[str, ...]
    checkpoint: bool
    final: bool


def _resolve(target: str, declared_in: str | None) -> str:
    """Resolve a target written in the chart to an absolute path."""
    if target.startswith("#"):
        return target[1:]
    if "." in target:
        return target
    base = declared_in.split(".")[:-1] if declared_in else []
    while target.startswith("^"):
        target = target[1:]
        base = base[:-1]
    return ".".join([*base, target])


def _names(value: Any, what: str, path: str, errors: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        errors.append(f"state {path!r}: {what} must be a name or a list of names, got {value!r}")
        return ()
    return tuple(value)


class Chart:
    """A validated statechart with its compiled transitions."""

    def __init__(self, data: Mapping[str, Any], source: str = "<chart>") -> None:
        self.source = source
        self.data = data
        self.states: dict[str, StateSpec] = {}
        errors: list[str] = []
        extra = data.get("tags") or ()
        if not isinstance(extra, list | tuple) or not all(isinstance(t, str) and t for t in extra):
            errors.append(f"the chart's top-level 'tags' must be a list of tag names, got {extra!r}")
            extra = ()
        self.vocabulary: frozenset[str] = frozenset(TAGS) | frozenset(extra)
        self._parse(data, None, {}, errors)
        self.initial = self._enter(_resolve(str(data.get("initial", "")), None), errors)
        self._check_targets(errors)
        if errors:
            raise ChartError(source, errors)
        self.leaf_specs: dict[str, Leaf] = {leaf: self._compile_leaf(leaf) for leaf in self.leaves}
        self.table: dict[str, dict[str, str]] = {
            leaf: {t.trigger: t.dest for t in (*spec.always, *spec.on.values())}
            for leaf, spec in self.leaf_specs.items()
        }
        errors = self._check_structure()
        if errors:
            raise ChartError(source, errors)
        #: Each leaf (event name) with its tags: its own and those of every state above it.
        self.tags: dict[str, frozenset[str]] = self._leaf_tags()

    # -- parsing -----------------------------------------------------------------
    def _parse(self, node: Mapping[str, Any], parent: str | None, params: Mapping[str, Any], errors: list[str]) -> None:
        states = node.get("states") or {}
        if not isinstance(states, Mapping) or not states:
            errors.append(f"{parent or 'the chart'} has no states")
            return
        for name, spec in states.items():
            if str(name).startswith("_"):
                continue
            path = f"{parent}.{name}" if parent else str(name)
            spec = spec or {}
            if not isinstance(spec, Mapping):
                errors.append(f"state {path!r} must be a mapping, got {spec!r}")
                continue
            unknown = set(spec) - _STATE_KEYS
            if unknown:
                errors.append(f"state {path!r} has unknown keys {sorted(unknown)}; allowed: {sorted(_STATE_KEYS)}")
            children = tuple(f"{path}.{c}" for c in (spec.get("states") or {}) if not str(c).startswith("_"))
            initial = spec.get("initial")
            if children and initial is None:
                errors.append(f"compound state {path!r} has no 'initial'")
            if initial is not None and f"{path}.{initial}" not in children:
                errors.append(f"state {path!r} has initial {initial!r}, which is not one of its states")
            own = spec.get("with") or {}
            if not isinstance(own, Mapping):
                errors.append(f"state {path!r}: 'with' must be a mapping of action parameters, got {own!r}")
                own = {}
            merged = {**params, **own}
            on = spec.get("on") or {}
            if not isinstance(on, Mapping):
                errors.append(f"state {path!r}: 'on' must map events to targets, got {on!r}")
                on = {}
            self.states[path] = StateSpec(
                path=path,
                parent=parent,
                children=children,
                initial=f"{path}.{initial}" if initial is not None else None,
                on={str(t): _resolve(str(dst), path) for t, dst in on.items()},
                always=self._parse_always(spec.get("always"), path, errors),
                entry=_names(spec.get("entry"), "entry", path, errors),
                entry_once=_names(spec.get("entry_once"), "entry_once", path, errors),
                exit=_names(spec.get("exit"), "exit", path, errors),
                final=bool(spec.get("final", False)),
                checkpoint=bool(spec.get("checkpoint", False)),
                params=merged,
                payload=_names(spec.get("payload"), "payload", path, errors),
                count=_names(spec.get("count"), "count", path, errors),
                doc=str(spec.get("doc", "")),
                resume_at=_resolve(str(spec["resume_at"]), path) if spec.get("resume_at") else None,
                tags=self._parse_tags(spec.get("tags"), path, errors),
            )
            if children:
                self._parse(spec, path, merged, errors)

    def _parse_tags(self, value: Any, path: str, errors: list[str]) -> frozenset[str]:
        tags = _names(value, "tags", path, errors)
        unknown = sorted(set(tags) - self.vocabulary)
        if unknown:
            errors.append(
                f"state {path!r} has unknown tags {unknown}; known: {sorted(self.vocabulary)} "
                "(a chart adds its own by listing them in its top-level 'tags')"
            )
        return frozenset(tags)

    def _parse_always(self, items: Any, path: str, errors: list[str]) -> tuple[TransitionSpec, ...]:
        if items is None:
            return ()
        if not isinstance(items, list) or not items:
            errors.append(f"state {path!r}: 'always' must be a non-empty list of transitions")
            return ()
        out: list[TransitionSpec] = []
        for i, item in enumerate(items):
            where = f"state {path!r}, always[{i}]"
            if not isinstance(item, Mapping) or "trigger" not in item or "target" not in item:
                errors.append(f"{where} must be a mapping with 'trigger' and 'target', got {item!r}")
                continue
            unknown = set(item) - _TRANSITION_KEYS
            if unknown:
                errors.append(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(_TRANSITION_KEYS)}")
            guard = item.get("guard")
            if guard is not None and (not isinstance(guard, str) or not guard):
                errors.append(f"{where}: guard must be a name, got {guard!r}")
                guard = None
            out.append(
                TransitionSpec(
                    trigger=str(item["trigger"]),
                    target=_resolve(str(item["target"]), path),
                    guard=guard,
                    do=_names(item.get("do"), "do", path, errors),
                    count=_names(item.get("count"), "count", path, errors),
                )
            )
        triggers = [t.trigger for t in out]
        dupes = sorted({t for t in triggers if triggers.count(t) > 1})
        if dupes:
            errors.append(f"state {path!r}: trigger(s) {dupes} appear twice in 'always'")
        for t in out[:-1]:
            if t.guard is None:
                errors.append(
                    f"state {path!r}: 'always' transition {t.trigger!r} has no guard but is not the last one; "
                    "the transitions after it could never be taken"
                )
        if out and out[-1].guard is not None:
            errors.append(
                f"state {path!r}: the last 'always' transition ({out[-1].trigger!r}) has guard "
                f"{out[-1].guard!r}; the last one is the default and takes no guard"
            )
        return tuple(out)

    def _enter(self, path: str, errors: list[str] | None = None) -> str:
        """The leaf entered when ``path`` is entered (follows ``initial``)."""
        spec = self.states.get(path)
        if spec is None:
            if errors is not None:
                errors.append(f"the initial state {path!r} does not exist")
            return path
        while spec.children and spec.initial in self.states:
            spec = self.states[spec.initial]
        return spec.path

    def _check_targets(self, errors: list[str]) -> None:
        for spec in self.states.values():
            if spec.resume_at is not None and spec.resume_at not in self.states:
                errors.append(f"state {spec.path!r}: resume_at {spec.resume_at!r} does not exist")
            for t in spec.declared():
                if t.target not in self.states:
                    errors.append(
                        f"state {spec.path!r}: trigger {t.trigger!r} goes to {t.target!r}, which does not exist"
                    )

    def _crossing(self, source: str, target: str) -> tuple[list[str], list[str]]:
        """States left (innermost first) and entered (outermost first) going from leaf ``source`` to ``target``."""
        dest = self._enter(target)
        left = list(self.ancestors(source))
        entered = list(self.ancestors(dest))
        common = next((a for a in left if a in entered and a not in (source, dest)), None)
        if source == dest:  # a self-transition leaves and re-enters the leaf
            return [source], [dest]
        exits = left[: left.index(common)] if common else left
        enters = entered[: entered.index(common)] if common else entered
        return exits, list(reversed(enters))

    def _compile(self, source: str, declared_in: str, spec: TransitionSpec) -> Transition:
        exits, enters = self._crossing(source, spec.target)
        actions: list[ActionRef] = [ActionRef(a, s) for s in exits for a in self.states[s].exit]
        actions += [ActionRef(a, declared_in) for a in spec.do]
        entries = tuple(ActionRef(a, s) for s in enters[:-1] for a in self.states[s].entry)
        count = (*spec.count, *(c for s in enters for c in self.states[s].count))
        return Transition(source, spec.trigger, enters[-1], spec.guard, tuple(actions), count, spec.eventless, entries)

    def _compile_leaf(self, leaf: str) -> Leaf:
        spec = self.states[leaf]
        on: dict[str, Transition] = {}
        for ancestor in self.ancestors(leaf):  # leaf first: the nearest declaration wins
            for trigger, target in self.states[ancestor].on.items():
                if trigger not in on:
                    on[trigger] = self._compile(leaf, ancestor, TransitionSpec(trigger, target, eventless=False))
        return Leaf(
            path=leaf,
            entry=tuple(ActionRef(a, leaf) for a in spec.entry),
            entry_once=tuple(ActionRef(a, leaf) for a in spec.entry_once),
            always=tuple(self._compile(leaf, leaf, t) for t in spec.always),
            on=on,
            payload=spec.payload,
            checkpoint=spec.checkpoint,
            final=spec.final,
        )

    def _check_structure(self) -> list[str]:
        errors: list[str] = []
        for leaf, spec in self.leaf_specs.items():
            events = set(spec.on) - {"fail", "interrupt"}
            if not spec.final and not spec.always and not events:
                errors.append(
                    f"state {leaf!r} has no 'always' transition and waits for no event: a run would stop "
                    "there; give it an 'always' list ending in a default, or make it final"
                )
            works = spec.entry or spec.entry_once or any(t.guard or t.actions for t in spec.always)
            missing = [e for e in ("fail", "interrupt") if e not in spec.on]
            if works and missing:
                errors.append(
                    f"state {leaf!r} runs actions but has no {' or '.join(repr(m) for m in missing)} transition "
                    "(declare `on: {fail: ..., interrupt: ...}` on it or a state above it)"
                )
        errors += [
            f"state {p!r} has entry_once but is not a checkpoint leaf state: use entry (entry_once runs before a save "
            "waiting for the state, and not again when a run resumes in it)"
            for p, s in self.states.items()
            if s.entry_once and not (s.is_leaf and s.checkpoint)
        ]
        reachable = self._reachable()
        errors += [f"state {s!r} is unreachable from {self.initial!r}" for s in self.leaves if s not in reachable]
        finals = self.final_states
        if not finals:
            errors.append("the chart has no final state (mark the states a run ends in with `final: true`)")
        ends = self._reaching(finals)
        errors += [f"state {s!r} cannot reach a final state" for s in self.leaves if s in reachable and s not in ends]
        return errors

    def _reachable(self) -> set[str]:
        seen, todo = {self.initial}, [self.initial]
        while todo:
            for dest in self.table[todo.pop()].values():
                if dest not in seen:
                    seen.add(dest)
                    todo.append(dest)
        return seen

    def _reaching(self, targets: set[str]) -> set[str]:
        back: dict[str, set[str]] = {}
        for source, row in self.table.items():
            for dest in row.values():
                back.setdefault(dest, set()).add(source)
        seen = set(targets)
        todo = list(targets)
        while todo:
            for source in back.get(todo.pop(), ()):
                if source not in seen:
                    seen.add(source)
                    todo.append(source)
        return seen

    # -- queries -----------------------------------------------------------------
    @property
    def leaves(self) -> list[str]:
        """Every leaf state, in document order."""
        return [p for p, s in self.states.items() if s.is_leaf]

    @property
    def triggers(self) -> set[str]:
        """Every trigger the chart declares."""
        return {t.trigger for s in self.states.values() for t in s.declared()}

    def _leaf_tags(self) -> dict[str, frozenset[str]]:
        """Each leaf (event name) with its tags: its own and those of every state above it."""
        out: dict[str, frozenset[str]] = {}
        for leaf in self.leaves:
            tags: set[str] = set()
            path: str | None = leaf
            while path is not None:
                tags |= self.states[path].tags
                path = self.states[path].parent
            out[leaf] = frozenset(tags)
        return out

    @property
    def resume_at(self) -> str | None:
        """Where a finished run resumes (the ``resume_at`` of its final checkpoint state), if declared."""
        for spec in self.states.values():
            if spec.final and spec.checkpoint and spec.resume_at is not None:
                return spec.resume_at
        return None

    @property
    def checkpoint_states(self) -> set[str]:
        return {p for p, s in self.states.items() if s.checkpoint}

    @property
    def final_states(self) -> set[str]:
        return {p for p, s in self.states.items() if s.final}

    def ancestors(self, path: str) -> Iterator[str]:
        """``path`` and then each state above it."""
        node: str | None = path
        while node is not None:
            yield node
            node = self.states[node].parent

    def transitions(self) -> list[Transition]:
        """Every compiled leaf-to-leaf transition."""
        return [t for spec in self.leaf_specs.values() for t in (*spec.always, *spec.on.values())]

    def transition(self, state: str, trigger: str) -> str:
        """Pure step function: the leaf reached from ``state`` by ``trigger``."""
        try:
            return self.table[state][trigger]
        except KeyError:
            raise IllegalTransition(state, trigger, sorted(self.table.get(state, ()))) from None

    def resume_point(self, saved: str) -> str:
        """The leaf a run saved in ``saved`` resumes at; raise when the chart cannot resume there."""
        spec = self.states.get(saved)
        if spec is not None and spec.resume_at is not None:
            return self._enter(spec.resume_at)
        if spec is None or not spec.is_leaf or not spec.checkpoint:
            ok = sorted(p for p, s in self.states.items() if s.checkpoint)
            raise ChartError(
                self.source,
                [f"a checkpoint saved in state {saved!r} cannot be resumed by this chart; resumable states: {ok}"],
            )
        return saved

    def guard_of(self, source: str, trigger: str) -> str | None:
        """The guard that decides the transition ``trigger`` out of ``source`` (``None``: a default or an event)."""
        for t in self.leaf_specs.get(source, _NO_LEAF).always:
            if t.trigger == trigger:
                return t.guard
        return None

    # -- what the chart refers to ------------------------------------------------
    def actions(self) -> set[str]:
        """Every action name the chart uses."""
        out: set[str] = set()
        for s in self.states.values():
            out.update(s.entry_once, s.entry, s.exit)
            for t in s.always:
                out.update(t.do)
        return out

    def guards(self) -> set[str]:
        """Every guard name the chart uses."""
        return {t.guard for s in self.states.values() for t in s.always if t.guard is not None}

    def counters(self) -> set[str]:
        """Every counter operation the chart uses."""
        return {c for s in self.states.values() for c in (*s.count, *(c for t in s.always for c in t.count))}

    def payload_keys(self) -> set[str]:
        return {k for s in self.states.values() for k in s.payload}

    def check_names(
        self,
        actions: Iterable[str],
        guards: Iterable[str],
        counters: Iterable[str] = (),
        payload: Iterable[str] = (),
    ) -> None:
        """Raise :class:`ChartError` naming every action, guard, counter or payload key nobody registered."""
        errors: list[str] = []
        for what, used, known in (
            ("action", self.actions(), set(actions)),
            ("guard", self.guards(), set(guards)),
            ("counter", self.counters(), set(counters)),
            ("payload key", self.payload_keys(), set(payload)),
        ):
            for name in sorted(used - known):
                close = [k for k in sorted(known) if k.split(".")[0] == name.split(".")[0]] or sorted(known)
                errors.append(f"unknown {what} {name!r}; registered: {', '.join(close)}")
        if errors:
            raise ChartError(self.source, errors)


_NO_LEAF = Leaf("", (), (), (), {}, (), False, False)


class _ChartLoader(yaml.SafeLoader):
    """YAML 1.2 booleans only: ``on`` is a key here, not ``True``."""


_ChartLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ChartLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_chart(path: str | os.PathLike[str] | None = None) -> Chart:
    """Load and validate a chart; the built-in lifecycle when ``path`` is None."""
    if path is None:
        ref = resources.files("interlock") / "statecharts" / "trainer.yaml"
        text, source = ref.read_text(encoding="utf-8"), "statecharts/trainer.yaml"
    else:
        try:
            text, source = Path(path).read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ChartError(str(path), [f"cannot read the chart: {exc}"]) from None
    try:
        data = yaml.load(text, Loader=_ChartLoader)
    except yaml.YAMLError as exc:
        raise ChartError(source, [f"not valid YAML: {exc}"]) from None
    if not isinstance(data, Mapping):
        raise ChartError(source, ["the chart must be a mapping with 'initial' and 'states'"])
    return Chart(data, source)
