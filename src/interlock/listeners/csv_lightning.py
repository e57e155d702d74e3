"""``metrics.csv`` in Lightning's layout: what ``interlock.lightning.loggers.CSVLogger`` writes.

Lightning's ``CSVLogger`` writes a row every ``log_every_n_steps`` training batches (the values
the batch logged on step) and a row as each epoch, validation or test ends (the epoch's values),
each with ``epoch`` and ``step`` (the batches stepped before it); the header is the sorted names
seen so far, and the file is rewritten with the wider header when a new name appears. Code that
reads it with pandas (``metrics["train_loss_step"]``) reads the same columns and rows here. The
rows come from the same moments as the tracking loggers' (:class:`TrackingLogger`).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from interlock.listeners._tracking import TrackingLogger
from interlock.listeners.csv_logger import _append, _rewrite, _write_error

__all__ = ["LightningCSVLogger"]


class LightningCSVLogger(TrackingLogger):
    """``save_dir/metrics.csv`` with Lightning's rows and columns; ``hparams.yaml`` beside it (as Lightning's).

    A row is written as it comes (Lightning buffers ``flush_logs_every_n_steps`` of them: the file
    ends the same). A failed write raises :class:`~interlock.core.errors.OutputError` naming the file.
    """

    where = "metrics.csv"

    def __init__(self, save_dir: str | os.PathLike[str], prefix: str = "") -> None:
        super().__init__(log_model=False, prefix=prefix)
        self.folder = Path(save_dir)  # where the files go
        self._keys: list[str] = []  # the header: the names seen so far, sorted

    @property
    def save_dir(self) -> Path:
        """The folder the files go to."""
        return self.folder

    @property
    def metrics_file(self) -> Path:
        return self.folder / "metrics.csv"

    # -- TrackingLogger ------------------------------------------------------------------
    def _safely(self, what: str, call: Callable[[], Any]) -> bool:
        """A local file: a failed write fails the run (naming the file), it is not skipped with a warning."""
        try:
            call()
        except OSError as exc:
            raise _write_error(self.metrics_file, exc) from exc
        return True

    def _open(self, run_id: str | None) -> str:
        path = self.metrics_file
        if path.is_file() and not self._keys:  # a resumed run appends to the file, under its header
            with path.open(newline="") as f:
                self._keys = next(csv.reader(f), [])
        return str(path)

    def _send_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        epoch = self._name("epoch")  # Lightning writes it as an int (trainer.current_epoch), the rest as logged
        row: dict[str, Any] = {k: int(v) if k == epoch and float(v).is_integer() else v for k, v in metrics.items()}
        row["step"] = step
        path = self.metrics_file
        new = sorted(set(row) - set(self._keys))
        if new or not path.is_file():
            old = _rows(path)
            self._keys = sorted({*self._keys, *new})
            _rewrite(path, self._keys, [*old, row])
        else:
            _append(path, self._keys, [row])

    def _send_params(self, params: Mapping[str, Any]) -> None:
        import yaml

        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / "hparams.yaml").open("w", newline="") as f:
            yaml.dump(dict(params), f)

    def _send_checkpoints(self, files: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """A CSV file holds no checkpoints (``log_model`` is off)."""

    def _close(self, status: str) -> None:
        """Every row is already in the file."""


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))
