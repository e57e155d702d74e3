"""Every default listener on: a late epoch costs the work and bytes of an early one (counted, not timed)."""

from __future__ import annotations

import gc
import itertools
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from conftest import TinyModule, loader
from interlock.listeners import csv_logger


class Logs(TinyModule):
    """TinyModule that logs with self.log, as a new user's module does."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().validation_step(batch, batch_idx)
        self.log("val_loss", out["loss"])
        return out


def test_per_epoch_work_and_bytes_do_not_grow_with_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """60 epochs, defaults on: each epoch adds as many bytes as an early one, CSV renders only its new rows,
    rewrites the file only when a name widens the header, and last.ckpt keeps its size."""
    rendered: list[int] = []
    rewrites: list[int] = []
    render, rewrite = csv_logger._render, csv_logger._rewrite

    def counting_render(fields: Any, rows: Any, header: bool) -> bytes:
        rendered.append(len(rows))
        return render(fields, rows, header)

    def counting_rewrite(path: Path, fields: Any, rows: Any) -> None:
        rewrites.append(len(rows))
        rewrite(path, fields, rows)

    monkeypatch.setattr(csv_logger, "_render", counting_render)
    monkeypatch.setattr(csv_logger, "_rewrite", counting_rewrite)
    sizes: list[dict[str, int]] = []
    trainer = interlock.Trainer(
        max_epochs=60, default_root_dir=tmp_path, accelerator="cpu", num_sanity_val_steps=0, seed=0
    )

    def measure(event: interlock.Event) -> None:
        run = Path(trainer.state.run_dir)
        names = ("events.jsonl", "metrics.csv", "history.jsonl", "checkpoints/last.ckpt")
        sizes.append({n: (run / n).stat().st_size if (run / n).exists() else 0 for n in names})

    trainer.on("fit.train.epoch_start", measure)
    trainer.fit(Logs(), loader(16, 8), loader(16, 8))
    assert len(sizes) == 60
    for name in ("events.jsonl", "metrics.csv", "history.jsonl"):
        added = [b[name] - a[name] for a, b in itertools.pairwise(sizes)]
        early, late = statistics.median(added[5:15]), statistics.median(added[-10:])
        assert 0 < late <= 1.25 * early, (name, early, late)  # counters and times gain digits, nothing more
    ckpt = [s["checkpoints/last.ckpt"] for s in sizes[2:]]
    assert max(ckpt) <= 1.01 * min(ckpt)
    assert len(rewrites) <= 2 and max(rendered[2:]) <= 2  # widened once (val names), then only new rows


def test_a_long_default_run_retains_no_objects_per_epoch(tmp_path: Path) -> None:
    """Every default on: the objects the garbage collector tracks do not grow with the epochs (history included)."""
    samples: dict[int, int] = {}
    trainer = interlock.Trainer(
        max_epochs=150, default_root_dir=tmp_path, accelerator="cpu", num_sanity_val_steps=0, seed=0
    )

    def count(name: str, *_: Any) -> None:
        epoch = trainer.state.epoch
        if name == "fit.train.epoch_start" and (20 <= epoch < 30 or epoch >= 140) and epoch % 2 == 0:
            gc.collect()
            samples[epoch] = len(gc.get_objects())

    trainer.observe(count)
    trainer.fit(Logs(), loader(16, 8), loader(16, 8))
    assert len(trainer.state.history) == 300  # a training and a validation row per epoch
    early = min(v for e, v in samples.items() if e < 30)  # the least of 5 samples: transient objects left out
    late = min(v for e, v in samples.items() if e >= 140)
    assert late - early < 120, (early, late)  # under 1 per epoch over the 120 between (was 2: the rows' mappings)
