"""Run many clean 2-rank ``torchrun`` DDP (or FSDP) fits, optionally beside a CPU hog; count those that exit non-zero.

    python tools/ddp_exit_check.py --runs 50 --hog [--strategy fsdp]

A clean fit must exit 0 on every rank: a scheduler marks a job whose rank dies at
interpreter exit (SIGABRT, "terminate called without an active exception") as failed.
Prints ``{"runs": N, "clean": K, "failures": [...]}`` (``--json``) or a summary; exits 0
iff K == N. Each fit trains the digits example for one short epoch on CPU over gloo; the
script keeps its module and trainer as globals to the end, as scripts do.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FIT = """
import sys
import interlock
from interlock.examples.digits import DigitsClassifier, DigitsData

data = DigitsData()
trainer = interlock.Trainer(
    strategy=sys.argv[2], devices=2, max_epochs=1, limit_train_batches=8, limit_val_batches=2,
    default_root_dir=sys.argv[1], seed=0,
)
model = DigitsClassifier()
trainer.fit(model, data.train_dataloader(), data.val_dataloader())
"""


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _hog(stop: Any) -> None:  # pragma: no cover - a busy loop in another process
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def one(root: Path, timeout: float, strategy: str = "ddp") -> dict[str, Any]:
    """One torchrun fit; its exit code and the tail of its output."""
    script = root / "fit.py"
    script.write_text(FIT)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        f"--master-port={_port()}",
        str(script),
        str(root / "out"),
        strategy,
    ]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=root)
    except subprocess.TimeoutExpired:
        return {"rc": None, "seconds": timeout, "tail": "timed out"}
    out = (proc.stdout + proc.stderr).strip().splitlines()
    return {"rc": proc.returncode, "seconds": time.perf_counter() - t0, "tail": "\n".join(out[-8:])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10, help="fits to run (default 10)")
    p.add_argument("--hog", action="store_true", help="keep one CPU busy in another process meanwhile")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds one fit may take")
    p.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp", help="the fits' strategy (default ddp)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    stop = multiprocessing.Event()
    hog = multiprocessing.Process(target=_hog, args=(stop,), daemon=True) if args.hog else None
    if hog is not None:
        hog.start()
    failures: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    try:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="ddp-exit-") as tmp:
                result = one(Path(tmp), args.timeout, args.strategy)
            ok = result["rc"] == 0
            print(f"[{i + 1}/{args.runs}] exit {result['rc']} in {result['seconds']:.1f} s", file=sys.stderr)
            if not ok:
                failures.append({"run": i + 1, **result})
    finally:
        stop.set()
        if hog is not None:
            hog.join(timeout=5)
    report = {
        "runs": args.runs,
        "clean": args.runs - len(failures),
        "hog": args.hog,
        "strategy": args.strategy,
        "failures": failures,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        beside = " beside a CPU hog" if args.hog else ""
        print(f"{report['clean']}/{report['runs']} clean 2-rank {args.strategy.upper()} fits{beside}")
        for f in failures:
            print(f"run {f['run']}: exit {f['rc']}\n{f['tail']}")
    return 0 if not failures else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
