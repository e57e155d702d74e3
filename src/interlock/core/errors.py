"""Errors that name the bad value and say how to fix it."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ChartError",
    "CheckpointError",
    "ConflictingUpdates",
    "IllegalTransition",
    "InterlockError",
    "RunFailed",
]


class InterlockError(Exception):
    """Base class of interlock's own errors."""


class ChartError(InterlockError, ValueError):
    """The statechart definition is invalid; lists every problem found."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid statechart {source}:\n{lines}")


class IllegalTransition(InterlockError, RuntimeError):
    """A trigger was fired in a state that does not allow it."""

    def __init__(self, state: str, trigger: str, allowed: Sequence[str]) -> None:
        self.state, self.trigger, self.allowed = state, trigger, list(allowed)
        super().__init__(
            f"trigger {trigger!r} is not allowed in state {state!r}; allowed there: {', '.join(allowed) or 'none'}"
        )


class ConflictingUpdates(InterlockError, ValueError):
    """Two handlers of one event returned updates that cannot both apply."""


class CheckpointError(InterlockError, ValueError):
    """A checkpoint file cannot be read, or does not fit the run."""


class RunFailed(InterlockError, RuntimeError):
    """Raised from a wrapped exception: carries the chart state where it happened."""
