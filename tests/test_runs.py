"""Run directories and resumes under faults and hostile input: where a run writes, who writes it, what it resumes.

Covers issue 13's findings: checkpoint paths never choose what is written or deleted; run
directories are claimed atomically and locked against a second writer; ``ckpt_path="last"``
is resolved deliberately and announced; a checkpoint is validated whole before the module
changes; bad flags, empty loaders and a second ``fit`` are refused or defined; the first
Ctrl-C saves and the second stops at once.
"""

from __future__ import annotations

import copy
import os
import posixpath
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import interlock
from _resume_worker import ahead, compare, go, reference, stop
from conftest import TinyModule, loader, only
from interlock import CheckpointError
from interlock.cli.main import main
from interlock.connectors import rundir
from interlock.connectors.signals import PreemptionFlag
from interlock.core.errors import RunDirectoryInUse
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.plugins import checkpoint_io
from interlock.plugins.checkpoint_io import TorchCheckpointIO

IO = TorchCheckpointIO()
HERE = Path(__file__).parent
RESUME_WORKER = str(HERE / "_resume_worker.py")
RUNS_WORKER = str(HERE / "_runs_worker.py")
BOUNDARIES = {"fit.train.batch.end", "fit.train.val.batch.end", "fit.train.epoch_end"}


def slow(examples: int) -> Any:
    """Hypothesis settings for examples that each run a trainer."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def files(root: Path) -> dict[str, Any]:
    """Every file under ``root``: its bytes and modification time."""
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def same_weights(module: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(before[k], v) for k, v in module.state_dict().items())


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 1-epoch run (4 batches) whose ModelCheckpoint keeps the latest epoch file and last.ckpt."""
    root = tmp_path_factory.mktemp("finished")
    trainer = interlock.Trainer(max_epochs=1, **only(ModelCheckpoint(save_last=True)), default_root_dir=root)
    torch.manual_seed(0)
    trainer.fit(TinyModule(scheduler=True), loader())
    return Path(trainer.state.run_dir)


# ------------------------------------------------------------------ 1. paths in a checkpoint


