"""Lightning's ``callbacks`` names: ``Callback``, and interlock's listeners taking Lightning's constructor arguments.

``Callback`` is Lightning's base class, run at Lightning's moments (docs/porting.md#callbacks);
``BaseFinetuning``, ``BackboneFinetuning``, ``BasePredictionWriter``, ``LambdaCallback``,
``LearningRateFinder``, ``WeightAveraging`` and ``EMAWeightAveraging`` are Lightning's callbacks of those
names, written on it.

``ModelCheckpoint``, ``EarlyStopping``, ``LearningRateMonitor``, ``Timer``, ``ModelSummary``,
``StochasticWeightAveraging``, ``GradientAccumulationScheduler``, ``RichProgressBar``,
``DeviceStatsMonitor`` and ``TQDMProgressBar``
(``ProgressBar``) are the native listeners. Lightning's attributes that read run state
(``best_model_path``, ``best_model_score``, EarlyStopping's ``wait_count``, ``best_score`` and
``stopped_epoch``, ``time_elapsed()``) read the state of the trainer
that last ran them. A Lightning argument interlock cannot honour raises at construction, and a
Lightning callback class with no interlock equivalent raises ``ImportError`` naming the
alternative when imported.
"""

from __future__ import annotations

import datetime
import enum
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from interlock.connectors.callbacks import CALLBACK_HOOKS
from interlock.core.events import Event
from interlock.core.state import TrainerState, callback_metrics
from interlock.lightning._refuse import missing, refuse_value
from interlock.lightning.callback import Callback
from interlock.lightning.finetuning import BackboneFinetuning, BaseFinetuning
from interlock.lightning.lr_finder import LearningRateFinder
from interlock.lightning.utilities import MisconfigurationException
from interlock.lightning.weight_averaging import EMAWeightAveraging, WeightAveraging
from interlock.listeners import DeviceStatsMonitor, GradientAccumulationScheduler
from interlock.listeners import EarlyStopping as _EarlyStopping
from interlock.listeners import LearningRateMonitor as _LearningRateMonitor
from interlock.listeners import ModelCheckpoint as _ModelCheckpoint
from interlock.listeners import ModelSummary as _ModelSummary
from interlock.listeners import ProgressBar as _ProgressBar
from interlock.listeners import RichProgressBar as _RichProgressBar
from interlock.listeners import StochasticWeightAveraging as _StochasticWeightAveraging
from interlock.listeners import Timer as _Timer

__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "Callback",
    "DeviceStatsMonitor",
    "EMAWeightAveraging",
    "EarlyStopping",
    "GradientAccumulationScheduler",
    "LambdaCallback",
    "LearningRateFinder",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "RichProgressBar",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "Timer",
    "WeightAveraging",
]


class _Bound:
    """Reads the state of the trainer that runs this listener (bound by ``interlock.lightning.Trainer``)."""

    _state_source: Callable[[], TrainerState] | None = None

    def bind_state(self, source: Callable[[], TrainerState]) -> None:
        self._state_source = source

    def _bound_state(self, what: str) -> TrainerState:
        if self._state_source is None:
            raise RuntimeError(
                f"{type(self).__name__}.{what} reads the run's state, and this callback has not run in an "
                "interlock.lightning.Trainer yet; pass it to Trainer(callbacks=[...]) and fit first "
                f"(with the native interlock.Trainer, call the listener's method with trainer.state)"
            )
        return self._state_source()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state_source": None}


def _state_key(name: str, **kwargs: Any) -> str:
    """Lightning's ``Callback.state_key`` of a callback made with ``kwargs`` (the class name and their repr)."""
    return f"{name}{kwargs!r}"


def distinct_keys(listeners: list[Any]) -> None:
    """Give Lightning's state key to each of several ``ModelCheckpoint`` / ``EarlyStopping`` of one kind.

    One of a kind keeps its class name as its key (what its checkpoints store its state under); several,
    as Lightning allows, each take their Lightning ``state_key`` (monitor, mode, triggers). Two with the
    same settings are Lightning's error.
    """
    kinds: dict[str, list[Any]] = {}
    for x in listeners:
        if hasattr(x, "lightning_state_key") and getattr(x, "_key", None) is None:
            kinds.setdefault(x.key, []).append(x)
    for kind, same in kinds.items():
        if len(same) < 2:
            continue
        keys = [x.lightning_state_key for x in same]
        if len(set(keys)) < len(keys):
            raise RuntimeError(
                f"Found more than one stateful callback of type `{kind}`. In the current configuration, this "
                f"callback does not support being saved alongside other instances of the same type (Lightning's "
                f"error): give them different monitor/mode{'/triggers' if 'Checkpoint' in kind else ''}"
            )
        for x, key in zip(same, keys, strict=True):
            x.key = key


