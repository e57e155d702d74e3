"""Interrupt the built-in digits example at random transitions and check that resuming is bitwise exact.

    python tools/resume_check.py --trials 20 --json [--accelerator cuda]

One uninterrupted reference run; then, for each trial, a fresh process trains
until a random transition, saves a checkpoint (at the next checkpointable
state) and crashes, and another fresh process resumes from that checkpoint and
trains to the end. A trial passes when the resumed run ends with bitwise the
same weights, optimizer and scheduler states, metric history, event counts and
listener states as the reference. Prints ``{"trials": N, "bitwise_equal": K,
"failures": [...], ...}`` (``--json``) or a summary; exits 0 iff K == N.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

EPOCHS, LIMIT_TRAIN, LIMIT_VAL, SEED = 3, 12, 2, 0


# ------------------------------------------------------------------------------ worker side
def _fit(
    root: str, out: str | None, ckpt: str | None, save_at: int | None, trace: str | None, accelerator: str = "cpu"
) -> int:
    """One run of the example in this process; returns the exit code (3: crashed after the save, as asked)."""
    import torch

    import interlock
    from interlock.core.state import thaw
    from interlock.examples.digits import DigitsClassifier, DigitsData
    from interlock.listeners import EarlyStopping
    from interlock.listeners.checkpoint import ModelCheckpoint

    torch.set_num_threads(1)
    data = DigitsData(batch_size=32)
    trainer = interlock.Trainer(
        max_epochs=EPOCHS,
        limit_train_batches=LIMIT_TRAIN,
        limit_val_batches=LIMIT_VAL,
        val_check_interval=4,
        accumulate_grad_batches=2,
        num_sanity_val_steps=1,
        seed=SEED,
        accelerator=accelerator,
        deterministic=accelerator != "cpu" or None,
        default_root_dir=root,
        listeners=[
            EarlyStopping(monitor="val_loss", patience=100),
            ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True),
        ],
    )
    torch.manual_seed(SEED)
    module = DigitsClassifier(hidden=64, step_size=5)
    made: dict[str, Any] = {}
    configure = module.configure_optimizers

    def capture() -> Any:
        made.update(configure())
        return made

    module.configure_optimizers = capture  # type: ignore[method-assign]
    names: list[str] = []
    crashed: list[str] = []
    target = os.path.join(root, "interrupted.ckpt")

    class Crash(Exception):
        pass

    @trainer.on("*")
    def watch(event: interlock.Event) -> Any:
        names.append(event.name)
        if save_at is not None and len(names) == save_at:
            return interlock.SaveCheckpoint(target, tag="resume_check")
        if save_at is not None and len(names) > save_at and not crashed and os.path.exists(target):
            crashed.append(event.name)
            raise Crash
        return None

    try:
        trainer.fit(module, data.train_dataloader(), data.val_dataloader(), ckpt_path=ckpt)
    except Crash:
        return 3
    if trace:
        Path(trace).write_text(json.dumps(names))
    if out:
        state = trainer.state
        result = {
            "model": module.state_dict(),
            "optimizer": made["optimizer"].state_dict(),
            "scheduler": made["lr_scheduler"].state_dict(),
            "history": thaw(state.history),
            "counts": {k: v for k, v in state.counts.items() if v},
            "listeners": thaw(state.listeners),
            "metrics": thaw(state.metrics),
            "progress": [state.epoch, state.global_step, state.progress.train_batches],
            "run_dir": state.run_dir,
        }
        torch.save(result, out)
    return 0


# ------------------------------------------------------------------------------ checker side
def _compare(expected_path: Path, got_path: Path) -> list[str]:
    import torch

    from interlock.core.bitwise import differences, relocate

    expected, got = (torch.load(p, weights_only=True) for p in (expected_path, got_path))
    return differences(relocate(expected, expected.pop("run_dir")), relocate(got, got.pop("run_dir")))


ACCELERATOR = ["cpu"]  # the checker's --accelerator, passed on to every worker


def _spawn(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, __file__, "--worker", "--accelerator", ACCELERATOR[0], *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _chart_of(path: Path) -> str:
    from interlock.plugins.checkpoint_io import TorchCheckpointIO

    return str(TorchCheckpointIO().load_checkpoint(path)["state"]["chart"])


def _trial(work: Path, n: int, event: str, reference: Path, timeout: float) -> dict[str, Any]:
    root = work / f"trial{n}"
    crashed = _spawn("--root", str(root), "--save-at", str(n), timeout=timeout)
    info: dict[str, Any] = {"transition": n, "event": event}
    if crashed.returncode != 3:
        return {**info, "error": f"the interrupted run exited {crashed.returncode}: {crashed.stderr[-1500:]}"}
    ckpt = root / "interrupted.ckpt"
    info["saved_at"] = _chart_of(ckpt)
    out = root / "resumed.pt"
    resumed = _spawn("--root", str(root), "--ckpt", str(ckpt), "--out", str(out), timeout=timeout)
    if resumed.returncode != 0:
        return {**info, "error": f"the resumed run exited {resumed.returncode}: {resumed.stderr[-1500:]}"}
    diffs = _compare(reference, out)
    return {**info, "differences": diffs[:20]} if diffs else info


def check(trials: int, seed: int, jobs: int, work: Path, timeout: float) -> dict[str, Any]:
    """Run the reference and ``trials`` interrupted-and-resumed runs; return the report."""
    start = time.monotonic()
    reference, trace = work / "reference.pt", work / "reference.json"
    print("reference run ...", file=sys.stderr, flush=True)
    ref = _spawn("--root", str(work / "reference"), "--out", str(reference), "--trace", str(trace), timeout=timeout)
    if ref.returncode != 0:
        raise SystemExit(f"resume_check: the reference run failed:\n{ref.stderr[-3000:]}")
    names = json.loads(trace.read_text())
    last = max(i for i, name in enumerate(names) if name == "fit.train.epoch_end") + 1
    rng = random.Random(seed)
    points = sorted(rng.sample(range(1, last + 1), min(trials, last)))
    points += [rng.randint(1, last) for _ in range(trials - len(points))]  # more trials than transitions
    results: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_trial, work, n, names[n - 1], reference, timeout) for n in points]
        for done, future in enumerate(futures, 1):
            r = future.result()
            results.append(r)
            verdict = "bitwise equal" if "error" not in r and "differences" not in r else "FAILED"
            print(
                f"[{done}/{len(points)}] transition {r['transition']} ({r['event']}) saved at "
                f"{r.get('saved_at', '?')}: {verdict}",
                file=sys.stderr,
                flush=True,
            )
    failures = [r for r in results if "error" in r or "differences" in r]
    return {
        "trials": len(results),
        "bitwise_equal": len(results) - len(failures),
        "failures": failures,
        "saved_at": dict(Counter(r.get("saved_at", "?") for r in results)),
        "transitions": last,
        "seed": seed,
        "seconds": round(time.monotonic() - start, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10, help="interruption points to check (default 10)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--seed", type=int, default=0, help="seed of the random interruption points")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="trials run at once")
    p.add_argument("--timeout", type=float, default=600, help="seconds one training process may take")
    p.add_argument("--keep", type=Path, help="keep the runs and checkpoints in this directory")
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "cuda"), help="where the runs train (default cpu)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--ckpt", help=argparse.SUPPRESS)
    p.add_argument("--save-at", type=int, help=argparse.SUPPRESS)
    p.add_argument("--trace", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return _fit(args.root, args.out, args.ckpt, args.save_at, args.trace, args.accelerator)
    ACCELERATOR[0] = args.accelerator
    if args.trials < 1:
        p.error("--trials must be >= 1")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        report = check(args.trials, args.seed, max(1, args.jobs), args.keep, args.timeout)
    else:
        with tempfile.TemporaryDirectory(prefix="resume_check_") as tmp:
            report = check(args.trials, args.seed, max(1, args.jobs), Path(tmp), args.timeout)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['bitwise_equal']}/{report['trials']} interrupted runs resumed bitwise equal")
        for f in report["failures"]:
            print(f"  transition {f['transition']} ({f['event']}): {f.get('error') or f['differences'][:3]}")
    return 0 if report["bitwise_equal"] == report["trials"] else 1


if __name__ == "__main__":
    sys.exit(main())
