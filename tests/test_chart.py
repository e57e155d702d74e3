"""The statechart: loading, validation, names checked against the registry, the compiled table against `transitions`."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock import ChartError, IllegalTransition, load_chart
from interlock.core.config import TrainerConfig
from interlock.core.state import Progress, TrainerState
from interlock.core.step import Count, Facts, compile_nodes, step
from interlock.loops import default_registry

CHART = load_chart()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "chart.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_builtin_chart_loads_with_the_lifecycle_states() -> None:
    """The built-in chart has the lifecycle's top-level states and starts idle."""
    tops = {p for p, s in CHART.states.items() if s.parent is None}
    assert tops == {
        "idle",
        "setup",
        "fit",
        "validate",
        "test",
        "predict",
        "teardown",
        "finished",
        "interrupted",
        "failed",
    }
    assert CHART.initial == "idle"
    assert CHART.final_states == {"finished", "interrupted", "failed"}


def test_every_name_the_builtin_chart_uses_is_registered() -> None:
    """Every action, guard, counter and payload key of the built-in chart has a registered implementation."""
    reg = default_registry()
    CHART.check_names(reg.actions, reg.guards, reg.counters, reg.payload)
    assert CHART.actions() <= set(reg.actions) and CHART.guards() <= set(reg.guards)
    assert {"data.fetch", "precision.backward", "optim.step", "module.training_step"} <= CHART.actions()
    assert {"schedule.val_due", "limits.epoch_done", "optim.step_due", "signals.preempted"} <= CHART.guards()


def test_an_unknown_name_is_an_error_that_lists_the_registered_ones() -> None:
    """A chart naming an action or guard nobody registered is refused with the name and the candidates."""
    reg = default_registry()
    del reg.actions["optim.step"]
    del reg.guards["schedule.val_due"]
    with pytest.raises(ChartError) as info:
        CHART.check_names(reg.actions, reg.guards, reg.counters, reg.payload)
    text = str(info.value)
    assert (
        "unknown action 'optim.step'; registered: optim.close_window, optim.configure, optim.plateau_step, "
        "optim.skip_batch, optim.step_epoch_schedulers" in text
    )
    assert "unknown guard 'schedule.val_due'; registered: schedule.sanity_due, schedule.val_due_at_end" in text


def test_every_decision_has_a_default_and_every_state_can_finish() -> None:
    """Each leaf's `always` list ends in an unguarded transition, and every leaf reaches a final state."""
    for leaf, spec in CHART.leaf_specs.items():
        if spec.always:
            assert spec.always[-1].guard is None, leaf
            assert all(t.guard is not None for t in spec.always[:-1]), leaf
    assert CHART._reaching(CHART.final_states) >= set(CHART.leaves)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(CHART.leaf_specs)), st.lists(st.booleans(), min_size=8, max_size=8))
def test_step_takes_the_first_transition_whose_guard_holds(leaf: str, outcomes: list[bool]) -> None:
    """`step` is pure: for any guard outcomes it picks the first holding guard, else the default."""
    spec = CHART.leaf_specs[leaf]
    guards = sorted({t.guard for t in spec.always if t.guard})
    truth = dict(zip(guards, outcomes, strict=False))
    nodes = compile_nodes(CHART, lambda name, where: lambda facts: truth[name], lambda ref: ref, Count)
    facts = Facts(TrainerState(), Progress(), TrainerConfig())
    decided = step(nodes[leaf], facts)
    if not spec.always:
        assert decided is None
        return
    assert decided is not None
    expected = next(t for t in spec.always if t.guard is None or truth[t.guard])
    assert decided[0].transition == expected and CHART.transition(leaf, expected.trigger) == decided[0].dest.path


def test_gradient_accumulation_is_visible_in_the_chart() -> None:
    """From backward the chart either steps the optimizer or accumulates straight to batch end."""
    row = CHART.table["fit.train.batch.backward"]
    assert row["optimizer_step"] == "fit.train.batch.optimizer_step"
    assert row["accumulate"] == "fit.train.batch.end"


def test_fail_and_interrupt_are_allowed_from_every_running_state() -> None:
    """Every leaf inside a stage can fail or be interrupted into teardown; teardown itself into its final states."""
    for leaf in CHART.leaves:
        if leaf.split(".")[0] in {"setup", "fit", "validate", "test", "predict"}:
            assert CHART.transition(leaf, "fail") == "teardown"
            assert CHART.transition(leaf, "interrupt") == "teardown"
    assert CHART.transition("teardown", "fail") == "failed"
    assert CHART.transition("teardown", "interrupt") == "interrupted"


