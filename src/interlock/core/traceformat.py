"""The events trace's two line formats, and one decoder for both.

**Full** (``EventTrace(full=True)``): one JSON object per transition, ``{"time", "event",
"trigger", "source", "epoch", "global_step", "batch_idx", "count"}`` (+ ``"error"``, and
``"where"`` when the failure was raised on a transition: ``"a -> b [trigger] do action"``).

**Compact** (the default, ``interlock.trace/2``), one JSON value a line:

- ``{"trace": "interlock.trace/2", "time": T0}``: a header; the writer's keys start afresh
  (each process, or each reopening of the file, writes one).
- ``{"key": K, "event": E, "trigger": G, "source": S}``: transition ``S --G--> E`` is key ``K``
  (written before its first use).
- ``[dt, K, epoch, global_step, batch_idx, count]`` (+ ``"Type: message"``, + where): one transition at
  ``T0 + dt``, with the counters after it, exactly as a full line has them.
- ``{"repeat": [K1, ..., Kn], "times": N, "from": [dt, epoch, global_step, batch_idx, count],
  "to": [...]}``: the cycle of transitions ``K1 .. Kn`` taken ``N`` times in a row (a batch loop);
  ``from`` is the position after its first transition, ``to`` after its last.

Only transitions between batch states (``*.batch.*``) are ever counted in a ``repeat``;
every other transition (stage, epoch and validation starts and ends, where checkpoints are
taken, failures) is a single line with its exact position, as are the first two turns of
every loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["COMPACT", "Decoder", "TraceFormatError", "transition"]

COMPACT = "interlock.trace/2"
_KEYS = ("event", "trigger", "source")


class TraceFormatError(ValueError):
    """A line that is valid JSON but not a trace line (the message says why)."""


def transition(event: str, trigger: str, source: str, at: Sequence[Any], t0: float) -> dict[str, Any]:
    """A full-format record of one transition at position ``at`` = ``[dt, epoch, step, batch, count]``."""
    return {
        "time": t0 + float(at[0]),
        "event": event,
        "trigger": trigger,
        "source": source,
        "epoch": at[1],
        "global_step": at[2],
        "batch_idx": at[3],
        "count": at[4],
    }


class Decoder:
    """Turns parsed trace lines of either format into records.

    A record is a full-format dict; a compact ``repeat`` becomes one record of its last
    transition with ``"cycle"`` (the transitions, as ``{"event", "trigger", "source"}``),
    ``"times"`` and ``"first"`` (the record of its first transition) added. Keep one decoder
    per file read in order: keys are defined by earlier lines.
    """

    def __init__(self) -> None:
        self.keys: dict[int, tuple[str, str, str]] = {}
        self.t0 = 0.0

    def feed(self, value: Any) -> list[dict[str, Any]]:
        """The records of one parsed line (none for headers and key definitions)."""
        if isinstance(value, list):
            return [self._one(value)]
        if not isinstance(value, Mapping):
            raise TraceFormatError(f"expected a JSON object or array per line, got {type(value).__name__}")
        if "trace" in value:
            if value["trace"] != COMPACT:
                raise TraceFormatError(f"trace format {value['trace']!r} is not one this interlock reads ({COMPACT})")
            self.keys, self.t0 = {}, _number(value.get("time", 0.0), "header time")
            return []
        if "key" in value:
            names = tuple(value.get(k) for k in _KEYS)
            if not isinstance(value["key"], int) or not all(isinstance(n, str) for n in names):
                raise TraceFormatError(f"a key definition needs an int key and string {list(_KEYS)}: {dict(value)}")
            self.keys[value["key"]] = names  # type: ignore[assignment]
            return []
        if "repeat" in value:
            return [self._repeat(value)]
        missing = [k for k in _KEYS if not isinstance(value.get(k), str)]
        if missing:
            raise TraceFormatError(f"event record lacks string field(s) {missing}")
        return [dict(value)]

    def _names(self, key: Any) -> tuple[str, str, str]:
        try:
            return self.keys[key]
        except (KeyError, TypeError):
            raise TraceFormatError(f"transition key {key!r} is used before a line defines it") from None

    def _one(self, row: list[Any]) -> dict[str, Any]:
        if len(row) not in (6, 7, 8):
            raise TraceFormatError(f"a transition line has 6 to 8 items, not {len(row)}")
        event, trigger, source = self._names(row[1])
        out = transition(event, trigger, source, [_number(row[0], "time"), *row[2:6]], self.t0)
        if len(row) >= 7:
            out["error"] = row[6]
        if len(row) == 8:
            out["where"] = row[7]
        return out

    def _repeat(self, value: Mapping[str, Any]) -> dict[str, Any]:
        keys, times = value.get("repeat"), value.get("times")
        first, last = value.get("from"), value.get("to")
        ok = isinstance(keys, list) and keys and isinstance(times, int) and times > 0
        if not ok or not all(isinstance(p, list) and len(p) == 5 for p in (first, last)):
            raise TraceFormatError("a repeat line needs 'repeat' (keys), 'times' > 0, and 'from'/'to' positions")
        cycle = [self._names(k) for k in keys]  # type: ignore[union-attr]
        out = transition(*cycle[-1], last, self.t0)  # type: ignore[arg-type]
        out["cycle"] = [dict(zip(_KEYS, names, strict=True)) for names in cycle]
        out["times"] = times
        out["first"] = transition(*cycle[0], first, self.t0)  # type: ignore[arg-type]
        return out


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceFormatError(f"{what} {value!r} is not a number")
    return float(value)