def test_a_resumed_fit_writes_in_the_run_its_file_is_in_not_the_one_it_names(
    finished_run: Path, tmp_path: Path
) -> None:
    """A checkpoint naming another run directory resumes in the run its file lies in; the named one stays empty."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    victim = tmp_path / "victim"
    victim.mkdir()
    ckpt = run / "checkpoints" / "last.ckpt"
    payload = IO.load_checkpoint(ckpt)
    payload["state"]["run_dir"] = str(victim)
    IO.save_checkpoint(payload, ckpt)
    trainer = interlock.Trainer(max_epochs=2, default_root_dir=tmp_path / "root")
    trainer.fit(TinyModule(scheduler=True), loader(), ckpt_path=ckpt)
    assert trainer.state.run_dir == str(run) and trainer.state.epoch == 1
    assert list(victim.iterdir()) == []
    assert not (tmp_path / "root").exists()
    assert (run / "metrics.csv").is_file() and (run / "checkpoints" / "epoch=1-step=8.ckpt").is_file()


def test_resuming_a_copied_run_writes_into_the_copy_and_never_the_original(tmp_path: Path) -> None:
    """A copied run resumes in the copy: it writes and deletes there; the original is byte-for-byte unchanged."""
    original = tmp_path / "a"
    interlock.Trainer(max_epochs=1, **only(ModelCheckpoint(save_last=True)), default_root_dir=original).fit(
        TinyModule(), loader()
    )
    shutil.copytree(original, tmp_path / "b")
    before = files(original)
    copy_run = tmp_path / "b" / "runs" / "version_0"
    mc = ModelCheckpoint(save_last=True)  # top 1 without a monitor: each epoch's file replaces the last one
    trainer = interlock.Trainer(max_epochs=3, **only(mc), default_root_dir=tmp_path / "elsewhere")
    trainer.fit(TinyModule(), loader(), ckpt_path=copy_run / "checkpoints" / "last.ckpt")
    assert files(original) == before
    assert trainer.state.run_dir == str(copy_run)
    assert sorted(p.name for p in (copy_run / "checkpoints").iterdir()) == ["epoch=2-step=12.ckpt", "last.ckpt"]
    assert mc.best_model_path(trainer.state) == str(copy_run / "checkpoints" / "epoch=2-step=12.ckpt")
    assert mc.stored(trainer.state)["best"] == "checkpoints/epoch=2-step=12.ckpt"


def _escaping(segments: list[str]) -> str:
    return "/".join(segments)


relative_escapes = (
    st.lists(st.sampled_from(["..", ".", "checkpoints", "x"]), min_size=1, max_size=6)
    .map(_escaping)
    .filter(lambda p: posixpath.normpath(p) == ".." or posixpath.normpath(p).startswith("../"))
    .map(lambda p: p + "/epoch=0-step=4.ckpt")
)


@slow(12)
@given(
    field=st.sampled_from(["best_k", "best", "last"]),
    path=st.one_of(relative_escapes, st.sampled_from(["victim", "/etc/passwd", "/"])),
)
def test_checkpoint_paths_that_lead_outside_the_run_are_refused_naming_file_and_path(
    finished_run: Path, tmp_path_factory: pytest.TempPathFactory, field: str, path: str
) -> None:
    """A top-k, best or last path resolving outside the run: CheckpointError naming both; nothing deleted or loaded."""
    base = tmp_path_factory.mktemp("crafted")
    victim_run = base / "other"
    shutil.copytree(finished_run, victim_run)
    victim = victim_run / "checkpoints" / "epoch=0-step=4.ckpt"
    if path == "victim":
        path = str(victim)
    run = base / "run"
    shutil.copytree(finished_run, run)
    ckpt = run / "checkpoints" / "crafted.ckpt"
    payload = IO.load_checkpoint(finished_run / "checkpoints" / "last.ckpt")
    stored = payload["state"]["listeners"]["ModelCheckpoint"]
    if field == "best_k":
        stored["best_k"] = {path: None}
    else:
        stored[field] = path
    IO.save_checkpoint(payload, ckpt)
    before = files(base)
    module = TinyModule(scheduler=True)
    start = weights(module)
    trainer = interlock.Trainer(max_epochs=3, **only(ModelCheckpoint(save_last=True)), default_root_dir=base)
    with pytest.raises(CheckpointError) as info:
        trainer.fit(module, loader(), ckpt_path=ckpt)
    assert str(ckpt) in str(info.value) and repr(path) in str(info.value)
    assert "outside" in str(info.value)
    assert files(base) == before and same_weights(module, start)


@settings(max_examples=200, deadline=None)
@given(
    segments=st.lists(st.sampled_from(["..", ".", "a", "checkpoints", "b.ckpt"]), min_size=1, max_size=7),
    absolute=st.booleans(),
)
def test_stored_paths_resolve_inside_the_run_or_are_refused(segments: list[str], absolute: bool) -> None:
    """check_restored keeps a path iff it resolves inside the run directory, and stores it relative to it."""
    run_dir = "/data/runs/version_3"
    raw = "/".join(segments)
    path = posixpath.join(run_dir, raw) if absolute else raw
    full = posixpath.normpath(posixpath.join(run_dir, raw))
    inside = full.startswith(run_dir + "/")
    mc = ModelCheckpoint()
    stored = {"best_k": {path: 0.5}, "best": path, "last": path}
    if not inside:
        with pytest.raises(ValueError, match="outside"):
            mc.check_restored(stored, run_dir)
        return
    checked = mc.check_restored(stored, run_dir)
    rel = posixpath.relpath(full, run_dir)
    assert checked["best_k"] == {rel: 0.5} and checked["best"] == rel and checked["last"] == rel


def test_an_old_checkpoint_with_absolute_paths_inside_its_run_still_resumes(finished_run: Path, tmp_path: Path) -> None:
    """Absolute paths (older checkpoints) inside the run directory resume, stored relative from then on."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    ckpt = run / "checkpoints" / "last.ckpt"
    payload = IO.load_checkpoint(ckpt)
    stored = payload["state"]["listeners"]["ModelCheckpoint"]
    stored["best_k"] = {str(run / k): v for k, v in stored["best_k"].items()}
    stored["best"], stored["last"] = str(run / stored["best"]), str(run / stored["last"])
    IO.save_checkpoint(payload, ckpt)
    mc = ModelCheckpoint(save_last=True)
    trainer = interlock.Trainer(max_epochs=2, **only(mc), default_root_dir=tmp_path)
    trainer.fit(TinyModule(scheduler=True), loader(), ckpt_path=ckpt)
    assert mc.stored(trainer.state)["best_k"] == {"checkpoints/epoch=1-step=8.ckpt": None}
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["epoch=1-step=8.ckpt", "last.ckpt"]


