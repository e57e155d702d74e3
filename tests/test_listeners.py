"""The built-in listeners: progress, event trace, early stopping, timer, guards, LR monitor, defaults."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import only
from interlock import Event, Listener, LogMetrics, SaveCheckpoint, Stop, Trainer, TrainerState, listen
from interlock.core.chart import load_chart
from interlock.core.events import EventBus
from interlock.core.traceformat import Decoder
from interlock.core.updates import merge, reduce
from interlock.examples.digits import DigitsClassifier, DigitsData
from interlock.listeners import (
    CSVLogger,
    EarlyStopping,
    EventTrace,
    FiniteGuard,
    LearningRateMonitor,
    ProgressBar,
    Timer,
    default_listeners,
)
from interlock.listeners.lr_monitor import lr_metric_names
from interlock.listeners.timer import parse_duration
from interlock.viz import read_trace

TRACE_KEYS = ["time", "event", "trigger", "source", "epoch", "global_step", "batch_idx", "count"]
LEAVES = load_chart().leaves
TAGS = load_chart().tags


# -- helpers ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits() -> DigitsData:
    return DigitsData(batch_size=32)


def fit(
    root: Path,
    listeners: Sequence[Listener],
    digits: DigitsData,
    module: torch.nn.Module | None = None,
    ckpt_path: Any = None,
    **flags: Any,
) -> Trainer:
    """A short real fit of the digits example with ``listeners``; returns the trainer."""
    flags = {"max_epochs": 2, "limit_train_batches": 4, "limit_val_batches": 2, **flags}
    trainer = Trainer(**only(*listeners), default_root_dir=root, accelerator="cpu", **flags)
    torch.manual_seed(0)
    trainer.fit(module or DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader(), ckpt_path=ckpt_path)
    return trainer


class Driver:
    """Delivers synthetic events to one listener through a real bus and applies its updates."""

    def __init__(self, listener: Listener, state: TrainerState | None = None) -> None:
        self.bus = EventBus(LEAVES, TAGS)
        listener.bind_tags(self.bus.tags)
        for pattern, fn, every, once in listener.subscriptions():
            self.bus.on(pattern, fn, every=every, once=once, source=listener.key)
        self.state = state or TrainerState()
        self.updates: list[Any] = []

    def send(self, name: str, trigger: str = "t", *, epoch: int = 0, step: int = 0, batch: int = 0, **payload: Any):
        event = Event(name, trigger, "src", 1, epoch, step, batch, payload)
        self.updates = [u for _, u in self.bus.send(event, lambda: self.state)]
        self.state = reduce(self.state, merge(("test", u) for u in self.updates))
        return self.updates


class SaveAt(Listener):
    """Asks for a checkpoint at every training epoch end."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @listen("fit.train.epoch_end")
    def save(self, event: Event) -> SaveCheckpoint:
        return SaveCheckpoint(str(self.path))


class Scripted(DigitsClassifier):
    """Digits model whose validation also reports ``score``: one scripted value per validation run."""

    def __init__(self, scores: Sequence[float], offset: int = 0) -> None:
        super().__init__()
        self.scores, self.calls = list(scores), offset

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        out = super().validation_step(batch, batch_idx)
        out["score"] = torch.tensor(self.scores[self.calls])
        self.calls += 1
        return out


# -- EventTrace ---------------------------------------------------------------------
def _records(file: Path) -> list[dict[str, Any]]:
    """The records of a trace in either format (a compact repeat is one record)."""
    decoder = Decoder()
    return [r for line in file.read_text().splitlines() for r in decoder.feed(json.loads(line))]


