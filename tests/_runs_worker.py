"""A small fit in a fresh process, for the run-directory tests (``sys.executable tests/_runs_worker.py``).

Options:

- ``--root DIR``: the trainer's ``default_root_dir``;
- ``--ckpt PATH``: resume from ``PATH`` (or ``last``);
- ``--max-epochs N``: epochs of 4 batches (default 1);
- ``--go FILE``: wait (up to 60 s) until ``FILE`` exists before fitting, so several workers start together;
- ``--slow SECONDS``: sleep that long after every training batch;
- ``--report``: print ``batch <global_step>`` after each training batch (flushed).

At the end it prints ``run_dir <path>``. Exit codes: 0 finished, 4 the run directory was in use
(the message on stderr), 5 ``--go`` never came.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import interlock
from conftest import TinyModule, loader
from interlock.core.errors import RunDirectoryInUse
from interlock.listeners.checkpoint import ModelCheckpoint


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--ckpt")
    p.add_argument("--max-epochs", type=int, default=1)
    p.add_argument("--go")
    p.add_argument("--slow", type=float, default=0.0)
    p.add_argument("--report", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    trainer = interlock.Trainer(
        max_epochs=args.max_epochs,
        listeners=[ModelCheckpoint(save_last=True)],
        logger=False,
        enable_trace=False,
        enable_progress_bar=False,
        default_root_dir=args.root,
        accelerator="cpu",
        num_sanity_val_steps=0,
    )

    @trainer.on("fit.train.batch.end")
    def batch_end(event: interlock.Event) -> None:
        if args.report:
            print(f"batch {event.global_step}", flush=True)
        if args.slow:
            time.sleep(args.slow)

    if args.go:
        deadline = time.monotonic() + 60
        while not Path(args.go).exists():
            if time.monotonic() > deadline:
                return 5
            time.sleep(0.005)
    try:
        trainer.fit(TinyModule(), loader(64, 16), ckpt_path=args.ckpt)
    except RunDirectoryInUse as exc:
        print(f"in use: {exc}", file=sys.stderr, flush=True)
        return 4
    print(f"run_dir {trainer.state.run_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
