"""The statechart: loading, validation, the compiled table against `transitions`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock import ChartError, IllegalTransition, load_chart
from interlock.loops import TRIGGERS

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


def test_loops_fire_exactly_the_declared_triggers() -> None:
    """Every trigger the chart declares is fired by some loop, and no loop fires an undeclared one."""
    CHART.check_triggers(TRIGGERS)
    with pytest.raises(ChartError, match="'nope' is fired by a loop but not declared"):
        CHART.check_triggers(TRIGGERS | {"nope"})
    with pytest.raises(ChartError, match="'resume' is declared but no loop fires it"):
        CHART.check_triggers(TRIGGERS - {"resume"})


def test_gradient_accumulation_is_visible_in_the_chart() -> None:
    """From backward the chart either steps the optimizer or accumulates straight to batch end."""
    row = CHART.table["fit.train.batch.backward"]
    assert row["optimizer_step"] == "fit.train.batch.optimizer_step"
    assert row["accumulate"] == "fit.train.batch.end"


def test_fail_and_interrupt_are_allowed_from_every_running_state() -> None:
    """Every leaf inside a stage can fail or be interrupted into teardown."""
    for leaf in CHART.leaves:
        if leaf.split(".")[0] in {"setup", "fit", "validate", "test", "predict"}:
            assert CHART.transition(leaf, "fail") == "teardown"
            assert CHART.transition(leaf, "interrupt") == "teardown"


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
        ("initial: a\nstates:\n  a: {}\n  b: {}\n", "state 'b' is unreachable from 'a'"),
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
    text = "initial: a\nstates:\n  a: {on: {x: nope1, y: nope2}}\n"
    with pytest.raises(ChartError) as info:
        load_chart(write(tmp_path, text))
    assert len(info.value.problems) == 2


def test_targets_resolve_relative_to_the_declaring_state(tmp_path: Path) -> None:
    """Plain names are siblings, ^ climbs a level, dotted names are absolute, compounds enter their initial."""
    text = """
        initial: a
        states:
          a:
            initial: x
            states:
              x: {on: {up: ^b, abs: a.y, side: y}}
              y: {}
          b:
            initial: z
            states: {z: {on: {back: ^a}}}
    """
    chart = load_chart(write(tmp_path, text))
    assert chart.transition("a.x", "up") == "b.z"
    assert chart.transition("a.x", "abs") == "a.y"
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
          q: {}
    """
    chart = load_chart(write(tmp_path, text))
    assert chart.transition("p.c", "go") == "p.d"
    assert chart.transition("p.d", "go") == "q"


def test_yaml_on_is_a_key_not_a_boolean(tmp_path: Path) -> None:
    """`on:` is read as the key 'on' (YAML 1.1 would make it True)."""
    chart = load_chart(write(tmp_path, "initial: a\nstates:\n  a: {on: {go: b}}\n  b: {}\n"))
    assert chart.transition("a", "go") == "b"


class _Model:
    pass


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=60))
def test_compiled_table_agrees_with_transitions_machine(choices: list[int]) -> None:
    """A random walk through the chart lands in the same state in the compiled table and in `transitions`."""
    model = _Model()
    CHART.machine(model)
    at = CHART.initial
    for choice in choices:
        row = CHART.table[at]
        if not row:
            break
        trigger = sorted(row)[choice % len(row)]
        at = CHART.transition(at, trigger)
        model.trigger(trigger)  # type: ignore[attr-defined]
        assert model.state == at  # type: ignore[attr-defined]


def test_every_compiled_transition_exists_in_transitions_machine() -> None:
    """For every state, the triggers `transitions` allows are exactly the compiled table's row."""
    machine = CHART.machine()
    for leaf, row in CHART.table.items():
        assert set(machine.get_triggers(leaf)) == set(row), leaf