def _expand(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Every transition, a compact repeat's loop written out ``times`` times."""
    out = []
    for r in records:
        for _ in range(r.get("times", 1)):
            out.extend((c["source"], c["trigger"], c["event"]) for c in r.get("cycle", [r]))
    return out


@pytest.mark.parametrize("accumulate", [1, 3])
def test_compact_trace_holds_every_transition_in_order_with_exact_boundaries(
    tmp_path: Path, digits: DigitsData, accumulate: int
) -> None:
    """The default trace, loops written out, is every transition in order; boundaries keep their exact counters."""
    seen: list[tuple[str, str, str, int, int, int]] = []
    trainer = Trainer(
        **only(EventTrace()),
        default_root_dir=tmp_path,
        accelerator="cpu",
        max_epochs=2,
        limit_train_batches=20,
        limit_val_batches=3,
        accumulate_grad_batches=accumulate,
    )
    trainer.observe(lambda n, t, s, c, e, g, b: seen.append((s, t, n, e, g, b)))
    trainer.fit(DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader())
    records = _records(Path(trainer.state.run_dir) / "events.jsonl")
    assert _expand(records) == [x[:3] for x in seen]
    assert any(r.get("times", 0) > 1 for r in records)  # the batch loop was counted, not written
    where = {x[2]: x[3:] for x in seen if x[2] in ("fit.train.epoch_end", "fit.train.val.end", "finished")}
    singles = {r["event"]: (r["epoch"], r["global_step"], r["batch_idx"]) for r in records if "cycle" not in r}
    assert all(singles[name] == pos for name, pos in where.items())
    summary = read_trace(trainer.state.run_dir)
    assert summary.events == len(seen) and summary.visits["fit.train.batch.end"] == 40


def test_compact_trace_is_a_few_bytes_per_training_step(tmp_path: Path, digits: DigitsData) -> None:
    """400 training steps in 2 epochs cost under 100 bytes a step in the compact trace, against ~1 kB in full."""
    sizes = []
    for full in (False, True):
        trainer = Trainer(
            **only(EventTrace(full=full)),
            default_root_dir=tmp_path / str(full),
            accelerator="cpu",
            max_epochs=2,
            limit_val_batches=2,
        )
        trainer.fit(DigitsClassifier(), torch.utils.data.DataLoader(digits.train_dataloader().dataset, batch_size=4))
        sizes.append((Path(trainer.state.run_dir) / "events.jsonl").stat().st_size / trainer.state.global_step)
    assert sizes[0] <= 100 < 500 <= sizes[1]


@settings(max_examples=80, deadline=None)
# found by hypothesis in CI: a loop's turn begun before a flush, then a final flush with nothing new, lost that turn
@example(keys=([0, 0, 0, 0, 0, 0, 1], [0], 0), cuts=[14])
@given(
    keys=st.lists(st.integers(0, 3), max_size=60).flatmap(
        lambda head: st.tuples(st.just(head), st.lists(st.integers(0, 3), min_size=1, max_size=6), st.integers(0, 12))
    ),
    cuts=st.lists(st.integers(0, 120), max_size=5),
)
def test_compact_trace_round_trips_any_stream(keys: Any, cuts: list[int]) -> None:
    """Any sequence of transitions, written in any chunks, decodes back to the same sequence and counters."""
    import tempfile

    head, loop, turns = keys
    stream = [*head, *loop * turns, *head, 0]
    names = [("fit.train.batch.a", "x"), ("fit.train.batch.b", "y"), ("fit.train.batch.c", "z"), ("fit.end", "w")]
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "t.jsonl"
        trace = EventTrace(path=file, flush_every=10**6, flush_seconds=None)
        trace._rank_zero = True
        expected = []
        for i, k in enumerate(stream):
            event, trigger = names[k]
            trace.record(event, trigger, "fit.train.batch.s", i + 1, 0, i, i)
            expected.append(("fit.train.batch.s", trigger, event))
            if i in cuts:
                trace.flush()
        trace.flush(final=True)
        trace.close()
        records = _records(file)
        assert _expand(records) == expected
        counted = [c["event"] for r in records for c in r.get("cycle", [])]
        assert "fit.end" not in counted  # a boundary is never counted in a loop: it keeps its own line
        singles = [(r["event"], r["global_step"]) for r in records if "cycle" not in r]
        assert [(e, i) for i, (_, _, e) in enumerate(expected) if e == "fit.end"] == [
            x for x in singles if x[0] == "fit.end"
        ]


def test_trace_has_one_line_per_transition_and_reads_back(tmp_path: Path, digits: DigitsData) -> None:
    """With full=True every transition of a fit is one JSON line with the documented keys; read_trace sums it."""
    counted: list[tuple[str, str, str]] = []
    trace = EventTrace(full=True)
    trainer = Trainer(**only(trace), default_root_dir=tmp_path, accelerator="cpu", max_epochs=2, limit_train_batches=3)
    trainer.on("*", lambda e: counted.append((e.source, e.trigger, e.name)))
    trainer.fit(DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader())
    file = Path(trainer.state.run_dir) / "events.jsonl"
    assert trace.file == file
    records = [json.loads(line) for line in file.read_text().splitlines()]
    assert len(records) == len(counted)
    assert all(list(r) == TRACE_KEYS for r in records)
    assert [(r["source"], r["trigger"], r["event"]) for r in records] == counted
    assert records[-1]["global_step"] == trainer.state.global_step == 6
    summary = read_trace(trainer.state.run_dir)
    assert summary.events == len(counted)
    assert summary.last_state == "finished" and summary.is_final and not summary.failed
    assert summary.visits["fit.train.batch.end"] == 6
    pickle.loads(pickle.dumps(trace))


def test_trace_flushes_every_n_lines_and_at_epoch_and_validation_ends(tmp_path: Path, digits: DigitsData) -> None:
    """At each epoch or validation end the file holds every transition so far; between them it grows by flush_every.

    The file stays open during the run, and a copy pickled mid-run writes to the same file."""
    trace = EventTrace(flush_every=7, flush_seconds=None, full=True)
    copies: list[EventTrace] = []
    trainer = Trainer(
        **only(trace),
        default_root_dir=tmp_path,
        accelerator="cpu",
        max_epochs=2,
        limit_train_batches=5,
        limit_val_batches=2,
    )
    seen: list[tuple[str, int, int]] = []  # event, lines on disk, transitions so far

    def look(event: Event, state: TrainerState) -> None:
        file = Path(state.run_dir) / "events.jsonl"
        lines = len(file.read_text().splitlines()) if file.exists() else 0
        seen.append((event.name, lines, sum(state.counts.values())))
        if event.name == "fit.train.epoch_end" and not copies:
            copies.append(pickle.loads(pickle.dumps(trace)))

    trainer.on("fit.*", look)
    trainer.fit(DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader())
    boundary = 0
    for name, lines, total in seen:
        if name in ("fit.train.epoch_end", "fit.train.val.end"):
            assert lines == total
            boundary = lines
        else:
            assert (lines - boundary) % 7 == 0 and 0 <= total - lines < 7
    assert [name for name, _, _ in seen].count("fit.train.val.end") == 2
    assert read_trace(trainer.state.run_dir).events == sum(trainer.state.counts.values())
    copy = copies[0]
    copy.record("teardown", "end", "fit.end", 1, 0, 0, 0)
    copy.flush()
    copy.close()
    assert json.loads(copy.file.read_text().splitlines()[-1])["source"] == "fit.end"


def test_trace_writes_at_least_once_per_flush_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a clock advancing 0.3 s per transition and flush_seconds=1, the file catches up every fourth line."""
    from interlock.listeners import trace as trace_module

    clock = [0.0]
    monkeypatch.setattr(trace_module, "_now", lambda: clock[0])
    trace = EventTrace(path=tmp_path / "t.jsonl", flush_every=10**6, flush_seconds=1.0, full=True)
    on_disk: list[int] = []
    for i in range(10):
        clock[0] = i * 0.3
        trace.record("fit.train.batch.end", "next", "fit.train.batch.fetch", i, 0, i, i)
        on_disk.append(len((tmp_path / "t.jsonl").read_text().splitlines()))
    assert on_disk == [1, 1, 1, 1, 5, 5, 5, 5, 9, 9]
    trace.flush()
    trace.close()
    assert [json.loads(line)["time"] for line in (tmp_path / "t.jsonl").read_text().splitlines()] == [
        pytest.approx(i * 0.3) for i in range(10)
    ]


@pytest.mark.parametrize("bad", [0, -1.0, True, "1"])
def test_trace_refuses_a_bad_flush_interval(bad: Any) -> None:
    """flush_seconds must be None or a positive number of seconds; the error names the value."""
    with pytest.raises(ValueError, match=rf"flush_seconds={bad!r}\) must be None"):
        EventTrace(flush_seconds=bad)


def test_trace_records_through_the_runtime_and_handles_only_boundaries(tmp_path: Path) -> None:
    """EventTrace records transitions as a recorder (no call); per-batch events get no handler, so no Event is built."""
    trainer = Trainer(**only(EventTrace()), default_root_dir=tmp_path, accelerator="cpu")
    assert trainer.bus.observer_sources() == ["EventTrace.record"]
    for name in ("fit.train.batch.step", "fit.train.batch.end", "fit.train.val.batch.fetch"):
        assert trainer.bus.handlers(name) == []
        assert not trainer.bus.signals[name].receivers


@pytest.mark.parametrize("full", [False, True])
def test_failed_fit_is_traced_with_its_error(tmp_path: Path, digits: DigitsData, full: bool) -> None:
    """A NaN loss fails the run: FiniteGuard names where, the trace (either format) records the error and where."""

    class NaNAt(DigitsClassifier):
        calls = 0

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss, self.calls = super().training_step(batch, batch_idx), self.calls + 1
            return loss * float("nan") if self.calls == 7 else loss

    bar = ProgressBar(mode="bar", file=io.StringIO())
    with pytest.raises(FloatingPointError, match=r"non-finite training loss .* epoch 1, global step 6, batch 2"):
        fit(tmp_path, [bar, EventTrace(full=full), FiniteGuard()], digits, NaNAt(), max_epochs=3)
    records = _records(tmp_path / "runs" / "version_0" / "events.jsonl")
    with_error = [(r["trigger"], r["event"]) for r in records if "error" in r]
    assert with_error == [("fail", "teardown"), ("failed", "failed")]
    summary = read_trace(tmp_path / "runs" / "version_0")
    assert summary.error is not None and summary.error.startswith("FloatingPointError: non-finite training loss")
    assert summary.failed_in == "fit.train.batch.backward" and summary.last_state == "failed"
    assert bar._bars == {}


# -- FiniteGuard --------------------------------------------------------------------
def test_finite_guard_passes_finite_losses_and_names_bad_ones() -> None:
    """Finite losses (tensor or dict) pass; an infinite one raises naming epoch, step and batch."""
    drv = Driver(FiniteGuard())
    assert drv.send("fit.train.batch.backward", outputs=torch.tensor(1.5)) == []
    assert drv.send("fit.train.batch.backward", outputs={"loss": torch.tensor([0.1, 2.0])}) == []
    with pytest.raises(FloatingPointError, match=r"inf.* epoch 3, global step 41, batch 7;.*gradient_clip_val"):
        drv.send("fit.train.batch.backward", epoch=3, step=41, batch=7, outputs={"loss": torch.tensor(math.inf)})
    (sub,) = drv.bus.handlers("fit.train.batch.backward")
    assert sub.wants_state is False


# -- EarlyStopping ------------------------------------------------------------------
#: what EarlyStopping stores when patience runs out at epoch 4 after a best of 4.0 (Lightning's reason code 3)
_PATIENCE_SPENT = {"wait_count": 3, "best_score": 4.0, "stopped_epoch": 4, "stopping_reason": 3, "stopping_best": 4.0}


def test_early_stopping_stops_at_the_expected_epoch(tmp_path: Path, digits: DigitsData) -> None:
    """Best at epoch 1, then three checks without improvement: stops at epoch 4 with its counters stored."""
    scores = [5.0, 4.0, 4.5, 4.2, 4.1, 1.0, 1.0, 1.0]
    trainer = fit(
        tmp_path,
        [EarlyStopping("val_score", patience=3)],
        digits,
        Scripted(scores),
        max_epochs=8,
        limit_val_batches=1,
        num_sanity_val_steps=0,
    )
    assert trainer.state.epoch == 4
    assert trainer.state.stop_reason.startswith("EarlyStopping: val_score did not improve")
    stored = dict(trainer.state.listeners["EarlyStopping"])
    assert stored == {**_PATIENCE_SPENT, "stopping_value": pytest.approx(4.1)}
    assert [row["epoch"] for row in trainer.state.history if row["stage"] == "val"] == [0, 1, 2, 3, 4]


def test_early_stopping_counters_continue_after_resume(tmp_path: Path, digits: DigitsData) -> None:
    """Resuming from an epoch-2 checkpoint stops at the same epoch as the uninterrupted run."""
    scores = [5.0, 4.0, 4.5, 4.2, 4.1, 1.0, 1.0, 1.0]
    flags = {"limit_val_batches": 1, "num_sanity_val_steps": 0}
    ckpt = tmp_path / "es.ckpt"
    first = fit(tmp_path, [EarlyStopping("val_score"), SaveAt(ckpt)], digits, Scripted(scores), max_epochs=3, **flags)
    assert dict(first.state.listeners["EarlyStopping"])["wait_count"] == 1
    resumed = fit(
        tmp_path, [EarlyStopping("val_score")], digits, Scripted(scores, offset=3), ckpt, max_epochs=8, **flags
    )
    assert resumed.state.epoch == 4
    assert dict(resumed.state.listeners["EarlyStopping"]) == {**_PATIENCE_SPENT, "stopping_value": pytest.approx(4.1)}


def test_early_stopping_missing_metric_lists_the_available_ones(tmp_path: Path, digits: DigitsData) -> None:
    """A monitor that no step returns is a RuntimeError (Lightning's) naming it and the metrics there are."""
    with pytest.raises(RuntimeError, match=r"'val_nope'.*\['train_loss', 'val_acc', 'val_loss'\]"):
        fit(tmp_path, [EarlyStopping("val_nope")], digits)
    assert Driver(EarlyStopping("x", strict=False)).send("fit.train.epoch_end") == []
    with pytest.warns(RuntimeWarning, match=r"'x', which is not available"):
        assert Driver(EarlyStopping("x", strict=False, verbose=True)).send("fit.train.epoch_end") == []


def _reference_stop(values: list[float], mode: str, patience: int, delta: float) -> int | None:
    """Lightning's rule, written plainly: the index of the check that stops, or None."""
    best = math.inf if mode == "min" else -math.inf
    wait = 0
    for i, v in enumerate(values):
        if not math.isfinite(v):
            return i
        improved = v + delta < best if mode == "min" else v - delta > best  # Lightning compares current -+ delta
        if improved:
            best, wait = v, 0
        else:
            wait += 1
            if wait >= patience:
                return i
    return None


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.floats(-10, 10) | st.sampled_from([math.nan, math.inf]), min_size=1, max_size=15),
    mode=st.sampled_from(["min", "max"]),
    patience=st.integers(0, 4),
    delta=st.sampled_from([0.0, 0.5]),
)
def test_early_stopping_matches_lightnings_rule(values: list[float], mode: str, patience: int, delta: float) -> None:
    """For any metric sequence, EarlyStopping stops at the check Lightning's rule stops at, and not before."""
    drv = Driver(EarlyStopping("m", mode=mode, patience=patience, min_delta=delta))
    stopped = None
    for i, v in enumerate(values):
        drv.state = reduce(drv.state, merge([("loop", LogMetrics({"m": v}))]))
        if any(isinstance(u, Stop) for u in drv.send("fit.train.epoch_end", epoch=i)):
            stopped = i
            break
    assert stopped == _reference_stop(values, mode, patience, delta)
    if stopped is not None:
        assert drv.state.listeners["EarlyStopping"]["stopped_epoch"] == stopped