# ------------------------------------------------------------------ 2. one run directory per writer


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    existing=st.sets(st.integers(0, 12), max_size=6),
    stale=st.sets(st.integers(0, 12), max_size=6),
    junk=st.lists(st.sampled_from(["version_x", "version_", "version_²", "notes", "version_-1"]), max_size=3),
)
def test_claiming_a_run_directory_never_takes_one_that_exists(
    tmp_path_factory: pytest.TempPathFactory, existing: set[int], stale: set[int], junk: list[str]
) -> None:
    """Even when its view of runs/ is stale (another process created some meanwhile), a claim makes a new directory."""
    root = tmp_path_factory.mktemp("claim")
    runs = root / "runs"
    for n in existing:
        (runs / f"version_{n}").mkdir(parents=True)
    for name in junk:
        (runs / name).mkdir(parents=True, exist_ok=True)
    real = rundir._versions
    rundir._versions = lambda _: sorted(stale & existing)  # type: ignore[assignment]  # what it saw before the others
    try:
        claimed = rundir.claim_run_dir(root)
    finally:
        rundir._versions = real  # type: ignore[assignment]
    number = int(claimed.name.removeprefix("version_"))
    assert claimed.parent == runs and claimed.is_dir() and number not in existing
    assert number > max(stale & existing, default=-1)


def _spawn(*args: str, stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *args], stdout=stdout, stderr=stderr, text=True)


def test_trainers_starting_together_on_one_root_get_distinct_run_directories(tmp_path: Path) -> None:
    """Four processes fitting on one root at the same moment each claim their own runs/version_N and keep its files."""
    go = tmp_path / "go"
    procs = [_spawn(RUNS_WORKER, "--root", str(tmp_path / "root"), "--go", str(go)) for _ in range(4)]
    time.sleep(0.5)
    go.touch()
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-2000:]
        outs.append(out)
    dirs = [line.split(" ", 1)[1] for out in outs for line in out.splitlines() if line.startswith("run_dir ")]
    assert len(dirs) == 4 and len(set(dirs)) == 4
    for d in dirs:
        saved = IO.load_checkpoint(Path(d) / "checkpoints" / "last.ckpt")["state"]
        assert saved["run_dir"] == d and saved["progress"]["global_step"] == 4


class Lines:
    """The lines a worker prints, read from its pipe as they come (no buffering hides one from ``select``)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.proc, self.fd, self.buffer = proc, proc.stdout.fileno(), b""

    def wait_for(self, prefix: str, timeout: float = 120) -> str:
        """The next line starting with ``prefix``; fail when none comes within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if line.decode().startswith(prefix):
                    return line.decode()
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self.proc.kill()
                pytest.fail(f"no {prefix!r} line from the worker in {timeout} s")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                pytest.fail(f"the worker ended before printing a {prefix!r} line")
            self.buffer += chunk


