"""Everything the trainer knows about a run: one frozen value.

``TrainerState`` is immutable; mappings inside it are read-only views and lists
are tuples, so a handler that receives it cannot change it. It converts to and
from plain data (numbers, strings, lists, dicts, tensors) for checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, overload

import attrs

__all__ = [
    "STATE_VERSION", "History", "Progress", "TrainerState", "callback_metrics", "freeze", "logged_metrics", "mode_of",
    "progress_bar_metrics", "thaw",
]  # fmt: skip

#: 2 added the facts guards read (``agreed``, ``limits``, ``manual_optimization``, ``eval_exhausted``),
#: ``metric_modes``, ``error``/``failed_in`` and ``loader_results``; a version-1 state loads with their defaults.
#: 3 added ``prog_bar`` and ``to_loggers`` (where each logged metric goes); a version-2 state loads with none.
#: 4 added ``to_callbacks`` (the logged names that are not Lightning's callback metrics); older ones load with none.
STATE_VERSION = 4
STATUSES = ("idle", "running", "finished", "interrupted", "failed")


def freeze(value: Any) -> Any:
    """Deep read-only copy: dicts become mapping proxies, lists become tuples; a :class:`History` is kept."""
    if isinstance(value, History):
        return value
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Inverse of :func:`freeze`: plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | History):
        return [thaw(v) for v in value]
    return value


_Row = tuple[tuple[str, ...], tuple[Any, ...]]


class History(Sequence[Mapping[str, Any]]):
    """The metric history: an append-only log of frozen rows, read-only to everyone.

    Appending is O(1): a new ``History`` shares the rows of the one it extends and
    sees only its own length, so every earlier state keeps seeing its own rows and
    a snapshot of the trainer state never copies the history.

    A row is kept compact, as its names (one tuple shared by every row with the same
    names) and a tuple of its values: rows of plain numbers hold no object the garbage
    collector tracks, so a long run's history adds nothing to every full collection.
    Reading a row gives a read-only mapping of it, built when read.
    """

    __slots__ = ("_n", "_names", "_rows")

    def __init__(self, rows: Sequence[Mapping[str, Any]] = ()) -> None:
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._rows: list[_Row] = [self._pack(r) for r in rows]
        self._n = len(self._rows)

    def _pack(self, row: Mapping[str, Any]) -> _Row:
        frozen = {str(k): freeze(v) for k, v in row.items()}
        names = tuple(frozen)
        return self._names.setdefault(names, names), tuple(frozen.values())

    def append(self, row: Mapping[str, Any]) -> History:
        """A history one row longer (this one is unchanged)."""
        rows = self._rows
        if len(rows) != self._n:  # another history already extended ours: branch off with a copy
            rows = rows[: self._n]
        rows.append(self._pack(row))
        out = History.__new__(History)
        out._rows, out._n, out._names = rows, self._n + 1, self._names
        return out

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Mapping[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Mapping[str, Any], ...]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):  # O(len of the slice): the rows past _n belong to longer histories
            rows = self._rows
            return tuple(_row(*rows[i]) for i in range(*index.indices(self._n)))
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError(f"history index {index} out of range ({self._n} rows)")
        return _row(*self._rows[index])

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        rows = self._rows
        return (_row(*rows[i]) for i in range(self._n))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History):
            return self._n == other._n and (self._rows is other._rows or list(self) == list(other))
        if isinstance(other, tuple | list):
            return len(other) == self._n and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(tuple(sorted(r.items())) for r in self))

    def __repr__(self) -> str:
        return f"History({list(self)!r})"


def _row(names: tuple[str, ...], values: tuple[Any, ...]) -> Mapping[str, Any]:
    return MappingProxyType(dict(zip(names, values, strict=True)))


def _history(value: Any) -> History:
    return value if isinstance(value, History) else History(value)


def _non_negative(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be an int >= 0, got {value!r}")


def _one_of(choices: tuple[str, ...]) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in choices:
            raise ValueError(f"{type(instance).__name__}.{attribute.name}={value!r}; allowed: {choices}")

    return check


def _stage_name(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    """A stage is named by a state of the chart (``fit``, or a chart's own); the runtime checks it is one."""
    if not isinstance(value, str) or not (value == "" or value.isidentifier()):
        raise ValueError(
            f"{type(instance).__name__}.{attribute.name}={value!r}; a stage is the name of a stage state of the "
            "chart (an identifier such as 'fit' or 'validate'), or '' for none"
        )


_int = attrs.field(default=0, validator=_non_negative)


@attrs.frozen
class Progress:
    """Counters of the loops; they change only by chart transitions.

    ``epoch`` is the current training epoch (0-based); ``global_step`` counts
    optimizer steps; ``batch_idx`` the training batches finished in this epoch
    (the data position); ``eval_batch_idx`` the batches finished in the running
    evaluation loop's current loader; ``train_batches`` all training batches ever
    finished; ``eval_loader`` which of the evaluation loop's loaders is running (0-based).
    """

    epoch: int = _int
    global_step: int = _int
    batch_idx: int = _int
    eval_batch_idx: int = _int
    train_batches: int = _int
    eval_loader: int = _int


@attrs.frozen
class TrainerState:
    """The whole known state of a run. Change it only through updates."""

    chart: str = "idle"
    stage: str = attrs.field(default="", validator=_stage_name)
    status: str = attrs.field(default="idle", validator=_one_of(STATUSES))
    progress: Progress = attrs.field(factory=Progress)
    counts: Mapping[str, int] = attrs.field(factory=dict, converter=freeze)
    should_stop: bool = False
    stop_reason: str = ""
    metrics: Mapping[str, float] = attrs.field(factory=dict, converter=freeze)
    #: for the metrics the module logged (``self.log``): whether the progress bar shows the name (Lightning's
    #: ``progress_bar_metrics``: ``prog_bar=True``, under ``<name>_step``/``<name>_epoch`` when logged on both)
    prog_bar: Mapping[str, bool] = attrs.field(factory=dict, converter=freeze)
    #: for the metrics the module logged: whether the loggers get the name (``logger=True``; Lightning's
    #: ``logged_metrics``, under ``<name>_step``/``<name>_epoch`` when logged on both)
    to_loggers: Mapping[str, bool] = attrs.field(factory=dict, converter=freeze)
    #: ``False`` for the metrics that are not Lightning's ``callback_metrics``: what an evaluation loop logged on
    #: step (on the bar and to the loggers only); a name not in it is one
    to_callbacks: Mapping[str, bool] = attrs.field(factory=dict, converter=freeze)
    best_metrics: Mapping[str, float] = attrs.field(factory=dict, converter=freeze)
    history: History = attrs.field(factory=History, converter=_history)
    eval_sums: Mapping[str, float] = attrs.field(factory=dict, converter=freeze)
    #: running epoch reductions of what the module logged with ``self.log`` (``<loop>/<name>`` -> row)
    logged: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict, converter=freeze)
    data: Mapping[str, Any] = attrs.field(factory=dict, converter=freeze)
    listeners: Mapping[str, Any] = attrs.field(factory=dict, converter=freeze)
    seed: int | None = None
    #: the gradient accumulation factor a listener set for this epoch (``GradientAccumulationScheduler``);
    #: 0: the Trainer's ``accumulate_grad_batches``
    accumulate_grad_batches: int = attrs.field(default=0, validator=_non_negative)
    run_dir: str = ""
    global_rank: int = attrs.field(default=0, validator=_non_negative)
    world_size: int = attrs.field(default=1, validator=_non_negative)
    #: what the processes agreed by the chart's agreement actions (``stop``, ``preempted``), for the guards
    agreed: Mapping[str, bool] = attrs.field(factory=dict, converter=freeze)
    #: the batch limit of each loader of the stage (``train``, ``val``, ``val#1``, ...; ``None``: until exhausted)
    limits: Mapping[str, int | None] = attrs.field(factory=dict, converter=freeze)
    #: the module steps its optimizers itself (``automatic_optimization = False``)
    manual_optimization: bool = False
    #: the evaluation loop's current loader ran out
    eval_exhausted: bool = False
    #: ``"min"`` or ``"max"`` for the metrics whose better direction the module names (``Module.metric_modes``)
    metric_modes: Mapping[str, str] = attrs.field(factory=dict, converter=freeze)
    #: ``"Type: message"`` of the exception ending the stage, and the state (or transition) it was raised in
    error: str = ""
    failed_in: str = ""
    #: the metrics of each loader of the latest evaluation loop (what ``validate``/``test`` return)
    loader_results: tuple[Mapping[str, float], ...] = attrs.field(factory=tuple, converter=freeze)

    @property
    def is_global_zero(self) -> bool:
        """Whether this process is rank 0 (the one that writes logs and checkpoints)."""
        return self.global_rank == 0

    # -- convenience views -------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.progress.epoch

    @property
    def current_epoch(self) -> int:
        """Lightning's ``trainer.current_epoch``.

        :attr:`epoch` while a fit runs; once it has ended, the number of epochs it entered
        (``epoch + 1``, also when ``max_steps`` or a stop cut the last one short).
        :attr:`epoch` is the resume cursor: it stays on the last epoch trained.
        """
        ended = not self.chart.startswith("fit.") and not (
            self.stage == "fit" and self.status in ("interrupted", "failed")
        )
        return self.progress.epoch + 1 if ended and self.progress.train_batches else self.progress.epoch

    @property
    def global_step(self) -> int:
        return self.progress.global_step

    @property
    def batch_idx(self) -> int:
        return self.progress.batch_idx

    def listener_state(self, key: str) -> Mapping[str, Any]:
        """The stored state of one listener (empty when it has none yet)."""
        stored: Mapping[str, Any] = self.listeners.get(key, MappingProxyType({}))
        return stored

    def replace(self, **changes: Any) -> TrainerState:
        """A copy with ``changes``: O(fields changed), unlike ``attrs.evolve``, which re-converts every field."""
        new = object.__new__(TrainerState)
        for name in _FIELD_NAMES:
            object.__setattr__(new, name, getattr(self, name))
        for name, value in changes.items():
            field = _FIELDS.get(name)
            if field is None:
                raise TypeError(f"TrainerState has no field {name!r}")
            if field.converter is not None:
                value = field.converter(value)  # type: ignore[operator]
            if field.validator is not None:
                field.validator(new, field, value)
            object.__setattr__(new, name, value)
        return new

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
        unknown = set(progress) - {f.name for f in attrs.fields(Progress)}
        if unknown:
            raise ValueError(f"unknown progress counters {sorted(unknown)} in state 'progress'")
        _check_plain(data)
        return cls(progress=Progress(**progress), **data)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_plain(data: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the field when plain state data has the wrong kind of value.

    The fields the interpreter counts and compares must hold what it would have put there:
    an ``int`` event count, a ``float`` metric, a ``bool`` flag. A checkpoint that says
    otherwise would fail later, deep in a run; here it fails before anything is loaded.
    """

    def mapping(name: str) -> Mapping[str, Any]:
        value = data.get(name, {})
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"state {name!r} must be a mapping with str keys, got {value!r:.80}")
        return value

    for name, value in mapping("counts").items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(
                f"state 'counts'[{name!r}] must be an int >= 0 (times the state was entered), got {value!r}"
            )
    for field in ("metrics", "best_metrics", "eval_sums"):
        for name, value in mapping(field).items():
            if not _number(value):
                raise ValueError(f"state {field!r}[{name!r}] must be a number, got {value!r:.80}")
    for name, value in mapping("listeners").items():
        if not isinstance(value, Mapping):
            raise ValueError(
                f"state 'listeners'[{name!r}] must be a mapping (a listener's stored state), got {value!r:.80}"
            )
    for name, value in mapping("logged").items():
        if not isinstance(value, Mapping) or not _number(value.get("value")) or not _number(value.get("weight")):
            raise ValueError(f"state 'logged'[{name!r}] must be a mapping with number 'value' and 'weight'")
    mapping("data")
    for field in ("agreed", "prog_bar", "to_loggers", "to_callbacks"):
        for name, value in mapping(field).items():
            if not isinstance(value, bool):
                raise ValueError(f"state {field!r}[{name!r}] must be a bool, got {value!r:.80}")
    for name, value in mapping("limits").items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"state 'limits'[{name!r}] must be an int >= 0 or None, got {value!r:.80}")
    for name, value in mapping("metric_modes").items():
        if value not in ("min", "max"):
            raise ValueError(f"state 'metric_modes'[{name!r}] must be 'min' or 'max', got {value!r:.80}")
    results = data.get("loader_results", ())
    if not isinstance(results, list | tuple) or not all(
        isinstance(r, Mapping) and all(_number(v) for v in r.values()) for r in results
    ):
        raise ValueError(f"state 'loader_results' must be a list of mappings of numbers, got {results!r:.80}")
    history = data.get("history", ())
    if not isinstance(history, list | tuple | History):
        raise ValueError(f"state 'history' must be a list of rows, got {history!r:.80}")
    for i, row in enumerate(history):
        if not isinstance(row, Mapping):
            raise ValueError(f"state 'history'[{i}] must be a mapping (one row of metrics), got {row!r:.80}")
    flags = (("should_stop", bool), ("manual_optimization", bool), ("eval_exhausted", bool))
    texts = (("chart", str), ("stop_reason", str), ("run_dir", str), ("error", str), ("failed_in", str))
    for name, kind in (*texts, *flags):
        if name in data and not isinstance(data[name], kind):
            raise ValueError(f"state {name!r} must be a {kind.__name__}, got {data[name]!r:.80}")
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"state 'seed' must be an int or None, got {seed!r:.80}")


def progress_bar_metrics(state: TrainerState) -> dict[str, float]:
    """Lightning's ``trainer.progress_bar_metrics``: the latest value of each metric logged with ``prog_bar=True``."""
    shown = state.prog_bar
    return {k: v for k, v in state.metrics.items() if shown.get(k)}


def callback_metrics(state: TrainerState) -> dict[str, float]:
    """Lightning's ``trainer.callback_metrics``: the latest metrics, less what an evaluation loop logged on step."""
    hidden = state.to_callbacks
    if not hidden:
        return dict(state.metrics)
    return {k: v for k, v in state.metrics.items() if hidden.get(k, True)}


def logged_metrics(state: TrainerState) -> dict[str, float]:
    """Lightning's ``trainer.logged_metrics``: the latest value of each metric logged with ``logger=True``."""
    loggers = state.to_loggers
    return {k: v for k, v in state.metrics.items() if loggers.get(k)}


def mode_of(metric: str, modes: Mapping[str, str]) -> str:
    """``"min"`` or ``"max"``: which direction is better for ``metric``.

    ``modes`` first, then its name: lower is better for names containing ``loss`` or ``err``.
    """
    mode = modes.get(metric)
    if mode is not None:
        return mode
    lowered = metric.lower()
    return "min" if ("loss" in lowered or "err" in lowered) else "max"


_FIELDS = {f.name: f for f in attrs.fields(TrainerState)}
_FIELD_NAMES = tuple(_FIELDS)
