"""Resuming from checkpoints: exact from any transition, in a fresh process; data position; bad input."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset

import interlock
from _resume_worker import ahead, compare, go, reference, stop, worker
from conftest import TinyModule, loader, only
from interlock import CheckpointError, SaveCheckpoint
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.plugins.checkpoint_io import TorchCheckpointIO, frame

IO = TorchCheckpointIO()
#: Every event of the worker's fit before it ends (the run can be interrupted at any of them); its module skips no
#: epoch and its loader has a length, so it never enters the states of those (tests/test_epoch_edges.py resumes them)
_NEVER = ("fit.end", "fit.train.skipped", "fit.train.batch.window_step")
FIT_EVENTS = ["setup", *(n for n in interlock.load_chart().leaves if n.startswith("fit.") and n not in _NEVER)]


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[str]]:
    return reference(tmp_path_factory.getbasetemp())


def transition_numbers(names: list[str], points: list[tuple[str, int]]) -> list[int]:
    """1-based event numbers of (event name, k-th occurrence modulo its count) before the last epoch end."""
    end = max(i for i, n in enumerate(names) if n == "fit.train.epoch_end")
    chosen = set()
    for name, k in points:
        seen = [i + 1 for i, n in enumerate(names[: end + 1]) if n == name]
        chosen.add(seen[k % len(seen)])
    return sorted(chosen)


@settings(
    max_examples=2,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@example(points=[("fit.train.epoch_start", 0), ("fit.train.batch.end", 0), ("fit.train.val.start", 1)])
@example(points=[("fit.train.val.batch.end", 4), ("fit.train.val.end", 2), ("fit.train.epoch_end", 1)])
@given(points=st.lists(st.tuples(st.sampled_from(FIT_EVENTS), st.integers(0, 99)), min_size=3, max_size=3))
def test_interrupted_at_any_transition_resumes_bitwise_in_fresh_process(
    points: list[tuple[str, int]], ref: tuple[dict[str, Any], list[str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Saved at any transition, crashed, resumed in a fresh process: bitwise the uninterrupted run's end."""
    expected, names = ref
    numbers = transition_numbers(names, points)
    root = tmp_path_factory.mktemp("interrupted")
    ckpts = [root / str(n) / "interrupted.ckpt" for n in numbers]
    outs = [c.with_name("resumed.pt") for c in ckpts]
    # the resuming processes start up while the interrupted runs train; they begin once every checkpoint is written
    resumes = ahead(
        *[["--root", str(c.parent), "--ckpt", str(c), "--out", str(o)] for c, o in zip(ckpts, outs, strict=True)]
    )
    try:
        proc = worker("--root", str(root), "--save-at", ",".join(map(str, numbers)))
        assert proc.returncode == 3, proc.stderr[-3000:]
        charts = [IO.load_checkpoint(c)["state"]["chart"] for c in ckpts]
        runs = go(resumes)
    finally:
        stop(resumes)
    for n, chart, out, (code, err) in zip(numbers, charts, outs, runs, strict=True):
        where = f"save requested at event {n} ({names[n - 1]}), taken at {chart}"
        assert code == 0, f"{where}: resume failed\n{err[-3000:]}"
        assert compare(expected, torch.load(out, weights_only=True)) == [], where


def test_finished_run_resumed_with_more_epochs_equals_longer_run(
    ref: tuple[dict[str, Any], list[str]], tmp_path: Path
) -> None:
    """A finished 2-epoch run resumed from "last" with max_epochs=3 ends bitwise like a 3-epoch run."""
    expected, _ = ref
    second = ahead(["--root", str(tmp_path), "--max-epochs", "3", "--ckpt", "last", "--out", str(tmp_path / "o.pt")])
    try:  # the second process starts up while the first trains; it begins after the first has ended
        first = worker("--root", str(tmp_path), "--max-epochs", "2")
        assert first.returncode == 0, first.stderr[-3000:]
        ((code, err),) = go(second)
        assert code == 0, err[-3000:]
    finally:
        stop(second)
    assert compare(expected, torch.load(tmp_path / "o.pt", weights_only=True)) == []


