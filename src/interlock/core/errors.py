"""Errors that name the bad value and say how to fix it."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ChartError",
    "ChartEvent",
    "CheckpointError",
    "ConflictingUpdates",
    "IllegalTransition",
    "InterlockError",
    "Interrupted",
    "OutputError",
    "Paused",
    "Preempted",
    "ReplayDivergence",
    "RunDirectoryInUse",
    "WeightsMismatchError",
    "add_note",
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


class WeightsMismatchError(CheckpointError, RuntimeError):
    """A checkpoint's weights do not fit the module (a ``RuntimeError`` too, as torch's ``load_state_dict`` raises)."""


class OutputError(InterlockError, OSError):
    """A run's output (a log or metrics file) cannot be written; names the file, the cause and the fix.

    An :class:`OSError` whose ``errno`` is the cause's (e.g. ``errno.ENOSPC`` for a full disk).
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class Preempted(Exception):
    """Raised by a fit that a preemption signal stopped, once the checkpoint is saved."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"preempted by signal {signum}; a checkpoint was saved at the last batch boundary")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during fit, raised once the run is saved at the next checkpointable state.

    A ``KeyboardInterrupt``: code that catches Ctrl-C catches it. ``checkpoint`` is the
    file that was saved (``<run_dir>/checkpoints/last.ckpt``); resume with ``ckpt_path=`` it.
    """

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        super().__init__(f"interrupted by Ctrl-C; a checkpoint was saved to {checkpoint}")


class ChartEvent(Exception):
    """Raised by an action to send the chart the external event ``name`` from the state it runs in.

    The rest of that state's entry actions is skipped and the ``on: {name: target}`` transition
    declared on the state (or one above it) is taken, after ``updates`` are applied. A state with
    no such transition fails the stage with an error naming the event. ``module.on_train_batch_start``
    sends ``skip_epoch`` when the hook returns -1 (Lightning's "skip the rest of the epoch").
    """

    def __init__(self, name: str, reason: str, updates: Sequence[object] = ()) -> None:
        self.name, self.reason, self.updates = name, reason, tuple(updates)
        super().__init__(f"{reason} (the chart's {name!r} event)")


class Paused(BaseException):
    """Raised by a replay's own hooks to stop the interpreter where it is, the stage still bound.

    The runtime lets it through without failing the stage or tearing it down
    (:meth:`interlock.trainer.runtime.Runtime.release` unbinds the stage later).
    """


class ReplayDivergence(InterlockError, RuntimeError):
    """A replay made a transition other than the recorded one; names the first that differs, expected vs got."""

    def __init__(self, message: str, number: int) -> None:
        self.number = number
        super().__init__(message)


class RunDirectoryInUse(InterlockError, RuntimeError):
    """Another process is writing the run directory this stage would write (one writer per run)."""


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` (Python 3.11+), or the same ``__notes__`` list on 3.10."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # pragma: no cover - Python 3.10
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]