def test_early_stopping_thresholds_and_argument_errors() -> None:
    """Stopping and divergence thresholds stop at once; bad arguments name the value and the choice."""
    drv = Driver(EarlyStopping("m", mode="max", stopping_threshold=0.9, divergence_threshold=0.1))
    for value, reason in ((0.5, None), (0.95, "stopping threshold reached"), (0.05, "divergence threshold reached")):
        drv.state = TrainerState(metrics={"m": value})
        stops = [u.reason for u in drv.send("fit.train.epoch_end") if isinstance(u, Stop)]
        assert len(stops) == (reason is not None)
        assert all(r.startswith(f"EarlyStopping: {reason}: m={value}") for r in stops)
    with pytest.raises(ValueError, match=r"mode='up'.*'min'"):
        EarlyStopping("m", mode="up")
    with pytest.raises(ValueError, match=r"patience=-1"):
        EarlyStopping("m", patience=-1)
    drv = Driver(EarlyStopping("val_acc", check_on="fit.train.epoch_end"))
    assert drv.bus.handlers("fit.train.epoch_end") and not drv.bus.handlers("fit.train.val.end")


# -- Timer --------------------------------------------------------------------------
def fake_clock(tick: float = 1.0) -> Callable[[], float]:
    """A clock that advances ``tick`` seconds per reading."""
    now = [0.0]

    def clock() -> float:
        now[0] += tick
        return now[0]

    return clock


