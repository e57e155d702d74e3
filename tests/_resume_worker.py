"""A training run for the resume tests, run in a fresh process (``sys.executable tests/_resume_worker.py``).

The run has everything exact resuming must carry: shuffling, dropout,
``accumulate_grad_batches=2``, a per-step and a per-epoch LR scheduler, Adam
state, validation every 3 batches, a ModelCheckpoint and a stateful listener.

Options:

- ``--out FILE``: at the end, write what the run ended with (weights, optimizer
  and scheduler states, history, event counts, listener states) with ``torch.save``;
- ``--ckpt PATH``: resume from ``PATH`` (or ``last``);
- ``--save-at N1,N2,...``: for each N, one run (in this process, under ``ROOT/N``) that
  asks for ``ROOT/N/interrupted.ckpt`` at its N-th event (written at the next
  checkpointable state) and crashes at the first event after the file exists;
- ``--report``: print ``batch <train_batches>`` after each training batch (flushed);
- ``--die-in-save K``: SIGKILL itself halfway through writing its K-th checkpoint;
- ``--slow-step SECONDS``: sleep that long in every training step after the first two (a run to interrupt
  mid-batch);
- ``--trace FILE``: write the names of all events, in order, as JSON;
- ``--go``: started ahead of its turn (``ahead``): import everything, then wait for a line on stdin before the run.

Exit codes: 0 finished, 3 every ``--save-at`` run crashed as asked, 128+signum when preempted,
130 on Ctrl-C (stderr then says ``interrupted: checkpoint=PATH``, the file the interruption saved, or none).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock
from interlock import Event, Listener, SaveCheckpoint, TrainerState
from interlock.core.bitwise import differences, relocate
from interlock.core.state import thaw
from interlock.listeners.checkpoint import ModelCheckpoint

MAX_EPOCHS = 3
SEED = 11


class Tiny(interlock.Module):
    """6 -> 16 -> 3 MLP with dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3)
        )

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        out = self.net(x)
        return {"loss": torch.nn.functional.cross_entropy(out, y), "acc": (out.argmax(1) == y).float().mean()}

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        return self.training_step(batch, batch_idx)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=0.02)
        per_step = {"scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.8), "interval": "step"}
        return [opt], [per_step, torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)]


class Tally(Listener):
    """A stateful listener: counts training batches and keeps the validation losses it saw."""

    def subscriptions(self) -> Any:
        yield "fit.train.batch.end", self.on_batch, None, False
        yield "fit.train.val.end", self.on_val, None, False

    def on_batch(self, event: Event, state: TrainerState) -> Any:
        return self.store(state, batches=self.stored(state).get("batches", 0) + 1)

    def on_val(self, event: Event, state: TrainerState) -> Any:
        seen = list(self.stored(state).get("val_losses", ()))
        return self.store(state, val_losses=[*seen, state.metrics["val_loss"]])


def datasets() -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(52, 6, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return TensorDataset(x[:40], y[:40]), TensorDataset(x[40:], y[40:])


def listeners() -> list[Listener]:
    """A stateful listener, a top-2 ModelCheckpoint on val_loss, one saving every step (both write last.ckpt)."""
    top_k = ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True, filename="{epoch}-{step}-{val_loss:.4f}")
    every = ModelCheckpoint(every_n_train_steps=1, save_last=True, key="EveryStep")
    return [Tally(), top_k, every]


def result(trainer: interlock.Trainer, module: Tiny, scheds: Any) -> dict[str, Any]:
    """What the run ended with, as plain data and tensors."""
    state = trainer.state
    return {
        "model": module.state_dict(),
        "optimizers": [o.state_dict() for o in scheds["optimizers"]],
        "schedulers": [s.state_dict() for s in scheds["schedulers"]],
        "history": thaw(state.history),
        "counts": {k: v for k, v in state.counts.items() if v},
        "listeners": thaw(state.listeners),
        "progress": [state.epoch, state.global_step, state.batch_idx, state.progress.train_batches],
        "metrics": thaw(state.metrics),
        "best_metrics": thaw(state.best_metrics),
        "run_dir": state.run_dir,
        "rng": torch.get_rng_state(),
    }


