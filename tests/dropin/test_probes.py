"""Differential probes: Lightning scripts run under Lightning 2.6.6 and with only their imports switched.

Each probe in ``probes/`` trains, evaluates, checkpoints or resumes the way a Lightning user writes it,
and its module records what the run showed it (``module.seen``: callback metrics, checkpoint files
and scores, results, hook arguments, the summary text, ...). Switched to ``interlock.lightning``
(``harness.switched``: nothing but import lines changes), the record and the trained weights must
be Lightning's. Each probe names what it covers in its first line; the fixes they found are in
``docs/porting.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dropin import harness

pytest.importorskip("pytorch_lightning")

PROBES = sorted(p.stem for p in harness.PROBES.glob("*.py"))


def test_every_probe_is_run() -> None:
    """The probes folder holds the scripts this file runs (a new probe is picked up by its name)."""
    assert len(PROBES) >= 16 and "clipping" in PROBES


@pytest.mark.parametrize("name", PROBES)
def test_probe_records_what_lightning_records(name: str, tmp_path: Path) -> None:
    """The probe's record of the run and its trained weights equal Lightning's, with only its imports switched."""
    lit, mine = harness.both(name, tmp_path, harness.PROBES)
    assert lit.seen is not None
    assert mine.seen == lit.seen
    assert harness.differences(lit.weights, mine.weights) == []
