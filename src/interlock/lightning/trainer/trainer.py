"""Lightning's ``Trainer``: :class:`interlock.Trainer` plus the attributes Lightning code reads after a run.

This subclass takes Lightning's signature (its ``None`` defaults resolved as Lightning does) and
hands the flags to the native Trainer; it adds Lightning's argument order for ``fit``/``validate``/
``test``/``predict``, read-only views over the frozen state (``callback_metrics``,
``current_epoch``, ``checkpoint_callback``, the flag attributes, ...) and the module of the last
run (``trainer.model``). Nothing here runs per step.
"""

from __future__ import annotations

import copy
import datetime
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from interlock.connectors.callbacks import TrainerView, is_callback, lightning_order, sampler_kwargs, view
from interlock.connectors.lightning_state import LightningState, RunningStage, TrainerStatus, lightning_state
from interlock.core.config import LIGHTNING_FIELDS, NodeLayout, filled_min_epochs, lightning_flag
from interlock.core.datamodule import is_datamodule
from interlock.core.events import Listener
from interlock.core.module import Module
from interlock.core.state import TrainerState, callback_metrics, logged_metrics, progress_bar_metrics
from interlock.lightning.lr_finder import LearningRateFinder
from interlock.trainer.trainer import Trainer as NativeTrainer
from interlock.trainer.trainer import _report

__all__ = ["Trainer"]

_SETTABLE = {
    "should_stop": "return interlock.Stop('why') from a listener (a Lightning Callback's `trainer.should_stop = True`)",
}


