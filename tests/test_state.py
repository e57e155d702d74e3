"""The trainer state: frozen, plain-data round trip; updates merge and reduce."""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock import (
    ConflictingUpdates,
    LogMetrics,
    Progress,
    RestoreState,
    SaveCheckpoint,
    SetLearningRate,
    SetListenerState,
    Stop,
    TrainerState,
)
from interlock.core.updates import BeginStage, as_updates, merge, reduce

names = st.text(st.characters(codec="utf-8", categories=["L", "N"]), min_size=1, max_size=8)
floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | floats | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
counter = st.integers(0, 10**9)
states = st.builds(
    TrainerState,
    chart=st.sampled_from(["idle", "fit.train.batch.end", "fit.train.val.batch.end", "finished"]),
    stage=st.sampled_from(["", "fit", "validate", "test", "predict"]),
    status=st.sampled_from(["idle", "running", "finished", "interrupted", "failed"]),
    progress=st.builds(Progress, counter, counter, counter, counter, counter),
    counts=st.dictionaries(names, counter, max_size=4),
    should_stop=st.booleans(),
    stop_reason=st.text(max_size=10),
    metrics=st.dictionaries(names, floats, max_size=4),
    best_metrics=st.dictionaries(names, floats, max_size=4),
    history=st.lists(st.dictionaries(names, floats | st.integers(0, 99), max_size=3), max_size=3),
    eval_sums=st.dictionaries(names, floats, max_size=3),
    data=st.dictionaries(names, plain, max_size=3),
    listeners=st.dictionaries(names, st.dictionaries(names, plain, max_size=3), max_size=3),
    seed=st.none() | st.integers(0, 2**32 - 1),
    run_dir=st.text(max_size=12),
    global_rank=st.integers(0, 64),
    world_size=st.integers(1, 64),
    agreed=st.dictionaries(st.sampled_from(["stop", "preempted"]), st.booleans()),
    limits=st.dictionaries(names, st.none() | counter, max_size=3),
    manual_optimization=st.booleans(),
    eval_exhausted=st.booleans(),
    metric_modes=st.dictionaries(names, st.sampled_from(["min", "max"]), max_size=3),
    error=st.text(max_size=10),
    failed_in=st.text(max_size=10),
    loader_results=st.lists(st.dictionaries(names, floats, max_size=3), max_size=3),
    prog_bar=st.dictionaries(names, st.booleans(), max_size=3),
    to_loggers=st.dictionaries(names, st.booleans(), max_size=3),
    to_callbacks=st.dictionaries(names, st.booleans(), max_size=3),
)


@settings(max_examples=120, deadline=None)
@given(states)
def test_state_round_trips_through_plain_data(state: TrainerState) -> None:
    """to_dict/from_dict is the identity, and to_dict holds only plain data."""
    data = state.to_dict()

    def is_plain(x: Any) -> bool:
        if isinstance(x, dict):
            return all(isinstance(k, str) and is_plain(v) for k, v in x.items())
        if isinstance(x, list):
            return all(is_plain(v) for v in x)
        return x is None or isinstance(x, bool | int | float | str | torch.Tensor)

    assert is_plain(data)
    assert TrainerState.from_dict(data) == state


def test_tensors_survive_the_round_trip() -> None:
    """Tensors inside listener states are kept as tensors."""
    state = TrainerState(listeners={"x": {"t": torch.arange(3)}})
    back = TrainerState.from_dict(state.to_dict())
    assert torch.equal(back.listeners["x"]["t"], torch.arange(3))


def test_state_cannot_be_mutated() -> None:
    """Assigning a field, a metric, a listener value or a history row fails."""
    state = TrainerState(metrics={"a": 1.0}, listeners={"L": {"k": [1, 2]}}, history=[{"a": 1.0}])
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        state.should_stop = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        state.metrics["a"] = 2.0  # type: ignore[index]
    with pytest.raises(TypeError):
        state.listeners["L"]["k"] = 3  # type: ignore[index]
    with pytest.raises(AttributeError):
        state.listeners["L"]["k"].append(3)  # tuples have no append
    with pytest.raises(TypeError):
        state.history[0]["a"] = 0.0  # type: ignore[index]


