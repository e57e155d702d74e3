"""Read a run's ``events.jsonl`` (written by the EventTrace listener) into a summary.

Both formats are read (:mod:`interlock.core.traceformat`): the full one, a line per
transition ``{"time", "event" (the leaf entered), "trigger", "source" (the leaf left),
"epoch", "global_step", "batch_idx", "count"}``, and the compact default, whose ``repeat``
lines count the turns of a loop. A failed run also carries ``"error": "Type: message"`` on
its ``teardown`` (via ``fail``) and ``failed`` transitions. A run still writing may leave a
partial last line; it is ignored.

The file does not say why a transition was taken; the chart does: the guard of the
``always`` transition ``trigger`` out of ``source`` (:meth:`Chart.guard_of
<interlock.core.chart.Chart.guard_of>`) held. :attr:`TraceSummary.guards` records it
per taken transition, so a summary answers "why did validation run here".
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from interlock.core.chart import Chart, load_chart
from interlock.core.errors import InterlockError
from interlock.core.traceformat import Decoder, TraceFormatError

__all__ = ["INTERRUPT_TRIGGERS", "TRACE_FILE", "TraceError", "TraceSummary", "read_trace"]

TRACE_FILE = "events.jsonl"
#: Triggers that stop a run early without an error: Ctrl-C (an external event) and a preemption signal.
INTERRUPT_TRIGGERS = ("interrupt", "preempt")


class TraceError(InterlockError, ValueError):
    """An events trace is missing or malformed."""


@attrs.frozen
class TraceSummary:
    """What a run's trace says: where it went, how often, and how it ended."""

    path: Path
    events: int
    visits: Mapping[str, int]
    """Entries per leaf state; the state the trace starts in counts once."""
    transitions: Mapping[tuple[str, str, str], int]
    """Times each ``(source, trigger, dest)`` leaf transition was taken."""
    first_state: str | None
    last_state: str | None
    is_final: bool
    """The last state entered is a final state of the chart (the run ended)."""
    error: str | None = None
    failed_in: str | None = None
    #: the transition whose action raised (``"a -> b [trigger] do action"``), when it was one
    failed_where: str | None = None
    """The state the failure happened in (the source of the ``fail`` trigger)."""
    last_epoch: int | None = None
    last_global_step: int | None = None
    truncated: bool = False
    """A partial last line (a run still writing) was ignored."""
    guards: Mapping[tuple[str, str, str], str | None] = attrs.field(factory=dict)
    """The guard that decided each taken transition (``None``: the default, or an event from outside)."""
    interrupted_in: str | None = None
    """The state the run was stopped in without an error (the source of ``interrupt`` or ``preempt``)."""
    interrupted_by: str | None = None
    """The trigger that stopped it there: ``interrupt`` (Ctrl-C) or ``preempt`` (a preemption signal)."""

    @property
    def in_progress(self) -> bool:
        return not self.is_final

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def interrupted(self) -> bool:
        """The (last) run was stopped by Ctrl-C or a preemption signal, not by an error."""
        return self.interrupted_in is not None and self.error is None

    @property
    def decided(self) -> dict[str, int]:
        """How many transitions each guard decided, by guard name (defaults and events left out)."""
        out: dict[str, int] = {}
        for key, n in self.transitions.items():
            guard = self.guards.get(key)
            if guard is not None:
                out[guard] = out.get(guard, 0) + n
        return dict(sorted(out.items()))


