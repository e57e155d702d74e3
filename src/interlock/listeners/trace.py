"""EventTrace: every chart transition as one JSON line in ``events.jsonl``.

``interlock.viz.read_trace`` (and ``interlock chart --trace``) read this file.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from interlock.core.events import Event, Listener, listen, observe
from interlock.core.state import TrainerState
from interlock.listeners._util import STAGE_STARTS

__all__ = ["TRACE_FILE", "EventTrace"]

TRACE_FILE = "events.jsonl"
#: Events after which the buffered lines are written: the end of a run, and the
#: boundaries where a run in progress is most often read (epoch and validation ends).
_ENDS = frozenset({"finished", "failed", "interrupted"})
_FLUSH = frozenset({"teardown", "fit.train.epoch_end", "fit.train.val.end", *_ENDS})
#: One line; a buffered row is exactly its arguments: time, the JSON members of
#: (event, trigger, source), epoch, global_step, batch_idx, count, and the error member or "".
_LINE = '{"time": %.6f, %s, "epoch": %s, "global_step": %s, "batch_idx": %s, "count": %s%s}\n'
Row = tuple[float, str, int, int, int, int, str]
_now = time.time


class EventTrace(Listener):
    """Write one JSON line per transition to ``path`` (default ``<run_dir>/events.jsonl``).

    Each line has exactly the keys ``time`` (Unix seconds), ``event`` (the leaf
    entered), ``trigger``, ``source`` (the leaf left), ``epoch``, ``global_step``,
    ``batch_idx`` and ``count``; the ``teardown`` line reached by ``fail`` and the
    ``failed`` line add ``error`` (``"Type: message"``). Transitions are recorded
    by an observer (:func:`~interlock.observe`): no event object is built for them.
    They are buffered as tuples and formatted only when written: once
    ``flush_seconds`` have passed since the last write or ``flush_every`` lines
    are waiting (whichever comes first), at ``fit.train.epoch_end`` and
    ``fit.train.val.end``, and at ``teardown`` / ``finished`` / ``failed`` /
    ``interrupted``. A process killed outright loses at most the last
    ``flush_seconds`` (or ``flush_every`` lines) of transitions. The run
    directory is read from the state at stage starts and epoch boundaries, and the
    process rank at stage starts: on ranks other than 0 nothing is written. The
    file stays open from the first write to the end of the run; a pickled copy
    leaves it behind and reopens it.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, flush_every: int = 4096, flush_seconds: float | None = 1.0
    ) -> None:
        if not isinstance(flush_every, int) or isinstance(flush_every, bool) or flush_every < 1:
            raise ValueError(f"EventTrace(flush_every={flush_every!r}) must be an int >= 1 (lines per write)")
        bad = isinstance(flush_seconds, bool) or not isinstance(flush_seconds, int | float) or not flush_seconds > 0
        if flush_seconds is not None and bad:
            raise ValueError(
                f"EventTrace(flush_seconds={flush_seconds!r}) must be None (by line count only) or seconds > 0"
            )
        self.path = Path(path) if path is not None else None
        self.flush_every = flush_every
        self.flush_seconds = flush_seconds
        self._due = 0.0  # the time of the next write (it waits for flush_every lines when flush_seconds is None)
        self._file: Path | None = self.path
        self._rows: list[Row] = []
        self._names: dict[tuple[str, str, str], str] = {}
        self._rank_zero: bool | None = None  # this process's rank is 0 (None: not known yet)
        self._out: TextIO | None = None  # the open file, between writes of one run

    @property
    def file(self) -> Path | None:
        """The file being written (None until the run directory is known, and on ranks other than 0)."""
        return None if self._rank_zero is False else self._file

    @observe
    def record(
        self, name: str, trigger: str, source: str, count: int, epoch: int, global_step: int, batch_idx: int
    ) -> None:
        """Buffer one transition; the lines of the boundaries in ``_FLUSH`` are written by :meth:`on_boundary`."""
        key = (name, trigger, source)
        try:
            names = self._names[key]
        except KeyError:  # JSON-encode each (event, trigger, source) once
            names = self._names[key] = json.dumps(dict(zip(("event", "trigger", "source"), key, strict=True)))[1:-1]
        rows, now = self._rows, _now()
        rows.append((now, names, epoch, global_step, batch_idx, count, ""))
        if (len(rows) >= self.flush_every or now >= self._due) and name not in _FLUSH:
            self.flush()

    @listen("fit.start")
    @listen("validate.start")
    @listen("test.start")
    @listen("predict.start")
    @listen("fit.train.epoch_start")
    @listen("fit.train.epoch_end")
    @listen("fit.train.val.end")
    @listen("teardown")
    @listen("finished")
    @listen("failed")
    @listen("interrupted")
    def on_boundary(self, event: Event, state: TrainerState) -> None:
        """Learn the rank (at stage starts) and the output file from the state; write at the boundaries.

        The observer has already buffered this event's line; a failure adds its error to it.
        """
        name = event.name
        if name in STAGE_STARTS:
            self._rank_zero = state.is_global_zero
        if self.path is None and state.run_dir:
            self._file = Path(state.run_dir) / TRACE_FILE
        if name not in _FLUSH:
            return
        rows = self._rows
        if rows and (event.trigger == "fail" or name == "failed"):
            error = _error(event.payload)
            if error:
                rows[-1] = (*rows[-1][:-1], error)
        self.flush()
        if name in _ENDS:
            self.close()

    def flush(self) -> None:
        """Append the buffered lines to the file (kept buffered while the file is unknown; dropped off rank 0)."""
        self._due = math.inf if self.flush_seconds is None else _now() + self.flush_seconds
        rows = self._rows
        if not rows:
            return
        if self._rank_zero is False:
            rows.clear()
            return
        file = self._file
        if file is None:
            return
        fh = self._out
        if fh is None or fh.name != str(file):
            self.close()
            file.parent.mkdir(parents=True, exist_ok=True)
            fh = self._out = open(file, "a", encoding="utf-8")  # noqa: SIM115 - kept open between writes
        fh.write("".join([_LINE % row for row in rows]))
        fh.flush()
        rows.clear()

    def close(self) -> None:
        """Close the file (the next write reopens it)."""
        out = getattr(self, "_out", None)  # absent when __init__ refused its arguments
        if out is not None:
            out.close()
            self._out = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_out": None}

    def __del__(self) -> None:
        self.close()


def _error(payload: Mapping[str, Any]) -> str:
    """The ``"error"`` member of a failure line (empty when the payload has no error)."""
    error = payload.get("error")
    if error is None and payload.get("exception") is not None:
        exc = payload["exception"]
        error = f"{type(exc).__name__}: {exc}"
    return "" if error is None else f', "error": {json.dumps(str(error))}'
