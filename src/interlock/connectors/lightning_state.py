"""Lightning's ``trainer.state``: ``fn``, ``stage`` and ``status`` with Lightning's meanings and enums.

interlock's frozen :class:`~interlock.core.state.TrainerState` names the call ``stage`` (``fit``,
``validate``, ...) and has its own statuses (``idle``, ``failed``). Lightning code reads
``trainer.state.fn`` for the call, ``trainer.state.stage`` for the loop running now (``train``,
``sanity_check``, ``validate``, ...; ``None`` between calls) and ``trainer.state.status``
(``initializing``, ``running``, ``finished``, ``interrupted``). :func:`lightning_state` reads these
from the frozen state and the chart's tags, for the trainer a Lightning callback sees and for
``interlock.lightning.Trainer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from interlock.core.state import TrainerState as FrozenState

__all__ = ["LightningEnum", "LightningState", "RunningStage", "TrainerFn", "TrainerStatus", "lightning_state"]


class LightningEnum(str, Enum):
    """A string enum that compares case-insensitively with strings (Lightning's base of its enums)."""

    @classmethod
    def from_str(cls, value: str, source: str = "key") -> LightningEnum:
        for member in cls:
            if (member.name if source == "key" else member.value).lower() == value.lower():
                return member
        raise ValueError(f"{cls.__name__}.from_str({value!r}): expected one of {[m.value for m in cls]}")

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return isinstance(other, str) and self.value.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())


class TrainerStatus(LightningEnum):
    """Where the trainer is: before its first call, in one, after one (``interrupted``: it raised)."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        return self in (TrainerStatus.FINISHED, TrainerStatus.INTERRUPTED)


class TrainerFn(LightningEnum):
    """The trainer call: ``fit``, ``validate``, ``test`` or ``predict``."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(LightningEnum):
    """The loop running in a call: a fit runs ``sanity_check``, ``train`` and ``validate``."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (RunningStage.VALIDATING, RunningStage.TESTING, RunningStage.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str:
        return "val" if self in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING) else self.value


#: interlock's statuses as Lightning's (a failed call is ``interrupted`` there: it ended by an exception)
_STATUS = {
    "idle": TrainerStatus.INITIALIZING,
    "running": TrainerStatus.RUNNING,
    "finished": TrainerStatus.FINISHED,
    "interrupted": TrainerStatus.INTERRUPTED,
    "failed": TrainerStatus.INTERRUPTED,
}


class LightningState:
    """Lightning's ``trainer.state`` (read-only): ``fn``, ``stage``, ``status``, ``finished``, ``stopped``.

    Any other attribute reads interlock's frozen state (``trainer.state.global_step``,
    ``.metrics``, ``.chart``, ...); ``frozen`` is that state itself, for interlock's functions.
    """

    __slots__ = ("fn", "frozen", "stage", "status")
    fn: TrainerFn | str | None  # a stage an extended chart defines: its name
    stage: RunningStage | str | None
    status: TrainerStatus
    frozen: FrozenState

    def __init__(
        self, fn: TrainerFn | str | None, stage: RunningStage | str | None, status: TrainerStatus, frozen: FrozenState
    ) -> None:
        for name, value in (("fn", fn), ("stage", stage), ("status", status), ("frozen", frozen)):
            object.__setattr__(self, name, value)

    @property
    def finished(self) -> bool:
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        return self.status.stopped

    def __getattr__(self, name: str) -> Any:
        return getattr(self.frozen, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"trainer.state.{name} is read-only in interlock: the trainer's calls set fn, stage and status, and the "
            "chart's transitions the rest (return an update from a listener to change the run)"
        )

    def __repr__(self) -> str:
        fn, stage = (getattr(v, "value", v) for v in (self.fn, self.stage))
        return f"TrainerState(status={self.status.value!r}, fn={fn!r}, stage={stage!r})"


E = TypeVar("E", bound=LightningEnum)


def _member(enum: type[E], value: str) -> E | str:
    """``enum(value)``; a stage an extended chart defines has no Lightning member and stays its name."""
    try:
        return enum(value)
    except ValueError:
        return value


def running_stage(frozen: FrozenState, tags: Mapping[str, frozenset[str]], sanity: bool) -> RunningStage | str | None:
    """The loop running now (``None`` outside a call): a fit's sanity check, training, or validation."""
    if frozen.status != "running":
        return None
    leaf = tags.get(frozen.chart, frozenset())
    if sanity or "sanity" in leaf:
        return RunningStage.SANITY_CHECKING
    if frozen.stage == "fit":
        return RunningStage.VALIDATING if "val" in leaf else RunningStage.TRAINING
    return _member(RunningStage, frozen.stage)


def lightning_state(
    frozen: FrozenState,
    tags: Mapping[str, frozenset[str]],
    sanity: bool = False,
    stage: str | None = None,
) -> LightningState:
    """Lightning's view of ``frozen`` (``tags``: the chart's, by leaf; ``stage``: the loop, when the caller knows)."""
    fn = _member(TrainerFn, frozen.stage) if frozen.stage else None
    if frozen.status != "running":
        return LightningState(fn, None, _STATUS[frozen.status], frozen)
    now = running_stage(frozen, tags, sanity) if stage is None else _member(RunningStage, stage)
    return LightningState(fn, now, TrainerStatus.RUNNING, frozen)
