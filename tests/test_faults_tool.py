"""tools/faults.py: the short fault set (what `make test` runs) finds no loss, hang or executed code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "faults.py"


@pytest.mark.timeout(900)
def test_the_short_fault_set_is_safe() -> None:
    """A hostile pickle, a FIFO, bad flags, two trainers on one root, SIGKILLs (one mid-save), a full disk: all safe."""
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--quick", "--json"], capture_output=True, text=True, timeout=880, check=False
    )
    report = json.loads(proc.stdout)
    assert report["tried"] >= 6, report
    assert report["data loss"] == report["hang"] == report["code executed"] == 0, report["not_safe"]
    assert report["unclear error"] == 0, report["not_safe"]
    assert proc.returncode == 0
    assert report["summary"].startswith(f"tried {report['tried']}, safe {report['safe']}, data loss 0, hang 0")
