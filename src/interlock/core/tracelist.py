"""A run's events trace as a numbered list of transitions (what a replay follows).

Transition *numbers* count every transition of ``events.jsonl`` from 1, the turns of a compact
``repeat`` line expanded: transition ``N`` is the ``N``-th the run made, the numbering of
``interlock chart --trace`` (its ``events``), of the view's timeline and of
``interlock.replay(..., to=N)``.

A compact ``repeat`` line gives the counters (epoch, global step, batch index) only after its first
and its last transition: the turns between have ``None`` there. Each transition's ``count`` (the
times its target state was entered) is exact everywhere: it grows by one per entry within a process.
A transition out of the chart's initial state starts a new *process* (a trainer that began, or
resumed, the run): :attr:`Step.process` numbers them from 0.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from interlock.core.traceformat import Decoder, TraceFormatError

__all__ = ["Failure", "Step", "last_failure", "read_transitions"]


@attrs.frozen
class Step:
    """One transition of a run: ``source --trigger--> event``, the counters after it, the error it carried."""

    number: int
    event: str
    trigger: str
    source: str
    count: int
    epoch: int | None
    global_step: int | None
    batch_idx: int | None
    process: int
    error: str | None = None

    def describe(self) -> str:
        """``a -[trigger]-> b at epoch E, step S, batch B (entry K of b)`` (unknown counters left out)."""
        where = ", ".join(
            f"{name} {value}"
            for name, value in (("epoch", self.epoch), ("step", self.global_step), ("batch", self.batch_idx))
            if value is not None
        )
        return (
            f"{self.source} -[{self.trigger}]-> {self.event}"
            + (f" at {where}" if where else "")
            + (f" (entry {self.count} of {self.event})")
        )


def _records(file: Path) -> Iterator[dict[str, Any]]:
    decoder = Decoder()
    with file.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                yield from decoder.feed(json.loads(line))
            except (json.JSONDecodeError, TraceFormatError):  # a partial last line of a run still writing
                continue


def read_transitions(path: str | os.PathLike[str], initial: str) -> list[Step]:
    """Every transition of the trace ``path`` (a run directory or its ``events.jsonl``), numbered from 1.

    ``initial``: the chart's initial leaf (a transition out of it starts a new process).
    """
    file = Path(path)
    if file.is_dir():
        file = file / "events.jsonl"
    out: list[Step] = []
    counts: dict[str, int] = {}
    process = -1

    def add(names: Mapping[str, Any], at: Mapping[str, Any] | None, error: Any = None) -> None:
        nonlocal process
        if names["source"] == initial or process < 0:
            process += 1
            counts.clear()
        event = str(names["event"])
        count = int(at["count"]) if at is not None else counts.get(event, 0) + 1
        counts[event] = count
        out.append(
            Step(
                number=len(out) + 1,
                event=event,
                trigger=str(names["trigger"]),
                source=str(names["source"]),
                count=count,
                epoch=None if at is None else at.get("epoch"),
                global_step=None if at is None else at.get("global_step"),
                batch_idx=None if at is None else at.get("batch_idx"),
                process=process,
                error=None if error is None else str(error),
            )
        )

    for record in _records(file):
        cycle = record.get("cycle")
        if not cycle:
            add(record, record, record.get("error"))
            continue
        times, last = int(record["times"]), len(cycle) - 1
        for turn in range(times):
            for j, names in enumerate(cycle):
                at = record["first"] if turn == 0 and j == 0 else record if turn == times - 1 and j == last else None
                add(names, at)
    return out


@attrs.frozen
class Failure:
    """Where a trace's last failure was.

    ``number``: the transition the run failed after (its target ``state`` raised); the counters after
    it; the error the ``fail`` transition carried.
    """

    number: int
    state: str
    epoch: int | None
    global_step: int | None
    batch_idx: int | None
    error: str | None


def last_failure(path: str | os.PathLike[str]) -> Failure | None:
    """The last failure of the trace ``path`` (``None``: none), read in one pass without listing its transitions.

    What the flight recorder reads at a failure: the cost is one decode of the (compact) file.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "events.jsonl"
    number, found = 0, None
    before: Mapping[str, Any] = {}
    for record in _records(file):
        cycle = record.get("cycle")
        if cycle:
            number += int(record["times"]) * len(cycle)
        else:
            number += 1
            if record.get("trigger") == "fail":
                at = before
                err = record.get("error")
                found = Failure(
                    number - 1,
                    str(record.get("source")),
                    at.get("epoch"),
                    at.get("global_step"),
                    at.get("batch_idx"),
                    None if err is None else str(err),
                )
        before = record  # a repeat's own fields are the counters after its last transition
    return found
