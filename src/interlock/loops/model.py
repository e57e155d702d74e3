"""What events carry about the module itself: its layer table (``summary``) for the model summary."""

from __future__ import annotations

from typing import Any

from interlock.core.registry import Registry
from interlock.core.run import Run
from interlock.core.summary import describe

__all__ = ["register"]


def register(reg: Registry) -> None:
    """The ``summary`` payload key."""

    @reg.payload_key("summary", lazy=True)
    def summary(run: Run) -> Any:
        """The module's layers, parameter counts and modes (a ``ModuleSummary``, built when first read)."""
        return lambda: describe(run.module, run.hardware.precision.flag)
