"""docs/porting.md's "What still differs" table is the one the parity matrix generates."""

from __future__ import annotations

import sys
from pathlib import Path

from parity.case import Case
from parity.matrix import CASES
from parity.probes import PROBES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import parity_table

sys.path.pop(0)


def test_porting_table_is_fresh() -> None:
    """The table in docs/porting.md equals what tools/parity_table.py renders now (run it if not)."""
    assert parity_table.committed() == parity_table.render(), "stale: run python tools/parity_table.py"


def test_matrix_is_large_unique_and_well_formed() -> None:
    """At least 80 configurations with unique ids; every probe a case requires exists."""
    ids = [c.id for c in CASES]
    assert len(ids) >= 80
    assert len(set(ids)) == len(ids), sorted({i for i in ids if ids.count(i) > 1})
    assert {p for c in CASES for p in c.requires} <= set(PROBES)


def test_a_declared_difference_needs_its_fields() -> None:
    """A case that declares a deliberate difference must say where it shows, and the reverse."""
    import pytest

    with pytest.raises(ValueError, match="go together"):
        Case("x", expected_difference="why")
    with pytest.raises(ValueError, match="go together"):
        Case("x", differs=("weights",))
