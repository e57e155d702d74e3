"""Fit the digits example on one CUDA device under every precision flag and print a table.

    python tools/gpu_check.py [--epochs 10] [--precisions 32-true,bf16-mixed]

Columns: precision, final val_acc, seconds per epoch (after the first), peak
device memory, and the parameter dtype after the fit. Without CUDA it says so
and exits 0. Exits 1 if any precision fails to fit or ends below --min-acc.
``--accelerator cpu`` runs the same check on the CPU (to try the tool itself).
``tools/gpu_suite.sh`` runs this with every other check that needs a GPU (docs/accelerators.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any

import torch

import interlock
from interlock.examples.digits import DigitsClassifier, DigitsData
from interlock.plugins.precision import PRECISION_FLAGS


def fit_once(flag: str, accelerator: str, epochs: int, root: str) -> dict[str, Any]:
    """One single-device fit; the row of the table."""
    cuda = accelerator == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    module, data = DigitsClassifier(), DigitsData(batch_size=64)
    trainer = interlock.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=flag,
        max_epochs=epochs,
        num_sanity_val_steps=0,
        listeners=[],
        logger=False,
        enable_trace=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        seed=0,
        default_root_dir=root,
    )
    stamps: list[float] = []

    def stamp(event: interlock.Event) -> None:
        if cuda:
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())

    trainer.on("fit.train.epoch_start", stamp)
    trainer.on("fit.train.epoch_end", stamp)
    metrics = trainer.fit(module, data.train_dataloader(), data.val_dataloader())
    durations = [end - start for start, end in zip(stamps[::2], stamps[1::2], strict=False)]
    steady = durations[1:] or durations
    peak = torch.cuda.max_memory_allocated() if cuda else trainer.hardware.accelerator.memory_stats()["peak_bytes"]
    return {
        "precision": flag,
        "val_acc": metrics["val_acc"],
        "s_per_epoch": sum(steady) / len(steady),
        "peak_mib": peak / 2**20,
        "param_dtype": str(next(module.parameters()).dtype).removeprefix("torch."),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--precisions", default=",".join(PRECISION_FLAGS))
    parser.add_argument("--min-acc", type=float, default=0.9, help="fail a precision that ends below this val_acc")
    parser.add_argument("--accelerator", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args(argv)
    if args.accelerator == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device is available here; nothing to check.")
        return 0
    if args.accelerator == "cuda":
        print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    header = f"{'precision':<11} {'val_acc':>7} {'s/epoch':>8} {'peak MiB':>9}  param dtype"
    print(header)
    print("-" * len(header))
    failures = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as root:
        for flag in args.precisions.split(","):
            try:
                row = fit_once(flag.strip(), args.accelerator, args.epochs, root)
            except Exception as exc:  # report and go on to the next precision
                failures.append(flag)
                print(f"{flag:<11} FAILED: {type(exc).__name__}: {exc}".splitlines()[0], flush=True)
                continue
            low = row["val_acc"] < args.min_acc
            if low:
                failures.append(flag)
            print(
                f"{row['precision']:<11} {row['val_acc']:>7.3f} {row['s_per_epoch']:>8.3f} {row['peak_mib']:>9.1f}  "
                f"{row['param_dtype']}{'  (below --min-acc)' if low else ''}",
                flush=True,
            )
    if failures:
        print(f"gpu_check: failed for {', '.join(failures)}")
        return 1
    print("gpu_check: every precision fitted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
