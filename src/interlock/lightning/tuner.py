"""Lightning's ``tuner``: interlock has no learning-rate or batch-size finder; ``Tuner`` raises ``ImportError``."""

from __future__ import annotations

from interlock.lightning._refuse import missing

__getattr__ = missing(
    "interlock.lightning.tuner",
    {"Tuner": "interlock has no learning-rate or batch-size finder; choose them with a short sweep of fits"},
)
