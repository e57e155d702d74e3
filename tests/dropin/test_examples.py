"""Lightning's examples (and one of ours, in Lightning's idioms), with synthetic data, train to the same weights
with only their imports switched.

Each example in ``examples/`` runs twice in this process: as Lightning code, and with its
``lightning.pytorch`` / ``pytorch_lightning`` / ``lightning`` imports replaced by
``interlock.lightning`` (``harness.switched``: the test fails if anything but an import line
changes). The trained weights must be bitwise equal unless the example's entry says otherwise,
and the global RNGs (torch, numpy, python) must be left where Lightning leaves them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dropin import harness

pytest.importorskip("pytorch_lightning")

#: example -> (absolute tolerance, why not bitwise); 0.0 is bitwise.
TOLERANCE: dict[str, tuple[float, str]] = {}

#: example -> what interlock still lacks for it (the test is xfail(strict) until then).
MISSING: dict[str, str] = {}

EXAMPLES = [
    "bug_report_model",
    "boring_demo",
    "lstm_demo",
    "transformer",
    "autoencoder",
    "backbone_image_classifier",
    "generative_adversarial_net",
    "reinforce_learn_Qnet",
    "reinforce_learn_ppo",
    "trainer_in_module",  # ours, not Lightning's: the module idioms that read and write self.trainer
]


def _marks(name: str) -> list[pytest.MarkDecorator]:
    return [pytest.mark.xfail(strict=True, reason=MISSING[name])] if name in MISSING else []


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in EXAMPLES])
def test_example_trains_the_same_with_only_its_imports_switched(name: str, tmp_path: Path) -> None:
    """The example trains to Lightning's weights, and leaves the global RNGs where Lightning does, when switched."""
    lit, mine = harness.both(name, tmp_path)
    atol = TOLERANCE.get(name, (0.0, ""))[0]
    assert harness.differences(lit.weights, mine.weights, atol) == []
    assert mine.rng == lit.rng, "the run drew a different number of random values (data order, dropout, seeds)"
