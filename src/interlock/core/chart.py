"""The lifecycle statechart: loaded from data, validated, compiled to a table.

The YAML file in ``statecharts/`` is the single definition. :class:`Chart` parses
it, checks it, builds the equivalent ``transitions`` hierarchical machine (the
reference interpreter, used for validation, rendering and agreement tests) and
compiles a flat ``{leaf: {trigger: leaf}}`` table that the loops step through on
the hot path. :meth:`Chart.transition` is the pure ``(state, trigger) -> state``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import yaml

from interlock.core.errors import ChartError, IllegalTransition

__all__ = ["Chart", "StateSpec", "Transition", "load_chart"]


@attrs.frozen
class StateSpec:
    """One state of the chart, with its targets already resolved to paths."""

    path: str
    parent: str | None
    children: tuple[str, ...] = ()
    initial: str | None = None
    on: Mapping[str, str] = attrs.field(factory=dict)
    final: bool = False
    checkpoint: bool = False

    @property
    def is_leaf(self) -> bool:
        return not self.children


@attrs.frozen
class Transition:
    """A compiled transition between two leaf states."""

    source: str
    trigger: str
    dest: str


def _resolve(target: str, declared_in: str | None) -> str:
    """Resolve a target written in the chart to an absolute path."""
    if "." in target:
        return target
    base = declared_in.split(".")[:-1] if declared_in else []
    while target.startswith("^"):
        target = target[1:]
        base = base[:-1]
    return ".".join([*base, target])


class Chart:
    """A validated statechart with its compiled transition table."""

    def __init__(self, data: Mapping[str, Any], source: str = "<chart>") -> None:
        self.source = source
        self.data = data
        self.states: dict[str, StateSpec] = {}
        errors: list[str] = []
        self._parse(data, None, errors)
        self.initial = self._enter(_resolve(str(data.get("initial", "")), None), errors)
        self._check_targets(errors)
        if errors:
            raise ChartError(source, errors)
        self.table: dict[str, dict[str, str]] = self._compile()
        unreachable = sorted(set(self.leaves) - self._reachable())
        if unreachable:
            raise ChartError(source, [f"state {s!r} is unreachable from {self.initial!r}" for s in unreachable])

    # -- parsing -----------------------------------------------------------------
    def _parse(self, node: Mapping[str, Any], parent: str | None, errors: list[str]) -> None:
        states = node.get("states") or {}
        if not isinstance(states, Mapping) or not states:
            errors.append(f"{parent or 'the chart'} has no states")
            return
        for name, spec in states.items():
            if str(name).startswith("_"):
                continue
            path = f"{parent}.{name}" if parent else str(name)
            spec = spec or {}
            unknown = set(spec) - {"states", "initial", "on", "final", "checkpoint"}
            if unknown:
                errors.append(f"state {path!r} has unknown keys {sorted(unknown)}")
            children = tuple(f"{path}.{c}" for c in (spec.get("states") or {}) if not str(c).startswith("_"))
            initial = spec.get("initial")
            if children and initial is None:
                errors.append(f"compound state {path!r} has no 'initial'")
            if initial is not None and f"{path}.{initial}" not in children:
                errors.append(f"state {path!r} has initial {initial!r}, which is not one of its states")
            on = {str(t): _resolve(str(dst), path) for t, dst in (spec.get("on") or {}).items()}
            self.states[path] = StateSpec(
                path=path,
                parent=parent,
                children=children,
                initial=f"{path}.{initial}" if initial is not None else None,
                on=on,
                final=bool(spec.get("final", False)),
                checkpoint=bool(spec.get("checkpoint", False)),
            )
            if children:
                self._parse(spec, path, errors)

    def _enter(self, path: str, errors: list[str] | None = None) -> str:
        """The leaf entered when ``path`` is entered (follows ``initial``)."""
        spec = self.states.get(path)
        if spec is None:
            if errors is not None:
                errors.append(f"the initial state {path!r} does not exist")
            return path
        while spec.children and spec.initial in self.states:
            spec = self.states[spec.initial]  # type: ignore[index]
        return spec.path

    def _check_targets(self, errors: list[str]) -> None:
        for spec in self.states.values():
            for trigger, target in spec.on.items():
                if target not in self.states:
                    errors.append(f"state {spec.path!r}: trigger {trigger!r} goes to {target!r}, which does not exist")

    def _compile(self) -> dict[str, dict[str, str]]:
        table: dict[str, dict[str, str]] = {}
        for leaf in self.leaves:
            row: dict[str, str] = {}
            for ancestor in self.ancestors(leaf):  # leaf first: the nearest declaration wins
                for trigger, target in self.states[ancestor].on.items():
                    row.setdefault(trigger, self._enter(target))
            table[leaf] = row
        return table

    def _reachable(self) -> set[str]:
        seen, todo = {self.initial}, [self.initial]
        while todo:
            for dest in self.table[todo.pop()].values():
                if dest not in seen:
                    seen.add(dest)
                    todo.append(dest)
        return seen

    # -- queries -----------------------------------------------------------------
    @property
    def leaves(self) -> list[str]:
        """Every leaf state, in document order."""
        return [p for p, s in self.states.items() if s.is_leaf]

    @property
    def triggers(self) -> set[str]:
        """Every trigger the chart declares."""
        return {t for s in self.states.values() for t in s.on}

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
        return [Transition(s, t, d) for s, row in self.table.items() for t, d in row.items()]

    def transition(self, state: str, trigger: str) -> str:
        """Pure step function: the leaf reached from ``state`` by ``trigger``."""
        try:
            return self.table[state][trigger]
        except KeyError:
            raise IllegalTransition(state, trigger, sorted(self.table.get(state, ()))) from None

    def check_triggers(self, fired: Iterable[str]) -> None:
        """Raise if the chart declares a trigger no loop fires, or a loop fires an undeclared one."""
        fired = set(fired)
        errors = [f"trigger {t!r} is declared but no loop fires it" for t in sorted(self.triggers - fired)]
        errors += [f"trigger {t!r} is fired by a loop but not declared" for t in sorted(fired - self.triggers)]
        if errors:
            raise ChartError(self.source, errors)

    # -- the reference interpreter -------------------------------------------------
    def machine(self, model: Any = None) -> Any:
        """Build the ``transitions`` hierarchical machine for this chart."""
        from transitions.extensions.nesting import HierarchicalMachine, NestedState

        class _State(NestedState):
            separator = "."

        class _Machine(HierarchicalMachine):  # type: ignore[misc]
            state_cls = _State

        def build(parent: str | None) -> list[dict[str, Any]]:
            out = []
            for path, spec in self.states.items():
                if spec.parent != parent:
                    continue
                node: dict[str, Any] = {"name": path.rsplit(".", 1)[-1], "final": spec.final}
                if spec.children:
                    node["children"] = build(path)
                    node["initial"] = spec.initial.rsplit(".", 1)[-1]  # type: ignore[union-attr]
                out.append(node)
            return out

        m = _Machine(
            model=None, states=build(None), initial=self.initial, auto_transitions=False, ignore_invalid_triggers=False
        )
        for spec in self.states.values():
            for trigger, target in spec.on.items():
                m.add_transition(trigger, spec.path, target)
        if model is not None:
            m.add_model(model, initial=self.initial)
        return m


class _ChartLoader(yaml.SafeLoader):
    """YAML 1.2 booleans only: ``on`` is a key here, not ``True``."""


_ChartLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ChartLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_chart(path: str | Path | None = None) -> Chart:
    """Load and validate a chart; the built-in lifecycle when ``path`` is None."""
    if path is None:
        ref = resources.files("interlock") / "statecharts" / "trainer.yaml"
        text, source = ref.read_text(encoding="utf-8"), "statecharts/trainer.yaml"
    else:
        text, source = Path(path).read_text(encoding="utf-8"), str(path)
    try:
        data = yaml.load(text, Loader=_ChartLoader)
    except yaml.YAMLError as exc:
        raise ChartError(source, [f"not valid YAML: {exc}"]) from None
    if not isinstance(data, Mapping):
        raise ChartError(source, ["the chart must be a mapping with 'initial' and 'states'"])
    return Chart(data, source)