def test_from_dict_rejects_unknown_keys_and_newer_versions() -> None:
    """Unknown keys and a newer state version are clear errors."""
    with pytest.raises(ValueError, match=r"unknown trainer state keys \['bogus'\]"):
        TrainerState.from_dict({**TrainerState().to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="newer"):
        TrainerState.from_dict({**TrainerState().to_dict(), "version": 99})


@pytest.mark.parametrize(("field", "value"), [("stage", "fit!"), ("status", "done")])
def test_invalid_values_are_rejected_by_validators(field: str, value: Any) -> None:
    """evolve re-runs validators: a bad stage or status raises naming the field and value."""
    with pytest.raises(ValueError, match=f"{field}={value!r}"):
        attrs.evolve(TrainerState(), **{field: value})


def test_negative_counters_are_rejected() -> None:
    """A counter below zero raises naming the counter."""
    with pytest.raises(ValueError, match="Progress.epoch must be an int >= 0, got -1"):
        Progress(epoch=-1)


def test_merge_rejects_conflicting_metric_values_naming_both_sources() -> None:
    """Two handlers setting one metric differently is a ConflictingUpdates naming both."""
    with pytest.raises(ConflictingUpdates, match=r"metric 'loss': a set 1.0, b set 2.0"):
        merge([("a", LogMetrics({"loss": 1.0})), ("b", LogMetrics({"loss": 2.0}))])


def test_merge_rejects_conflicting_learning_rates_and_double_restores() -> None:
    """Two different learning rates for one optimizer, or two restores, cannot both apply."""
    with pytest.raises(ConflictingUpdates, match="learning rate"):
        merge([("a", SetLearningRate(0.1)), ("b", SetLearningRate(0.2))])
    with pytest.raises(ConflictingUpdates, match="two restores"):
        merge([("a", RestoreState(TrainerState())), ("b", RestoreState(TrainerState()))])


def test_merge_accepts_agreeing_updates_and_keeps_first_stop_reason() -> None:
    """Equal values agree; stops combine with the first reason; effects keep their order."""
    merged = merge(
        [
            ("a", Stop("first")),
            ("b", Stop("second")),
            ("a", LogMetrics({"m": 1.0})),
            ("b", LogMetrics({"m": 1.0})),
            ("c", SaveCheckpoint("x.ckpt")),
            ("d", SetLearningRate(0.1)),
        ]
    )
    assert merged.stop == "first" and merged.metrics == {"m": 1.0}
    assert merged.effects == (SaveCheckpoint("x.ckpt"), SetLearningRate(0.1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.dictionaries(names, floats, max_size=3)), max_size=6))
def test_reduce_is_pure_and_merges_metrics(items: list[tuple[str, dict[str, float]]]) -> None:
    """reduce never changes its input and yields the union of non-conflicting metrics."""
    before = TrainerState(metrics={"old": 1.0})
    updates = [(src, LogMetrics(m)) for src, m in items]
    try:
        merged = merge(updates)
    except ConflictingUpdates:
        return
    after = reduce(before, merged)
    assert before.metrics == {"old": 1.0}
    expected = {"old": 1.0}
    for _, m in items:
        expected.update(m)
    assert dict(after.metrics) == expected


def test_restore_replaces_the_state_then_applies_the_rest() -> None:
    """RestoreState returns the saved state; other updates of the event apply on top of it."""
    saved = TrainerState(progress=Progress(epoch=3), metrics={"a": 1.0})
    after = reduce(TrainerState(), merge([("ckpt", RestoreState(saved)), ("l", SetListenerState("L", {"n": 1}))]))
    assert after.progress.epoch == 3 and after.metrics == {"a": 1.0} and after.listeners["L"] == {"n": 1}


def test_as_updates_names_the_handler_on_bad_returns() -> None:
    """Returning a dict or a list with a non-update is a TypeError naming the handler."""
    assert as_updates(None, "h") == [] and as_updates(Stop(), "h") == [Stop()]
    with pytest.raises(TypeError, match="handler h returned"):
        as_updates([Stop(), 3], "h")
    with pytest.raises(TypeError, match="handler h returned"):
        as_updates({"stop": True}, "h")


def test_a_version_1_state_loads_with_the_new_facts_at_their_defaults() -> None:
    """A checkpoint's state from before version 2 (no agreed/limits/... keys) still loads, with defaults."""
    new = TrainerState(stage="fit", status="running", progress=Progress(epoch=3, global_step=7))
    old = {k: v for k, v in new.to_dict().items() if k not in _V2_FIELDS}
    old["version"] = 1
    loaded = TrainerState.from_dict(old)
    assert loaded == new
    assert loaded.agreed == {} and loaded.limits == {} and loaded.loader_results == ()


_V2_FIELDS = (
    "agreed",
    "limits",
    "manual_optimization",
    "eval_exhausted",
    "metric_modes",
    "error",
    "failed_in",
    "loader_results",
)