def compare(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Differences between two ``--out`` results, run directories aside."""

    keys = ["model", "optimizers", "schedulers", "history", "counts", "listeners", "progress", "metrics"]
    keys += ["best_metrics", "rng"]
    a = {k: relocate(expected[k], expected["run_dir"]) for k in keys}
    return differences(a, {k: relocate(got[k], got["run_dir"]) for k in keys})


class Crash(Exception):
    """The simulated interruption."""


def die_in_save(k: int) -> None:
    """SIGKILL this process halfway through writing the k-th checkpoint (after its temp file is open)."""
    real_save = torch.save
    calls = [0]

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(f, str | os.PathLike):
            real_save(obj, f, *args, **kwargs)
            return
        calls[0] += 1
        if calls[0] < k:
            real_save(obj, f, *args, **kwargs)
            return
        buf = io.BytesIO()
        real_save(obj, buf, *args, **kwargs)
        data = buf.getvalue()
        f.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    torch.save = save


def run(args: argparse.Namespace, root: str, save_at: int | None = None, ckpt_out: str = "") -> tuple[int, Any]:
    """One fit; returns (exit code, result or None). ``save_at``: save at that event, then crash."""
    train_set, val_set = datasets()
    trainer = interlock.Trainer(
        max_epochs=args.max_epochs,
        accumulate_grad_batches=2,
        val_check_interval=3,
        num_sanity_val_steps=1,
        seed=SEED,
        accelerator="cpu",
        listeners=listeners(),
        logger=False,
        enable_trace=False,
        enable_progress_bar=False,
        default_root_dir=root,
    )
    torch.manual_seed(SEED)  # the initial weights
    module = Tiny()
    captured: dict[str, Any] = {}
    real_configure = module.configure_optimizers

    def configure() -> Any:
        opts, scheds = real_configure()
        captured["optimizers"] = opts
        captured["schedulers"] = [s["scheduler"] if isinstance(s, dict) else s for s in scheds]
        return opts, scheds

    module.configure_optimizers = configure  # type: ignore[method-assign]
    names: list[str] = []
    crashed: list[str] = []

    @trainer.on("*")
    def watch(event: Event) -> Any:
        names.append(event.name)
        if save_at is not None:
            if len(names) == save_at:
                return SaveCheckpoint(ckpt_out, tag="test")
            if len(names) > save_at and not crashed and os.path.exists(ckpt_out):
                crashed.append(event.name)
                raise Crash(f"simulated crash at event {len(names)} ({event.name})")
        if args.report and event.name == "fit.train.batch.end":
            print(f"batch {trainer.state.progress.train_batches}", flush=True)
        if args.slow_step and event.name == "fit.train.batch.step" and trainer.state.progress.train_batches >= 2:
            time.sleep(args.slow_step)
        return None

    train = DataLoader(train_set, batch_size=4, shuffle=True)
    val = DataLoader(val_set, batch_size=4)
    code = 0
    try:
        trainer.fit(module, train, val, ckpt_path=args.ckpt)
    except Crash:
        code = 3
    except interlock.Preempted as exc:
        code = 128 + exc.signum
    except KeyboardInterrupt as exc:
        print(f"interrupted: checkpoint={getattr(exc, 'checkpoint', None) or 'none'}", file=sys.stderr, flush=True)
        code = 130
    if args.trace:
        Path(args.trace).write_text(json.dumps(names))
    return code, (result(trainer, module, captured) if code == 0 else None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--out")
    p.add_argument("--ckpt")
    p.add_argument("--max-epochs", type=int, default=MAX_EPOCHS)
    p.add_argument("--save-at", help="comma-separated event numbers; one crashed run (under ROOT/<n>) for each")
    p.add_argument("--report", action="store_true")
    p.add_argument("--die-in-save", type=int)
    p.add_argument("--slow-step", type=float, default=0.0)
    p.add_argument("--trace")
    p.add_argument("--go", action="store_true")
    args = p.parse_args(argv)
    if args.go:
        importlib.import_module("torch._dynamo")  # what the first optimizer imports: start-up, done ahead
        if sys.stdin.readline() != "go\n":  # the test ended without letting it run
            return 1
    torch.set_num_threads(1)
    if args.die_in_save:
        die_in_save(args.die_in_save)
    if args.save_at:
        codes = []
        for n in (int(x) for x in args.save_at.split(",")):
            root = os.path.join(args.root, str(n))
            codes.append(run(args, root, n, os.path.join(root, "interrupted.ckpt"))[0])
        return 3 if all(c == 3 for c in codes) else 1
    code, out = run(args, args.root)
    if args.out and out is not None:
        torch.save(out, args.out)
    return code


def worker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run this script in a fresh process."""
    return subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def ahead(*arglists: list[str]) -> list[subprocess.Popen[str]]:
    """Start this script once per argument list, each in a fresh process that starts up and waits for ``go``."""
    return [
        subprocess.Popen(
            [sys.executable, __file__, "--go", *a],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in arglists
    ]


def go(procs: list[subprocess.Popen[str]], timeout: float = 180) -> list[tuple[int, str]]:
    """Let workers started by ``ahead`` run, all at once; wait for them: (exit code, stderr) of each."""
    for proc in procs:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it ended already: its exit code and stderr say why
            proc.stdin.write("go\n")
            proc.stdin.flush()
    done = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        done.append((proc.returncode, err))
    return done


def stop(procs: list[subprocess.Popen[str]]) -> None:
    """End workers started by ``ahead`` that are still running (a test failed before it let them go)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def workers(*arglists: list[str], timeout: float = 180) -> list[tuple[int, str]]:
    """Run this script once per argument list, concurrently, each in a fresh process: (exit code, stderr)."""
    return go(ahead(*arglists), timeout)


def reference(base: Path) -> tuple[dict[str, Any], list[str]]:
    """The uninterrupted run's result and event names, computed once per ``base`` directory."""
    out, trace = base / "reference.pt", base / "reference.json"
    if not out.exists():
        proc = worker("--root", str(base / "reference"), "--out", str(out), "--trace", str(trace))
        assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out, weights_only=True), json.loads(trace.read_text())


if __name__ == "__main__":
    sys.exit(main())
