"""Preemption (a real SIGTERM) and crashes (SIGKILL at random moments): the last checkpoint always resumes exactly."""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from _resume_worker import ahead, compare, go, reference, stop, workers
from conftest import TinyModule, loader, only
from interlock.connectors.signals import PreemptionFlag
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.plugins.checkpoint_io import TorchCheckpointIO

IO = TorchCheckpointIO()
WORKER = str(Path(__file__).with_name("_resume_worker.py"))
BOUNDARIES = {"fit.train.batch.end", "fit.train.val.batch.end", "fit.train.epoch_end"}


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return reference(tmp_path_factory.getbasetemp())[0]


def start(root: Path, *args: str) -> subprocess.Popen[str]:
    """A reporting training worker (``batch N`` per training batch on stdout)."""
    return subprocess.Popen(
        [sys.executable, WORKER, "--root", str(root), "--report", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def wait_for_batches(proc: subprocess.Popen[str], n: int, timeout: float = 120) -> bool:
    """Read the worker's reports until it has finished ``n`` training batches; False if it ended first."""
    assert proc.stdout is not None
    seen, deadline = 0, time.monotonic() + timeout
    while seen < n:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            proc.kill()
            pytest.fail(f"the worker reported {seen} batches in {timeout} s")
        line = proc.stdout.readline()
        if not line:
            return False
        seen += line.startswith("batch ")
    return True


def last_ckpt(root: Path) -> Path | None:
    found = sorted(root.glob("runs/*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime_ns)
    return found[-1] if found else None


def test_sigterm_saves_at_the_next_boundary_exits_128_plus_signum_and_resumes_exactly(
    expected: dict[str, Any], tmp_path: Path
) -> None:
    """A real SIGTERM: the worker saves last.ckpt at the next batch boundary, exits 143; resuming is bitwise exact."""
    proc = start(tmp_path)
    resume = ahead(["--root", str(tmp_path), "--ckpt", "last", "--out", str(tmp_path / "o.pt")])
    try:  # the resuming process starts up while the first trains; it begins after the first has exited
        assert wait_for_batches(proc, 7)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        saved = IO.load_checkpoint(last_ckpt(tmp_path))["state"]
        assert saved["chart"] in BOUNDARIES and saved["progress"]["train_batches"] >= 7
        ((code, err),) = go(resume)
        assert code == 0, err[-3000:]
    finally:
        stop(resume)
        proc.kill()
        proc.wait()
    assert compare(expected, torch.load(tmp_path / "o.pt", weights_only=True)) == []


def test_sigterm_inside_validation_saves_there_and_restores_the_handler(tmp_path: Path) -> None:
    """A SIGTERM during validation saves at that validation batch, ends 'interrupted', and resumes exactly."""

    def run(**kw: Any) -> tuple[interlock.Trainer, TinyModule]:
        torch.manual_seed(0)
        module = TinyModule(dropout=0.3)
        trainer = interlock.Trainer(
            max_epochs=2, seed=4, **only(ModelCheckpoint(save_last=True)), default_root_dir=kw.pop("root")
        )
        if kw.pop("preempt", False):
            trainer.on("fit.train.val.batch.end", lambda e: os.kill(os.getpid(), signal.SIGTERM), once=1)
        trainer.fit(module, loader(64, 16, shuffle=True), loader(48, 16), **kw)
        return trainer, module

    before = signal.getsignal(signal.SIGTERM)
    whole, whole_module = run(root=tmp_path / "whole")
    with pytest.raises(interlock.Preempted) as info:
        run(root=tmp_path / "cut", preempt=True)
    assert info.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before
    saved = IO.load_checkpoint(last_ckpt(tmp_path / "cut"))["state"]
    assert (saved["chart"], saved["progress"]["eval_batch_idx"]) == ("fit.train.val.batch.end", 1)
    resumed, module = run(root=tmp_path / "cut", ckpt_path="last")
    pairs = zip(whole_module.state_dict().values(), module.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert resumed.state.history == whole.state.history


def test_a_signal_after_quiet_batches_is_agreed_at_that_batch_end(tmp_path: Path) -> None:
    """No listener changes the state between batches; a SIGTERM in batch 6's step stops the run at its end."""

    class Signalling(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.global_step == 5:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().training_step(batch, batch_idx)

    trainer = interlock.Trainer(max_epochs=3, **only(), default_root_dir=tmp_path, num_sanity_val_steps=0)
    with pytest.raises(interlock.Preempted):
        trainer.fit(Signalling(), loader(64, 4))
    assert (trainer.state.chart, trainer.state.status) == ("interrupted", "interrupted")
    assert trainer.state.progress.global_step == 6  # the batch whose step got the signal finished


def test_preemption_flag_only_records_the_first_signal() -> None:
    """The handler stores the signal number (first one wins) and nothing else; uninstall puts the old handler back."""
    before = signal.getsignal(signal.SIGUSR1)
    flag = PreemptionFlag((signal.SIGUSR1, signal.SIGUSR2))
    flag.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert flag.received == signal.SIGUSR2
    finally:
        flag.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == before


def kill_chain(expected: dict[str, Any], base: Path, rng: random.Random, wanted: int, mid_save: set[int]) -> Any:
    """Kill workers until ``wanted`` SIGKILLs: each resumes from the last.ckpt its killed predecessor left.

    Kills numbered in ``mid_save`` land halfway through writing a checkpoint. A worker that finishes before its
    kill is checked against ``expected`` and a new chain starts. Returns (snapshots of last.ckpt after each kill,
    the unfinished chain's root, how many chains finished).
    """
    kills, finished, snapshots = 0, 0, []
    root = base / "chain0"
    while kills < wanted:
        last = last_ckpt(root)
        args = ["--ckpt", "last"] if last else []
        if kills in mid_save:
            args += ["--die-in-save", str(rng.randint(1, 3))]
        proc = start(root, *args, "--out", str(root / "out.pt"))
        if kills in mid_save:
            proc.wait(timeout=120)
        elif rng.random() < 0.2:  # anywhere, start-up included
            time.sleep(rng.uniform(0.0, 3.0))
            proc.kill()
        elif wait_for_batches(proc, rng.randint(1, 3)):
            time.sleep(rng.uniform(0.0, 0.02))
            proc.kill()
        code = proc.wait(timeout=120)
        if proc.stdout is not None:
            proc.stdout.close()
        if code == 0:  # it finished before the kill: check it, start another chain
            assert compare(expected, torch.load(root / "out.pt", weights_only=True)) == []
            finished += 1
            root = base / f"chain{finished}"
            continue
        assert code == -signal.SIGKILL
        kills += 1
        last = last_ckpt(root)
        if last is not None:
            IO.load_checkpoint(last)  # a killed run never leaves a broken last.ckpt
            snapshots.append(shutil.copy(last, base / f"snapshot{kills}.ckpt"))
    return snapshots, root, finished


def test_sigkill_at_random_moments_leaves_a_loadable_last_checkpoint_that_resumes_exactly(
    expected: dict[str, Any], tmp_path: Path
) -> None:
    """SIGKILL at >= 20 random moments (some inside a checkpoint write): last.ckpt always loads, resuming is exact.

    Two chains of processes side by side, 10 kills each: each process resumes from the last.ckpt its killed
    predecessor left and is killed in turn; the survivors' ends, and independent resumes of saved snapshots, must
    equal the uninterrupted run.
    """
    rng = random.Random(20240607)
    plans = [
        (tmp_path / "a", random.Random(rng.random()), 10, {3, 9}),
        (tmp_path / "b", random.Random(rng.random()), 10, {5}),
    ]
    with ThreadPoolExecutor(len(plans)) as pool:  # one chain's worker runs while the other's starts up
        chains = [f.result() for f in [pool.submit(kill_chain, expected, *plan) for plan in plans]]
    snapshots = [snap for snaps, _, _ in chains for snap in snaps]
    stray = len(list(tmp_path.rglob("*.tmp")))  # writes a kill cut short: never renamed into place
    kills, finished = sum(wanted for _, _, wanted, _ in plans), sum(done for _, _, done in chains)
    print(f"{kills} kills, {finished} chains finished, {len(snapshots)} snapshots, {stray} cut-short writes left")
    assert snapshots
    runs = [
        ["--root", str(root), "--out", str(root / "out.pt"), *(["--ckpt", "last"] if last_ckpt(root) else [])]
        for _, root, _ in chains
    ]
    for i, snap in enumerate(rng.sample(snapshots, min(2, len(snapshots)))):
        runs.append(["--root", str(tmp_path / f"alone{i}"), "--ckpt", str(snap), "--out", str(tmp_path / f"{i}.pt")])
    for (code, err), args in zip(workers(*runs), runs, strict=True):
        assert code == 0, err[-3000:]
        assert compare(expected, torch.load(args[args.index("--out") + 1], weights_only=True)) == [], args


SLURM_ENV = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NAME": "train",
    "SLURM_NTASKS": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
}


def test_slurm_requeue_signal_is_a_preemption_signal_only_under_slurm(tmp_path: Path, monkeypatch: Any) -> None:
    """Under SLURM, SIGUSR1 (sbatch --signal=USR1@90) saves last.ckpt and raises Preempted(SIGUSR1)."""
    from interlock.trainer.session import preemption_signals

    assert preemption_signals({}) == (signal.SIGTERM,)
    assert preemption_signals(SLURM_ENV) == (signal.SIGTERM, signal.SIGUSR1)
    for key, value in SLURM_ENV.items():
        monkeypatch.setenv(key, value)
    trainer = interlock.Trainer(
        max_epochs=2, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path, accelerator="cpu"
    )
    trainer.on("fit.train.batch.end", lambda e: os.kill(os.getpid(), signal.SIGUSR1), once=3)
    with pytest.raises(interlock.Preempted) as info:
        trainer.fit(TinyModule(), loader(64, 16))
    assert info.value.signum == signal.SIGUSR1
    assert trainer.state.chart == "interrupted"
    saved = IO.load_checkpoint(last_ckpt(tmp_path))["state"]
    assert (saved["chart"], saved["progress"]["global_step"]) == ("fit.train.batch.end", 3)
