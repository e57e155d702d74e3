"""What the loops need from the layer above: fire triggers, apply updates, read state.

The trainer's runtime implements it. Loops never see the trainer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from interlock.core.progress import Counters
from interlock.core.state import TrainerState
from interlock.core.updates import Update

__all__ = ["Driver"]


class Driver(Protocol):
    """The runtime as the loops see it."""

    counters: Counters

    @property
    def at(self) -> str: ...

    @property
    def should_stop(self) -> bool: ...

    @property
    def state(self) -> TrainerState: ...

    def fire(self, trigger: str, payload: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None) -> None:
        """Take transition ``trigger``; ``payload`` may be a function, called only if someone listens."""

    def apply(self, *updates: Update, source: str = "loop") -> None: ...

    def log(self, metrics: Mapping[str, float], **history: Any) -> None: ...

    def evolve(self, **changes: Any) -> None: ...