def test_timer_stops_when_the_duration_is_reached(tmp_path: Path, digits: DigitsData) -> None:
    """With one second per clock reading and a 3 s limit, training stops after the third batch."""
    timer = Timer(duration={"seconds": 3}, clock=fake_clock())
    trainer = fit(tmp_path, [timer], digits, max_epochs=5)
    assert trainer.state.global_step == 3
    assert trainer.state.stop_reason == "Timer: training time 0:00:03 reached the limit 0:00:03"
    assert timer.time_elapsed(trainer.state) == 4.0  # + the reading at fit.end
    assert timer.time_remaining(trainer.state) == 0.0


def test_timer_elapsed_time_accumulates_across_resume(tmp_path: Path, digits: DigitsData) -> None:
    """The elapsed time saved in a checkpoint is the starting point of the resumed run."""
    ckpt = tmp_path / "t.ckpt"
    first = fit(tmp_path, [Timer(clock=fake_clock()), SaveAt(ckpt)], digits, max_epochs=1)
    assert dict(first.state.listeners["Timer"]) == {"elapsed": 5.0}  # 4 batches, then fit.end
    timer = Timer(interval="epoch", clock=fake_clock(10.0))
    resumed = fit(tmp_path, [timer], digits, ckpt_path=ckpt, max_epochs=2)
    assert resumed.state.epoch == 1
    assert timer.time_elapsed(resumed.state) == 4.0 + 10.0 + 10.0  # checkpoint, epoch 1 end, fit.end


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [("01:02:03:04", 93784), ({"minutes": 2}, 120), (parse_duration("00:00:00:05"), 5)],
)
def test_timer_durations_parse(duration: Any, seconds: int) -> None:
    """'DD:HH:MM:SS', dicts of timedelta arguments and timedeltas all give the same kind of limit."""
    assert Timer(duration).duration.total_seconds() == seconds  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"duration": "12:00"}, ValueError, r"'12:00' must be 'DD:HH:MM:SS'"),
        ({"duration": {"hourz": 1}}, ValueError, r"'hourz'.*keys such as"),
        ({"duration": 5}, TypeError, r"duration 5 must be"),
        ({"interval": "batch"}, ValueError, r"interval='batch'.*'step'"),
    ],
)
def test_timer_rejects_bad_arguments(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    """Bad durations and intervals are errors naming the value and the accepted forms."""
    with pytest.raises(error, match=match):
        Timer(**kwargs)


# -- ProgressBar --------------------------------------------------------------------
def test_progress_prints_plain_lines_when_not_a_terminal(
    tmp_path: Path, digits: DigitsData, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a TTY: one line per epoch and per validation, with batch counts and metrics; none for sanity."""
    trainer = fit(tmp_path, [ProgressBar()], digits)
    trainer.test(DigitsClassifier(), digits.test_dataloader(), verbose=False)  # the progress lines only
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "Validation (epoch 0)",
        "Epoch 0",
        "Validation (epoch 1)",
        "Epoch 1",
        "Testing",
    ]
    assert lines[0].startswith("Validation (epoch 0): 2 batches, ") and "val_loss=" in lines[0]
    assert lines[1].startswith("Epoch 0: 4 batches, ") and "it/s" in lines[1] and "train_loss=" in lines[1]
    assert "test_acc=" in lines[4] and "val_loss" not in lines[4]


def test_progress_lines_leave_out_what_was_logged_with_prog_bar_false(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bar shows prog_bar=True metrics under Lightning's names and returned scalars, never prog_bar=False ones."""
    from conftest import TinyModule, loader

    class Logs(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("shown", loss, prog_bar=True, on_epoch=True)
            self.log("quiet", loss, on_epoch=True)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
            out = super().validation_step(batch, batch_idx)
            self.log("val_quiet", out["loss"])
            self.log("val_shown", out["loss"], prog_bar=True)
            return out

    torch.manual_seed(0)
    trainer = Trainer(
        max_epochs=1, default_root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_trace=False,
        listeners=[ProgressBar(mode="lines")], num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(Logs(), loader(32, 8), loader(16, 8))
    out = capsys.readouterr().out.splitlines()
    val, epoch = (next(x for x in out if x.startswith(p)) for p in ("Validation (epoch 0)", "Epoch 0"))
    assert "val_shown=" in val and "val_loss=" in val and "val_quiet" not in val
    assert "shown_step=" in epoch and "shown_epoch=" in epoch and "train_loss=" in epoch
    assert "quiet" not in epoch and " shown=" not in epoch  # the bare name of a step-and-epoch value: not shown
    assert set(trainer.state.metrics) >= {"quiet", "quiet_epoch", "shown", "val_quiet"}  # still metrics


def test_progress_bars_show_epoch_loss_and_close(tmp_path: Path, digits: DigitsData) -> None:
    """Bar mode draws tqdm bars with epoch, loss and validation, and closes them all when the run ends."""
    out = io.StringIO()
    bar = ProgressBar(mode="bar", file=out)
    fit(tmp_path, [bar], digits)
    text = out.getvalue()
    assert "Epoch 0" in text and "Epoch 1" in text and "loss=" in text and "Validation" in text
    assert "it/s" in text and bar._bars == {}
    pickle.loads(pickle.dumps(bar))


def test_progress_subscribes_to_batch_events_only_when_drawing_bars(tmp_path: Path) -> None:
    """A non-terminal file, mode='lines' or refresh_rate=0 register no per-batch handler; a terminal gets bars."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    batch_ends = [name for name in LEAVES if name.endswith(".batch.end")]
    cases = [
        (ProgressBar(file=io.StringIO()), []),
        (ProgressBar(mode="lines", file=Terminal()), []),
        (ProgressBar(refresh_rate=0, mode="bar", file=Terminal()), []),
        (ProgressBar(file=Terminal()), batch_ends),
    ]
    for bar, handled in cases:
        trainer = Trainer(**only(bar), default_root_dir=tmp_path, accelerator="cpu")
        assert [name for name in LEAVES if ".batch." in name and trainer.bus.handlers(name)] == handled
        assert trainer.bus.handlers("fit.train.epoch_end")


def test_progress_reads_the_loss_only_every_refresh_rate_batches() -> None:
    """With refresh_rate=3 the loss is read (one .item()) on batches 3, 6 and 9 of 10."""

    class Counting(torch.Tensor):
        items = 0

        def item(self) -> Any:
            Counting.items += 1
            return super().item()

    drv = Driver(ProgressBar(refresh_rate=3, mode="bar", file=io.StringIO()))
    drv.send("fit.train.epoch_start")
    for n in range(1, 11):
        drv.send("fit.train.batch.end", batch=n, outputs=torch.tensor(0.5).as_subclass(Counting))
    assert Counting.items == 3


def test_progress_refresh_rate_zero_is_silent(
    tmp_path: Path, digits: DigitsData, capsys: pytest.CaptureFixture[str]
) -> None:
    """refresh_rate=0 turns the progress output off; bad arguments are rejected by name."""
    fit(tmp_path, [ProgressBar(refresh_rate=0)], digits, max_epochs=1)
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match=r"mode='fancy'"):
        ProgressBar(mode="fancy")
    with pytest.raises(ValueError, match=r"refresh_rate=-1"):
        ProgressBar(refresh_rate=-1)


# -- LearningRateMonitor --------------------------------------------------------------
def test_lr_monitor_logs_lightning_names_from_the_payload() -> None:
    """Rates in the payload become lr-<Class>[-k][/pg<i>] metrics; without them the error says what is missing."""
    drv = Driver(LearningRateMonitor())
    lrs = (("SGD", (0.1,)), ("Adam", (0.01, 0.02)), ("SGD", (0.5,)))
    (update,) = drv.send("fit.train.epoch_start", lr=lrs)
    assert dict(update.metrics) == {"lr-SGD": 0.1, "lr-Adam/pg1": 0.01, "lr-Adam/pg2": 0.02, "lr-SGD-1": 0.5}
    assert lr_metric_names([("SGD", (1.0,))]) == ["lr-SGD"]
    with pytest.raises(RuntimeError, match=r"payload of 'fit.train.epoch_start' \(key 'lr'"):
        drv.send("fit.train.epoch_start")
    step = Driver(LearningRateMonitor(logging_interval="step"))
    assert step.bus.handlers("fit.train.batch.optimizer_step")
    with pytest.raises(ValueError, match=r"logging_interval='batch'"):
        LearningRateMonitor("batch")


# -- defaults -----------------------------------------------------------------------
def test_default_listeners_order() -> None:
    """Progress bar, model summary, CSV logger, event trace, then ModelCheckpoint(save_last=True) last."""
    names = [type(x).__name__ for x in default_listeners()]
    assert names[:4] == ["ProgressBar", "ModelSummary", "CSVLogger", "EventTrace"]
    if importlib.util.find_spec("interlock.listeners.checkpoint") is not None:
        assert names[4:] == ["ModelCheckpoint"]
        assert default_listeners()[-1].save_last is True  # type: ignore[attr-defined]
    else:
        assert names[4:] == []


def test_trainer_defaults_write_metrics_and_trace(
    tmp_path: Path, digits: DigitsData, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Trainer given no listeners writes metrics.csv and events.jsonl into its run directory."""
    trainer = Trainer(default_root_dir=tmp_path, accelerator="cpu", max_epochs=1, limit_train_batches=2)
    trainer.fit(DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader())
    run = Path(trainer.state.run_dir)
    assert (run / "metrics.csv").is_file() and read_trace(run).is_final
    out = capsys.readouterr().out
    assert "Epoch 0: 2 batches" in out
    assert out.index("Trainable params") < out.index("Epoch 0: 2 batches")  # the model summary, first
    assert isinstance(trainer.listeners[2], CSVLogger)
