"""The one decision function, `step(leaf, facts)`: against `transitions`, with real guards, and agreement order."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.core.chart import ActionRef, Chart, load_chart
from interlock.core.config import TrainerConfig
from interlock.core.errors import ChartError
from interlock.core.progress import Counters, FrozenCounters
from interlock.core.registry import Registry
from interlock.core.state import Progress, TrainerState
from interlock.core.step import Count, Facts, check_agreement, compile_nodes, step
from interlock.loops import default_registry

CHART = load_chart()
REGISTRY = default_registry()
FACTS = Facts(TrainerState(), FrozenCounters(), TrainerConfig())


def _machine(model: object, holds: dict[str, bool], log: list[tuple[str, str]]) -> Any:
    """The chart as a `transitions` hierarchical machine, logging each state it exits and enters."""
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
            node: dict[str, object] = {
                "name": path.rsplit(".", 1)[-1],
                "final": spec.final,
                "on_enter": [lambda p=path: log.append(("enter", p))],
                "on_exit": [lambda p=path: log.append(("exit", p))],
            }
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


class _Model:
    pass


def _refs(chart: Chart, states: list[str], kind: str) -> list[ActionRef]:
    return [ActionRef(a, s) for s in states for a in getattr(chart.states[s], kind)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=10_000), st.booleans()), min_size=1, max_size=60))
def test_step_agrees_with_the_transitions_machine(choices: list[tuple[int, bool]]) -> None:
    """A random walk (random guard outcomes and events): `step` takes the edge `transitions` takes, same work.

    The edge's exit actions are those of the states `transitions` exits (innermost first), its entries
    those of the compound states it enters (outermost first), its count the chart's `count:`.
    """
    holds: dict[str, bool] = dict.fromkeys(CHART.guards(), False)
    nodes = compile_nodes(
        CHART,
        guard=lambda name, where: lambda facts: holds[name],
        action=lambda ref: ref,
        count=Count,
    )
    log: list[tuple[str, str]] = []
    model = _Model()
    _machine(model, holds, log)
    at = CHART.initial
    for choice, outcome in choices:
        node = nodes[at]
        guards = sorted({e.guard_name for e in node.always if e.guard_name})
        for i, g in enumerate(guards):
            holds[g] = bool((choice >> i) & 1) ^ outcome
        if node.always:
            decided = step(node, FACTS)
            assert decided is not None
            edge, work = decided
        elif node.on:
            edge = node.on[sorted(node.on)[choice % len(node.on)]]
            work = edge.actions
        else:
            assert step(node, FACTS) is None  # a final state waits
            break
        log.clear()
        assert model.trigger(edge.trigger)  # type: ignore[attr-defined]
        assert model.state == edge.dest.path  # type: ignore[attr-defined]
        exited = [p for kind, p in log if kind == "exit"]
        entered = [p for kind, p in log if kind == "enter" and p != edge.dest.path]
        exits = [w for w in work if isinstance(w, ActionRef) and w.name in CHART.states[w.where].exit]
        entries = [w for w in work if isinstance(w, ActionRef) and w in edge.transition.enters]
        assert exits == _refs(CHART, exited, "exit")
        assert entries == _refs(CHART, entered, "entry")
        assert [w.names for w in work if isinstance(w, Count)] == (
            [edge.transition.count] if edge.transition.count else []
        )
        at = edge.dest.path


def _guards(leaf: str) -> list[Any]:
    """The real guards of ``leaf``'s transitions, bound with its parameters."""
    params = CHART.states[leaf].params
    return [REGISTRY.guards[t.guard].bind(params) if t.guard else None for t in CHART.leaf_specs[leaf].always]