class ModelCheckpoint(_Bound, _ModelCheckpoint):
    """Lightning's ``ModelCheckpoint(dirpath, filename, monitor, ...)``; ``best_model_path`` etc. are attributes."""

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | None = None,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: datetime.timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        refuse_value(
            "ModelCheckpoint", "save_last", save_last, (None, True, False), "use save_last=True (a copy, not a link)"
        )
        refuse_value(
            "ModelCheckpoint",
            "save_on_exception",
            save_on_exception,
            (False,),
            "interlock saves last.ckpt on preemption and Ctrl-C by itself (docs/resuming.md)",
        )
        no_trigger = every_n_train_steps is None and every_n_epochs is None and train_time_interval is None
        self.lightning_state_key = _state_key(
            type(self).__qualname__, monitor=monitor, mode=mode, every_n_train_steps=every_n_train_steps or 0,
            every_n_epochs=1 if no_trigger else every_n_epochs or 0, train_time_interval=train_time_interval,
        )  # fmt: skip
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            monitor=monitor,
            mode=mode,
            save_top_k=save_top_k,
            save_last=save_last,
            every_n_train_steps=every_n_train_steps,
            every_n_epochs=every_n_epochs,
            train_time_interval=train_time_interval,
            verbose=verbose,
            auto_insert_metric_name=auto_insert_metric_name,
            save_on_train_epoch_end=save_on_train_epoch_end,
            enable_version_counter=enable_version_counter,
            save_weights_only=save_weights_only,
        )

    @property
    def state_key(self) -> str:
        """Lightning's ``state_key``: the class and the settings that tell two instances apart."""
        return self.lightning_state_key

    def _missing_monitor(self, state: TrainerState) -> Exception:
        """Lightning's error, with its list of candidates (the callback metrics, then ``epoch`` and ``step``)."""
        keys = [*callback_metrics(state), "epoch", "step"]
        return MisconfigurationException(
            f"`ModelCheckpoint(monitor={self.monitor!r})` could not find the monitored key in the returned "
            f"metrics: {keys}. HINT: Did you call `log({self.monitor!r}, value)` in the `LightningModule`?"
        )

    @property
    def best_model_path(self) -> str:  # type: ignore[override]
        return _ModelCheckpoint.best_model_path(self, self._bound_state("best_model_path"))

    @property
    def best_model_score(self) -> torch.Tensor | None:  # type: ignore[override]
        score = _ModelCheckpoint.best_model_score(self, self._bound_state("best_model_score"))
        return None if score is None else torch.tensor(score)

    @property
    def last_model_path(self) -> str:  # type: ignore[override]
        return _ModelCheckpoint.last_model_path(self, self._bound_state("last_model_path"))

    @property
    def best_k_models(self) -> dict[str, torch.Tensor | None]:  # type: ignore[override]
        kept = _ModelCheckpoint.best_k_models(self, self._bound_state("best_k_models"))
        return {p: None if s is None else torch.tensor(s) for p, s in kept.items()}

    def lightning_checkpoint_entry(self, state: TrainerState) -> dict[str, Any]:
        """Lightning's ``state_dict()`` as ``state`` has it: what a checkpoint file keeps under :attr:`state_key`."""
        kept = _ModelCheckpoint.best_k_models(self, state)
        score = _ModelCheckpoint.best_model_score(self, state)
        latest = list(kept.values())[-1] if kept else None  # the score of the file last ranked (Lightning's current)
        kth_path, kth_value = self._kth_in(state)
        return {
            "monitor": self.monitor,
            "best_model_score": None if score is None else torch.tensor(score),
            "best_model_path": _ModelCheckpoint.best_model_path(self, state),
            "current_score": None if latest is None else torch.tensor(latest),
            "dirpath": str(self._base(state) / self._subdir),
            "best_k_models": {p: None if s is None else torch.tensor(s) for p, s in kept.items()},
            "kth_best_model_path": kth_path,
            "kth_value": torch.tensor(kth_value),
            "last_model_path": _ModelCheckpoint.last_model_path(self, state),
        }

    def _kth(self, what: str) -> tuple[str, float]:
        return self._kth_in(self._bound_state(what))

    def _kth_in(self, state: TrainerState) -> tuple[str, float]:
        """The worst kept file and its score once ``save_top_k`` are kept (Lightning's ``kth``), else ``("", ±inf)``."""
        kept = _ModelCheckpoint.best_k_models(self, state)
        full = bool(kept) and (self.save_top_k == -1 or len(kept) == self.save_top_k)
        if not full:
            return "", math.inf if self.mode == "min" else -math.inf
        sign = 1.0 if self.mode == "min" else -1.0
        worst = max(kept, key=lambda p: math.inf if kept[p] is None else sign * float(kept[p]))  # type: ignore[arg-type]
        score = kept[worst]
        return worst, math.inf if score is None else float(score)

    @property
    def kth_best_model_path(self) -> str:
        """The kept file a better one replaces once ``save_top_k`` are kept (``""`` before), as Lightning's."""
        return self._kth("kth_best_model_path")[0]

    @property
    def kth_value(self) -> torch.Tensor:
        """The score of :attr:`kth_best_model_path` (``inf`` in min mode, ``-inf`` in max, before), a tensor."""
        return torch.tensor(self._kth("kth_value")[1])