def test_illegal_trigger_names_state_and_trigger() -> None:
    """A trigger fired where the chart does not allow it names the state, the trigger and what is allowed."""
    with pytest.raises(IllegalTransition) as info:
        CHART.transition("idle", "fetched")
    assert info.value.state == "idle" and info.value.trigger == "fetched"
    assert "'fetched' is not allowed in state 'idle'" in str(info.value) and "setup" in str(info.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("initial: a\nstates:\n  a: {on: {go: nowhere}}\n", "goes to 'nowhere', which does not exist"),
        ("initial: a\nstates:\n  a: {final: true}\n  b: {final: true}\n", "state 'b' is unreachable from 'a'"),
        (
            "initial: a\nstates:\n  a: {on: {go: b}}\n  b: {}\n",
            "state 'b' has no 'always' transition and waits for no event",
        ),
        ("initial: a\nstates:\n  a: {on: {go: b}}\n  b: {on: {go: a}}\n", "the chart has no final state"),
        (
            "initial: a\nstates:\n  a: {on: {go: b, end: z}}\n  b: {on: {go: b}}\n  z: {final: true}\n",
            "state 'b' cannot reach a final state",
        ),
        (
            "initial: a\nstates:\n  a: {always: [{trigger: go, target: z, guard: g.x}]}\n  z: {final: true}\n",
            "the last one is the default and takes no guard",
        ),
        (
            "initial: a\nstates:\n  a: {always: [{trigger: go, target: z}, {trigger: no, target: z}]}\n"
            "  z: {final: true}\n",
            "'go' has no guard but is not the last one",
        ),
        (
            "initial: a\nstates:\n  a: {entry: [x.y], always: [{trigger: go, target: z}]}\n  z: {final: true}\n",
            "state 'a' runs actions but has no 'fail' or 'interrupt' transition",
        ),
        ("initial: a\nstates:\n  a: {always: [{trigger: go}]}\n", "must be a mapping with 'trigger' and 'target'"),
        ("initial: a\nstates:\n  a:\n    states: {x: {}}\n", "compound state 'a' has no 'initial'"),
        (
            "initial: a\nstates:\n  a: {initial: y, states: {x: {}}}\n",
            "has initial 'y', which is not one of its states",
        ),
        ("initial: zz\nstates:\n  a: {}\n", "the initial state 'zz' does not exist"),
        ("initial: a\nstates:\n  a: {onn: {}}\n", "state 'a' has unknown keys ['onn']"),
        ("initial: a\nstates: {}\n", "has no states"),
        ("[1, 2", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
    ],
)
def test_invalid_charts_are_rejected_naming_each_problem(tmp_path: Path, text: str, problem: str) -> None:
    """Loading a broken chart raises ChartError naming the problem and the file."""
    with pytest.raises(ChartError, match="chart.yaml") as info:
        load_chart(write(tmp_path, text))
    assert problem in str(info.value)


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    """Several broken targets are listed together, not one per attempt."""
    text = "initial: a\nstates:\n  a: {on: {x: nope1, y: nope2}}\n  z: {final: true}\n"
    with pytest.raises(ChartError) as info:
        load_chart(write(tmp_path, text))
    assert len(info.value.problems) == 2, info.value.problems


def test_targets_resolve_relative_to_the_declaring_state(tmp_path: Path) -> None:
    """Plain names are siblings, ^ climbs a level, dotted names are absolute, compounds enter their initial."""
    text = """
        initial: a
        states:
          a:
            initial: x
            states:
              x: {on: {up: ^b, abs: a.y, side: y, hash: "#a.y"}}
              y: {final: true}
          b:
            initial: z
            states: {z: {on: {back: ^a}}}
    """
    chart = load_chart(write(tmp_path, text))
    assert chart.transition("a.x", "up") == "b.z"
    assert chart.transition("a.x", "abs") == "a.y"
    assert chart.transition("a.x", "hash") == "a.y"
    assert chart.transition("a.x", "side") == "a.y"
    assert chart.transition("b.z", "back") == "a.x"


def test_nearest_declaration_wins(tmp_path: Path) -> None:
    """A trigger declared on a leaf overrides the same trigger declared on its parent."""
    text = """
        initial: p
        states:
          p:
            initial: c
            on: {go: q}
            states:
              c: {on: {go: d}}
              d: {}
          q: {final: true}
    """
    chart = load_chart(write(tmp_path, text))
    assert chart.transition("p.c", "go") == "p.d"
    assert chart.transition("p.d", "go") == "q"


def test_yaml_on_is_a_key_not_a_boolean(tmp_path: Path) -> None:
    """`on:` is read as the key 'on' (YAML 1.1 would make it True)."""
    chart = load_chart(write(tmp_path, "initial: a\nstates:\n  a: {on: {go: b}}\n  b: {final: true}\n"))
    assert chart.transition("a", "go") == "b"


class _Model:
    pass


def _machine(model: object, holds: dict[str, bool]) -> Any:
    """The chart as a `transitions` hierarchical machine: `always` transitions are triggers with conditions."""
    from transitions.extensions.nesting import HierarchicalMachine, NestedState

    class _State(NestedState):
        separator = "."

    class _Machine(HierarchicalMachine):  # type: ignore[misc]
        state_cls = _State

    def build(parent: str | None) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for path, spec in CHART.states.items():
            if spec.parent != parent:
                continue
            node: dict[str, object] = {"name": path.rsplit(".", 1)[-1], "final": spec.final}
            if spec.children:
                node["children"] = build(path)
                node["initial"] = str(spec.initial).rsplit(".", 1)[-1]
            out.append(node)
        return out

    m = _Machine(model=None, states=build(None), initial=CHART.initial, auto_transitions=False)
    for spec in CHART.states.values():
        for t in spec.declared():
            conditions = [lambda g=t.guard: holds[g]] if t.guard else []
            m.add_transition(t.trigger, spec.path, t.target, conditions=conditions)
    m.add_model(model, initial=CHART.initial)
    return m


def test_every_compiled_transition_exists_in_transitions_machine() -> None:
    """For every state, the triggers `transitions` allows are exactly the compiled table's row."""
    machine = _machine(_Model(), dict.fromkeys(CHART.guards(), True))
    for leaf, row in CHART.table.items():
        assert set(machine.get_triggers(leaf)) == set(row), leaf