def test_a_second_process_resuming_the_same_run_is_refused_naming_the_directory_and_the_writer(
    finished_run: Path, tmp_path: Path
) -> None:
    """Two processes resume one run: the second is refused at set-up (directory, pid, how to fork); not after a kill."""
    run = tmp_path / "runs" / "version_0"
    shutil.copytree(finished_run, run)
    ckpt = str(run / "checkpoints" / "last.ckpt")
    first = _spawn(
        RUNS_WORKER, "--root", str(tmp_path), "--ckpt", ckpt, "--max-epochs", "50", "--slow", "0.2", "--report"
    )
    try:
        Lines(first).wait_for("batch ")
        second = subprocess.run(
            [sys.executable, RUNS_WORKER, "--root", str(tmp_path), "--ckpt", ckpt, "--max-epochs", "2"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert second.returncode == 4, second.stderr[-2000:]
        assert f"run directory {run} is in use" in second.stderr
        assert f"process {first.pid}" in second.stderr and "NEW_ROOT" in second.stderr
    finally:
        first.kill()
        first.communicate(timeout=60)
    third = subprocess.run(
        [sys.executable, RUNS_WORKER, "--root", str(tmp_path), "--ckpt", ckpt, "--max-epochs", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert third.returncode == 0, third.stderr[-2000:]  # the kill released the lock
    assert f"run_dir {run}" in third.stdout


def test_the_lock_is_held_for_the_fit_and_released_at_teardown(finished_run: Path, tmp_path: Path) -> None:
    """During a fit its run directory is locked (another holder is refused); after it, the lock is free again."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    trainer = interlock.Trainer(max_epochs=2, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path)
    refused: list[str] = []

    @trainer.on("fit.train.batch.end")
    def try_to_lock(event: interlock.Event) -> None:
        if refused:
            return
        with pytest.raises(RunDirectoryInUse) as info:
            rundir.RunLock.acquire(run)
        refused.append(str(info.value))

    trainer.fit(TinyModule(scheduler=True), loader(), ckpt_path=run / "checkpoints" / "last.ckpt")
    assert refused and f"process {os.getpid()}" in refused[0]
    lock = rundir.RunLock.acquire(run)
    lock.release()


HOLD_AND_DIE = """
import os, sys, time
from pathlib import Path
from interlock.connectors.rundir import RunLock
lock = RunLock.acquire(Path(sys.argv[1]))
child = os.fork()
if child == 0:  # a DataLoader worker, say: it outlives its parent for a while
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 1)  # (its parent's caller reads the output pipe to its end)
    os.dup2(quiet, 2)
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
os._exit(0)  # dies holding the lock
"""


def test_a_dead_writers_forked_children_do_not_keep_its_run_locked(tmp_path: Path) -> None:
    """A process dies holding the lock while a child it forked lives on: the run directory is free at once."""
    done = subprocess.run(
        [sys.executable, "-c", HOLD_AND_DIE, str(tmp_path)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    child = int(done.stdout.strip())
    try:
        os.kill(child, 0)  # still alive
        rundir.RunLock.acquire(tmp_path).release()
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_run_directory_deleted_while_training_is_not_silently_recreated(tmp_path: Path) -> None:
    """Deleting the run directory mid-fit fails the next save with an error naming it; nothing recreates the run."""
    trainer = interlock.Trainer(
        max_epochs=2, listeners=[ModelCheckpoint(save_last=True, every_n_train_steps=2)], default_root_dir=tmp_path
    )

    def delete(event: Any, state: interlock.TrainerState) -> None:
        shutil.rmtree(state.run_dir)

    trainer.on("fit.train.batch.end", delete, once=3)
    with pytest.raises(OSError, match="was deleted or replaced while this run was writing it") as info:
        trainer.fit(TinyModule(), loader())
    assert "version_0" in str(info.value)
    assert not (tmp_path / "runs" / "version_0" / "checkpoints").exists()
    assert trainer.state.status == "failed"


def test_a_run_directory_deleted_under_a_background_save_is_named_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deletion that lands while the fit's last save is written (past the check before it) gets the clear error."""
    finish, calls = checkpoint_io._finish, []

    def deleted_meanwhile(sink: Any, tmp: Path, fd: int, target: Path) -> None:
        calls.append(target)
        shutil.rmtree(target.parent.parent)  # the run directory, as the save is being written
        finish(sink, tmp, fd, target)

    monkeypatch.setattr(checkpoint_io, "_finish", deleted_meanwhile)
    saver = ModelCheckpoint(save_top_k=-1, save_last=False)  # one save, at the epoch's end: no check comes after it
    trainer = interlock.Trainer(max_epochs=1, **only(saver), default_root_dir=tmp_path)
    with pytest.raises(OSError, match="was deleted or replaced while this run was writing it") as info:
        trainer.fit(TinyModule(), loader())
    assert "No such file or directory" in str(info.value.__context__)  # the write's own error, kept as the context
    assert len(calls) == 1 and not (tmp_path / "runs" / "version_0").exists()
    assert trainer.state.status == "failed"


# ------------------------------------------------------------------ 3. what "last" is, and saying what is resumed


def test_last_resumes_the_trainers_own_run_and_says_what_it_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'last' on a trainer with a run is its own last.ckpt, not a newer run's; a line names run, state, epoch, step."""
    own = interlock.Trainer(max_epochs=1, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path)
    own.fit(TinyModule(), loader())
    other = interlock.Trainer(
        max_epochs=1, limit_train_batches=1, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path
    )
    other.fit(TinyModule(), loader())  # a newer short run with its own last.ckpt (fast_dev_run saves none)
    assert own.state.run_dir != other.state.run_dir
    capsys.readouterr()
    own.fit(TinyModule(), loader(), ckpt_path="last")
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("interlock: resuming"))
    assert f"{own.state.run_dir}/checkpoints/last.ckpt in {own.state.run_dir}" in line
    assert "state fit.train.epoch_end, epoch 0, global step 4" in line
    assert "nothing to train: epoch 0 was the last of max_epochs=1; raise max_epochs" in line
    fresh = interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path)
    fresh.fit(TinyModule(), loader(), ckpt_path="last")
    assert fresh.state.run_dir == other.state.run_dir  # a new trainer: the newest run that has a last.ckpt
    assert f"resuming {other.state.run_dir}/checkpoints/last.ckpt" in capsys.readouterr().err


def test_resuming_past_max_steps_says_there_is_nothing_to_train(
    finished_run: Path, tmp_path: Path, capsys: Any
) -> None:
    """A checkpoint at or past max_steps resumes to a stop at once and says which limit to raise."""
    shutil.copytree(finished_run, tmp_path / "run")
    trainer = interlock.Trainer(max_steps=3, **only(), default_root_dir=tmp_path)
    trainer.fit(TinyModule(scheduler=True), loader(), ckpt_path=tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert trainer.state.global_step == 4
    assert "nothing to train: global step 4 has reached max_steps=3; raise max_steps" in capsys.readouterr().err


def test_resuming_a_stopped_run_trains_nothing_and_names_the_way_to_train_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run stopped by a listener resumes stopped (the flag is saved) and says how to train its model further."""

    class StopAfterFirstEpoch(interlock.Listener):
        @interlock.listen("#epoch_end")
        def stop(self, event: Any, state: Any) -> Any:
            return interlock.Stop(reason="enough") if state.epoch == 0 else None

    first = interlock.Trainer(
        max_epochs=5, **only(ModelCheckpoint(save_last=True), StopAfterFirstEpoch()), default_root_dir=tmp_path
    )
    first.fit(TinyModule(), loader())
    assert (first.state.epoch, first.state.should_stop) == (0, True)
    capsys.readouterr()
    again = interlock.Trainer(max_epochs=5, **only(), default_root_dir=tmp_path)
    again.fit(TinyModule(), loader(), ckpt_path="last")
    assert again.state.global_step == first.state.global_step
    err = capsys.readouterr().err
    assert "nothing to train: the run had stopped (enough) and stays stopped" in err
    assert "Module.load_from_checkpoint(path)" in err


@settings(max_examples=30, deadline=None)
@given(
    value=st.one_of(
        st.integers(),
        st.floats(),
        st.booleans(),
        st.lists(st.text(max_size=3), max_size=2),
        st.dictionaries(st.text(), st.integers(), max_size=1),
    )
)
def test_a_ckpt_path_that_is_not_a_path_is_a_type_error_naming_it(value: Any) -> None:
    """ckpt_path=3 (not None, 'last' or a path): TypeError naming the value and what to pass, before anything runs."""
    trainer = interlock.Trainer(max_epochs=1, **only(), default_root_dir="/nonexistent/never-created")
    for call in (trainer.fit, trainer.validate):
        with pytest.raises(TypeError) as info:
            call(TinyModule(), loader(), ckpt_path=value)
        assert f"ckpt_path={value!r}" in str(info.value) and "'last'" in str(info.value)
    assert trainer.state.chart == "idle"


# ------------------------------------------------------------------ 4. the whole checkpoint, before the module


def _shape_unlike(draw: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    dims = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple).filter(lambda s: s != shape)
    return tuple(draw(dims))


def _opt_state_shape(c: dict[str, Any], draw: Any) -> str:
    pid = draw(st.sampled_from(sorted(c["optimizer_states"][0]["state"])))
    buf = c["optimizer_states"][0]["state"][pid]["momentum_buffer"]
    buf_shape = tuple(buf.shape)
    c["optimizer_states"][0]["state"][pid]["momentum_buffer"] = torch.zeros(_shape_unlike(draw, buf_shape))
    return f"optimizer_states[0].state[{pid!r}]['momentum_buffer']"


def _opt_other_class(c: dict[str, Any], draw: Any) -> str:
    other = draw(st.sampled_from([torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop, torch.optim.Adagrad]))
    module = TinyModule()
    opt = other(module.parameters())
    module.training_step(next(iter(loader())), 0).backward()
    opt.step()
    c["optimizer_states"][0] = opt.state_dict()
    return "optimizer_states[0].param_groups[0]"


def _opt_groups(c: dict[str, Any], draw: Any) -> str:
    groups = c["optimizer_states"][0]["param_groups"]
    if draw(st.booleans()):
        groups[0]["params"] = groups[0]["params"][: draw(st.integers(0, len(groups[0]["params"]) - 1))]
        return "optimizer_states[0].param_groups[0]"
    groups.append({**groups[0], "params": [99]})
    return "optimizer_states[0].param_groups"


def _opt_junk(c: dict[str, Any], draw: Any) -> str:
    where = draw(st.sampled_from(["whole", "state", "entry", "value"]))
    junk = draw(st.sampled_from(["adam", 3, [1, 2], None]))
    opt = c["optimizer_states"][0]
    if where == "whole":
        c["optimizer_states"][0] = junk
        return "optimizer_states[0]"
    if where == "state":
        opt["state"] = [junk]
        return "optimizer_states[0].state"
    pid = sorted(opt["state"])[0]
    if where == "entry":
        opt["state"][pid] = [junk]
        return f"optimizer_states[0].state[{pid!r}]"
    opt["state"][pid]["momentum_buffer"] = "adam" if junk is None else str(junk)
    return f"optimizer_states[0].state[{pid!r}]['momentum_buffer']"


def _schedulers(c: dict[str, Any], draw: Any) -> str:
    kind = draw(st.sampled_from(["list", "last_epoch", "base_lrs"]))
    if kind == "list":
        c["lr_schedulers"][0] = [c["lr_schedulers"][0]]
        return "lr_schedulers[0]"
    if kind == "last_epoch":
        c["lr_schedulers"][0]["last_epoch"] = draw(st.sampled_from(["3", [3], None, {"a": 1}]))
        return "lr_schedulers[0]['last_epoch']"
    c["lr_schedulers"][0]["base_lrs"] = [0.1] * draw(st.sampled_from([0, 2, 3]))
    return "lr_schedulers[0]['base_lrs']"


def _rng(c: dict[str, Any], draw: Any) -> str:
    kind = draw(st.sampled_from(["python", "python_values", "torch", "numpy", "extra", "whole"]))
    rng = c["rng"]
    if kind == "python":
        rng["python"] = draw(st.sampled_from(["state", [3, [1, 2], None], [3]]))
    elif kind == "python_values":
        internal = list(rng["python"][1])
        internal[draw(st.integers(0, 623))] = draw(st.sampled_from([-1, 2**32, "x", 1.5]))
        rng["python"] = [rng["python"][0], internal, rng["python"][2]]
    elif kind == "torch":
        rng["torch"] = draw(st.sampled_from([torch.zeros(10, dtype=torch.uint8), torch.zeros(5056), "seed"]))
    elif kind == "numpy":
        rng["numpy"] = draw(st.sampled_from([["MT19937"], "numpy", [*rng["numpy"][:2], 999, 0, 0.0]]))
    elif kind == "extra":
        rng["jax"] = torch.zeros(2)
        return "rng"
    else:
        c["rng"] = [rng]
        return "rng"
    return f"rng[{kind.removesuffix('_values')!r}]"


def _counters(c: dict[str, Any], draw: Any) -> str:
    state = c["state"]
    kind = draw(st.sampled_from(["progress", "counts", "metrics", "seed"]))
    bad = draw(st.sampled_from(["7", 1.5, -1, True, None, [1]]))
    if kind == "progress":
        field = draw(st.sampled_from(["epoch", "global_step", "batch_idx", "eval_batch_idx", "train_batches"]))
        state["progress"][field] = bad
        return field
    if kind == "counts":
        if isinstance(bad, int) and not isinstance(bad, bool) and bad >= 0:
            bad = "7"
        state["counts"]["fit.train.batch.end"] = bad
        return "counts"
    if kind == "metrics":
        state["metrics"]["train_loss"] = "low" if bad is None or _is_number(bad) else bad
        return "metrics"
    state["data"]["seed"] = "seed" if bad is None or (isinstance(bad, int) and not isinstance(bad, bool)) else bad
    return "seed"


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _precision_or_grads(c: dict[str, Any], draw: Any) -> str:
    if draw(st.booleans()):
        c["precision"] = draw(st.sampled_from([[1], "scaler", 3]))
        return "precision"
    c["grads"] = {"net.0.weight": torch.zeros(_shape_unlike(draw, (8, 4)))}
    return "gradient for 'net.0.weight'"


CORRUPTIONS: list[Callable[[dict[str, Any], Any], str]] = [
    _opt_state_shape,
    _opt_other_class,
    _opt_groups,
    _opt_junk,
    _schedulers,
    _rng,
    _counters,
    _precision_or_grads,
]


@slow(40)
@given(corrupt=st.sampled_from(CORRUPTIONS), data=st.data())
def test_a_corrupted_checkpoint_is_refused_naming_field_and_file_before_the_weights_change(
    finished_run: Path, tmp_path_factory: pytest.TempPathFactory, corrupt: Any, data: st.DataObject
) -> None:
    """Optimizer, scheduler, RNG, counter, precision corruption: CheckpointError naming file and field; weights kept."""
    payload = copy.deepcopy(IO.load_checkpoint(finished_run / "checkpoints" / "last.ckpt"))
    field = corrupt(payload, data.draw)
    path = tmp_path_factory.mktemp("corrupt") / "bad.ckpt"
    IO.save_checkpoint(payload, path)
    torch.manual_seed(1)
    module = TinyModule(scheduler=True)
    start = weights(module)
    trainer = interlock.Trainer(max_epochs=3, **only(), default_root_dir=path.parent)
    with pytest.raises(CheckpointError) as info:
        trainer.fit(module, loader(), ckpt_path=path)
    assert str(path) in str(info.value) and field in str(info.value), (field, str(info.value))
    assert same_weights(module, start)


# ------------------------------------------------------------------ 5. flags, traces, a second fit


@pytest.mark.parametrize(
    ("flags", "error", "phrase"),
    [
        ({"gradient_clip_val": float("nan")}, ValueError, "Trainer(gradient_clip_val=nan)"),
        ({"gradient_clip_val": float("inf")}, ValueError, "Trainer(gradient_clip_val=inf)"),
        ({"deterministic": "yes"}, ValueError, "Trainer(deterministic='yes')"),
        ({"deterministic": 1}, ValueError, "Trainer(deterministic=1)"),
        ({"listeners": "abc"}, TypeError, "Trainer(listeners='abc')"),
        ({"listeners": {"key": ModelCheckpoint()}}, TypeError, "expected a list of Listener objects"),
        ({"listeners": [object()]}, TypeError, "item 0 is <object object"),
        ({"listeners": [ModelCheckpoint]}, TypeError, "not a Listener"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag_the_value_and_the_fix(
    flags: dict[str, Any], error: type, phrase: str
) -> None:
    """NaN/inf clipping, a non-bool deterministic, listeners that are not Listener objects: refused at construction."""
    with pytest.raises(error) as info:
        interlock.Trainer(**flags)
    assert phrase in str(info.value)


class Stream(IterableDataset):  # type: ignore[type-arg]
    """An iterable dataset of ``n`` samples (no length)."""

    def __init__(self, n: int = 64) -> None:
        self.data = TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))

    def __iter__(self) -> Any:
        return iter(self.data)


def test_a_fractional_val_check_interval_needs_a_sized_training_loader(trainer_factory: Any) -> None:
    """val_check_interval=0.5 with an iterable training loader (no length) is refused at set-up, naming the flag."""
    trainer = trainer_factory(max_epochs=1, val_check_interval=0.5)
    with pytest.raises(ValueError, match=r"Trainer\(val_check_interval=0.5\).*no length.*pass an int"):
        trainer.fit(TinyModule(), DataLoader(Stream(), batch_size=16), loader(32))
    assert trainer.state.counts.get("fit.start", 0) == 0
    trainer_factory(max_epochs=1, val_check_interval=0.5, limit_train_batches=4).fit(
        TinyModule(), DataLoader(Stream(), batch_size=16), loader(32)
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(min_size=1, max_size=60).filter(lambda t: t.strip() and not t.lstrip().startswith(("{", "["))),
    newline=st.booleans(),
)
def test_chart_trace_refuses_a_file_that_is_not_a_trace(
    tmp_path_factory: pytest.TempPathFactory, text: str, newline: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """`interlock chart --trace FILE` with a file that is not an events trace: exit 2 saying so, no chart drawn."""
    file = tmp_path_factory.mktemp("trace") / "notes.txt"
    file.write_text(text + ("\n" if newline else ""), encoding="utf-8")
    assert main(["chart", "--trace", str(file)]) == 2
    out, err = capsys.readouterr()
    assert f"{file} is not an interlock trace" in err and out == ""


def test_chart_trace_refuses_records_of_states_the_chart_does_not_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JSON lines shaped like events but naming states the chart lacks: exit 2 naming the state and --chart."""
    file = tmp_path / "events.jsonl"
    file.write_text('{"event": "warmup", "trigger": "go", "source": "idle"}\n', encoding="utf-8")
    assert main(["chart", "--trace", str(file)]) == 2
    assert "names the state 'warmup'" in capsys.readouterr().err


def test_a_second_fit_continues_with_the_next_epoch_never_past_an_epochs_end(
    trainer_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second fit of one trainer starts the next epoch (batch 1..16 of 16); it says when there is nothing to train."""
    trainer = trainer_factory(max_epochs=3, num_sanity_val_steps=0)
    seen: list[tuple[int, int]] = []
    trainer.on("fit.train.batch.end", lambda e: seen.append((e.epoch, e.batch_idx)))
    trainer.on("fit.train.epoch_end", lambda e: interlock.Stop("pause"), once=True)

    def interrupt(event: interlock.Event) -> None:
        if event.epoch == 1 and event.batch_idx == 5:
            raise KeyboardInterrupt

    trainer.on("fit.train.batch.end", interrupt)
    trainer.fit(TinyModule(), loader(64, 4))  # stopped after epoch 0
    assert seen == [(0, i) for i in range(1, 17)]
    seen.clear()
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(TinyModule(), loader(64, 4))  # epoch 1, interrupted at its 5th batch
    assert seen == [(1, i) for i in range(1, 6)]
    seen.clear()
    capsys.readouterr()
    trainer.fit(TinyModule(), loader(64, 4))  # the unfinished epoch 1 is over: epoch 2, the last
    assert seen == [(2, i) for i in range(1, 17)]
    assert "fit continues in" in capsys.readouterr().err
    seen.clear()
    trainer.fit(TinyModule(), loader(64, 4))
    assert seen == [] and trainer.state.chart == "finished"
    assert "nothing to train: epoch 2 was the last of max_epochs=3; raise max_epochs" in capsys.readouterr().err


# ------------------------------------------------------------------ 6. empty training data


class Empty(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        return iter(())


def _no_endless_epochs(trainer: interlock.Trainer) -> None:
    starts = [0]

    def count(event: interlock.Event) -> None:
        starts[0] += 1
        if starts[0] > 20:
            raise AssertionError("fit ran 20 empty epochs: it would never return")

    trainer.on("fit.train.epoch_start", count)


@pytest.mark.parametrize("max_steps", [5, -1])
@pytest.mark.parametrize("n", [0, 3])
def test_an_empty_training_loader_is_refused_at_setup(trainer_factory: Any, max_steps: int, n: int) -> None:
    """A training loader of length 0 (no data, or fewer samples than a batch with drop_last): ValueError at set-up."""
    data = TensorDataset(torch.randn(n, 4), torch.zeros(n, dtype=torch.long))
    trainer = trainer_factory(max_steps=max_steps)
    _no_endless_epochs(trainer)
    with pytest.raises(ValueError, match=rf"training loader has no batches.*len\(dataset\) = {n}, batch_size=4"):
        trainer.fit(TinyModule(), DataLoader(data, batch_size=4, drop_last=True))
    assert trainer.state.counts.get("fit.start", 0) == 0


def test_an_unsized_loader_that_yields_nothing_stops_after_the_first_empty_epoch(trainer_factory: Any) -> None:
    """An iterable loader that turns out empty: an error after its first epoch, not endless epochs (max_steps set)."""
    trainer = trainer_factory(max_steps=5)
    _no_endless_epochs(trainer)
    with pytest.raises(RuntimeError, match="yielded no batches in epoch 0"):
        trainer.fit(TinyModule(), DataLoader(Empty(), batch_size=4))
    assert trainer.state.counts["fit.train.epoch_start"] == 1 and trainer.state.chart == "failed"


# ------------------------------------------------------------------ 7. Ctrl-C


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return reference(tmp_path_factory.getbasetemp())[0]


def _start(root: Path, err: Path, *args: str) -> subprocess.Popen[str]:
    with err.open("w") as sink:
        return _spawn(RESUME_WORKER, "--root", str(root), "--report", *args, stderr=sink)


def test_the_first_ctrl_c_saves_at_the_next_boundary_and_resumes_exactly(
    expected: dict[str, Any], tmp_path: Path
) -> None:
    """One SIGINT: a notice with the resume command, a save at a boundary, exit 130; the resume is bitwise exact."""
    err = tmp_path / "err.txt"
    proc = _start(tmp_path, err)
    resume = ahead(["--root", str(tmp_path), "--ckpt", "last", "--out", str(tmp_path / "o.pt")])
    try:  # the resuming process starts up while the first trains; it begins after the first has exited
        try:
            lines = Lines(proc)
            for _ in range(5):
                lines.wait_for("batch ")
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 130
        finally:
            proc.kill()
            proc.communicate(timeout=60)
        last = tmp_path / "runs" / "version_0" / "checkpoints" / "last.ckpt"
        text = err.read_text()
        assert f"interlock: Ctrl-C: saving {last} at the next batch boundary" in text
        assert f"resume with fit(..., ckpt_path='{last}')" in text
        assert f"interrupted: checkpoint={last}" in text
        saved = IO.load_checkpoint(last)["state"]
        assert saved["chart"] in BOUNDARIES and saved["progress"]["train_batches"] >= 5
        ((code, resumed),) = go(resume)
    finally:
        stop(resume)
    assert code == 0, resumed[-3000:]
    assert f"interlock: resuming {last}" in resumed
    assert compare(expected, torch.load(tmp_path / "o.pt", weights_only=True)) == []


def test_a_second_ctrl_c_stops_at_once_without_saving(tmp_path: Path) -> None:
    """Two SIGINTs during a 20 s training step: the second raises KeyboardInterrupt there, long before the step ends."""
    err = tmp_path / "err.txt"
    proc = _start(tmp_path, err, "--slow-step", "20")
    try:
        lines = Lines(proc)
        lines.wait_for("batch 2")  # batch 2 done (and saved: one optimizer step); batch 3's step sleeps 20 s
        time.sleep(0.5)
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=15)
        elapsed = time.monotonic() - began
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    text = err.read_text()
    assert code == 130 and elapsed < 12, (code, elapsed, text[-2000:])
    assert "interlock: Ctrl-C: saving" in text and "interrupted: checkpoint=none" in text
    saved = IO.load_checkpoint(tmp_path / "runs" / "version_0" / "checkpoints" / "last.ckpt")["state"]
    assert saved["progress"]["train_batches"] == 2  # the every-step save of batch 2; nothing after


def test_a_forked_child_ignores_the_signals_its_parent_catches() -> None:
    """A process forked while the handlers are installed (a DataLoader worker) leaves the signal to the installer."""
    flag = PreemptionFlag((signal.SIGUSR1,))
    flag.install()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.05)
            os._exit(0 if flag.received is None else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        flag.uninstall()
    assert os.waitstatus_to_exitcode(status) == 0 and flag.received is None