@pytest.mark.parametrize(
    ("field", "value", "phrase"),
    [
        ("agreed", {"stop": 1}, "must be a bool"),
        ("limits", {"train": -1}, "int >= 0 or None"),
        ("metric_modes", {"acc": "up"}, "'min' or 'max'"),
        ("loader_results", [{"acc": "x"}], "mappings of numbers"),
        ("error", 3, "must be a str"),
    ],
)
def test_wrong_kinds_of_new_facts_are_refused_naming_the_field(field: str, value: Any, phrase: str) -> None:
    """A checkpoint whose new fact fields hold the wrong kind of value fails at load, naming the field."""
    data = TrainerState().to_dict()
    data[field] = value
    with pytest.raises(ValueError, match=f"{field}.*{re.escape(phrase)}"):
        TrainerState.from_dict(data)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["val_loss", "acc", "score"]), floats), max_size=20),
    st.sampled_from(["min", "max"]),
)
def test_the_reducer_keeps_each_metrics_best_value_by_its_mode(rows: list[tuple[str, float]], mode: str) -> None:
    """`best_metrics` comes from the reducer: min or max of each metric, by `state.metric_modes`, else by its name."""
    state = TrainerState(metric_modes={"score": mode})
    for name, value in rows:
        state = reduce(state, merge([("test", LogMetrics({name: value}))]))
    for name in {n for n, _ in rows}:
        values = [v for n, v in rows if n == name]
        wanted = mode if name == "score" else ("min" if name == "val_loss" else "max")
        assert state.best_metrics[name] == (min if wanted == "min" else max)(values)


def test_a_modules_metric_modes_reach_the_state_at_the_stage_start() -> None:
    """The module's `metric_modes` are data in the state (`BeginStage`), where the reducer reads them."""
    state = reduce(TrainerState(), merge([("runtime", BeginStage("fit", {"acc": "min"}))]))
    state = reduce(state, merge([("a", LogMetrics({"acc": 0.5}))]))
    state = reduce(state, merge([("a", LogMetrics({"acc": 0.9}))]))
    assert state.metric_modes == {"acc": "min"} and state.best_metrics == {"acc": 0.5}


def test_a_stage_is_any_identifier_the_chart_names_and_a_bad_one_errors_clearly() -> None:
    """The state takes a chart's own stage name; a malformed one, or one the chart lacks, errors naming the fix."""
    from interlock.core.chart import load_chart
    from interlock.core.run import stage_def

    assert TrainerState(stage="distill").stage == "distill"
    with pytest.raises(ValueError, match=r"stage='not a stage'.*identifier"):
        TrainerState(stage="not a stage")
    with pytest.raises(ValueError, match=r"no state 'distill'.*its stages: \['fit', 'validate', 'test', 'predict'\]"):
        stage_def(load_chart(), "distill")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.dictionaries(names, plain, max_size=4), max_size=6), st.dictionaries(names, plain, max_size=3))
def test_history_rows_read_back_as_appended_and_branches_keep_their_own(
    rows: list[dict[str, Any]], other: dict[str, Any]
) -> None:
    """Appended rows read back equal, in key order and frozen, by index, slice and iteration; a branch sees its own."""
    from interlock.core.state import History, freeze, thaw

    history = History()
    for row in rows:
        history = history.append(row)
    assert len(history) == len(rows)
    assert [thaw(r) for r in history] == rows and [list(r) for r in history] == [list(r) for r in rows]
    assert list(history) == [freeze(r) for r in rows] and history == [freeze(r) for r in rows]
    if rows:
        assert thaw(history[-1]) == rows[-1] and [thaw(r) for r in history[1:]] == rows[1:]
        with pytest.raises(TypeError):
            history[0]["x"] = 1  # type: ignore[index]
    shorter = History(rows[:-1]) if rows else History()
    branch, longer = shorter.append(other), shorter.append(rows[-1] if rows else {})
    assert thaw(branch[len(branch) - 1]) == other and len(branch) == len(longer) == len(shorter) + 1
    assert [thaw(r) for r in longer[: len(shorter)]] == rows[: len(shorter)]


def test_an_evaluation_step_value_is_no_callback_metric_until_logged_again() -> None:
    """to_callbacks hides an evaluation's step value from callback_metrics (Lightning's); a later LogMetrics of the
    name without the flag makes it one again, a new stage forgets the flags, and a version-3 state loads without."""
    from interlock.core.state import callback_metrics

    def apply(state: TrainerState, *updates: Any) -> TrainerState:
        return reduce(state, merge([("t", u) for u in updates]))

    state = apply(TrainerState(), LogMetrics({"train_x": 1.0, "val_x": 2.0}))
    state = apply(
        state, LogMetrics({"val_x": 3.0, "val_x_step": 3.0}, to_callbacks={"val_x": False, "val_x_step": False})
    )
    assert state.metrics["val_x"] == 3.0 and callback_metrics(state) == {"train_x": 1.0}
    state = apply(state, LogMetrics({"val_x": 2.5}))  # the epoch value, logged at the loop's end
    assert callback_metrics(state) == {"train_x": 1.0, "val_x": 2.5} and state.to_callbacks == {"val_x_step": False}
    assert TrainerState.from_dict(state.to_dict()) == state
    assert apply(state, BeginStage("validate")).to_callbacks == {}
    old = {k: v for k, v in state.to_dict().items() if k != "to_callbacks"}
    assert TrainerState.from_dict({**old, "version": 3}).to_callbacks == {}
