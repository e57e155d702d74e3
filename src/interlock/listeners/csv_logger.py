"""CSVLogger: the run's metric history as a CSV file, one row per history entry."""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from interlock.core.errors import OutputError
from interlock.core.events import Event, listen
from interlock.core.state import TrainerState
from interlock.core.updates import SetListenerState
from interlock.listeners._tracking import LoggerListener
from interlock.listeners._util import ROW_KEYS, is_rank_zero, output_dir

__all__ = ["CSVLogger"]


class CSVLogger(LoggerListener):
    """Write ``state.history`` to ``<save_dir or run_dir>/<name>``, a row as each entry appears.

    Rows come at the end of each training epoch, validation, ``validate`` and
    ``test``. Columns are ``stage, epoch, global_step`` and then the metric names
    in order of appearance; when a new name appears the file is rewritten with the
    wider header. Each row is flushed as it is written. The rows written and the
    columns are kept in the listener's stored state; on the first write of a
    process (e.g. after resuming) the file is rewritten from the history, so it
    always equals ``state.history``. Under DDP only rank 0 writes (the rank is
    read at each stage start); the others do nothing.

    Each write is all or nothing: a rewrite goes to ``<name>.tmp`` and is renamed
    over the file, an append that fails is cut back to where it started, and no
    ``.tmp`` file is left behind. A failed write (a full disk, no permission)
    raises :class:`~interlock.core.errors.OutputError` naming the file, the cause
    and the fix, which fails the run through the chart's ``fail`` path.
    """

    def __init__(self, save_dir: str | os.PathLike[str] | None = None, name: str = "metrics.csv") -> None:
        if not isinstance(name, str) or not name or Path(name).name != name:
            raise ValueError(f"CSVLogger(name={name!r}) must be a plain file name such as 'metrics.csv'")
        self.save_dir = save_dir
        self.name = name
        self._synced: Path | None = None  # the file this process has rewritten from the history
        self._rank_zero: bool | None = None  # this process's rank is 0 (None: not known yet)

    @property
    def experiment(self) -> Any:
        """Refused: a CSV file has no library object (Lightning's ``ExperimentWriter``) to log through."""
        raise AttributeError(
            "CSVLogger.experiment (Lightning's ExperimentWriter) is not in interlock: log values with self.log, "
            "they are written to metrics.csv; for images or text use TensorBoardLogger, MLFlowLogger or WandbLogger"
        )

    def file(self, state: TrainerState) -> Path:
        """The CSV file for the run ``state`` describes."""
        return output_dir(self.save_dir, state, "CSVLogger") / self.name

    @listen("#stage_start")
    def on_stage_start(self, event: Event, state: TrainerState) -> None:
        self._rank_zero = state.is_global_zero

    @listen("#epoch_end")
    @listen("#eval_end")
    @listen("teardown")
    def on_rows(self, event: Event, state: TrainerState) -> SetListenerState | None:
        if not is_rank_zero(self._rank_zero, state):
            return None
        stored = self.stored(state)
        written = int(stored.get("rows", 0))
        history = state.history
        if not history or (len(history) == written and self._synced is not None):
            return None
        fields = list(stored.get("fields", ROW_KEYS))
        for row in history[written:]:
            fields.extend(k for k in row if k not in fields)
        path = self.file(state)
        try:
            if path != self._synced or len(history) < written or len(fields) > len(stored.get("fields", ROW_KEYS)):
                _rewrite(path, fields, history)
                self._synced = path
            else:
                _append(path, fields, history[written:])
        except OSError as exc:
            raise _write_error(path, exc) from exc
        return self.store(state, rows=len(history), fields=fields)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_synced": None}


def _cell(value: Any) -> Any:
    return repr(value) if isinstance(value, float) else value


def _write_error(path: Path, exc: OSError) -> OutputError:
    """The error for a failed write of ``path``: the file, the cause, and what to do."""
    cause = (exc.strerror or str(exc) or type(exc).__name__).lower()
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        fix = "free space there or set CSVLogger(save_dir=...) to a disk with room"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make the directory writable or set CSVLogger(save_dir=...) to a writable one"
    else:
        fix = "check the disk or set CSVLogger(save_dir=...) to another directory"
    return OutputError(f"{cause} writing {path}; {fix} (the file is left as it was)", errno=exc.errno)


def _render(fields: Sequence[str], rows: Sequence[Mapping[str, Any]], header: bool) -> bytes:
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=list(fields), restval="")
    if header:
        writer.writeheader()
    writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)
    return buf.getvalue().encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    with memoryview(data) as view:
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])


def _rewrite(path: Path, fields: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    """Write ``rows`` to ``<path>.tmp`` and rename it over ``path``; on failure remove the ``.tmp``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _render(fields, rows, header=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o666)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _append(path: Path, fields: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    """Append ``rows`` to ``path``; on failure cut the file back to its length before."""
    data = _render(fields, rows, header=False)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(fd, data)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)  # drop the part of the rows that was written
            raise
    finally:
        os.close(fd)