class Trainer(NodeLayout, NativeTrainer):
    """:class:`interlock.Trainer` with Lightning's read-only attributes (``callback_metrics``, ``global_step``, ...).

    Takes Lightning's ``Trainer(...)`` arguments (interlock's own flags pass through);
    ``fit``, ``validate``, ``test`` and ``predict`` take Lightning's argument order and run the
    native ones. Afterwards ``trainer.model`` is the module of the last call, and
    ``trainer.checkpoint_callback.best_model_path`` reads the first ``ModelCheckpoint``'s state.
    Setting any of these attributes raises, naming the interlock way.
    """

    _last_module: Module | None = None

    def __init__(
        self,
        *,
        accelerator: Any = "auto",
        strategy: str = "auto",
        devices: Any = "auto",
        num_nodes: int = 1,
        precision: Any = None,
        logger: bool | Listener | list[Listener] | None = None,
        callbacks: list[Any] | Any = None,
        fast_dev_run: bool | int = False,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int = -1,
        min_steps: int | None = None,
        max_time: str | datetime.timedelta | dict[str, int] | None = None,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        overfit_batches: int | float = 0.0,
        val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int | None = None,
        log_every_n_steps: int | None = None,
        enable_checkpointing: bool | None = None,
        enable_progress_bar: bool | None = None,
        enable_model_summary: bool | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: int | float | None = None,
        gradient_clip_algorithm: str | None = None,
        deterministic: bool | Literal["warn"] | None = None,
        benchmark: bool | None = None,
        inference_mode: bool = True,
        use_distributed_sampler: bool = True,
        profiler: Any = None,
        detect_anomaly: bool = False,
        barebones: bool = False,
        plugins: Any = None,
        sync_batchnorm: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
        default_root_dir: str | os.PathLike[str] | None = None,
        enable_autolog_hparams: bool = True,
        model_registry: str | None = None,
        **interlock_flags: Any,
    ) -> None:
        """Lightning's ``Trainer(...)`` arguments and defaults; ``None`` means Lightning's default, as there.

        ``max_time`` adds a ``Timer(duration=max_time)`` as Lightning does. interlock's own flags
        (``seed``, ``enable_trace``, ``chart``, ...) pass through. A Lightning argument interlock
        cannot honour raises the native Trainer's ``TypeError`` naming what to do instead.
        """
        if not isinstance(enable_autolog_hparams, bool):
            raise ValueError(f"Trainer(enable_autolog_hparams={enable_autolog_hparams!r}) must be True or False")
        if model_registry is not None:
            raise TypeError(
                f"Trainer(model_registry={model_registry!r}) is Lightning's model registry upload, which interlock "
                "does not have: upload the checkpoint files yourself"
            )
        #: Lightning's barebones mode: no checkpoints, logger, progress bar, summary, sanity check; self.log off
        self.barebones = bool(barebones)
        if barebones:
            _refuse_in_barebones(
                enable_checkpointing=enable_checkpointing, logger=logger, enable_progress_bar=enable_progress_bar,
                log_every_n_steps=log_every_n_steps, enable_model_summary=enable_model_summary,
                num_sanity_val_steps=num_sanity_val_steps, fast_dev_run=fast_dev_run, detect_anomaly=detect_anomaly,
                profiler=profiler,
            )  # fmt: skip
            enable_checkpointing = enable_progress_bar = enable_model_summary = logger = False
            log_every_n_steps = num_sanity_val_steps = 0
            interlock_flags.setdefault("enable_trace", False)  # interlock's own default listener, off as the others
        one = isinstance(callbacks, Listener) or is_callback(callbacks)
        given = [] if callbacks is None else [callbacks] if one else list(callbacks)
        from interlock.lightning.callbacks import distinct_keys

        distinct_keys(given)  # several checkpoint / early-stopping callbacks: Lightning's state keys
        profiler = _profiler_listener(profiler)
        if profiler is not None:
            given.append(profiler)
        if max_time is not None:
            from interlock.lightning.callbacks import Timer

            given.append(Timer(duration=max_time, interval="step"))
        self._clip_algorithm = gradient_clip_algorithm  # Lightning's attribute keeps None ("norm" is applied)
        precision = _cpu_amp(accelerator, "32-true" if precision is None else precision)
        lightning_only = {
            "num_nodes": num_nodes,
            "inference_mode": inference_mode,
            "use_distributed_sampler": use_distributed_sampler,
            "detect_anomaly": detect_anomaly,
            "plugins": plugins,
            "sync_batchnorm": sync_batchnorm,
        }
        super().__init__(
            accelerator=accelerator,
            strategy=strategy,
            devices=devices,
            precision=precision,
            logger=logger,
            callbacks=given or None,
            fast_dev_run=fast_dev_run,
            max_epochs=max_epochs,
            min_epochs=min_epochs,
            max_steps=max_steps,
            min_steps=min_steps,
            limit_train_batches=limit_train_batches,
            limit_val_batches=limit_val_batches,
            limit_test_batches=limit_test_batches,
            limit_predict_batches=limit_predict_batches,
            overfit_batches=overfit_batches,
            val_check_interval=1.0 if val_check_interval is None else val_check_interval,
            check_val_every_n_epoch=check_val_every_n_epoch,
            num_sanity_val_steps=2 if num_sanity_val_steps is None else num_sanity_val_steps,
            log_every_n_steps=50 if log_every_n_steps is None else log_every_n_steps,
            reload_dataloaders_every_n_epochs=reload_dataloaders_every_n_epochs,
            enable_checkpointing=True if enable_checkpointing is None else enable_checkpointing,
            enable_progress_bar=True if enable_progress_bar is None else enable_progress_bar,
            enable_model_summary=enable_model_summary,
            accumulate_grad_batches=accumulate_grad_batches,
            gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm="norm" if gradient_clip_algorithm is None else gradient_clip_algorithm,
            deterministic=deterministic,
            benchmark=benchmark,
            default_root_dir=default_root_dir,
            **lightning_only,
            **interlock_flags,
        )

    # -- the runs: Lightning's signatures onto the native ones -------------------------------------
    def fit(  # type: ignore[override]
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool | None = None,
    ) -> dict[str, float]:
        """Lightning's ``fit(model, train_dataloaders, val_dataloaders, datamodule, ckpt_path)`` (its order).

        A ``LearningRateFinder`` among the callbacks sweeps first (``interlock.lightning.lr_finder``).
        """
        _weights_only(weights_only, "fit")
        self._attach(datamodule if datamodule is not None else train_dataloaders)
        for finder in [c for c in self.lightning_callbacks if isinstance(c, LearningRateFinder)]:
            if type(finder).on_fit_start is not LearningRateFinder.on_fit_start:
                raise NotImplementedError(
                    f"{type(finder).__name__} overrides on_fit_start, so its sweep would run inside the fit, which "
                    "interlock does not do; keep LearningRateFinder's on_fit_start (the sweep as the fit starts), "
                    "or run interlock.lightning.tuner.Tuner(trainer).lr_find(model, ...) between fits"
                )
            if ckpt_path is not None:
                raise NotImplementedError(
                    f"{type(finder).__name__} with fit(ckpt_path=...): the sweep would start from the restored "
                    "weights and reset the learning rate in the middle of the run (Lightning does so); remove the "
                    "callback when resuming"
                )
            if finder.sweep(self, model, train_dataloaders, val_dataloaders, datamodule):
                self.__dict__["_train_opened"] = True  # Lightning's sweep opened the fit's loader in its isolated RNG
        try:
            return super().fit(model, train_dataloaders, val_dataloaders, ckpt_path, datamodule=datamodule)
        finally:
            self.__dict__.pop("_train_opened", None)  # for this fit only, also when it stopped before its session

    def validate(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: Any = None,
        verbose: bool = True,
        datamodule: Any = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Lightning's ``validate(model, dataloaders, ckpt_path, verbose, datamodule)``."""
        out: list[dict[str, float]] = self._lightning_eval(
            "validate", model, dataloaders, ckpt_path, verbose, datamodule, weights_only
        )
        return out

    def test(
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: Any = None,
        verbose: bool = True,
        datamodule: Any = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Lightning's ``test(model, dataloaders, ckpt_path, verbose, datamodule)``."""
        out: list[dict[str, float]] = self._lightning_eval(
            "test", model, dataloaders, ckpt_path, verbose, datamodule, weights_only
        )
        return out

    def predict(  # type: ignore[override]
        self,
        model: Module | None = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        return_predictions: bool | None = None,
        ckpt_path: Any = None,
        weights_only: bool | None = None,
    ) -> Any:
        """Lightning's ``predict(model, dataloaders, datamodule, return_predictions, ckpt_path)``."""
        _weights_only(weights_only, "predict")
        keep = return_predictions
        return super().predict(model, dataloaders, ckpt_path, datamodule=datamodule, return_predictions=keep)

    def _lightning_eval(
        self, stage: str, model: Any, dataloaders: Any, ckpt_path: Any, verbose: Any, datamodule: Any, weights: Any
    ) -> Any:
        _weights_only(weights, stage)
        if not isinstance(verbose, bool):
            raise ValueError(f"Trainer.{stage}(verbose={verbose!r}) must be True or False")
        results = getattr(super(), stage)(model, dataloaders, ckpt_path, datamodule=datamodule, verbose=False)
        logged = self.runtime.state.to_loggers  # Lightning returns (and prints) what the module logged, not scalars
        return _report(stage, [{k: v for k, v in r.items() if logged.get(k)} for r in results], verbose,
                       self.hardware.strategy)  # fmt: skip

    # -- remember the module and the datamodule, bind the checkpoint callbacks -------------------
    def _attach(self, datamodule: Any) -> None:
        """Remember the datamodule a call was given (``trainer.datamodule``); a call with loaders keeps the last."""
        if is_datamodule(datamodule):
            self.__dict__["_datamodule"] = datamodule

    @property
    def datamodule(self) -> Any:
        """The datamodule of the last call that was given one (``None`` before), as Lightning's."""
        return self.__dict__.get("_datamodule")

    def _bind(self, module: Module) -> None:
        self._last_module = module
        for listener in self.listeners:
            bind = getattr(listener, "bind_state", None)
            if callable(bind):
                bind(lambda: self.runtime.state)

    def _launch(self, module: Module, call: Any, fit: bool = False, datamodule: Any = None) -> Any:
        self._bind(module)
        module.__dict__["_interlock_barebones"] = self.barebones  # its self.log is off in barebones mode

        def keeping(session: Any) -> Any:  # what the stage configured, for trainer.optimizers after it
            try:
                return call(session)
            finally:  # validate/test/predict configure none: the fit's stay, as in Lightning
                if session.optimizers or session.schedulers:
                    self.__dict__["_configured"] = (session.optimizers, session.schedulers)

        return super()._launch(module, keeping, fit, datamodule)

    def _evaluate(
        self,
        stage: str,
        module: Module | None,
        dataloaders: Any,
        ckpt_path: Any,
        datamodule: Any,
        return_predictions: bool = True,
    ) -> Any:
        self._attach(datamodule if datamodule is not None else dataloaders)
        if module is not None or self._last_module is not None:  # None: the native trainer runs the last module
            self._bind(module if module is not None else self._last_module)  # type: ignore[arg-type]
        return super()._evaluate(stage, module, dataloaders, ckpt_path, datamodule, return_predictions)

    # -- what Lightning code reads ---------------------------------------------------------------
    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The latest metrics, as tensors (Lightning's ``trainer.callback_metrics``: no evaluation step values)."""
        return _tensors(callback_metrics(self.runtime.state))

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of each metric logged with ``logger=True``, as tensors (Lightning's names)."""
        return _tensors(logged_metrics(self.runtime.state))

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The metrics logged with ``prog_bar=True``, under Lightning's names (``<name>_step``/``<name>_epoch``)."""
        return progress_bar_metrics(self.runtime.state)

    @property
    def current_epoch(self) -> int:
        """Epochs completed (Lightning's ``trainer.current_epoch``)."""
        return self.runtime.state.current_epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps taken."""
        return self.runtime.state.global_step

    @property
    def should_stop(self) -> bool:
        """Whether a stop was asked for (read-only: a listener returns ``interlock.Stop`` to ask)."""
        return self.runtime.state.should_stop

    @property
    def is_global_zero(self) -> bool:
        return self.runtime.state.is_global_zero

    @property
    def global_rank(self) -> int:
        return self.runtime.state.global_rank

    @property
    def world_size(self) -> int:
        return self.runtime.state.world_size

    @property
    def max_epochs(self) -> int | None:
        """The ``max_epochs`` flag as given (``None``: Lightning's 1000 when ``max_steps`` is not set either)."""
        return 1 if self.config.fast_dev_run else self.config.max_epochs

    @property
    def local_rank(self) -> int:
        return int(getattr(self.hardware.strategy, "local_rank", 0))

    @property
    def num_devices(self) -> int:
        return len(self.hardware.devices)

    @property
    def min_epochs(self) -> int | None:
        """The flag; after a fit, Lightning's filled value (``min_epochs``, else 1 with ``min_steps``, else 0)."""
        return self.config.min_epochs if not self.runtime.state.stage else filled_min_epochs(self.config)

    @property
    def device_ids(self) -> list[int]:
        return list(self.hardware.devices)

    @property
    def precision(self) -> str:
        return str(self.hardware.precision.flag)

    @property
    def scaler(self) -> Any:
        """The gradient scaler of ``16-mixed`` (``torch.amp.GradScaler``, made as a fit sets up), else ``None``."""
        return self.hardware.precision.scaler

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas`` and ``rank`` of a ``DistributedSampler`` (``None`` on a single device), as Lightning's."""
        return sampler_kwargs(self.hardware.strategy)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` in each node's local rank 0 only (Lightning's)."""
        if self.local_rank == 0:
            print(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        """Lightning's flag attributes (``trainer.limit_val_batches``, ``accumulate_grad_batches``, ...)."""
        try:
            return lightning_flag(self.config, name, self.__dict__.get("_clip_algorithm"))
        except AttributeError:
            pass
        if name in _LOADERS:  # Lightning's trainer holds the loaders of its last call only
            last = (self.__dict__.get("_ended") or {}).get(self.runtime.state.stage)
            return None if last is None else getattr(view(last), name)
        if isinstance(TrainerView.__dict__.get(name), property):  # a figure of the run a callback reads
            stage = self._described(name)
            ended = (self.__dict__.get("_ended") or {}).get(stage)
            if ended is not None:  # the run it describes, as it ended: Lightning answers these after a call too
                return getattr(view(ended), name)
            if name in _BEFORE_A_RUN:  # Lightning's loops' figures before their first run
                return copy.copy(_BEFORE_A_RUN[name])
            raise AttributeError(
                f"trainer.{name} describes a {stage} run, and this trainer has none to read: it has not run {stage} "
                "yet, or its last call ran in other processes (ddp_spawn, several ranks); read it after "
                f"trainer.{stage}(...) in one process, or in a Lightning Callback's hooks"
            )
        instead = _LIGHTNING_ONLY.get(name)
        if instead is not None:
            raise AttributeError(f"trainer.{name} is Lightning's, and interlock has no such object: {instead}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def strategy(self) -> Any:
        """The strategy plugin: ``barrier()``, ``broadcast(obj, src)``, ``is_global_zero``, ``world_size``, ..."""
        return self.hardware.strategy

    def _described(self, name: str) -> str:
        """The stage whose last run a figure of Lightning's trainer describes after the calls.

        Lightning keeps each loop's figures: the test and predict counts are those calls', the
        validation count the last ``validate``'s right after one and the fit's otherwise, the rest the fit's.
        """
        if name == "num_val_batches" and self.runtime.state.stage == "validate":
            return "validate"
        return {"num_test_batches": "test", "num_predict_batches": "predict"}.get(name, "fit")

    @property
    def max_steps(self) -> int:
        fast = self.config.fast_dev_run
        return int(fast) if fast else self.config.max_steps

    @property
    def default_root_dir(self) -> str:
        return str(self.root)

    @property
    def log_dir(self) -> str:
        """The first logger's directory, as Lightning's; the run directory with the default logger or none.

        (Lightning's default is ``lightning_logs/version_N``; interlock's ``runs/version_N``.)
        """
        first = self.loggers[0] if self.loggers else None
        mine = getattr(first, "log_dir", None) or getattr(first, "save_dir", None)
        return str(mine) if mine is not None else str(self.run_dir)

    @property
    def loggers(self) -> list[Listener]:
        """The logger listeners (``CSVLogger``, ``TensorBoardLogger``, ``MLFlowLogger``, ``WandbLogger``), in order."""
        from interlock.listeners._tracking import LoggerListener

        return [x for x in self.listeners if isinstance(x, LoggerListener)]

    @property
    def logger(self) -> Listener | None:
        """The first logger, or ``None`` with ``logger=False``."""
        found = self.loggers
        return found[0] if found else None

    @property
    def callbacks(self) -> list[Any]:
        """The listeners and Lightning-style callbacks in Lightning's order: those passed, interlock's, checkpoints."""
        return lightning_order([*self.listeners, *self.lightning_callbacks], self.given)

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """Every ``ModelCheckpoint``; a native one in a view with Lightning's attributes (``best_model_path``, ...).

        One of ``interlock.lightning.callbacks`` has them itself and comes as it is.
        """
        from interlock.lightning.callbacks import ModelCheckpoint as LitModelCheckpoint
        from interlock.listeners import ModelCheckpoint

        found = [x for x in self.listeners if isinstance(x, ModelCheckpoint)]
        return [x if isinstance(x, LitModelCheckpoint) else CheckpointView(x, self) for x in found]

    @property
    def profiler(self) -> Any:
        """The ``SimpleProfiler`` (``profiler="simple"``), else a ``PassThroughProfiler``, as Lightning's."""
        from interlock.lightning.profilers import PassThroughProfiler
        from interlock.listeners.profiler import Profiler

        found = [x for x in self.listeners if isinstance(x, Profiler)]
        return found[0] if found else PassThroughProfiler()

    @property
    def checkpoint_callback(self) -> Any:
        """The first ``ModelCheckpoint``, with Lightning's attributes (``best_model_path``, ``best_model_score``)."""
        found = self.checkpoint_callbacks
        return found[0] if found else None

    @property
    def early_stopping_callbacks(self) -> list[Listener]:
        """Every ``EarlyStopping``, in order (Lightning's)."""
        from interlock.listeners import EarlyStopping

        return [x for x in self.listeners if isinstance(x, EarlyStopping)]

    @property
    def early_stopping_callback(self) -> Listener | None:
        """The first ``EarlyStopping`` (``None`` without one)."""
        found = self.early_stopping_callbacks
        return found[0] if found else None

    @property
    def progress_bar_callback(self) -> Listener | None:
        """The progress bar listener (``None`` with ``enable_progress_bar=False``), as Lightning's."""
        from interlock.listeners.progress import ProgressBar

        return next((x for x in self.listeners if isinstance(x, ProgressBar)), None)

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers of the last ``fit`` (``[]`` before one, or after a fit in other processes: ddp_spawn)."""
        return list(self.__dict__.get("_configured", ([], []))[0])

    @property
    def lr_scheduler_configs(self) -> list[Any]:
        """The LR schedulers of the last ``fit``, with ``scheduler``, ``interval``, ``frequency``, ``monitor``."""
        return list(self.__dict__.get("_configured", ([], []))[1])

    @property
    def model(self) -> Module | None:
        """The module of the last ``fit``/``validate``/``test``/``predict`` (``None`` before)."""
        return self._last_module

    @property
    def lightning_module(self) -> Module | None:
        return self._last_module

    @property
    def state(self) -> LightningState:  # type: ignore[override]
        """Lightning's ``trainer.state``: ``fn`` (the last call), ``stage`` (the loop running now), ``status``.

        Its other attributes read interlock's frozen state (``trainer.state.global_step``, ``.metrics``),
        and ``trainer.state.frozen`` is that state, for interlock's functions that take one.
        """
        return lightning_state(self.runtime.state, self.runtime.chart.tags)

    @property
    def sanity_checking(self) -> bool:
        return self.state.stage == RunningStage.SANITY_CHECKING

    @property
    def training(self) -> bool:
        return self.state.stage == RunningStage.TRAINING

    @property
    def validating(self) -> bool:
        return self.state.stage == RunningStage.VALIDATING

    @property
    def testing(self) -> bool:
        return self.state.stage == RunningStage.TESTING

    @property
    def predicting(self) -> bool:
        return self.state.stage == RunningStage.PREDICTING

    @property
    def evaluating(self) -> bool:
        """Validation, testing or the sanity check is running (Lightning's)."""
        return self.state.stage in (RunningStage.VALIDATING, RunningStage.TESTING, RunningStage.SANITY_CHECKING)

    @property
    def interrupted(self) -> bool:
        """The last call ended by an exception (Ctrl-C, a preemption signal, or an error), as Lightning's."""
        return self.state.status == TrainerStatus.INTERRUPTED

    @property
    def received_sigterm(self) -> bool:
        """A preemption signal (SIGTERM) was agreed in the last run."""
        return bool(self.runtime.state.agreed.get("preempted"))

    def __setattr__(self, name: str, value: Any) -> None:
        flag = name in LIGHTNING_FIELDS or name in ("gradient_clip_algorithm", "num_sanity_val_steps", "fast_dev_run")
        flag = flag or (name.startswith("limit_") and name.endswith("_batches"))
        if flag or isinstance(getattr(type(self), name, None), property):
            instead = _SETTABLE.get(name, "configure it with a Trainer flag, or return an update from a listener")
            raise AttributeError(f"trainer.{name} is read-only in interlock (the state is frozen): {instead}")
        super().__setattr__(name, value)


_LOADERS = ("train_dataloader", "val_dataloaders", "test_dataloaders", "predict_dataloaders")
_LOOPS = (
    "the loops are interlock's statechart, not objects: read trainer.state (its counters and its position "
    "state.chart), or listen to the chart's events (docs/concepts.md)"
)
#: Lightning Trainer attributes interlock has no object for, and what to use instead.
_LIGHTNING_ONLY = {
    "fit_loop": _LOOPS,
    "validate_loop": _LOOPS,
    "test_loop": _LOOPS,
    "predict_loop": _LOOPS,
    "accelerator": "trainer.hardware.accelerator is interlock's plugin (trainer.hardware.device: the device)",
    "precision_plugin": "trainer.hardware.precision is interlock's precision plugin (trainer.precision the flag)",
    "ckpt_path": "keep the path you passed to fit/validate/test/predict (interlock logs the file it resumed from)",
}


#: What Lightning's barebones mode turns off, and why it says so when one is asked for
_BAREBONES_OFF = {
    "enable_checkpointing": "Checkpointing",
    "logger": "Logging",
    "enable_progress_bar": "The progress bar",
    "log_every_n_steps": "Logging",
    "enable_model_summary": "Model summary",
    "num_sanity_val_steps": "Sanity checking",
    "fast_dev_run": "Development run",
    "detect_anomaly": "Anomaly detection",
    "profiler": "Profiling",
}


#: what Lightning's trainer reads before a stage has run (its loops' initial figures)
_BEFORE_A_RUN: dict[str, Any] = {
    "num_training_batches": float("inf"),
    "num_val_batches": [],
    "num_sanity_val_batches": [],
    "num_test_batches": [],
    "num_predict_batches": [],
    "val_check_batch": None,
}


def _cpu_amp(accelerator: Any, precision: Any) -> Any:
    """Lightning's precision on the CPU: ``16-mixed`` (fp16 AMP) becomes ``bf16-mixed``, with Lightning's warning.

    The native ``interlock.Trainer`` runs fp16 autocast with loss scaling on the CPU as asked (docs/porting.md).
    """
    from interlock.accelerators.registry import select_accelerator
    from interlock.plugins.precision import precision_plugin

    try:
        fp16_on_cpu = precision_plugin(precision).flag == "16-mixed" and select_accelerator(accelerator).name == "cpu"
    except (TypeError, ValueError):  # a bad flag: the native Trainer names it
        return precision
    if not fp16_on_cpu:
        return precision
    warnings.warn(
        "You passed `Trainer(accelerator='cpu', precision='16-mixed')` but AMP with fp16 is not supported on CPU. "
        "Using `precision='bf16-mixed'` instead.",
        UserWarning,
        stacklevel=3,
    )
    return "bf16-mixed"


def _profiler_listener(profiler: Any) -> Listener | None:
    """What ``Trainer(profiler=...)`` installs: ``"simple"`` or a ``SimpleProfiler`` is the chart-state profiler."""
    from interlock.lightning.profilers import PassThroughProfiler, SimpleProfiler
    from interlock.listeners.profiler import Profiler

    if profiler is None or isinstance(profiler, PassThroughProfiler):
        return None
    if isinstance(profiler, Profiler):
        return profiler
    if isinstance(profiler, str):
        name = profiler.lower()
        if name == "simple":
            return SimpleProfiler()
        instead = {
            "advanced": "run trainer.fit under cProfile, or profiler='simple' (time per chart state)",
            "pytorch": "wrap trainer.fit in torch.profiler.profile(...), or profiler='simple'",
            "xla": "interlock has no XLA support; profiler='simple' times each chart state",
        }.get(name)
        if instead is None:
            raise ValueError(
                "When passing string value for the `profiler` parameter of `Trainer`, it can only be one of "
                f"['simple', 'advanced', 'pytorch', 'xla'] (Lightning's); got {profiler!r}"
            )
        raise TypeError(f"Trainer(profiler={profiler!r}) is not in interlock: {instead}")
    raise TypeError(
        f"Trainer(profiler={profiler!r}): pass 'simple', a SimpleProfiler(dirpath, filename) from "
        "interlock.lightning.profilers, or an interlock.listeners.Profiler"
    )


def _refuse_in_barebones(**given: Any) -> None:
    """Lightning's ``ValueError`` for a feature asked for with ``barebones=True`` (which turns them all off)."""
    for name, value in given.items():
        if name in ("logger", "profiler"):
            on = value is not None and value is not False
        elif name in ("log_every_n_steps", "num_sanity_val_steps"):
            on = value is not None and value != 0
        elif name == "fast_dev_run":
            on = value is not False and value != 0
        else:
            on = bool(value)
        if on:
            why = "is not meant for raw speed evaluation" if name == "fast_dev_run" else "can impact raw speed"
            raise ValueError(
                f"`Trainer(barebones=True, {name}={value!r})` was passed. {_BAREBONES_OFF[name]} {why} so it is "
                "disabled in barebones mode."
            )


class CheckpointView:
    """A ``ModelCheckpoint`` listener read through its trainer's state, with Lightning's attribute names."""

    def __init__(self, listener: Any, trainer: NativeTrainer) -> None:
        self._listener, self._trainer = listener, trainer

    @property
    def _state(self) -> TrainerState:
        return self._trainer.runtime.state

    @property
    def best_model_path(self) -> str:
        return str(_native(self._listener, "best_model_path")(self._state))

    @property
    def best_model_score(self) -> torch.Tensor | None:
        score = _native(self._listener, "best_model_score")(self._state)
        return None if score is None else torch.tensor(score)

    @property
    def last_model_path(self) -> str:
        return str(_native(self._listener, "last_model_path")(self._state))

    @property
    def best_k_models(self) -> dict[str, torch.Tensor | None]:
        kept = _native(self._listener, "best_k_models")(self._state)
        return {p: None if s is None else torch.tensor(s) for p, s in kept.items()}

    @property
    def dirpath(self) -> str:
        if self._listener.dirpath is not None:
            return str(self._listener.dirpath)
        return str(Path(self._state.run_dir or self._trainer.run_dir) / "checkpoints")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._listener, name)

    def __repr__(self) -> str:
        return f"CheckpointView({self._listener!r})"


def _weights_only(value: Any, method: str) -> None:
    """Lightning's ``weights_only`` of ``torch.load``: interlock always loads checkpoints without running code."""
    if value is not None and value is not True:
        raise ValueError(
            f"Trainer.{method}(weights_only={value!r}): interlock loads checkpoints as data only (torch.load with "
            "weights_only=True), so checkpoints holding pickled objects cannot be loaded; pass None or True"
        )


def _native(listener: Any, name: str) -> Any:
    """The native ``ModelCheckpoint`` method ``name`` of ``listener`` (bypassing a Lightning-style property)."""
    from interlock.listeners import ModelCheckpoint

    return getattr(ModelCheckpoint, name).__get__(listener)


def _tensors(metrics: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v, dtype=torch.float32) for k, v in metrics.items()}
