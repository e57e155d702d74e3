"""EventTrace: every chart transition as one JSON line in ``events.jsonl``.

``interlock.viz.read_trace`` (and ``interlock chart --trace``) read this file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interlock.core.events import Event, Listener, listen
from interlock.core.state import TrainerState

__all__ = ["TRACE_FILE", "EventTrace"]

TRACE_FILE = "events.jsonl"
#: Events after which buffered lines are written out at once.
_FINAL = frozenset({"teardown", "finished", "failed", "interrupted"})


class EventTrace(Listener):
    """Write one JSON line per transition to ``path`` (default ``<run_dir>/events.jsonl``).

    Each line has exactly the keys ``time`` (Unix seconds), ``event`` (the leaf
    entered), ``trigger``, ``source`` (the leaf left), ``epoch``, ``global_step``,
    ``batch_idx`` and ``count``; the ``teardown`` line reached by ``fail`` and the
    ``failed`` line add ``error`` (``"Type: message"``). Lines are buffered and
    appended every ``flush_every`` lines and at ``teardown`` / ``finished`` /
    ``failed`` / ``interrupted``. The per-transition handler takes only the event,
    so the trainer builds no state snapshot for it; the run directory is read
    from the state at stage starts and ends and at epoch boundaries. No file
    stays open between writes, so the listener pickles at any time.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, flush_every: int = 256) -> None:
        if not isinstance(flush_every, int) or isinstance(flush_every, bool) or flush_every < 1:
            raise ValueError(f"EventTrace(flush_every={flush_every!r}) must be an int >= 1 (lines per write)")
        self.path = Path(path) if path is not None else None
        self.flush_every = flush_every
        self._file: Path | None = self.path
        self._lines: list[str] = []
        self._names: dict[tuple[str, str, str], str] = {}

    @property
    def file(self) -> Path | None:
        """The file being written (None until the run directory is known)."""
        return self._file

    @listen("*")
    def on_event(self, event: Event) -> None:
        key = (event.name, event.trigger, event.source)
        names = self._names.get(key)
        if names is None:  # JSON-encode each (event, trigger, source) once
            names = self._names[key] = json.dumps(dict(zip(("event", "trigger", "source"), key, strict=True)))[1:-1]
        line = (
            f'{{"time": {time.time()!r}, {names}, "epoch": {event.epoch}, "global_step": {event.global_step}, '
            f'"batch_idx": {event.batch_idx}, "count": {event.count}'
        )
        if event.trigger == "fail" or event.name == "failed":
            line += _error(event.payload)
        self._lines.append(line + "}")
        if len(self._lines) >= self.flush_every or event.name in _FINAL:
            self.flush()

    @listen("fit.start")
    @listen("fit.train.epoch_start")
    @listen("fit.train.epoch_end")
    @listen("validate.start")
    @listen("test.start")
    @listen("predict.start")
    @listen("teardown")
    @listen("finished")
    @listen("failed")
    @listen("interrupted")
    def on_boundary(self, event: Event, state: TrainerState) -> None:
        """Learn the output file from the state (on rare events only), then write at the end."""
        if self.path is None and state.run_dir:
            self._file = Path(state.run_dir) / TRACE_FILE
        if event.name in _FINAL:
            self.flush()

    def flush(self) -> None:
        """Append the buffered lines to the file (kept buffered while the file is unknown)."""
        if not self._lines or self._file is None:
            return
        self._file.parent.mkdir(parents=True, exist_ok=True)
        with self._file.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(self._lines) + "\n")
        self._lines.clear()


def _error(payload: Mapping[str, Any]) -> str:
    """The ``"error"`` member of a failure line (empty when the payload has no error)."""
    error = payload.get("error")
    if error is None and payload.get("exception") is not None:
        exc = payload["exception"]
        error = f"{type(exc).__name__}: {exc}"
    return "" if error is None else f', "error": {json.dumps(str(error))}'
