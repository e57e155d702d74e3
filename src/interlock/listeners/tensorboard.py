"""TensorBoardLogger: the run's metrics as TensorBoard event files."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from interlock.core.config import TrainerConfig
from interlock.core.events import Event, Handler, listen
from interlock.core.state import TrainerState
from interlock.core.updates import SetListenerState
from interlock.listeners._tracking import LoggerListener
from interlock.listeners._util import is_rank_zero, loss_tensor, output_dir, row_metrics, stage_starts

__all__ = ["TensorBoardLogger", "summary_writer"]


def summary_writer(folder: Path) -> Any:
    """A ``SummaryWriter`` writing to ``folder``; an ``ImportError`` naming the extra without ``tensorboard``."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "TensorBoardLogger needs the tensorboard package: pip install 'interlock[tensorboard]'"
        ) from exc
    return SummaryWriter(log_dir=str(folder))


class TensorBoardLogger(LoggerListener):
    """Write scalars with ``torch.utils.tensorboard.SummaryWriter`` to ``save_dir`` (default: the run dir).

    Every history row (training epoch end, validation, ``validate``, ``test``)
    becomes one scalar per metric, plus ``epoch``, at the row's ``global_step``.
    Every ``log_every_n_steps`` optimizer steps the training loss of that batch is
    written as ``train_loss_step`` (one ``.item()`` sync per logged step); ``0``
    turns that off; ``None`` (the default) takes the Trainer's ``log_every_n_steps``
    (Lightning's default 50), as Lightning's loggers do. The writer is created on the first write and closed when the
    stage ends; the rows written are kept in the stored state, so a resumed run
    writes only the rows that came after its checkpoint. Under DDP only rank 0
    writes (the rank is read at each stage start). Needs the ``tensorboard`` package.
    """

    def __init__(self, save_dir: str | os.PathLike[str] | None = None, log_every_n_steps: int | None = None) -> None:
        self._own_cadence = log_every_n_steps is not None
        if log_every_n_steps is None:
            log_every_n_steps = 50
        if not isinstance(log_every_n_steps, int) or isinstance(log_every_n_steps, bool) or log_every_n_steps < 0:
            raise ValueError(
                f"TensorBoardLogger(log_every_n_steps={log_every_n_steps!r}) must be an int >= 0 (0 turns it off)"
            )
        self.save_dir = save_dir
        self.log_every_n_steps = log_every_n_steps
        self._dir: Path | None = Path(save_dir) if save_dir is not None else None
        self._writer: Any = None
        self._rank_zero: bool | None = None  # this process's rank is 0 (None: not known yet)
        self._stage_starts: frozenset[str] = frozenset()

    def bind_tags(self, tags: Mapping[str, frozenset[str]]) -> None:
        """Learn which events start a stage (where this process's rank is read)."""
        self._stage_starts = stage_starts(tags)

    def configure(self, config: TrainerConfig) -> None:
        """Take the Trainer's ``log_every_n_steps`` unless one was given here."""
        if not self._own_cadence:
            self.log_every_n_steps = config.log_every_n_steps

    def subscriptions(self) -> Iterator[tuple[str, Handler, int | None, bool | int]]:
        """The declared handlers, less the per-batch one when ``log_every_n_steps`` is 0."""
        for pattern, handler, every, once in super().subscriptions():
            if self.log_every_n_steps or getattr(handler, "__name__", "") != "on_train_batch_end":
                yield pattern, handler, every, once

    @property
    def log_dir(self) -> Path | None:
        """Where the event files go (None until the run directory is known, and on ranks other than 0)."""
        return None if self._rank_zero is False else self._dir

    @property
    def experiment(self) -> Any:
        """The ``SummaryWriter`` (Lightning's ``logger.experiment``), made on first use: ``add_image``, ..."""
        if self._rank_zero is False:
            raise RuntimeError(
                "TensorBoardLogger.experiment is written by rank 0 only; guard the call with global_rank"
            )
        return self._open()

    def _open(self) -> Any:
        if self._writer is None:
            if self._dir is None:
                raise RuntimeError("TensorBoardLogger wrote before its directory was known; pass save_dir=...")
            self._writer = summary_writer(self._dir)
        return self._writer

    @listen("#stage_start")
    @listen("#epoch_start")
    def on_stage_start(self, event: Event, state: TrainerState) -> None:
        if event.name in self._stage_starts:
            self._rank_zero = state.is_global_zero
        if self._rank_zero is not False:
            self._locate(state)

    def _locate(self, state: TrainerState) -> None:
        where = output_dir(self.save_dir, state, "TensorBoardLogger")
        if where != self._dir:
            self.close()
            self._dir = where

    @listen("#train_batch_end")
    def on_train_batch_end(self, event: Event) -> None:
        n = self.log_every_n_steps
        due = n and event.trigger == "stepped" and event.global_step % n == 0
        if due and self._dir is not None and self._rank_zero is not False:
            loss = loss_tensor(event.payload.get("outputs"))
            if loss is not None and loss.numel() == 1:
                self._open().add_scalar("train_loss_step", loss.detach().item(), global_step=event.global_step)

    @listen("#epoch_end")
    @listen("#eval_end")
    def on_rows(self, event: Event, state: TrainerState) -> SetListenerState | None:
        if not is_rank_zero(self._rank_zero, state):
            return None
        written = int(self.stored(state).get("rows", 0))
        rows = state.history[written:]
        if not rows:
            return None
        self._locate(state)
        writer = self._open()
        for row in rows:
            step = int(row.get("global_step", state.global_step))
            for name, value in row_metrics(row).items():
                writer.add_scalar(name, value, global_step=step)
            if "epoch" in row:
                writer.add_scalar("epoch", float(row["epoch"]), global_step=step)
        writer.flush()
        return self.store(state, rows=len(state.history))

    @listen("teardown")
    @listen("failed")
    @listen("interrupted")
    def on_end(self, event: Event) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close the writer (a later write opens a new event file)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_writer": None}