class EarlyStoppingReason(enum.Enum):
    """Why ``EarlyStopping`` stopped the run (Lightning's ``callbacks.early_stopping.EarlyStoppingReason``)."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(_Bound, _EarlyStopping):
    """Lightning's ``EarlyStopping(monitor, min_delta, patience, ...)``; ``wait_count`` etc. are attributes."""

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        if not isinstance(log_rank_zero_only, bool):
            raise ValueError(f"EarlyStopping(log_rank_zero_only={log_rank_zero_only!r}) must be True or False")
        self.lightning_state_key = _state_key(type(self).__qualname__, monitor=monitor, mode=mode)
        super().__init__(
            monitor=monitor,
            min_delta=min_delta,
            patience=patience,
            verbose=verbose,
            mode=mode,
            strict=strict,
            check_finite=check_finite,
            stopping_threshold=stopping_threshold,
            divergence_threshold=divergence_threshold,
            check_on_train_epoch_end=check_on_train_epoch_end,
        )
        self.log_rank_zero_only = log_rank_zero_only  # interlock's messages come from rank 0 only either way

    @property
    def state_key(self) -> str:
        """Lightning's ``state_key``: the class and the settings that tell two instances apart."""
        return self.lightning_state_key

    def _missing_monitor(self, event: Event, state: TrainerState) -> str:
        """Lightning's message, naming the callback metrics."""
        names = "`, `".join(callback_metrics(state))
        return (
            f"Early stopping conditioned on metric `{self.monitor}` which is not available. Pass in or modify your "
            f"`EarlyStopping` callback to use any of the following: `{names}`"
        )

    def lightning_checkpoint_entry(self, state: TrainerState) -> dict[str, Any]:
        """Lightning's ``state_dict()`` as ``state`` has it: what a checkpoint file keeps under :attr:`state_key`."""
        c = self.counters(state)
        return {
            "wait_count": c["wait_count"],
            "stopped_epoch": c["stopped_epoch"],
            "best_score": torch.tensor(c["best_score"]),
            "patience": self.patience,
            "stopping_reason": self._reason_in(state).value,
            "stopping_reason_message": self._reason_message_in(state),
        }

    def _reason_in(self, state: TrainerState) -> EarlyStoppingReason:
        return EarlyStoppingReason(int(self.stored(state).get("stopping_reason", 0)))

    def _reason_message_in(self, state: TrainerState) -> str | None:
        """Lightning's message for why the run stopped (``None``: it did not)."""
        stored, reason = self.stored(state), self._reason_in(state)
        if reason is EarlyStoppingReason.NOT_STOPPED:
            return None
        current, best = torch.tensor(stored["stopping_value"]), torch.tensor(stored["stopping_best"])
        order = "<" if self.mode == "min" else ">"
        if reason is EarlyStoppingReason.NON_FINITE_METRIC:
            return (
                f"Monitored metric {self.monitor} = {current} is not finite. Previous best value was {best:.3f}. "
                "Signaling Trainer to stop."
            )
        if reason is EarlyStoppingReason.STOPPING_THRESHOLD:
            return (
                f"Stopping threshold reached: {self.monitor} = {current} {order} {self.stopping_threshold}. "
                "Signaling Trainer to stop."
            )
        if reason is EarlyStoppingReason.DIVERGENCE_THRESHOLD:
            return (
                f"Divergence threshold reached: {self.monitor} = {current} {order} {self.divergence_threshold}. "
                "Signaling Trainer to stop."
            )
        return (
            f"Monitored metric {self.monitor} did not improve in the last {self.counters(state)['wait_count']} "
            f"records. Best score: {best:.3f}. Signaling Trainer to stop."
        )

    @property
    def stopping_reason(self) -> EarlyStoppingReason:
        """Why the run stopped (``NOT_STOPPED`` when it did not), as Lightning's."""
        return self._reason_in(self._bound_state("stopping_reason"))

    @property
    def stopping_reason_message(self) -> str | None:
        """Lightning's message for :attr:`stopping_reason` (``None`` when the run did not stop)."""
        return self._reason_message_in(self._bound_state("stopping_reason_message"))

    @property
    def wait_count(self) -> int:
        """Checks without improvement since the best one, as Lightning's ``wait_count``."""
        return int(self.counters(self._bound_state("wait_count"))["wait_count"])

    @property
    def best_score(self) -> torch.Tensor:
        """The best monitored value so far (``inf``/``-inf`` before a check), a tensor as in Lightning."""
        return torch.tensor(self.counters(self._bound_state("best_score"))["best_score"])

    @property
    def stopped_epoch(self) -> int:
        """The epoch the run stopped in (0 when it did not stop), as Lightning's ``stopped_epoch``."""
        return int(self.counters(self._bound_state("stopped_epoch"))["stopped_epoch"])


