"""Everything the trainer knows about a run: one frozen value.

``TrainerState`` is immutable; mappings inside it are read-only views and lists
are tuples, so a handler that receives it cannot change it. It converts to and
from plain data (numbers, strings, lists, dicts, tensors) for checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

__all__ = ["STATE_VERSION", "Progress", "TrainerState", "freeze", "thaw"]

STATE_VERSION = 1
STATUSES = ("idle", "running", "finished", "interrupted", "failed")
STAGES = ("", "fit", "validate", "test", "predict")


def freeze(value: Any) -> Any:
    """Deep read-only copy: dicts become mapping proxies, lists become tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Inverse of :func:`freeze`: plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def _non_negative(instance: Any, attribute: attrs.Attribute, value: int) -> None:  # type: ignore[type-arg]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be an int >= 0, got {value!r}")


def _one_of(choices: tuple[str, ...]) -> Any:
    def check(instance: Any, attribute: attrs.Attribute, value: str) -> None:  # type: ignore[type-arg]
        if value not in choices:
            raise ValueError(f"{type(instance).__name__}.{attribute.name}={value!r}; allowed: {choices}")

    return check


_int = attrs.field(default=0, validator=_non_negative)


@attrs.frozen
class Progress:
    """Counters of the loops; they change only by chart transitions.

    ``epoch`` is the current training epoch (0-based); ``global_step`` counts
    optimizer steps; ``batch_idx`` the training batches finished in this epoch
    (the data position); ``eval_batch_idx`` the batches finished in the running
    evaluation loop; ``train_batches`` all training batches ever finished.
    """

    epoch: int = _int
    global_step: int = _int
    batch_idx: int = _int
    eval_batch_idx: int = _int
    train_batches: int = _int


@attrs.frozen
class TrainerState:
    """The whole known state of a run. Change it only through updates."""

    chart: str = "idle"
    stage: str = attrs.field(default="", validator=_one_of(STAGES))
    status: str = attrs.field(default="idle", validator=_one_of(STATUSES))
    progress: Progress = attrs.field(factory=Progress)
    counts: Mapping[str, int] = attrs.field(factory=dict, converter=freeze)
    should_stop: bool = False
    stop_reason: str = ""
    metrics: Mapping[str, float] = attrs.field(factory=dict, converter=freeze)
    best_metrics: Mapping[str, float] = attrs.field(factory=dict, converter=freeze)
    history: tuple[Mapping[str, Any], ...] = attrs.field(factory=tuple, converter=freeze)
    eval_sums: Mapping[str, float] = attrs.field(factory=dict, converter=freeze)
    data: Mapping[str, Any] = attrs.field(factory=dict, converter=freeze)
    listeners: Mapping[str, Any] = attrs.field(factory=dict, converter=freeze)
    seed: int | None = None
    run_dir: str = ""
    global_rank: int = attrs.field(default=0, validator=_non_negative)
    world_size: int = attrs.field(default=1, validator=_non_negative)

    @property
    def is_global_zero(self) -> bool:
        """Whether this process is rank 0 (the one that writes logs and checkpoints)."""
        return self.global_rank == 0

    # -- convenience views -------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.progress.epoch

    @property
    def global_step(self) -> int:
        return self.progress.global_step

    @property
    def batch_idx(self) -> int:
        return self.progress.batch_idx

    def listener_state(self, key: str) -> Mapping[str, Any]:
        """The stored state of one listener (empty when it has none yet)."""
        return self.listeners.get(key, MappingProxyType({}))

    # -- plain data --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain data: numbers, strings, lists, dicts and tensors only."""
        out = {f.name: thaw(getattr(self, f.name)) for f in attrs.fields(TrainerState)}
        out["progress"] = attrs.asdict(self.progress)
        out["version"] = STATE_VERSION
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainerState:
        """Rebuild a state from :meth:`to_dict` output; unknown keys are an error."""
        data = dict(data)
        version = data.pop("version", STATE_VERSION)
        if version > STATE_VERSION:
            raise ValueError(f"state version {version} is newer than this interlock supports ({STATE_VERSION})")
        names = {f.name for f in attrs.fields(TrainerState)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown trainer state keys {sorted(unknown)}; expected some of {sorted(names)}")
        progress = data.pop("progress", {})
        if not isinstance(progress, Mapping):
            raise ValueError(f"state 'progress' must be a mapping, got {type(progress).__name__}")
        return cls(progress=Progress(**progress), **data)