def test_raising_max_steps_trains_further(tmp_path: Path) -> None:
    """A run that stopped at max_steps resumes from "last" and trains to the new max_steps."""
    first = interlock.Trainer(max_steps=3, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path)
    first.fit(TinyModule(), loader(shuffle=True))
    assert first.state.global_step == 3
    second = interlock.Trainer(max_steps=7, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path)
    second.fit(TinyModule(), loader(shuffle=True), ckpt_path="last")
    assert second.state.global_step == 7
    assert second.state.counts["fit.train.batch.end"] == 7


# ------------------------------------------------------------------ data position


class Stream(IterableDataset):
    """An iterable dataset (no length); ``produced`` counts the samples it ever yielded."""

    def __init__(self, n: int = 26) -> None:
        g = torch.Generator().manual_seed(3)
        self.x = torch.randn(n, 4, generator=g)
        self.y = (self.x[:, 0] > 0).long()
        self.pos, self.produced, self._resume = 0, 0, 0

    def __iter__(self) -> Any:
        start, self._resume = self._resume, 0
        for i in range(start, len(self.x)):
            self.pos = i + 1
            self.produced += 1
            yield self.x[i], self.y[i]


class StatefulStream(Stream):
    """A Stream that can report and restore its position."""

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume = int(state["pos"])


def fit_stream(
    root: Path, data: Stream, save_at: str | None = None, occurrence: int = 2, ckpt: Path | None = None
) -> tuple[interlock.Trainer, TinyModule]:
    """Two epochs over ``data``, validating at epoch ends; optionally save at a ``save_at`` event, then stop."""
    torch.manual_seed(0)
    module = TinyModule(dropout=0.2)
    trainer = interlock.Trainer(
        max_epochs=2, accumulate_grad_batches=2, num_sanity_val_steps=0, seed=1, **only(), default_root_dir=root
    )
    if save_at is not None:
        trainer.on(save_at, lambda e: SaveCheckpoint(str(root / "x.ckpt")), once=occurrence)
        trainer.on("fit.train.*", lambda e: _stop_if_saved(root / "x.ckpt", e))
    try:
        trainer.fit(module, DataLoader(data, batch_size=4), loader(16, 8), ckpt_path=ckpt)
    except KeyboardInterrupt:
        pass
    return trainer, module


def _stop_if_saved(path: Path, event: interlock.Event) -> None:
    if path.exists() and event.name.endswith(("batch.fetch", "val.batch.fetch", "epoch_start", "val.end")):
        raise KeyboardInterrupt


def _same_run(a: tuple[interlock.Trainer, TinyModule], b: tuple[interlock.Trainer, TinyModule]) -> bool:
    weights = all(
        torch.equal(x, y) for x, y in zip(a[1].state_dict().values(), b[1].state_dict().values(), strict=True)
    )
    return weights and a[0].state.history == b[0].state.history and a[0].state.counts == b[0].state.counts


@pytest.mark.parametrize(
    ("save_at", "occurrence"),
    [("fit.train.batch.end", 2), ("fit.train.batch.end", 7), ("fit.train.val.batch.end", 2), ("fit.train.val.end", 1)],
)
def test_iterable_dataset_with_state_dict_resumes_without_replay(tmp_path: Path, save_at: str, occurrence: int) -> None:
    """An IterableDataset with state_dict/load_state_dict resumes from its saved position: no replay, no warning."""
    expected = fit_stream(tmp_path / "ref", StatefulStream())
    fit_stream(tmp_path, StatefulStream(), save_at=save_at, occurrence=occurrence)
    data = StatefulStream()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="resuming this loader")
        resumed = fit_stream(tmp_path, data, ckpt=tmp_path / "x.ckpt")
    assert _same_run(expected, resumed)
    saved_pos = IO.load_checkpoint(tmp_path / "x.ckpt")["state"]["data"]["dataset"]["pos"]
    assert data.produced == 2 * len(data.x) - saved_pos  # the rest of the epoch, then one whole epoch


