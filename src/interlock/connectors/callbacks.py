"""Lightning-style callbacks: called by the chart's hook actions, shown a read-only trainer view.

A Lightning ``Callback`` (``interlock.lightning.Callback``, or one from ``pytorch_lightning`` /
``lightning.pytorch`` that uses only what the view offers) is recognised by its method
names. The hook actions of ``loops/hooks.py`` call the callbacks' hook, then the module's
(Lightning's order; ``on_train_epoch_end`` runs the monitoring callbacks after the module).
A callback gets a :class:`TrainerView`: what the trainer knows, read from the frozen state
and the run's read-only parts. Its writes become updates: ``trainer.should_stop = True``
is ``Stop``, ``trainer.save_checkpoint(path)`` is ``SaveCheckpoint``; any other assignment
raises naming the interlock way. Only the hooks a callback overrides are called, and a
trainer without callbacks binds none.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from interlock.connectors.data import feed_key, loader_count, num_batches
from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.lightning_state import LightningState, lightning_state
from interlock.connectors.optim import batch_end_outputs_of
from interlock.core.combined import CombinedLoader
from interlock.core.config import NodeLayout, filled_min_epochs, lightning_flag
from interlock.core.logging import EpochLogged, epoch_values, take
from interlock.core.run import Run
from interlock.core.slots import CallbacksSlot, OptimSlot
from interlock.core.state import TrainerState, callback_metrics, logged_metrics, progress_bar_metrics
from interlock.core.updates import SaveCheckpoint, Stop, Update, as_updates

__all__ = [
    "CALLBACK_HOOKS",
    "TrainerView",
    "batch_end_handler",
    "caller",
    "check_callback",
    "ending",
    "has_load_hooks",
    "is_callback",
    "lightning_order",
    "load_callbacks",
    "module_writes",
    "order_callbacks",
    "sampler_kwargs",
    "save_callbacks",
    "shows_trainer",
    "state_key",
    "view",
]

#: Every hook Lightning 2.6.6 calls on a callback, with the trainer and module first.
CALLBACK_HOOKS = (
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_batch_start", "on_train_batch_end", "on_train_epoch_start", "on_train_epoch_end",
    "on_validation_epoch_start", "on_validation_epoch_end", "on_test_epoch_start", "on_test_epoch_end",
    "on_predict_epoch_start", "on_predict_epoch_end", "on_validation_batch_start", "on_validation_batch_end",
    "on_test_batch_start", "on_test_batch_end", "on_predict_batch_start", "on_predict_batch_end",
    "on_train_start", "on_train_end", "on_validation_start", "on_validation_end", "on_test_start", "on_test_end",
    "on_predict_start", "on_predict_end", "on_exception", "on_save_checkpoint", "on_load_checkpoint",
    "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
)  # fmt: skip
_BASES = ("interlock.lightning", "pytorch_lightning", "lightning.pytorch")
#: Lightning callbacks that monitor a metric: their on_train_epoch_end runs after the module's
_MONITORING = ("EarlyStopping", "Checkpoint")


def _from_lightning(cls: type) -> bool:
    return any(cls.__module__ == b or cls.__module__.startswith(b + ".") for b in _BASES)


def is_callback(obj: Any) -> bool:
    """Whether ``obj`` is a Lightning-style callback: a ``Callback`` subclass, or it has an ``on_*`` callback hook."""
    if isinstance(obj, type):
        return False
    if any(c.__name__ == "Callback" for c in type(obj).__mro__):
        return True
    return any(callable(getattr(obj, hook, None)) for hook in CALLBACK_HOOKS if hook.startswith("on_"))


def check_callback(obj: Any) -> None:
    """Refuse Lightning's own built-in callbacks (they drive the trainer's internals), naming interlock's."""
    for cls in type(obj).__mro__:
        if cls.__name__ == "Callback" or not _from_lightning(cls) or cls.__module__.startswith("interlock."):
            continue
        raise TypeError(
            f"{type(obj).__name__} from {cls.__module__} drives Lightning's trainer internals, which interlock does "
            f"not have: use interlock's own (from interlock.lightning.callbacks import {cls.__name__}, or "
            f"interlock.listeners), or subclass Callback with the hooks you need"
        )


