"""The metric loggers: CSVLogger and TensorBoardLogger write what state.history holds."""

from __future__ import annotations

import csv
import io
import pickle
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import only
from interlock import Event, Listener, Trainer, TrainerState
from interlock.core.chart import load_chart
from interlock.core.events import EventBus
from interlock.core.state import thaw
from interlock.core.updates import merge, reduce
from interlock.examples.digits import DigitsClassifier, DigitsData
from interlock.listeners import CSVLogger, EventTrace, ProgressBar, TensorBoardLogger, default_listeners

LEAVES = load_chart().leaves
TAGS = load_chart().tags


@pytest.fixture(scope="module")
def digits() -> DigitsData:
    return DigitsData(batch_size=32)


def fit(root: Path, listeners: Sequence[Listener], digits: DigitsData, **flags: Any) -> Trainer:
    """A short real fit of the digits example; returns the trainer."""
    flags = {"max_epochs": 3, "limit_train_batches": 4, "limit_val_batches": 2, **flags}
    trainer = Trainer(**only(*listeners), default_root_dir=root, accelerator="cpu", **flags)
    torch.manual_seed(0)
    trainer.fit(DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader())
    return trainer


def read_csv(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Header and rows, with empty cells dropped and numbers parsed."""
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = [{k: _value(v) for k, v in row.items() if v != ""} for row in reader]
        return list(reader.fieldnames or []), rows


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def deliver(listener: Listener, state: TrainerState, name: str) -> TrainerState:
    """Send one synthetic event through a real bus and apply the listener's updates."""
    bus = EventBus(LEAVES, TAGS)
    listener.bind_tags(bus.tags)
    for pattern, fn, every, once in listener.subscriptions():
        bus.on(pattern, fn, every=every, once=once, source=listener.key)
    event = Event(name, "t", "src", 1, state.epoch, state.global_step, 0)
    return reduce(state, merge(bus.send(event, lambda: state)))


# -- CSVLogger ----------------------------------------------------------------------
def test_csv_rows_equal_the_history(tmp_path: Path, digits: DigitsData) -> None:
    """After fit, validate and test, metrics.csv holds exactly state.history, header widened on the way."""
    logger = CSVLogger()
    trainer = fit(tmp_path, [logger], digits)
    trainer.validate(DigitsClassifier(), digits.val_dataloader())
    trainer.test(DigitsClassifier(), digits.test_dataloader())
    header, rows = read_csv(Path(trainer.state.run_dir) / "metrics.csv")
    assert rows == thaw(trainer.state.history)
    assert [r["stage"] for r in rows] == ["val", "train"] * 3 + ["val", "test"]
    assert header == ["stage", "epoch", "global_step", "val_loss", "val_acc", "train_loss", "test_loss", "test_acc"]
    assert dict(trainer.state.listeners["CSVLogger"])["rows"] == len(rows) == 8
    pickle.loads(pickle.dumps(logger))


def test_csv_row_is_on_disk_when_its_event_is_handled(tmp_path: Path, digits: DigitsData) -> None:
    """Each row is flushed at once: a later handler of the same event reads it from the file."""
    trainer = Trainer(
        **only(CSVLogger(save_dir=tmp_path / "logs", name="m.csv")),
        default_root_dir=tmp_path,
        accelerator="cpu",
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=1,
    )
    seen: list[int] = []
    for name in ("fit.train.val.end", "fit.train.epoch_end"):
        trainer.on(name, lambda e, s: seen.append(len(read_csv(tmp_path / "logs" / "m.csv")[1])))
    trainer.fit(DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader())
    assert seen[0::2] == [1, 3] and seen[1::2] == [2, 4]  # val.end, epoch_end per epoch


names = st.sampled_from(["loss", "acc", "f1", "lr", "x_y"])
history_rows = st.lists(
    st.fixed_dictionaries(
        {"stage": st.sampled_from(["train", "val", "test"]), "epoch": st.integers(0, 9)},
        optional={"global_step": st.integers(0, 999)},
    ).flatmap(
        lambda row: st.dictionaries(names, st.floats(allow_nan=False, width=32), max_size=3).map(
            lambda metrics: {**row, **metrics}
        )
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(rows=history_rows, cut=st.integers(0, 8))
def test_csv_equals_history_for_any_rows(rows: list[dict[str, Any]], cut: int) -> None:
    """Rows appended one or several at a time, with new names at any point: the file always equals the history."""
    with tempfile.TemporaryDirectory() as tmp:
        logger = CSVLogger(save_dir=tmp)
        state = TrainerState(run_dir=tmp)
        for history in (rows[:cut], rows):
            state = deliver(logger, TrainerState(history=history, listeners=state.listeners), "fit.train.val.end")
            if history:
                header, written = read_csv(Path(tmp) / "metrics.csv")
                assert written == history
                assert len(header) == len(set(header)) and header[:3] == ["stage", "epoch", "global_step"]


def test_csv_resumed_run_rewrites_the_file_from_the_history(tmp_path: Path) -> None:
    """A new process (fresh logger) with restored state rewrites stale rows written after the checkpoint."""
    rows = [{"stage": "val", "epoch": e, "global_step": e, "val_loss": 1.0 / (e + 1)} for e in range(4)]
    first = CSVLogger(save_dir=tmp_path)
    state = deliver(first, TrainerState(history=rows), "fit.train.val.end")
    saved = TrainerState(history=rows[:2], listeners={"CSVLogger": {"rows": 2, "fields": list(rows[0])}})
    resumed = deliver(CSVLogger(save_dir=tmp_path), saved, "fit.train.epoch_end")
    assert read_csv(tmp_path / "metrics.csv")[1] == rows[:2]
    assert resumed.listeners["CSVLogger"]["rows"] == 2 and state.listeners["CSVLogger"]["rows"] == 4


def test_csv_needs_a_directory_and_a_plain_name() -> None:
    """Without save_dir or a run directory the error says how to give one; names must be plain file names."""
    with pytest.raises(RuntimeError, match=r"state.run_dir is empty.*CSVLogger\(save_dir=...\)"):
        deliver(CSVLogger(), TrainerState(history=[{"stage": "val", "epoch": 0}]), "test.end")
    with pytest.raises(ValueError, match=r"name='a/b.csv'"):
        CSVLogger(name="a/b.csv")


# -- TensorBoardLogger --------------------------------------------------------------
def _scalars(log_dir: Path) -> Mapping[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_scalars_equal_the_history(tmp_path: Path, digits: DigitsData) -> None:
    """Every history metric is a scalar at the row's global step; the step loss comes every log_every_n_steps."""
    logger = TensorBoardLogger(log_every_n_steps=5)
    trainer = fit(tmp_path, [logger], digits)
    trainer.test(DigitsClassifier(), digits.test_dataloader())
    scalars = _scalars(Path(trainer.state.run_dir))
    history = thaw(trainer.state.history)
    for tag in ("val_loss", "val_acc", "train_loss", "test_loss"):
        expected = [(row["global_step"], row[tag]) for row in history if tag in row]
        assert [s for s, _ in scalars[tag]] == [s for s, _ in expected]
        assert [v for _, v in scalars[tag]] == pytest.approx([v for _, v in expected], rel=1e-6)
    assert [s for s, _ in scalars["train_loss_step"]] == [5, 10]
    assert [v for _, v in scalars["epoch"]] == [row["epoch"] for row in history]
    assert logger._writer is None and logger.log_dir == Path(trainer.state.run_dir)
    pickle.loads(pickle.dumps(logger))


def test_tensorboard_save_dir_and_no_step_logging(tmp_path: Path, digits: DigitsData) -> None:
    """save_dir overrides the run directory; log_every_n_steps=0 writes only the history rows."""
    fit(tmp_path, [TensorBoardLogger(save_dir=tmp_path / "tb", log_every_n_steps=0)], digits, max_epochs=1)
    scalars = _scalars(tmp_path / "tb")
    assert "train_loss_step" not in scalars and [s for s, _ in scalars["val_loss"]] == [4]
    with pytest.raises(ValueError, match=r"log_every_n_steps=-1"):
        TensorBoardLogger(log_every_n_steps=-1)


def test_tensorboard_without_step_logging_has_no_per_batch_handler(tmp_path: Path) -> None:
    """log_every_n_steps=0 registers nothing on fit.train.batch.end; step logging does."""
    for every, handled in ((0, False), (50, True)):
        trainer = Trainer(**only(TensorBoardLogger(log_every_n_steps=every)), default_root_dir=tmp_path)
        assert bool(trainer.bus.handlers("fit.train.batch.end")) is handled


# -- ranks --------------------------------------------------------------------------
def rank_trainer(rank: int, root: Path, listeners: Sequence[Listener], **flags: Any) -> Trainer:
    """A digits trainer whose (single-device) strategy claims global rank ``rank``."""
    flags = {"max_epochs": 2, "limit_train_batches": 4, "limit_val_batches": 2, **flags}
    trainer = Trainer(**only(*listeners), default_root_dir=root, accelerator="cpu", **flags)
    trainer.hardware.strategy.global_rank = rank
    return trainer


def all_listeners() -> tuple[list[Listener], io.StringIO]:
    """The defaults, TensorBoard logging every step, and a bar drawn into the returned buffer."""
    out = io.StringIO()
    bar = ProgressBar(mode="bar", file=out)
    bar.key = "Bar"
    return [*default_listeners(), TensorBoardLogger(log_every_n_steps=1), bar], out


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("rank", [0, 1])
def test_only_rank_zero_writes_files_or_prints(
    rank: int, tmp_path: Path, digits: DigitsData, capsys: pytest.CaptureFixture[str]
) -> None:
    """After fit and test, rank 0 has written CSV, trace, TensorBoard, checkpoint and output; rank 1 nothing."""
    listeners, bar_out = all_listeners()
    trainer = rank_trainer(rank, tmp_path, listeners)
    torch.manual_seed(0)
    trainer.fit(DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader())
    trainer.test(DigitsClassifier(), digits.test_dataloader())
    assert trainer.state.global_rank == rank and trainer.state.chart == "finished"
    files = {name.split("/")[-1].split(".out.")[0] for name in files_under(tmp_path)}
    out = capsys.readouterr().out
    if rank == 0:
        assert {"metrics.csv", "events.jsonl", "last.ckpt", "events"} <= files
        assert "Epoch 1: 4 batches" in out and "Testing" in out and "Epoch 1" in bar_out.getvalue()
        assert dict(trainer.state.listeners["CSVLogger"])["rows"] == 5
    else:
        assert files == set() and out == "" and bar_out.getvalue() == ""
        assert "CSVLogger" not in trainer.state.listeners
        assert [x.file for x in listeners if isinstance(x, EventTrace)] == [None]
        assert [x.log_dir for x in listeners if isinstance(x, TensorBoardLogger)] == [None]


def test_resumed_run_on_rank_one_writes_nothing(
    tmp_path: Path, digits: DigitsData, capsys: pytest.CaptureFixture[str]
) -> None:
    """Resuming on rank 1 from rank 0's checkpoint (its state says rank 0) leaves rank 0's files untouched."""
    first = rank_trainer(0, tmp_path, all_listeners()[0], max_epochs=1)
    first.fit(DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader())
    before = files_under(tmp_path)
    capsys.readouterr()
    listeners, bar_out = all_listeners()
    resumed = rank_trainer(1, tmp_path, listeners)
    ckpt = first.run_dir / "checkpoints" / "last.ckpt"
    resumed.fit(DigitsClassifier(), digits.train_dataloader(), digits.val_dataloader(), ckpt_path=ckpt)
    assert resumed.state.epoch == 1 and resumed.state.chart == "finished"
    assert files_under(tmp_path) == before
    assert capsys.readouterr().out == "" and bar_out.getvalue() == ""


def test_csv_logger_has_no_experiment_and_says_what_to_use() -> None:
    """CSVLogger.experiment raises, naming self.log and the loggers that take images."""
    with pytest.raises(AttributeError, match=r"self\.log.*TensorBoardLogger"):
        _ = CSVLogger().experiment
