"""The metric history lives in RUN/history.jsonl; checkpoints keep a fingerprint of it, and resume reads it back."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader, only
from interlock import CheckpointError
from interlock.connectors.history import HISTORY_FILE, HistoryLog, read_history
from interlock.core.state import thaw
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.plugins.checkpoint_io import TorchCheckpointIO

IO = TorchCheckpointIO()


def _fit(root: Path, epochs: int, ckpt: Any = None, **kwargs: Any) -> interlock.Trainer:
    trainer = interlock.Trainer(
        max_epochs=epochs,
        default_root_dir=root,
        accelerator="cpu",
        seed=0,
        enable_progress_bar=False,
        enable_trace=False,
        logger=False,
        num_sanity_val_steps=0,
        **kwargs,
    )
    torch.manual_seed(0)
    trainer.fit(TinyModule(), loader(32, 8, shuffle=True), loader(16, 8), ckpt_path=ckpt)
    return trainer


def test_checkpoint_size_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """last.ckpt at epoch 40 is the size of last.ckpt at epoch 2: it holds a fingerprint, not the rows."""
    short = _fit(tmp_path / "short", 2)
    long = _fit(tmp_path / "long", 40)
    sizes = [(Path(t.state.run_dir) / "checkpoints" / "last.ckpt").stat().st_size for t in (short, long)]
    assert len(long.state.history) == 20 * len(short.state.history) > 0
    assert sizes[1] / sizes[0] <= 1.02, sizes
    ckpt = IO.load_checkpoint(Path(long.state.run_dir) / "checkpoints" / "last.ckpt")
    assert ckpt["state"]["history"] == []
    assert ckpt["history"]["rows"] == len(long.state.history)
    lines = (Path(long.state.run_dir) / HISTORY_FILE).read_text().splitlines()
    assert [json.loads(line) for line in lines] == thaw(long.state.history)


def test_resume_restores_the_history_exactly_from_the_run_directory(tmp_path: Path) -> None:
    """Resumed from last.ckpt of epoch 2, a 5-epoch fit ends with the uninterrupted run's history and file."""
    whole = _fit(tmp_path / "whole", 5)
    first = _fit(tmp_path / "parts", 2)
    last = Path(first.state.run_dir) / "checkpoints" / "last.ckpt"
    resumed = _fit(tmp_path / "parts", 5, ckpt=last)
    assert resumed.state.history == whole.state.history
    assert (Path(resumed.state.run_dir) / HISTORY_FILE).read_bytes() == (
        Path(whole.state.run_dir) / HISTORY_FILE
    ).read_bytes()


def test_rows_after_the_resumed_checkpoint_are_replaced_by_the_resumed_run(tmp_path: Path) -> None:
    """Resuming from an epoch-1 checkpoint of a 4-epoch run: the file ends equal to the resumed run's history."""
    keep = ModelCheckpoint(every_n_epochs=1, save_top_k=-1, filename="{epoch}")
    first = _fit(tmp_path, 4, listeners=[keep], enable_checkpointing=True)
    run = Path(first.state.run_dir)
    resumed = _fit(tmp_path, 3, ckpt=run / "checkpoints" / "epoch=1.ckpt")
    lines = (run / HISTORY_FILE).read_text().splitlines()
    assert [json.loads(line) for line in lines] == thaw(resumed.state.history)
    assert len(resumed.state.history) < len(first.state.history)


@pytest.mark.parametrize("damage", ["missing", "edited", "cut"])
def test_a_damaged_history_file_is_a_clear_error(tmp_path: Path, damage: str) -> None:
    """A missing, edited or cut history.jsonl fails the resume, naming the file and what to do."""
    first = _fit(tmp_path, 2)
    run = Path(first.state.run_dir)
    file = run / HISTORY_FILE
    if damage == "missing":
        file.unlink()
    elif damage == "edited":
        file.write_text(file.read_text().replace('"epoch":0', '"epoch":7', 1))
    else:
        file.write_bytes(file.read_bytes()[:-5])
    with pytest.raises(CheckpointError, match=HISTORY_FILE) as info:
        _fit(tmp_path, 4, ckpt=run / "checkpoints" / "last.ckpt")
    assert str(file) in str(info.value) and "copy that run's" in str(info.value)


def test_a_copied_checkpoint_reads_the_history_beside_it_once_its_run_is_gone(tmp_path: Path) -> None:
    """A checkpoint copied out of its run resumes while its run exists, and after, with history.jsonl beside it."""
    whole = _fit(tmp_path / "whole", 4)
    first = _fit(tmp_path / "first", 2)
    run = Path(first.state.run_dir)
    away = tmp_path / "away"
    away.mkdir()
    shutil.copy(run / "checkpoints" / "last.ckpt", away / "x.ckpt")
    assert _fit(tmp_path / "again", 4, ckpt=away / "x.ckpt").state.history == whole.state.history
    shutil.copy(run / HISTORY_FILE, away / HISTORY_FILE)
    shutil.rmtree(run)
    assert _fit(tmp_path / "more", 4, ckpt=away / "x.ckpt").state.history == whole.state.history
    (away / HISTORY_FILE).unlink()
    with pytest.raises(CheckpointError, match="does not exist"):
        _fit(tmp_path / "fails", 4, ckpt=away / "x.ckpt")


def test_validate_with_a_checkpoint_needs_no_history(tmp_path: Path) -> None:
    """validate(ckpt_path=...) loads weights only: a checkpoint without its history file still works."""
    first = _fit(tmp_path, 1)
    run = Path(first.state.run_dir)
    (run / HISTORY_FILE).unlink()
    trainer = interlock.Trainer(default_root_dir=tmp_path, accelerator="cpu", **only())
    assert "val_loss" in trainer.validate(TinyModule(), loader(16, 8), ckpt_path=run / "checkpoints" / "last.ckpt")[0]


_value = st.one_of(
    st.floats(allow_nan=False, width=64), st.integers(-(2**60), 2**60), st.text(max_size=5), st.just(math.inf)
)
_rows = st.lists(st.dictionaries(st.text(min_size=1, max_size=4), _value, max_size=4), max_size=12)


@settings(max_examples=60, deadline=None)
@given(rows=_rows, cuts=st.lists(st.integers(0, 12), max_size=4))
def test_history_log_appends_and_reads_back_exactly(rows: list[dict[str, Any]], cuts: list[int]) -> None:
    """Synced at any growing prefixes, the file holds exactly the rows and each fingerprint reads its prefix back."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        log, prints = HistoryLog(), []
        for n in [*sorted(cuts), len(rows)]:
            n = min(n, len(rows))
            prints.append((n, log.sync(rows[:n], tmp)))
        for n, fp in prints:
            _, _, back = read_history(fp, Path(tmp) / "x.ckpt", Path(tmp))
            assert back == rows[:n]


def test_history_log_writes_only_the_new_rows(tmp_path: Path) -> None:
    """Each sync writes the bytes of the rows added since the last one, not the whole history."""
    log, rows, sizes = HistoryLog(), [], []
    for i in range(50):
        rows.append({"stage": "val", "epoch": i, "loss": 1.0 / (i + 1)})
        before = log.bytes
        log.sync(rows, str(tmp_path))
        sizes.append(log.bytes - before)
    assert max(sizes[1:]) <= 2 * min(sizes[1:])
    assert (tmp_path / HISTORY_FILE).stat().st_size == sum(sizes)