limit = st.none() | st.integers(0, 6)
facts_strategy = st.builds(
    Facts,
    state=st.builds(
        TrainerState,
        stage=st.sampled_from(["fit", "validate", "test", "predict"]),
        status=st.sampled_from(["running", "failed", "interrupted"]),
        should_stop=st.booleans(),
        agreed=st.fixed_dictionaries({}, optional={"stop": st.booleans(), "preempted": st.booleans()}),
        limits=st.fixed_dictionaries(
            {}, optional={"train": limit, "val": limit, "val#1": limit, "test": limit, "predict": limit}
        ),
        manual_optimization=st.booleans(),
        eval_exhausted=st.booleans(),
        data=st.fixed_dictionaries({}, optional={"exhausted": st.booleans()}),
    ),
    progress=st.builds(FrozenCounters, *[st.integers(0, 9)] * 6),
    config=st.sampled_from([1.0, 0.5, 2, 3]).flatmap(
        lambda interval: st.builds(
            TrainerConfig,
            max_epochs=st.none() | st.integers(0, 4),
            max_steps=st.sampled_from([-1, 0, 3, 8]),
            val_check_interval=st.just(interval),
            check_val_every_n_epoch=st.integers(1, 3) | (st.none() if isinstance(interval, int) else st.just(1)),
            num_sanity_val_steps=st.sampled_from([-1, 0, 2]),
            accumulate_grad_batches=st.integers(1, 3),
            min_epochs=st.none() | st.integers(0, 3),
            limit_val_batches=st.sampled_from([None, 0, 2]),
        )
    ),
)


@settings(max_examples=200, deadline=None)
@given(leaf=st.sampled_from([leaf for leaf, spec in CHART.leaf_specs.items() if spec.always]), facts=facts_strategy)
def test_the_real_guards_decide_as_transitions_does_and_are_pure(leaf: str, facts: Facts) -> None:
    """Random facts at a random leaf: `step` with the real guards takes the edge `transitions` takes.

    Each guard is a pure function of the facts: asked twice it answers the same, and the facts are unchanged.
    """
    guards = _guards(leaf)
    before = facts.state.to_dict()
    outcomes = {t.guard: bool(g(facts)) for t, g in zip(CHART.leaf_specs[leaf].always, guards, strict=True) if g}
    assert outcomes == {
        t.guard: bool(g(facts)) for t, g in zip(CHART.leaf_specs[leaf].always, guards, strict=True) if g
    }
    assert facts.state.to_dict() == before
    nodes = compile_nodes(
        CHART,
        guard=lambda name, where: REGISTRY.guards[name].bind(CHART.states[where].params),
        action=lambda ref: ref,
        count=Count,
    )
    decided = step(nodes[leaf], facts)
    assert decided is not None
    model = _Model()
    machine = _machine(model, dict.fromkeys(CHART.guards(), False) | outcomes, [])
    machine.set_state(leaf, model=model)
    fired = next(t.trigger for t in CHART.leaf_specs[leaf].always if model.may_trigger(t.trigger))  # type: ignore[attr-defined]
    assert model.trigger(fired)  # type: ignore[attr-defined]
    assert (decided[0].trigger, decided[0].dest.path) == (fired, model.state)  # type: ignore[attr-defined]


def test_every_builtin_guard_binder_takes_only_the_states_parameters() -> None:
    """Guards cannot reach the run: each binder takes the `with:` parameters, its guard the facts."""
    for name, entry in REGISTRY.guards.items():
        parameters = inspect.signature(entry.bind).parameters.values()
        assert [p.name for p in parameters if p.default is inspect.Parameter.empty] == ["params"], name
        params = next((CHART.states[s].params for s in CHART.states if CHART.states[s].params), {})
        bound = entry.bind({"data": "val", "step": "validation_step", **params})
        assert len(inspect.signature(bound).parameters) == 1, name


def _copy(tmp_path: Path, old: str, new: str) -> Path:
    text = (Path(__file__).parents[1] / "statecharts" / "trainer.yaml").read_text()
    assert old in text
    out = tmp_path / "chart.yaml"
    out.write_text(text.replace(old, new, 1))
    return out


EPOCH_END_AGREES = "entry: [signals.agree_preempted, dist.agree_stop]"