def _overrides(callback: Any, hook: str) -> bool:
    """Whether ``callback`` defines ``hook`` itself (not the base class's no-op); set on the instance counts too."""
    if hook in getattr(callback, "__dict__", {}):  # LambdaCallback(on_train_epoch_end=fn)
        return callable(callback.__dict__[hook])
    fn = getattr(type(callback), hook, None)
    if fn is None:
        return callable(getattr(callback, hook, None))  # set on the instance
    if not callable(fn):
        return False
    owner = getattr(fn, "__qualname__", "").split(".")[0]
    return not (owner == "Callback" and _from_lightning_module(getattr(fn, "__module__", "") or ""))


def _from_lightning_module(name: str) -> bool:
    return any(name == b or name.startswith(b + ".") for b in _BASES)


def _monitoring(callback: Any) -> bool:
    return any(c.__name__ in _MONITORING for c in type(callback).__mro__)


def order_callbacks(callbacks: Sequence[Any]) -> tuple[Any, ...]:
    """Lightning's order: as given, with checkpoint callbacks last (they save what the others changed)."""
    saving = [c for c in callbacks if any(k.__name__ == "Checkpoint" for k in type(c).__mro__)]
    return tuple(c for c in callbacks if c not in saving) + tuple(saving)


def state_key(callback: Any) -> str:
    """The key of the callback's state in a checkpoint (Lightning's ``state_key``: the class's qualified name)."""
    key = getattr(callback, "state_key", None)
    return key if isinstance(key, str) else type(callback).__qualname__


# -- the trainer view -----------------------------------------------------------------------------
_NOT_SETTABLE = {
    "current_epoch": "the loop counters change only by the chart's transitions",
    "global_step": "the loop counters change only by the chart's transitions",
    "callback_metrics": "log from the module (self.log) or return LogMetrics from a Listener",
    "logged_metrics": "log from the module (self.log) or return LogMetrics from a Listener",
    "optimizers": "return ReplaceOptimizer or SetLearningRate from a Listener",
    "lr_scheduler_configs": "return configure_optimizers' schedulers from the module",
}


