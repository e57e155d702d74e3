"""The compiled walk (a hot leaf's step as one generated function) does what the generic step does, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interlock
import interlock.trainer.compiled as compiled
import interlock.trainer.runtime as runtime
from conftest import TinyModule, loader, only
from interlock.core.updates import Stop
from interlock.listeners import ModelCheckpoint


class Recorder(TinyModule):
    """Records every hook it is called with (and the counters then); fails in training_step at ``fail_at``."""

    def __init__(self, calls: list[tuple[Any, ...]], fail_at: int | None = None) -> None:
        super().__init__()
        self.calls, self.fail_at = calls, fail_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.calls.append(("training_step", batch_idx))
        if self.fail_at is not None and self.calls.count(("epoch_end",)) * 100 + batch_idx == self.fail_at:
            raise ValueError(f"failing at batch {batch_idx}")
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss)
        return loss

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.calls.append(("on_train_batch_start", batch_idx))

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.calls.append(("on_before_optimizer_step",))

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.calls.append(("on_train_batch_end", batch_idx))

    def on_train_epoch_end(self) -> None:
        self.calls.append(("epoch_end",))

    def on_validation_epoch_end(self) -> None:
        self.calls.append(("on_validation_epoch_end",))


class Rows:
    """A recorder keeping every row, asked to flush at every 5th."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.due, self.limit = float("inf"), 5
        self.asked: list[str] = []

    def flush_due(self, name: str) -> None:
        self.asked.append(name)
        self.limit += 5


def _fit(tmp: Path, hot: int, config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One fit with leaves compiled at their ``hot``-th arrival (0: never): what it did, in order, and its end."""
    monkeypatch.setattr(runtime, "HOT", hot)
    made: list[str] = []
    original = compiled.compile_arrival

    def spy(rt: Any, node: Any) -> Any:
        made.append(node.path)
        return original(rt, node)

    monkeypatch.setattr(runtime, "compile_arrival", spy)
    calls: list[tuple[Any, ...]] = []
    torch.manual_seed(0)
    module = Recorder(calls, config.get("fail_at"))
    seen: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = []
    trainer = interlock.Trainer(
        max_epochs=config["epochs"],
        max_steps=config["max_steps"],
        limit_train_batches=config["limit"],
        accumulate_grad_batches=config["accumulate"],
        val_check_interval=config["val_every"],
        check_val_every_n_epoch=config["val_epochs"],
        num_sanity_val_steps=1,
        default_root_dir=tmp,
        **(only(ModelCheckpoint(every_n_train_steps=2, save_top_k=-1)) if config["checkpoint"] else only()),
    )
    trainer.observe(lambda *values: seen.append(values))
    recorded = Rows()
    trainer.bus.record(recorded)
    if config["listen"]:  # a handler on every event: the compiled arrivals send their events too
        trainer.on("*", lambda event, state: events.append((event.name, event.trigger, event.guard, event.count)))
    if config["stop_at"] is not None:
        at = config["stop_at"]
        trainer.on("fit.train.batch.end", lambda event, state: Stop() if event.global_step == at else None)
    error = None
    try:
        trainer.fit(module, loader(config["samples"]), loader(32))
    except ValueError as exc:
        error = (str(exc), getattr(exc, "__notes__", []))
    return {
        "calls": calls,
        "seen": seen,
        "events": events,
        "error": error,
        "weights": [p.detach().clone() for p in module.parameters()],
        "state": trainer.state.progress,
        "metrics": dict(trainer.state.metrics),
        "compiled": made,
        "files": sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*.ckpt")),
        "recorded": [row[1:] for row in recorded.rows],
        "flushes": recorded.asked,
    }


configs = st.fixed_dictionaries(
    {
        "epochs": st.integers(1, 3),
        "max_steps": st.sampled_from([-1, 3, 5]),
        "limit": st.sampled_from([None, 2, 3]),
        "accumulate": st.integers(1, 3),
        "val_every": st.sampled_from([1.0, 2]),
        "val_epochs": st.integers(1, 2),
        "samples": st.sampled_from([40, 64, 90]),
        "stop_at": st.sampled_from([None, 2, 4]),
        "fail_at": st.sampled_from([None, 3, 101]),
        "listen": st.booleans(),
        "checkpoint": st.booleans(),
    }
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=configs)
def test_compiled_and_generic_walks_run_the_same_fit(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]
) -> None:
    """Every hook, transition, event (with its guard), failure note, weight and counter is the same either way."""
    config = {**config, "val_every": config["val_every"] if config["limit"] is None else 1.0}
    generic = _fit(tmp_path_factory.mktemp("generic"), 0, config, monkeypatch)
    fast = _fit(tmp_path_factory.mktemp("compiled"), 1, config, monkeypatch)
    assert generic["compiled"] == []
    assert "fit.train.batch.step" in fast["compiled"]
    assert fast["recorded"] == fast["seen"]
    for key in ("calls", "seen", "events", "error", "state", "metrics", "files", "recorded", "flushes"):
        assert fast[key] == generic[key], key
    for a, b in zip(fast["weights"], generic["weights"], strict=True):
        assert torch.equal(a, b)


def test_a_failure_in_a_compiled_leaf_and_on_its_transition_is_named_as_the_generic_walk_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry action raising in a hot leaf names the state; a transition's action raising names the transition."""

    class Late(TinyModule):
        ends = 0

        def on_train_epoch_end(self) -> None:
            self.ends += 1
            if self.ends == 2:  # on the edge out of batch.end, compiled by now
                raise KeyError("late")

    notes = []
    for hot in (0, 1):
        monkeypatch.setattr(runtime, "HOT", hot)
        trainer = interlock.Trainer(max_epochs=3, default_root_dir=tmp_path / str(hot), **only())
        with pytest.raises(KeyError) as info:
            trainer.fit(Late(), loader())
        notes.append(info.value.__notes__)
    assert notes[0] == notes[1]
    where = "fit.train.batch.end -> fit.train.epoch_end [epoch_end] do module.on_train_epoch_end"
    assert any(where in n for n in notes[1])


def test_a_leaf_whose_action_may_fill_a_slot_stays_generic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only leaves whose actions declare no ``writes`` are compiled; the others run the generic step every time."""
    monkeypatch.setattr(runtime, "HOT", 1)
    checked: dict[str, bool] = {}
    original = runtime.Runtime._compilable

    def spy(self: Any, node: Any) -> bool:
        checked[node.path] = out = original(self, node)
        return out

    monkeypatch.setattr(runtime.Runtime, "_compilable", spy)
    trainer = interlock.Trainer(max_epochs=1, default_root_dir=tmp_path, **only())
    trainer.fit(TinyModule(), loader())
    assert checked["fit.train.batch.step"] is True
    assert not checked["setup"], "the set-up state fills slots: it stays generic"


def test_the_source_of_a_leaf_leaves_out_what_it_cannot_need() -> None:
    """No save check on a leaf that is not a checkpoint state, no entry_once block without entry_once actions."""

    class Edge:
        guard = None
        actions: tuple[Any, ...] = ()
        enters: tuple[Any, ...] = ()
        ops = None

    class Node:
        path, checkpoint, once, entry = "a.b", False, (), (print,)
        always = (Edge(),)

    text, names = compiled.source_of(Node())
    assert "_pending_saves" not in text and "_holding" not in text and "facts" not in text
    Node.checkpoint, Node.once = True, (print,)
    text, _ = compiled.source_of(Node())
    assert "_pending_saves" in text and "_holding" in text
    assert list(names.values()).count(print) == 1
