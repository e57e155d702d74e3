"""tools/faults.py: the short fault set (what `make test` runs) finds no loss, hang or executed code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from _together import run_together

TOOL = Path(__file__).resolve().parents[1] / "tools" / "faults.py"


def _quick_kinds() -> list[str]:
    """The classes of the short set, in the tool's order (read from the tool itself, so a new class is included)."""
    saved = list(sys.path)
    sys.path.insert(0, str(TOOL.parent))
    try:
        import faults  # it puts the checkout's src/ first on sys.path: put the path back as it was
    finally:
        sys.path[:] = saved
    return list(dict.fromkeys(a.kind for a in faults.attempts(True)))


def _run_halves(kinds: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """The short set as two processes at once, every other class in each (attempts are independent of each other)."""
    halves = [kinds[0::2], kinds[1::2]]
    commands = [[sys.executable, str(TOOL), "--quick", "--json", "--only", ",".join(half)] for half in halves]
    return [(code, json.loads(out)) for code, out, _ in run_together(commands, timeout=880)]


@pytest.mark.timeout(900)
def test_the_short_fault_set_is_safe() -> None:
    """A hostile pickle, a FIFO, bad flags, two trainers on one root, SIGKILLs (one mid-save), a full disk: all safe."""
    kinds = _quick_kinds()
    assert {"checkpoints", "flags", "runs", "kills", "midsave", "storage"} <= set(kinds)
    results = _run_halves(kinds)
    assert sum(report["tried"] for _, report in results) >= 6, [report for _, report in results]
    for code, report in results:
        assert report["data loss"] == report["hang"] == report["code executed"] == 0, report["not_safe"]
        assert report["unclear error"] == 0, report["not_safe"]
        assert code == 0
        assert report["summary"].startswith(f"tried {report['tried']}, safe {report['safe']}, data loss 0, hang 0")