def test_a_copy_that_reads_an_agreed_fact_before_agreeing_is_refused_at_trainer(tmp_path: Path) -> None:
    """A chart copy without `dist.agree_stop` at the epoch end fails at `Trainer()`, naming state, guard and fix."""
    from interlock import Trainer

    chart = _copy(tmp_path, EPOCH_END_AGREES, "entry: [signals.agree_preempted]")
    with pytest.raises(ChartError) as info:
        Trainer(chart=chart, enable_progress_bar=False)
    text = str(info.value)
    assert "state 'fit.train.epoch_end'" in text and "guard 'limits.fit_done'" in text
    assert "reads the agreed fact 'stop'" in text and "add 'dist.agree_stop'" in text


def test_an_agreement_moved_onto_a_transition_is_refused(tmp_path: Path) -> None:
    """Agreeing on the way in (a transition's `do`) is not before the guards on resume: it is refused too."""
    chart_path = _copy(tmp_path, EPOCH_END_AGREES, "entry: [dist.agree_stop]")
    with pytest.raises(
        ChartError, match=r"fit.train.epoch_end.*signals.preempted.*'preempted'.*signals.agree_preempted"
    ):
        check_agreement(
            load_chart(chart_path),
            {n: e.agreed for n, e in REGISTRY.guards.items()},
            {n: e.agrees for n, e in REGISTRY.actions.items()},
        )


def test_reordering_guards_keeps_the_agreements_and_passes(tmp_path: Path) -> None:
    """Guards in another order change no collective: the agreements are entry actions, and the copy is valid."""
    text = (
        '      - {trigger: preempt, guard: signals.preempted, target: "#teardown", do: [checkpoint.save_preempted]}\n'
    )
    path = (Path(__file__).parents[1] / "statecharts" / "trainer.yaml").read_text()
    block = path.split("          epoch_end:\n", 1)[1].split("      end:\n", 1)[0]
    lines = block.splitlines(keepends=True)
    preempt = next(line for line in lines if "trigger: preempt" in line)
    done = next(line for line in lines if "trigger: done" in line)
    assert text.strip() == preempt.strip()
    swapped = block.replace(preempt, "@@").replace(done, preempt).replace("@@", done)
    out = tmp_path / "chart.yaml"
    out.write_text(path.replace(block, swapped, 1))
    chart = load_chart(out)
    assert [t.trigger for t in chart.leaf_specs["fit.train.epoch_end"].always][:2] == ["done", "preempt"]
    check_agreement(
        chart, {n: e.agreed for n, e in REGISTRY.guards.items()}, {n: e.agrees for n, e in REGISTRY.actions.items()}
    )


def test_a_user_guard_that_reads_an_agreed_fact_needs_its_agreement(tmp_path: Path) -> None:
    """`add_guard(..., agreed=...)`: a user guard reading `stop` is refused where the state does not agree it."""
    chart = load_chart(
        _copy(
            tmp_path,
            "entry: [data.reload, data.start_epoch, module.on_train_epoch_start]\n            always:\n",
            "entry: [data.reload, data.start_epoch, module.on_train_epoch_start]\n            always:\n"
            "              - {trigger: early, guard: my.stop_early, target: epoch_end}\n",
        )
    )
    reg: Registry = REGISTRY.copy()
    reg.add_guard("my.stop_early", lambda facts: bool(facts.state.agreed.get("stop")), agreed=("stop",))
    with pytest.raises(ChartError, match=r"'fit.train.epoch_start'.*'my.stop_early'.*'dist.agree_stop'"):
        check_agreement(
            chart, {n: e.agreed for n, e in reg.guards.items()}, {n: e.agrees for n, e in reg.actions.items()}
        )


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(0, 10**12), min_size=6, max_size=6))
def test_the_facts_counters_are_the_progress_the_state_reports(values: list[int]) -> None:
    """The counters a guard reads (`Counters.view`) have `Progress`'s fields and the values the state freezes."""
    counters = Counters.from_progress(Progress(*values))
    view, frozen = counters.view(), counters.freeze()
    assert view._fields == tuple(f.name for f in attrs.fields(Progress))
    assert tuple(getattr(frozen, name) for name in view._fields) == tuple(view) == tuple(values)
    counters.global_step += 1  # a later counter operation does not reach facts already built
    assert view.global_step == values[1]
    with pytest.raises(AttributeError):
        view.epoch = 5  # type: ignore[misc]
