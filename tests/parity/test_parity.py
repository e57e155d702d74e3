"""Each configuration of the matrix trains the same under pytorch-lightning 2.6.6 and interlock."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning", reason="the parity suite needs pytorch-lightning==2.6.6 (the test extra)")

from parity.case import Case
from parity.matrix import CASES
from parity.outcome import compare
from parity.probes import FIELD_PROBES, missing, present
from parity.run import run_interlock, run_lightning


def _param(case: Case) -> object:
    marks = []
    if case.known_issue:
        marks.append(pytest.mark.xfail(strict=True, reason=f"known difference, being fixed: {case.known_issue}"))
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_same_as_lightning(case: Case, tmp_path: Path) -> None:
    """The port matches Lightning on every compared field, or differs exactly as the case declares."""
    pending = missing(case.requires)
    if pending:
        pytest.skip("pending: " + "; ".join(pending))
    ignore = frozenset(f for f, probe in FIELD_PROBES.items() if not present(probe))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit = run_lightning(case, tmp_path)
        port = run_interlock(case, tmp_path)
    diff = compare(lit, port, ignore)
    if case.expected_difference is None:
        assert not diff, "\n".join(f"{k}: {v}" for k, v in diff.items())
    else:
        assert sorted(diff) == sorted(case.differs), (
            f"declared difference ({case.expected_difference}) in {sorted(case.differs)}, found "
            + "\n".join(f"{k}: {v}" for k, v in diff.items())
        )