def test_loader_without_position_replays_with_warning(tmp_path: Path) -> None:
    """A loader that cannot seek replays the skipped batches, says so in a warning, and still resumes exactly."""
    expected = fit_stream(tmp_path / "ref", Stream())
    fit_stream(tmp_path, Stream(), save_at="fit.train.batch.end")
    data = Stream()
    with pytest.warns(
        UserWarning, match=r"resuming this loader at batch 2 replays \(and discards\) the first 2 batches"
    ):
        resumed = fit_stream(tmp_path, data, ckpt=tmp_path / "x.ckpt")
    assert _same_run(expected, resumed)
    assert data.produced == 2 * len(data.x)


def test_map_style_position_is_restored_without_iterating(tmp_path: Path) -> None:
    """Resuming a shuffled map-style loader mid-epoch fetches only the remaining samples of the epoch."""
    fetched: list[int] = []

    class Counted(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.inner = loader(64).dataset

        def __len__(self) -> int:
            return len(self.inner)

        def __getitem__(self, i: int) -> Any:
            fetched.append(i)
            return self.inner[i]

    def fit(ckpt: Path | None, save: bool) -> None:
        trainer = interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path, seed=3)
        if save:
            trainer.on("fit.train.batch.end", lambda e: SaveCheckpoint(str(tmp_path / "m.ckpt")), once=3)
        trainer.fit(TinyModule(), DataLoader(Counted(), batch_size=8, shuffle=True), ckpt_path=ckpt)

    fit(None, save=True)
    order = list(fetched)
    fetched.clear()
    fit(tmp_path / "m.ckpt", save=False)
    assert fetched == order[24:]


# ------------------------------------------------------------------ bad input


