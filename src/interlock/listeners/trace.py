"""EventTrace: the chart's transitions in ``events.jsonl``: compact by default, one JSON line each with ``full``.

``interlock.viz.read_trace`` (and ``interlock chart --trace``) and the view read both
formats (:mod:`interlock.core.traceformat`).
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from interlock.core.errors import OutputError
from interlock.core.events import Event, Listener, listen
from interlock.core.state import TrainerState
from interlock.core.traceformat import COMPACT
from interlock.listeners._util import stage_starts
from interlock.listeners.flight import record_failure

__all__ = ["FOLLOWED_FLUSH_SECONDS", "TRACE_FILE", "EventTrace"]

TRACE_FILE = "events.jsonl"
#: Events after which the buffered lines are written: the end of a run, and the
#: boundaries where a run in progress is most often read (epoch and validation ends).
_ENDS = frozenset({"finished", "failed", "interrupted"})
#: (`teardown` and the final states are the runtime's own, outside any stage.) The epoch and
#: validation ends are learned from the chart's tags (:meth:`EventTrace.bind_tags`).
_FLUSH = frozenset({"teardown", *_ENDS})
#: One full-format line; its arguments: time, the JSON members of (event, trigger, source), epoch,
#: global_step, batch_idx, count, and the error and where members or "".
_LINE = '{"time": %.6f, %s, "epoch": %s, "global_step": %s, "batch_idx": %s, "count": %s%s}\n'
#: A buffered transition: time, key (index of its (event, trigger, source)), epoch, global_step,
#: batch_idx, count, the error ("" when none) and the transition that raised it ("" when none).
Row = tuple[float, int, int, int, int, int, str, str]
_now = time.time
_key_of = operator.itemgetter(1)
#: How often the trace of a run followed live (``interlock fit --view``) is written at the least, in seconds.
FOLLOWED_FLUSH_SECONDS = 0.25
#: The longest loop (in transitions) the compact trace counts instead of writing.
_LONGEST_LOOP = 32


class _Packer:
    """Compact lines (:mod:`interlock.core.traceformat`) for one file: keys, single lines, repeats.

    A loop is found when the last ``L`` transitions repeat the ``L`` before them (``L <= 32``)
    and all are between batch states; from then on each turn that matches it is counted, not written, and the
    count goes out as one ``repeat`` line at each write (the next write continues counting the
    same loop). A transition that does not match ends the loop; the matched part of an
    unfinished turn is written as single lines.
    """

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.defined: set[int] = set()
        self.cycle: tuple[int, ...] | None = None
        self.turn: list[int] = []  # the cycle as a list (compared with a slice of the keys)
        self.pos = 0
        self.reps = 0
        self.first: Row | None = None
        self.last: Row | None = None
        self.partial: list[Row] = []
        self.recent: list[int] = []

    @property
    def pending(self) -> bool:
        """Turns of a loop are counted or begun but not written yet (a final pack writes them)."""
        return self.cycle is not None and bool(self.partial or self.reps)

    def header(self) -> str:
        return json.dumps({"trace": COMPACT, "time": self.t0}) + "\n"

    def pack(self, rows: list[Row], names: list[str], loopable: list[bool], final: bool) -> str:
        """The lines of ``rows``; ``final`` also writes the unfinished turn of a loop (the run ended).

        Only transitions whose key is ``loopable`` (between batch states) are counted in a loop;
        the others (boundaries) are always single lines, with their exact positions.
        """
        out: list[str] = []
        recent = self.recent  # every key, counted or written: a loop of loops is found at its second turn too
        keys = list(map(_key_of, rows))
        i, total = 0, len(rows)
        while i < total:
            turn = self.turn
            if turn and not self.pos:  # whole turns of the loop: compared a turn at a time, counted, not written
                size, j = len(turn), i
                while keys[j : j + size] == turn:  # loopable keys only: a failure's row (its error) is never one
                    j += size
                if j > i:
                    if not self.reps:
                        self.first = rows[i]
                    self.reps += (j - i) // size
                    self.last = rows[j - 1]
                    recent.extend(keys[i:j])
                    if len(recent) > 4 * _LONGEST_LOOP:
                        del recent[: len(recent) - 2 * _LONGEST_LOOP]
                    i = j
                    continue
            row = rows[i]
            i += 1
            k = row[1]
            recent.append(k)
            n = len(recent)
            if n > 4 * _LONGEST_LOOP:
                del recent[: n - 2 * _LONGEST_LOOP]
                n = len(recent)
            cycle = self.cycle
            if cycle is not None:
                if k == cycle[self.pos] and loopable[k] and not row[6]:
                    self.partial.append(row)
                    self.pos += 1
                    if self.pos == len(cycle):
                        if not self.reps:
                            self.first = self.partial[0]
                        self.reps += 1
                        self.last = row
                        self.partial = []
                        self.pos = 0
                    continue
                self._end_loop(out, names)
            self._single(out, row, names)
            for size in range(1, min(n // 2, _LONGEST_LOOP) + 1):
                if recent[-1 - size] == k and recent[-size:] == recent[-2 * size : -size]:
                    if all(loopable[x] for x in recent[-size:]):
                        self.cycle, self.pos, self.reps, self.partial = tuple(recent[-size:]), 0, 0, []
                        self.turn = recent[-size:]
                    break
        if self.reps:
            self._repeat(out, names)
        if final and self.cycle is not None:
            self._end_loop(out, names)
        return "".join(out)

    def _define(self, out: list[str], key: int, names: list[str]) -> None:
        if key not in self.defined:
            self.defined.add(key)
            out.append(f'{{"key": {key}, {names[key]}}}\n')

    def _single(self, out: list[str], row: Row, names: list[str]) -> None:
        self._define(out, row[1], names)
        error = f",{json.dumps(row[6])}" if row[6] else ""
        if row[7]:
            error += f",{json.dumps(row[7])}"
        out.append(f"[{row[0] - self.t0:.6f},{row[1]},{row[2]},{row[3]},{row[4]},{row[5]}{error}]\n")

    def _repeat(self, out: list[str], names: list[str]) -> None:
        assert self.cycle is not None and self.first is not None and self.last is not None
        for key in self.cycle:
            self._define(out, key, names)
        f, la, t0 = self.first, self.last, self.t0
        out.append(
            f'{{"repeat": [{",".join(map(str, self.cycle))}], "times": {self.reps}, '
            f'"from": [{f[0] - t0:.6f},{f[2]},{f[3]},{f[4]},{f[5]}], '
            f'"to": [{la[0] - t0:.6f},{la[2]},{la[3]},{la[4]},{la[5]}]}}\n'
        )
        self.reps = 0

    def _end_loop(self, out: list[str], names: list[str]) -> None:
        """Write the counted turns and the unfinished one (as single lines); no loop is followed after."""
        if self.reps:
            self._repeat(out, names)
        for row in self.partial:
            self._single(out, row, names)
        self.cycle, self.turn, self.pos, self.partial = None, [], 0, []


class EventTrace(Listener):
    """Write the chart's transitions to ``path`` (default ``<run_dir>/events.jsonl``).

    By default the trace is compact (:mod:`interlock.core.traceformat`, ``interlock.trace/2``):
    single transitions as short JSON arrays naming a key, and the turns of a loop that repeat
    one already written as one ``repeat`` line with their count and first and last positions,
    so a long run costs a few bytes per training step. ``full=True`` writes one JSON line per
    transition instead, with exactly the keys ``time`` (Unix seconds), ``event`` (the leaf
    entered), ``trigger``, ``source`` (the leaf left), ``epoch``, ``global_step``,
    ``batch_idx`` and ``count``; in both formats the ``teardown`` transition reached by
    ``fail`` and the ``failed`` one add the error (``"Type: message"``). A failed run also gets
    ``failure.json`` beside the trace (:mod:`interlock.listeners.flight`): the transition to replay
    to, and the command that does it, also added to the exception's notes.

    Transitions are recorded by the runtime into the trace's buffer (a
    :class:`~interlock.core.events.Recorder`): no call and no event object is
    built for them. They are buffered as tuples and formatted only when written: once
    ``flush_seconds`` have passed since the last write or ``flush_every`` transitions are
    waiting (whichever comes first), at ``fit.train.epoch_end`` and ``fit.train.val.end``,
    and at ``teardown`` / ``finished`` / ``failed`` / ``interrupted``. A process killed
    outright loses at most the last ``flush_seconds`` (or ``flush_every`` transitions). The
    run directory is read from the state at stage starts and epoch boundaries, and the
    process rank at stage starts: on ranks other than 0 nothing is written. The file stays
    open from the first write to the end of the run; a pickled copy leaves it behind and
    reopens it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        flush_every: int = 4096,
        flush_seconds: float | None = 1.0,
        full: bool = False,
    ) -> None:
        if not isinstance(flush_every, int) or isinstance(flush_every, bool) or flush_every < 1:
            raise ValueError(f"EventTrace(flush_every={flush_every!r}) must be an int >= 1 (lines per write)")
        bad = isinstance(flush_seconds, bool) or not isinstance(flush_seconds, int | float) or not flush_seconds > 0
        if flush_seconds is not None and bad:
            raise ValueError(
                f"EventTrace(flush_seconds={flush_seconds!r}) must be None (by line count only) or seconds > 0"
            )
        if not isinstance(full, bool):
            raise ValueError(
                f"EventTrace(full={full!r}) must be True (one JSON line per transition) or False (compact)"
            )
        self.path = Path(path) if path is not None else None
        self.limit = flush_every  # rows at which the runtime asks for a write (Recorder)
        self.flush_seconds = flush_seconds
        self.full = full
        self.due = 0.0  # the time of the next write (it waits for flush_every lines when flush_seconds is None)
        self._file: Path | None = self.path
        # the runtime's rows (events.Row); a failure's row gets its error and where appended
        self.rows: list[tuple[Any, ...]] = []
        self._ids: dict[tuple[str, str, str], int] = {}
        self._names: list[str] = []  # per key: the JSON members "event": .., "trigger": .., "source": ..
        self._loopable: list[bool] = []  # per key: a transition between batch states (a loop may count it)
        self._rank_zero: bool | None = None  # this process's rank is 0 (None: not known yet)
        self._out: TextIO | None = None  # the open file, between writes of one run
        self._packer: _Packer | None = None  # the compact writer of the open file
        self._stage_starts: frozenset[str] = frozenset()
        self._flush_at: frozenset[str] = _FLUSH

    #: the failure note names ``interlock replay RUN --to N`` (a run started by ``interlock fit``), not the Python call
    replay_cli = False

    @property
    def file(self) -> Path | None:
        """The file being written (None until the run directory is known, and on ranks other than 0)."""
        return None if self._rank_zero is False else self._file

    @property
    def flush_every(self) -> int:
        """Buffered transitions at which they are written."""
        return self.limit

    @flush_every.setter
    def flush_every(self, value: int) -> None:
        self.limit = value

    def recorders(self) -> Iterator[EventTrace]:
        """The trace records through the runtime (:class:`~interlock.core.events.Recorder`): no call per transition."""
        yield self

    def record(
        self, name: str, trigger: str, source: str, count: int, epoch: int, global_step: int, batch_idx: int
    ) -> None:
        """Buffer one transition as the runtime does (:meth:`recorders`), and write when it is time."""
        rows, now = self.rows, _now()
        rows.append((now, name, trigger, source, count, epoch, global_step, batch_idx))
        if len(rows) >= self.limit or now >= self.due:
            self.flush_due(name)

    def flush_due(self, name: str) -> None:
        """The buffer is due (time or size): write it, unless at a boundary (:meth:`on_boundary` writes those)."""
        if name not in self._flush_at:
            self.flush()

    def _keyed(self, rows: list[tuple[Any, ...]]) -> list[Row]:
        """The buffered rows with their (event, trigger, source) as a key, each JSON-encoded once."""
        ids, out = self._ids, []
        for row in rows:
            t, name, trigger, source, count, epoch, global_step, batch_idx = row[:8]
            key = (name, trigger, source)
            k = ids.get(key)
            if k is None:
                k = ids[key] = len(self._names)
                self._names.append(json.dumps(dict(zip(("event", "trigger", "source"), key, strict=True)))[1:-1])
                self._loopable.append(".batch." in name and ".batch." in source)
            error, where = (row[8], row[9]) if len(row) > 8 else ("", "")
            out.append((t, k, epoch, global_step, batch_idx, count, error, where))
        return out

    def bind_tags(self, tags: Mapping[str, frozenset[str]]) -> None:
        """Learn the stage starts and the boundaries to write at (epoch ends, validation ends in fit)."""
        self._stage_starts = stage_starts(tags)
        ends = {n for n, t in tags.items() if "epoch_end" in t or {"fit", "val", "eval_end"} <= t}
        self._flush_at = _FLUSH | frozenset(ends)

    @listen("#stage_start")
    @listen("#epoch_start")
    @listen("#epoch_end")
    @listen("#fit#eval_end")
    @listen("teardown")
    @listen("finished")
    @listen("failed")
    @listen("interrupted")
    def on_boundary(self, event: Event, state: TrainerState) -> None:
        """Learn the rank (at stage starts) and the output file from the state; write at the boundaries.

        The runtime has already buffered this event's row; a failure adds its error to it.
        """
        name = event.name
        if name in self._stage_starts:
            self._rank_zero = state.is_global_zero
        if self.path is None and state.run_dir:
            self._file = Path(state.run_dir) / TRACE_FILE
        if name not in self._flush_at:
            return
        rows = self.rows
        if rows and (event.trigger == "fail" or name == "failed"):
            error = _error(event.payload)
            if error:
                rows[-1] = (*rows[-1][:8], error, _where(event.payload))
        self.flush(final=name in _ENDS)
        if name in _ENDS:
            self.close()
        if name == "failed" and self._file is not None and self._rank_zero is not False and self._file.is_file():
            record_failure(self._file, state, event.payload.get("exception"), self.replay_cli)

    def flush(self, final: bool = False) -> None:
        """Append the buffered lines to the file (kept buffered while the file is unknown; dropped off rank 0).

        ``final``: the run ended; the compact trace also writes the unfinished turn of a loop.
        """
        self.due = math.inf if self.flush_seconds is None else _now() + self.flush_seconds
        rows = self.rows
        packer = self._packer
        if not rows and not (final and packer is not None and packer.pending):
            return  # a final flush still ends a loop whose unfinished turn an earlier flush held back
        if self._rank_zero is False:
            rows.clear()
            return
        file = self._file
        if file is None:
            return
        try:
            self._write(file, self._keyed(rows), final)
            rows.clear()
        except OSError as exc:
            raise OutputError(
                f"could not write the event trace {file} ({exc.strerror or exc}); free space or fix the "
                "permissions of the run directory, or pass Trainer(enable_trace=False)",
                errno=exc.errno,
            ) from exc

    def _write(self, file: Path, rows: list[Row], final: bool) -> None:
        fh = self._out
        if fh is None or fh.name != str(file):
            self.close()
            file.parent.mkdir(parents=True, exist_ok=True)
            fh = self._out = open(file, "a", encoding="utf-8")  # noqa: SIM115 - kept open between writes
            if not self.full and rows:  # no rows: a final write of the held turn continues the same packer
                self._packer = _Packer(rows[0][0])
                fh.write(self._packer.header())
        names = self._names
        if self.full:
            lines = [_LINE % (t, names[k], e, g, b, c, _member(err, at)) for t, k, e, g, b, c, err, at in rows]
            fh.write("".join(lines))
        else:
            assert self._packer is not None
            fh.write(self._packer.pack(rows, names, self._loopable, final))
        fh.flush()

    def close(self) -> None:
        """Close the file (the next write reopens it).

        Lines a failed write left in the file's buffer are dropped: that write already raised
        :class:`OutputError`, and a close retrying it (at the run's end, or at interpreter exit) would
        print a second, bare ``OSError`` after the error that says what to do.
        """
        out = getattr(self, "_out", None)  # absent when __init__ refused its arguments
        if out is not None:
            self._out = None
            with contextlib.suppress(OSError):
                out.close()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_out": None, "_packer": None}

    def __del__(self) -> None:
        self.close()


def _error(payload: Mapping[str, Any]) -> str:
    """The error of a failure (``"Type: message"``; empty when the payload has none)."""
    error = payload.get("error")
    if error is None and payload.get("exception") is not None:
        exc = payload["exception"]
        error = f"{type(exc).__name__}: {exc}"
    return "" if error is None else str(error)


def _where(payload: Mapping[str, Any]) -> str:
    """The transition a failure was raised on (``"a -> b [trigger] do action"``), else ``""``.

    A failure in a state's own action is told by the ``fail`` transition's source already.
    """
    where = payload.get("where")
    return str(where) if isinstance(where, str) and " -> " in where else ""


def _member(error: str, where: str = "") -> str:
    """The ``"error"`` (and ``"where"``) members of a full-format line (empty without an error)."""
    if not error:
        return ""
    return f', "error": {json.dumps(error)}' + (f', "where": {json.dumps(where)}' if where else "")
