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


def test_compare_finds_each_kind_of_difference() -> None:
    """compare() names a one-bit weight change, a metric beyond tolerance and a raise on one side only."""
    import torch

    from parity.outcome import Outcome, compare

    w = {"w": torch.tensor([1.0, 2.0])}
    base = Outcome(weights=w, metrics={"val_loss": 0.5}, calls={"training_step": 4})
    assert (
        compare(base, Outcome(weights={"w": w["w"].clone()}, metrics={"val_loss": 0.5 + 1e-9}, calls=base.calls)) == {}
    )
    bumped = {"w": torch.nextafter(w["w"], torch.tensor(3.0))}
    diff = compare(base, Outcome(weights=bumped, metrics={"val_loss": 0.51}, calls=base.calls))
    assert sorted(diff) == ["metrics", "weights"]
    raised = Outcome(error="ValueError: bad", calls={})
    assert sorted(compare(base, raised)) == ["calls", "error"]
    assert compare(base, Outcome(weights=bumped, metrics={}, calls=base.calls), frozenset({"weights", "metrics"})) == {}