class Other(interlock.Module):
    """A different model: one layer renamed, one resized, one added."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.0))
        self.head = torch.nn.Linear(16, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.head(self.net(batch[0])), batch[1])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture(scope="module")
def good_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("good")
    interlock.Trainer(max_epochs=1, **only(ModelCheckpoint(save_last=True)), default_root_dir=root).fit(
        TinyModule(), loader()
    )
    return next(root.rglob("last.ckpt"))


def _frame(payload: bytes, like: Path) -> bytes:
    """``payload`` in a well-formed interlock frame (header with its true length and hash), modelled on ``like``."""
    import hashlib

    header = TorchCheckpointIO().read_header(like)
    header.update(sha256=hashlib.sha256(payload).hexdigest(), payload_bytes=len(payload))
    return frame(payload, header)


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def _bad_inputs(good: Path, d: Path) -> dict[str, tuple[Path | str, str]]:
    """name -> (ckpt_path, a phrase the error must contain)."""
    marker = d / "pwned"
    good_bytes = good.read_bytes()
    (d / "truncated.ckpt").write_bytes(good_bytes[: len(good_bytes) - 100])
    torch.save({"model": {}}, d / "plain.pt")
    (d / "newer.ckpt").write_bytes(good_bytes.replace(b'"version": 2', b'"version": 9', 1))
    ckpt = IO.load_checkpoint(good)
    IO.save_checkpoint({**ckpt, "format": "interlock.checkpoint/3"}, d / "newer_payload.ckpt")
    IO.save_checkpoint({**ckpt, "state": {**ckpt["state"], "version": 99}}, d / "newer_state.ckpt")
    (d / "evil_raw.pkl").write_bytes(pickle.dumps({"x": _Evil(marker)}))
    evil = io.BytesIO()
    torch.save({"format": "interlock.checkpoint/2", "x": _Evil(marker)}, evil)
    (d / "evil.ckpt").write_bytes(_frame(evil.getvalue(), good))
    (d / "a_dir").mkdir()
    return {
        "missing": (d / "nope.ckpt", "does not exist"),
        "directory": (d / "a_dir", "is a directory"),
        "truncated": (d / "truncated.ckpt", "truncated"),
        "other format": (d / "plain.pt", "not an interlock checkpoint"),
        "newer file format": (d / "newer.ckpt", "newer interlock"),
        "newer payload format": (d / "newer_payload.ckpt", "interlock.checkpoint/3"),
        "newer state": (d / "newer_state.ckpt", "newer"),
        "malicious raw pickle": (d / "evil_raw.pkl", "not an interlock checkpoint"),
        "malicious framed pickle": (d / "evil.ckpt", "nothing in it was executed"),
        "no last": ("last", "no last.ckpt"),
    }


def _snapshot(root: Path) -> dict[str, Any]:
    return {str(p): (p.is_dir() or p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_bad_checkpoints_fail_in_setup_with_a_clear_error_and_change_nothing(good_ckpt: Path, tmp_path: Path) -> None:
    """Missing, directory, truncated, foreign, newer, malicious: CheckpointError in setup, disk untouched."""
    cases = _bad_inputs(good_ckpt, tmp_path)
    for name, (path, phrase) in cases.items():
        module = TinyModule()
        weights = {k: v.clone() for k, v in module.state_dict().items()}
        trainer = interlock.Trainer(
            max_epochs=1, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path / "root"
        )
        before = _snapshot(tmp_path)
        with pytest.raises(CheckpointError) as info:
            trainer.fit(module, loader(), ckpt_path=path)
        assert phrase in str(info.value), f"{name}: {info.value}"
        assert any("failed in state 'setup'" in n for n in getattr(info.value, "__notes__", [])), name
        assert trainer.state.counts.get("fit.start", 0) == 0 and trainer.state.status == "failed", name
        assert _snapshot(tmp_path) == before, name
        assert all(torch.equal(weights[k], v) for k, v in module.state_dict().items()), name
    assert not (tmp_path / "pwned").exists()


def test_checkpoint_of_a_different_model_lists_missing_unexpected_and_misshapen_keys(
    good_ckpt: Path, tmp_path: Path
) -> None:
    """Resuming another architecture names its missing, unexpected and misshapen keys, before training."""
    shutil.copy(good_ckpt, tmp_path / "tiny.ckpt")
    trainer = interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path)
    with pytest.raises(CheckpointError) as info:
        trainer.fit(Other(), loader(), ckpt_path=tmp_path / "tiny.ckpt")
    message = str(info.value)
    assert "different model" in message
    assert "missing keys: head.bias, head.weight" in message
    assert "unexpected keys: net.3.bias, net.3.weight" in message
    assert "net.0.weight: checkpoint (8, 4) vs model (16, 4)" in message
    assert trainer.state.counts.get("fit.start", 0) == 0


def test_resume_check_tool_prints_a_json_report(tmp_path: Path) -> None:
    """tools/resume_check.py --trials 1 --json interrupts the digits example once and reports a bitwise-equal resume."""
    tool = Path(__file__).parents[1] / "tools" / "resume_check.py"
    proc = subprocess.run(
        [sys.executable, str(tool), "--trials", "1", "--json", "--seed", "3", "--keep", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    report = json.loads(proc.stdout)
    assert (proc.returncode, report["trials"], report["bitwise_equal"], report["failures"]) == (0, 1, 1, [])
    assert "[1/1] transition" in proc.stderr


def test_restore_keeps_this_processs_rank(tmp_path: Any) -> None:
    """A checkpoint saved by rank 0 and resumed on a process of rank 1 keeps rank 1 in the state."""
    import interlock
    from conftest import TinyModule, loader
    from interlock.listeners.checkpoint import ModelCheckpoint

    first = interlock.Trainer(max_epochs=1, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path)
    first.fit(TinyModule(), loader(32, 16))
    second = interlock.Trainer(max_epochs=2, **only(), default_root_dir=tmp_path)
    second.hardware.strategy.global_rank = 1
    ranks: list[int] = []
    second.on("fit.train.batch.end", lambda e, s: ranks.append(s.global_rank))
    second.fit(TinyModule(), loader(32, 16), ckpt_path="last")
    assert ranks and set(ranks) == {1}