_INTERVALS = ("batch", "epoch", "batch_and_epoch")


class BasePredictionWriter(Callback):
    """Lightning's ``BasePredictionWriter(write_interval)``: override ``write_on_batch_end`` / ``write_on_epoch_end``.

    ``write_interval="batch"`` calls ``write_on_batch_end(trainer, pl_module, prediction, batch_indices, batch,
    batch_idx, dataloader_idx)`` after each predict batch; ``"epoch"`` calls ``write_on_epoch_end(trainer,
    pl_module, predictions, batch_indices)`` once the predict loop ends (the predictions are kept for it even
    with ``return_predictions=False``); ``"batch_and_epoch"`` both. ``batch_indices`` are the dataset indices of
    each batch this process predicted (``[]`` for a loader whose sampler interlock does not drive), as Lightning's.
    """

    wants_batch_indices = True

    def __init__(self, write_interval: str = "batch") -> None:
        if write_interval not in _INTERVALS:
            raise ValueError(f"BasePredictionWriter(write_interval={write_interval!r}) must be one of {_INTERVALS}")
        self.write_interval = write_interval
        self.keeps_predictions = write_interval != "batch"

    def write_on_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        prediction: Any,
        batch_indices: list[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        """Override with the logic to write one batch's prediction."""
        raise NotImplementedError(f"{type(self).__name__} writes per batch: override write_on_batch_end")

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
        """Override with the logic to write every prediction of the loop."""
        raise NotImplementedError(f"{type(self).__name__} writes per epoch: override write_on_epoch_end")

    def on_predict_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.write_interval == "epoch":
            return
        indices = trainer._prediction_batch_indices(batch_idx, dataloader_idx)
        self.write_on_batch_end(trainer, pl_module, outputs, indices, batch, batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.write_interval == "batch":
            return
        predictions, indices = trainer._prediction_epoch()
        self.write_on_epoch_end(trainer, pl_module, predictions, indices)


class LambdaCallback(Callback):
    """Lightning's ``LambdaCallback(on_train_epoch_end=fn, ...)``: each hook given is called as the method would be."""

    def __init__(self, **hooks: Callable[..., Any] | None) -> None:
        unknown = sorted(set(hooks) - set(CALLBACK_HOOKS))
        if unknown:
            raise TypeError(
                f"LambdaCallback({', '.join(f'{k}=...' for k in unknown)}): not a callback hook; the hooks are "
                f"{', '.join(CALLBACK_HOOKS)}"
            )
        for name, fn in hooks.items():
            if fn is not None:
                if not callable(fn):
                    raise TypeError(f"LambdaCallback({name}={fn!r:.60}) must be a function or None")
                setattr(self, name, fn)


LearningRateMonitor = _LearningRateMonitor  # Lightning's arguments (logging_interval, log_momentum, log_weight_decay)


class Timer(_Bound, _Timer):
    """Lightning's ``Timer(duration, interval, verbose)``; ``time_elapsed()`` reads the last run's state."""

    def __init__(
        self,
        duration: str | datetime.timedelta | Mapping[str, float] | None = None,
        interval: str = "step",
        verbose: bool = True,
    ) -> None:
        super().__init__(duration=duration, interval=interval)
        self.verbose = bool(verbose)  # the stop reason names the limit; interlock prints it at the stop

    def time_elapsed(self, stage: Any = "train") -> float:
        """Training seconds so far (Lightning's ``time_elapsed("train")``; only the training time is measured)."""
        if isinstance(stage, TrainerState):
            return _Timer.time_elapsed(self, stage)
        refuse_value("Timer.time_elapsed", "stage", stage, ("train",), "interlock measures the training time only")
        return _Timer.time_elapsed(self, self._bound_state("time_elapsed"))

    def time_remaining(self, stage: Any = "train") -> float | None:
        if isinstance(stage, TrainerState):
            return _Timer.time_remaining(self, stage)
        refuse_value("Timer.time_remaining", "stage", stage, ("train",), "interlock measures the training time only")
        return _Timer.time_remaining(self, self._bound_state("time_remaining"))


class TQDMProgressBar(_ProgressBar):
    """Lightning's ``TQDMProgressBar(refresh_rate, process_position, leave)``."""

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        refuse_value(
            "TQDMProgressBar", "process_position", process_position, (0,), "interlock's bar takes the first line"
        )
        super().__init__(refresh_rate=refresh_rate, leave=leave)


ProgressBar = TQDMProgressBar


class RichProgressBar(_RichProgressBar):
    """Lightning's ``RichProgressBar(refresh_rate, leave, theme, console_kwargs)``; only the default look."""

    def __init__(
        self, refresh_rate: int = 1, leave: bool = False, theme: Any = None, console_kwargs: Any = None
    ) -> None:
        instead = "interlock draws Lightning's default look only; leave it out"
        refuse_value("RichProgressBar", "theme", theme, (None,), instead)
        refuse_value("RichProgressBar", "console_kwargs", console_kwargs, (None,), instead)
        super().__init__(refresh_rate=refresh_rate, leave=leave)


class ModelSummary(_ModelSummary):
    """Lightning's ``ModelSummary(max_depth)``: the layer table printed at the start of each fit."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if summarize_kwargs:
            raise TypeError(
                f"ModelSummary({', '.join(f'{k}=...' for k in summarize_kwargs)}): interlock's summary takes only "
                "max_depth (Lightning passes the others to RichModelSummary's table)"
            )
        super().__init__(max_depth=max_depth)


class StochasticWeightAveraging(_StochasticWeightAveraging):
    """Lightning's ``StochasticWeightAveraging(swa_lrs, swa_epoch_start, annealing_epochs, ...)``."""

    def __init__(
        self,
        swa_lrs: float | list[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        device: torch.device | str | None = torch.device("cpu"),  # noqa: B008  # Lightning's default
    ) -> None:
        super().__init__(swa_lrs, swa_epoch_start, annealing_epochs, annealing_strategy, avg_fn, device)


_NATIVE = "write an interlock.Listener (docs/listeners.md)"
__getattr__ = missing(
    "interlock.lightning.callbacks",
    {
        "BatchSizeFinder": "choose the batch size yourself; interlock has no batch-size finder",
        "RichModelSummary": "use ModelSummary(max_depth) (the same table in plain text)",
        "OnExceptionCheckpoint": "interlock saves last.ckpt on preemption and Ctrl-C by itself (docs/resuming.md)",
        "ModelPruning": "call torch.nn.utils.prune from a module hook",
        "SpikeDetection": "add the FiniteGuard listener (interlock.listeners.FiniteGuard), or " + _NATIVE,
        "ThroughputMonitor": "the EventTrace listener records each batch's time (interlock trace)",
        "Checkpoint": "subclass interlock.listeners.ModelCheckpoint, or " + _NATIVE,
    },
)

#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