class TrainerView(NodeLayout):
    """What a Lightning callback sees as ``trainer``: read-only; two writes become updates.

    Reads come from the frozen trainer state and the run's read-only parts (config, data,
    listeners). ``trainer.should_stop = True`` is a ``Stop`` update and
    ``trainer.save_checkpoint(path)`` a ``SaveCheckpoint`` one, applied when the hook returns.
    Setting anything else raises an ``AttributeError`` naming the interlock way.
    """

    __slots__ = ("_ending", "_pending", "_run")
    _run: Run
    _pending: list[Update]
    _ending: tuple[str, str] | None  # (loop, data) of the epoch whose end hooks run now

    def __init__(self, run: Run) -> None:
        object.__setattr__(self, "_run", run)
        object.__setattr__(self, "_pending", [])
        object.__setattr__(self, "_ending", None)

    # -- writes -------------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if name == "should_stop":
            if value is True:
                self._pending.append(Stop(f"trainer.should_stop = True in {self._writer('trainer.should_stop')}"))
                return
            if value is False and not self._run.facts.should_stop:
                return  # already the case
            raise AttributeError(
                f"trainer.should_stop = {value!r}: a callback may only ask the run to stop (True); "
                "interlock cannot withdraw a stop request"
            )
        why = _NOT_SETTABLE.get(name, "return updates from an interlock Listener instead")
        raise AttributeError(
            f"trainer.{name} is read-only in a callback (interlock's trainer view, see docs/porting.md#callbacks): "
            f"{why}; a callback may set only trainer.should_stop = True and call trainer.save_checkpoint(path)"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"trainer.{name} cannot be deleted: the trainer view is read-only")

    def save_checkpoint(self, filepath: Any, weights_only: bool = False, storage_options: Any = None) -> None:
        """Ask for a checkpoint at ``filepath`` (written at the next checkpointable state)."""
        if self._run.stage != "fit":
            raise RuntimeError(
                f"trainer.save_checkpoint({str(filepath)!r}) during {self._run.stage}: interlock writes checkpoints "
                "during fit only (they hold the training state); save the weights with "
                "torch.save(pl_module.state_dict(), path) instead"
            )
        if storage_options is not None:
            raise TypeError(
                "trainer.save_checkpoint(storage_options=...) is not supported: interlock writes local files"
            )
        self._writer(f"trainer.save_checkpoint({str(filepath)!r})")
        self._pending.append(SaveCheckpoint(str(filepath), "callback", weights_only=bool(weights_only)))

    def _writer(self, what: str) -> str:
        """Who writes now (for the update's reason); raise where no call would take the write when it returns."""
        writers = self._run.slot(CallbacksSlot).writers
        if writers:
            return writers[-1]
        raise RuntimeError(
            f"{what} here ({self._run.state.chart or self._run.stage}) would not be applied: the trainer view "
            "takes writes made in a Callback's hooks and in a LightningModule's hooks and steps (training_step, "
            "validation_step, ...), not in other methods or later; ask there, or return interlock.Stop / "
            "interlock.SaveCheckpoint from an interlock Listener (docs/porting.md#callbacks)"
        )

    def keep(self, updates: list[Update]) -> None:
        """Hold updates made outside a hook action (a manual backward, a checkpoint save) for the next one."""
        self._pending.extend(updates)

    def take_updates(self) -> list[Update]:
        """The updates the callbacks' writes made since the last call (emptied)."""
        out, self._pending[:] = list(self._pending), []
        return out

    def __getattr__(self, name: str) -> Any:
        try:  # Lightning's flag attributes: limit_val_batches, val_check_interval, log_every_n_steps, ...
            # gradient_clip_algorithm: Lightning reads None unless one was passed; "norm" is the default both mean
            algorithm = self._run.config.gradient_clip_algorithm
            return lightning_flag(self._run.config, name, None if algorithm == "norm" else algorithm)
        except AttributeError:
            pass
        raise AttributeError(
            f"the trainer view a callback receives has no {name!r}; it offers {', '.join(_OFFERS)} and Lightning's "
            "flags (limit_val_batches, val_check_interval, ...) (docs/porting.md#callbacks); for more, write an "
            "interlock Listener"
        )

    # -- reads --------------------------------------------------------------------------------
    @property
    def should_stop(self) -> bool:
        return self._run.facts.should_stop or any(isinstance(u, Stop) for u in self._pending)

    @property
    def current_epoch(self) -> int:
        """Lightning's: the epochs completed once training has ended (``on_train_end``, ``on_fit_end``)."""
        state = self._run.state
        ended = {"fit", "stage_end"} <= self._tags(state.chart) or self._run.slot(
            CallbacksSlot
        ).trained_through == state.progress.epoch
        if ended and state.progress.train_batches:
            return state.progress.epoch + 1
        return state.current_epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps, including those a manual training_step has taken so far (Lightning counts each)."""
        optim = self._run.slots.get(OptimSlot)
        return self._run.state.global_step + (optim.manual_steps if optim is not None else 0)

    def _epoch_values(self) -> EpochLogged | None:
        """In an epoch-end hook: the epoch values the module logged in the loop, not logged by the loop yet.

        Lightning's trainer computes them when a hook reads its metrics; interlock's loop logs them
        after the hooks, so the view adds them: a logged torchmetrics metric's ``compute()`` (which
        syncs processes, as Lightning's read does), this process's value of a ``sync_dist`` one.
        """
        if self._ending is None:
            return None
        loop, data = self._ending
        facts, live = self._run.facts, self._run.module.__dict__.get("_interlock_metrics") or {}
        rows = [r for k, r in facts.logged.items() if k.startswith(f"{loop}/") and r.get("metric")]
        computed = {
            str(r["metric"]): float(live[str(r["metric"])].compute())
            for r in rows
            if not r.get("step_only") and str(r["metric"]) in live
        }
        logged = epoch_values(facts, loop, computed)
        if loop == "eval" and loader_count(self._run.feeds, data) > 1:  # the loop's name for the loader's values
            return logged.for_loader(self._run.counters.eval_loader)
        return logged

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The latest metrics as tensors (Lightning's type), copies; in an epoch-end hook, with the epoch's."""
        metrics = callback_metrics(self._run.facts)
        ending = self._epoch_values()
        if ending is not None:
            metrics.update(ending.values)
        return {k: torch.tensor(v) for k, v in metrics.items()}

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """The metrics logged with ``logger=True`` as tensors (Lightning's names; in an epoch-end hook, the epoch's)."""
        metrics = logged_metrics(self._run.facts)
        ending = self._epoch_values()
        if ending is not None:
            metrics.update({k: v for k, v in ending.values.items() if k not in ending.hidden})
        return {k: torch.tensor(v) for k, v in metrics.items()}

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The metrics logged with ``prog_bar=True``, under Lightning's names (``<name>_step``/``<name>_epoch``)."""
        shown = progress_bar_metrics(self._run.facts)
        ending = self._epoch_values()
        if ending is not None:
            shown.update({k: v for k, v in ending.values.items() if ending.shown.get(k)})
        return shown

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return list(self._run.optimizers)

    @property
    def lr_scheduler_configs(self) -> list[Any]:
        """The schedulers with ``scheduler``, ``interval``, ``frequency``, ``monitor`` (Lightning's config)."""
        return list(self._run.schedulers)

    @property
    def datamodule(self) -> Any:
        return self._run.plan.datamodule

    @property
    def strategy(self) -> Any:
        """The strategy plugin: ``barrier()``, ``broadcast(obj, src)``, ``is_global_zero``, ``world_size``, ..."""
        return self._run.slot(HardwareSlot).strategy

    def _loaders(self, key: str) -> Any:
        """The loop's loader (several: the list), as this process iterates it; ``None`` without one (Lightning's)."""
        feeds, ranks = self._run.feeds, self.world_size
        found = [feeds[feed_key(key, i)] for i in range(loader_count(feeds, key))]
        loaders = [f.data.loader if ranks > 1 else f.loader for f in found]  # several ranks: this rank's share
        loaders = [x.iterables if isinstance(x, CombinedLoader) else x for x in loaders]  # Lightning's: the collection
        return _as_given(loaders) if loaders else None

    def _prediction_batch_indices(self, batch_idx: int, dataloader_idx: int) -> list[int]:
        """The dataset indices of a predict batch (``[]`` when the loader's are unknown), for a prediction writer."""
        feed = self._run.feeds.get(feed_key("predict", dataloader_idx))
        return feed.data.batch_indices(batch_idx) if feed is not None else []

    def _prediction_epoch(self) -> tuple[list[Any], list[list[list[int]]]]:
        """The predictions kept this epoch (a list per loader with several) and their batch indices, per loader."""
        feeds, predictions = self._run.feeds, self._run.predictions
        count = loader_count(feeds, "predict")
        per_loader = predictions if count > 1 else [predictions]
        indices = [
            [feeds[feed_key("predict", i)].data.batch_indices(b) for b in range(len(made))]
            for i, made in enumerate(per_loader)
        ]
        return predictions, indices

    @property
    def train_dataloader(self) -> Any:
        """The training loader of the fit (``None`` in other stages)."""
        return self._loaders("train")

    @property
    def val_dataloaders(self) -> Any:
        """The validation loader, or the list of them (``None`` without)."""
        return self._loaders("val")

    @property
    def test_dataloaders(self) -> Any:
        return self._loaders("test")

    @property
    def predict_dataloaders(self) -> Any:
        return self._loaders("predict")

    @property
    def lightning_module(self) -> Any:
        return self._run.module

    @property
    def model(self) -> Any:
        return self._run.module

    @property
    def is_global_zero(self) -> bool:
        return self._run.facts.is_global_zero

    @property
    def global_rank(self) -> int:
        return self._run.facts.global_rank

    @property
    def local_rank(self) -> int:
        return int(getattr(self._run.slot(HardwareSlot).strategy, "local_rank", 0))

    @property
    def world_size(self) -> int:
        return self._run.facts.world_size

    @property
    def num_devices(self) -> int:
        """Devices of this node (Lightning's ``len(device_ids)``)."""
        return len(self._run.slot(HardwareSlot).devices)

    @property
    def precision(self) -> str:
        return str(self._run.slot(HardwareSlot).precision.flag)

    @property
    def scaler(self) -> Any:
        """The gradient scaler of ``16-mixed`` (``torch.amp.GradScaler``), else ``None``."""
        return self._run.slot(HardwareSlot).precision.scaler

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas`` and ``rank`` of a ``DistributedSampler`` for this run (``None`` on a single device)."""
        return sampler_kwargs(self._run.slot(HardwareSlot).strategy)

    @property
    def evaluating(self) -> bool:
        """Validation, testing or the sanity check is running (Lightning's)."""
        return self._running_stage() in ("validate", "test", "sanity_check")

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` in each node's local rank 0 only (Lightning's ``trainer.print``)."""
        if self.local_rank == 0:
            print(*args, **kwargs)

    @property
    def interrupted(self) -> bool:
        """Lightning's: the call ends by an exception (Ctrl-C, a preemption signal, an error: ``on_exception``)."""
        return self.state.status.value == "interrupted"

    @property
    def received_sigterm(self) -> bool:
        """Whether a preemption signal (SIGTERM) arrived: the run then saves and stops at the next boundary."""
        return bool(self._run.facts.agreed.get("preempted"))

    @property
    def max_epochs(self) -> int | None:
        """In a fit, Lightning's filled value (1000 when no limit is set, -1 for none); elsewhere the flag."""
        config = self._run.config
        if self._run.stage != "fit":
            return 1 if config.fast_dev_run else config.max_epochs
        return -1 if config.epochs is None and config.max_steps != -1 else config.epochs

    @property
    def max_steps(self) -> int:
        return self._run.config.max_steps

    @property
    def min_epochs(self) -> int | None:
        """In a fit, Lightning's: ``min_epochs``, else 1 with ``min_steps``, else 0; elsewhere the flag."""
        config = self._run.config
        return filled_min_epochs(config) if self._run.stage == "fit" else config.min_epochs

    @property
    def min_steps(self) -> int | None:
        return self._run.config.min_steps

    @property
    def accumulate_grad_batches(self) -> int:
        return self._run.facts.accumulate_grad_batches or self._run.config.accumulate_grad_batches

    @property
    def num_training_batches(self) -> int | float:
        """The epoch's training batches, from the start of the fit.

        Lightning counts them when training starts, or when ``estimated_stepping_batches`` is read (a
        scheduler's set-up usually does): before that its value is ``inf``; interlock's is the count.
        """
        return self._train_batches() if self._run.feeds.get("train") is not None else math.inf

    def _train_batches(self) -> int | float:
        feed = self._run.feeds.get("train")
        if feed is None:
            return 0
        n = num_batches(feed.loader, self._run.config.limit("train"))
        return math.inf if n is None else n

    def _batches(self, key: str) -> list[int | float]:
        limit = self._run.config.limit(key)
        out: list[int | float] = []
        for i in range(loader_count(self._run.feeds, key)):
            n = num_batches(self._run.feeds[feed_key(key, i)].loader, limit)
            out.append(math.inf if n is None else n)
        return out

    @property
    def num_val_batches(self) -> list[int | float]:
        """Batches of each validation loader (the limit's, in the sanity check too; none in a test or predict)."""
        return self._batches("val") if self._run.stage in ("fit", "validate") else []

    @property
    def num_sanity_val_batches(self) -> list[int | float]:
        if self._run.stage != "fit":
            return []
        sanity = self._run.config.sanity_steps
        return [n if sanity == -1 else min(sanity, n) for n in self._batches("val")]

    @property
    def num_test_batches(self) -> list[int | float]:
        return self._batches("test")

    @property
    def num_predict_batches(self) -> list[int | float]:
        return self._batches("predict")

    @property
    def enable_validation(self) -> bool:
        """A fit or validate with validation data and a non-zero limit (Lightning's)."""
        stage = self._run.stage in ("fit", "validate")
        return stage and bool(self._batches("val")) and self._run.config.limit("val") != 0

    @property
    def val_check_batch(self) -> int | float | None:
        """After how many training batches validation runs in a fit (an int interval, or a fraction's)."""
        if self._run.stage != "fit":
            return None
        interval = lightning_flag(self._run.config, "val_check_interval", None)
        if isinstance(interval, int):
            return interval
        n = self._train_batches()
        return math.inf if n == math.inf else max(1, int(n * interval))

    @property
    def is_last_batch(self) -> bool:
        """The training batch in flight (or the last one trained) is the epoch's last (Lightning's)."""
        state, n = self._run.state, self._train_batches()
        if self._run.feeds.get("train") is None:  # no training in this run
            return False
        if self._tags(state.chart) & {"train_batch_start", "backward", "optimizer_step", "train_batch_end"}:
            return self._run.step.index + 1 >= n
        return state.progress.batch_idx >= n or bool(state.data.get("exhausted"))

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Lightning's estimate: optimizer steps the fit will take (``max_steps`` caps it)."""
        config = self._run.config
        epochs = config.epochs
        if epochs is None:
            return math.inf if config.max_steps == -1 else config.max_steps
        total = self._train_batches()
        if total == math.inf:
            return config.max_steps
        steps = math.ceil(total / config.accumulate_grad_batches) * max(epochs, 1)
        return min(steps, config.max_steps) if config.max_steps != -1 else steps

    @property
    def state(self) -> LightningState:
        """Lightning's ``trainer.state``: ``fn`` (the call), ``stage`` (the loop running now), ``status``."""
        state = self._run.state
        return lightning_state(state, {}, stage=self._running_stage() if state.status == "running" else None)

    def _tags(self, leaf: str) -> frozenset[str]:
        chart = self._run.chart
        return chart.tags.get(leaf, frozenset()) if chart is not None else frozenset()

    def _running_stage(self) -> str:
        """The loop running now (Lightning's ``RunningStage``); ``""`` once the call has ended."""
        if self._run.state.status != "running":
            return ""
        chart = self._run.state.chart
        if self.sanity_checking:
            return "sanity_check"
        if self._ending is not None and self._ending[0] == "train":  # on_train_epoch_end, taken from validation's end
            return "train"
        if {"fit", "val"} <= self._tags(chart):
            return "validate"
        return "train" if self._run.stage == "fit" else self._run.stage

    @property
    def sanity_checking(self) -> bool:
        return self._run.slot(CallbacksSlot).sanity

    @property
    def training(self) -> bool:
        return self._running_stage() == "train"

    @property
    def validating(self) -> bool:
        return self._running_stage() == "validate"

    @property
    def testing(self) -> bool:
        return self._running_stage() == "test"

    @property
    def predicting(self) -> bool:
        return self._running_stage() == "predict"

    @property
    def log_dir(self) -> str:
        return self._run.state.run_dir or self._run.plan.run_dir or self._run.plan.root

    @property
    def default_root_dir(self) -> str:
        return self._run.plan.root

    @property
    def callbacks(self) -> list[Any]:
        """The trainer's listeners and Lightning callbacks, in Lightning's order (:func:`lightning_order`)."""
        slot = self._run.slot(CallbacksSlot)
        return lightning_order([*self._run.listeners, *self._run.callbacks], slot.given)

    def _of_kind(self, *names: str) -> list[Any]:
        return [c for c in self.callbacks if any(k.__name__ in names for k in type(c).__mro__)]

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        return self._of_kind("ModelCheckpoint", "Checkpoint")

    @property
    def checkpoint_callback(self) -> Any:
        found = self.checkpoint_callbacks
        return found[0] if found else None

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        return self._of_kind("EarlyStopping")

    @property
    def profiler(self) -> Any:
        """The run's profiler listener, else one that times nothing (Lightning's ``PassThroughProfiler``).

        ``with self.trainer.profiler.profile("name"):`` times a block into the profiler's report.
        """
        found = self._of_kind("Profiler")
        return found[0] if found else _PASS_THROUGH

    @property
    def early_stopping_callback(self) -> Any:
        found = self.early_stopping_callbacks
        return found[0] if found else None

    @property
    def loggers(self) -> list[Any]:
        return list(self._run.loggers)

    @property
    def logger(self) -> Any:
        found = self.loggers
        return found[0] if found else None

    def __repr__(self) -> str:
        return f"TrainerView(stage={self._run.stage!r}, at={self._run.state.chart!r})"


class _PassThrough:
    """A profiler that times nothing: ``profile(name)`` runs the block, ``start``/``stop`` do nothing."""

    def start(self, action_name: str) -> None:
        """Nothing is timed."""

    def stop(self, action_name: str) -> None:
        """Nothing is timed."""

    def profile(self, action_name: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


_PASS_THROUGH = _PassThrough()


def _as_given(loaders: list[Any]) -> Any:
    """One loader as itself, several as their list (what the call was given)."""
    return loaders[0] if len(loaders) == 1 else loaders


_OFFERS = sorted(
    n for n, v in vars(TrainerView).items() if isinstance(v, property) or n in ("save_checkpoint", "print")
)


def sampler_kwargs(strategy: Any) -> dict[str, int] | None:
    """Lightning's ``distributed_sampler_kwargs``: ``num_replicas``, ``rank`` with several devices, else ``None``."""
    if strategy.name == "single_device":
        return None
    return {"num_replicas": int(strategy.world_size), "rank": int(strategy.global_rank)}


# -- calling the callbacks -----------------------------------------------------------------------
#: Lightning's epoch-end hooks, with their loop and data: their trainer view shows the epoch's logged values
_EPOCH_END = {
    "on_train_epoch_end": ("train", "train"),
    "on_validation_epoch_end": ("eval", "val"),
    "on_test_epoch_end": ("eval", "test"),
}


def ending(shown: TrainerView, hook: str | None) -> None:
    """Mark the epoch-end hook running now (``None``: none): its view reads the epoch's logged values (Lightning's)."""
    object.__setattr__(shown, "_ending", _EPOCH_END.get(hook) if hook is not None else None)


def view(run: Run) -> TrainerView:
    """The run's trainer view (one per stage), made on first use."""
    slot = run.slot(CallbacksSlot)
    if slot.view is None:
        slot.view = TrainerView(run)
    view: TrainerView = slot.view
    return view


def caller(
    run: Run, hook: str, loop: str, monitoring: bool | None = None, suffix: Callable[[], str] | None = None
) -> Callable[..., list[Update]] | None:
    """``call(*args, **kwargs)`` that runs ``hook`` of every callback that defines it; ``None`` when none does.

    ``monitoring``: only the monitoring callbacks (``True``), only the others (``False``), all (``None``).
    What a callback logs through the module (``pl_module.log``) and its writes to the view
    come back as updates.
    """
    chosen = [
        getattr(c, hook)
        for c in run.callbacks
        if _overrides(c, hook) and (monitoring is None or _monitoring(c) == monitoring)
    ]
    if not chosen:
        return None
    shown, module = view(run), run.module
    mdict = module.__dict__
    ending = _EPOCH_END.get(hook)

    writers = run.slot(CallbacksSlot).writers
    who = f"a callback's {hook}"

    def call(*args: Any, **kwargs: Any) -> list[Update]:
        object.__setattr__(shown, "_ending", ending)
        writers.append(who)
        try:
            for fn in chosen:
                fn(shown, module, *args, **kwargs)
        finally:
            writers.pop()
            object.__setattr__(shown, "_ending", None)
        updates = shown.take_updates()
        logs = mdict.get("_interlock_logs")
        if logs:
            updates.extend(take(logs, hook, loop, suffix=suffix() if suffix is not None else ""))
        return updates

    return call


def _is_checkpoint(x: Any) -> bool:
    return any(k.__name__ in ("ModelCheckpoint", "Checkpoint") for k in type(x).__mro__)


def lightning_order(everything: Sequence[Any], given: Sequence[Any]) -> list[Any]:
    """``everything`` (listeners and callbacks) as Lightning lists ``trainer.callbacks``.

    What was passed, in its order; then the others (interlock's defaults: progress bar, model summary,
    ..., then what ``configure_callbacks`` added); checkpoint callbacks last, as Lightning moves them.
    """
    present = {id(x) for x in everything}
    passed = [x for x in given if id(x) in present]
    taken = {id(x) for x in passed}
    ordered = passed + [x for x in everything if id(x) not in taken]
    return [x for x in ordered if not _is_checkpoint(x)] + [x for x in ordered if _is_checkpoint(x)]


def shows_trainer(module: Any) -> bool:
    """Whether ``module`` reads ``self.trainer`` (an ``interlock.lightning.LightningModule``: the trainer view)."""
    return bool(getattr(type(module), "shows_trainer_view", False))


def module_writes(run: Run, act: Callable[[], Any], who: str) -> Callable[[], Any]:
    """``act``, an action that calls the module's ``who``, also returning what the module wrote to ``self.trainer``.

    Only for a module that :func:`shows_trainer`; any other gets ``act`` itself (nothing added on its path).
    """
    if not shows_trainer(run.module):
        return act
    shown, writers = view(run), run.slot(CallbacksSlot).writers
    pending = shown._pending  # emptied in place by take_updates: read here, no call on the per-batch path

    def with_writes() -> Any:
        writers.append(who)
        try:
            out = act()
        finally:
            writers.pop()
        if not pending:
            return out
        return [*([] if out is None else out if isinstance(out, list) else [out]), *shown.take_updates()]

    return with_writes


def batch_end_handler(current: Callable[[], Run | None]) -> Callable[[Any], list[Update]]:
    """The first handler of ``fit.train.batch.end``: the callbacks' on_train_batch_end.

    It runs at the event, before the listeners' (a ``ModelCheckpoint`` step save is written right
    after them), so a checkpoint saved at a batch's end holds what the callbacks did in it, as in
    Lightning, where the checkpoint callback runs last. The module's hook runs after, as the
    state's entry action. ``current()`` is the stage's run.
    """
    bound: dict[int, tuple[Callable[..., list[Update]], Callable[[], Any]] | None] = {}

    def handle(event: Any) -> list[Update]:
        run = current()
        if run is None:
            return []
        key = id(run)
        if key not in bound:
            bound.clear()
            call_ = caller(run, "on_train_batch_end", "train")
            bound[key] = None if call_ is None else (call_, batch_end_outputs_of(run))
        entry = bound[key]
        if entry is None:
            return []
        call, outputs = entry
        step = run.step
        return call(outputs(), step.batch, step.index)  # Lightning's outputs: a dict, its loss detached

    return handle


def save_callbacks(run: Run, checkpoint: dict[str, Any], state: TrainerState | None = None) -> None:
    """Each callback's ``state_dict`` in ``checkpoint["callbacks"][state_key]``, then its on_save_checkpoint.

    A listener with Lightning's names (``interlock.lightning``'s ``ModelCheckpoint``, ``EarlyStopping``) adds
    Lightning's entry too, as its state stands in ``state`` (the one saved), so scripts that read
    ``checkpoint["callbacks"]`` find what Lightning writes there; interlock restores listeners from the state.
    """
    entries = {}
    for listener in run.listeners if state is not None else ():
        entry = getattr(listener, "lightning_checkpoint_entry", None)
        if callable(entry):
            entries[listener.state_key] = entry(state)
    if not run.callbacks and not entries:
        return
    states = {state_key(c): c.state_dict() for c in run.callbacks if callable(getattr(c, "state_dict", None))}
    checkpoint["callbacks"] = {**entries, **{k: v for k, v in states.items() if v}}
    if not run.callbacks:
        return
    call = caller(run, "on_save_checkpoint", "train")
    if call is not None:
        _apply_later(run, call(checkpoint))


def has_load_hooks(run: Run) -> bool:
    """Some callback overrides ``on_load_checkpoint`` (it may change the module's weights there)."""
    return any(_overrides(c, "on_load_checkpoint") for c in run.callbacks)


def load_callbacks(run: Run, checkpoint: Mapping[str, Any]) -> None:
    """Lightning's restore of callbacks: every on_load_checkpoint, then each load_state_dict with its saved state."""
    if not run.callbacks or checkpoint.get("callbacks") is None:
        return
    call = caller(run, "on_load_checkpoint", "train")
    if call is not None:
        _apply_later(run, call(checkpoint))
    states = checkpoint["callbacks"]
    for c in run.callbacks:
        state = states.get(state_key(c))
        if state and callable(getattr(c, "load_state_dict", None)):
            c.load_state_dict(copy.deepcopy(state))


def _apply_later(run: Run, updates: list[Update]) -> None:
    """Updates from a hook called outside an action (a checkpoint's save or load): kept for the next hook action."""
    if updates:
        view(run).keep(as_updates(updates, "a callback"))