def _trace_file(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if path.is_dir():
        file = path / TRACE_FILE
        if not file.is_file():
            raise TraceError(
                f"no {TRACE_FILE} in run directory {str(path)!r}; pass a run directory written with the "
                f"EventTrace listener enabled, or the path of an {TRACE_FILE} file"
            )
        return file
    if not path.is_file():
        raise TraceError(f"trace path {str(path)!r} does not exist; pass a run directory or its {TRACE_FILE}")
    return path


def _not_a_trace(file: Path, lineno: int, why: str) -> str:
    return (
        f"{file} is not an interlock trace: line {lineno}: {why}. Pass a run directory or the "
        f"{TRACE_FILE} the EventTrace listener wrote there"
    )


def _parse(line: str, file: Path, lineno: int, decoder: Decoder) -> list[dict[str, Any]]:
    """The records of one line (either format); :class:`TraceError` for a line that is not a trace's."""
    try:
        return decoder.feed(json.loads(line))
    except TraceFormatError as exc:
        raise TraceError(_not_a_trace(file, lineno, f"{exc}: {line.strip()[:200]}")) from None


def read_trace(path: str | os.PathLike[str], chart: Chart | None = None) -> TraceSummary:
    """Summarise the trace in run directory ``path`` (or the ``events.jsonl`` file itself).

    ``chart`` decides which states are final; the built-in lifecycle when None. When the
    trace holds several runs (a final state left by ``setup``), ``error`` and ``failed_in``
    describe the last run only; the counts cover them all. The chart also names the guard
    that decided each taken transition (:attr:`TraceSummary.guards`).
    """
    file = _trace_file(path)
    the_chart = chart if chart is not None else load_chart()
    finals = the_chart.final_states
    known = set(the_chart.leaves)
    visits: Counter[str] = Counter()
    transitions: Counter[tuple[str, str, str]] = Counter()
    first = last = error = failed_in = failed_where = prev_trigger = interrupted_in = interrupted_by = None
    epoch = step = None
    events = 0
    pending: tuple[int, str] | None = None  # an unparsable line: fine only if it is the last one
    decoder = Decoder()
    with file.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if pending is not None:
                raise TraceError(f"{pending[1]}; only the last line of a trace may be incomplete")
            try:
                records = _parse(line, file, lineno, decoder)
            except json.JSONDecodeError as exc:
                if not line.lstrip().startswith(("{", "[")):  # not even the start of a trace line
                    raise TraceError(_not_a_trace(file, lineno, f"it is not valid JSON ({exc.msg})")) from None
                pending = (lineno, f"{file}:{lineno}: not valid JSON ({exc.msg})")
                continue
            for record in records:
                times = int(record.get("times", 1))
                steps = record.get("cycle") or [record]
                for one in steps:
                    source, trigger, dest = one["source"], one["trigger"], one["event"]
                    for name in (source, dest):
                        if name not in known:
                            raise TraceError(
                                _not_a_trace(
                                    file,
                                    lineno,
                                    f"it names the state {name!r}, which chart {the_chart.source} does not have "
                                    "(a trace of another chart? pass that chart with --chart)",
                                )
                            )
                    if first is None:
                        first = source
                        visits[source] += 1
                    events += times
                    visits[dest] += times
                    transitions[(source, trigger, dest)] += times
                    last = dest
                    if source in finals:  # a new run starts in the same trace: its outcome is what counts
                        error = failed_in = failed_where = interrupted_in = interrupted_by = None
                    if trigger in INTERRUPT_TRIGGERS:
                        interrupted_in, interrupted_by = source, trigger
                    if trigger == "fail" or (one.get("error") is not None and prev_trigger != "fail"):
                        failed_in = source
                    if one.get("error") is not None:
                        error = str(one["error"])
                        failed_where = one.get("where", failed_where)
                    prev_trigger = trigger
                epoch, step = record.get("epoch", epoch), record.get("global_step", step)
    return TraceSummary(
        path=file,
        events=events,
        visits=dict(visits),
        transitions=dict(transitions),
        guards={key: the_chart.guard_of(key[0], key[1]) for key in transitions},
        first_state=first,
        last_state=last,
        is_final=last in finals,
        error=error,
        failed_in=failed_in,
        failed_where=failed_where,
        last_epoch=epoch,
        last_global_step=step,
        truncated=pending is not None,
        interrupted_in=interrupted_in,
        interrupted_by=interrupted_by,
    )
