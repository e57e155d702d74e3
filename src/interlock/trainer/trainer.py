"""The Trainer: a thin facade over the chart runtime and one session per call."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from interlock.connectors.best import best_checkpoint
from interlock.connectors.callbacks import batch_end_handler
from interlock.connectors.checkpoint import check_ckpt_path
from interlock.connectors.finished import NO_FIT, FinishedFit, keep_finished
from interlock.connectors.hardware import resolve_hardware
from interlock.connectors.init_module import tensor_init_context
from interlock.connectors.rundir import next_run_dir
from interlock.connectors.torch_flags import check_deterministic, set_torch_flags
from interlock.core.chart import Chart, load_chart
from interlock.core.config import TrainerConfig
from interlock.core.datamodule import LOADER_METHODS, check_datamodule, is_datamodule, provides
from interlock.core.errors import ChartError, CheckpointError
from interlock.core.events import EventBus, Handler, Listener, Observer, order_listeners
from interlock.core.extension import Extension
from interlock.core.hparams import logged_hparams
from interlock.core.module import Module, overrides
from interlock.core.run import Run, stage_def
from interlock.core.state import TrainerState
from interlock.core.step import Facts
from interlock.listeners._tracking import LoggerListener
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.listeners.lr_monitor import LearningRateMonitor
from interlock.loops import default_registry
from interlock.trainer.flags import check_lightning_flags, check_model_summary, resolve_listeners, split_callbacks
from interlock.trainer.runtime import Runtime
from interlock.trainer.session import Session

__all__ = ["Trainer"]


class Trainer:
    """Runs :class:`~interlock.Module` s through the lifecycle statechart.

    Flags keep Lightning's names and meanings. ``listeners`` receive every event
    they subscribe to. As Lightning keeps its default callbacks, the defaults
    (progress bar, CSV logger, event trace, ``ModelCheckpoint(save_last=True)``)
    are always installed besides the listeners you pass, unless
    ``enable_progress_bar=False``, ``logger=False``, ``enable_trace=False`` or
    ``enable_checkpointing=False`` removes them; a listener you pass of a
    default's kind replaces that default. A Lightning argument interlock does not
    take raises a ``TypeError`` naming what to use instead.
    Outputs go to ``default_root_dir/runs/version_N``.

    Args:
        max_epochs: Stop after this many epochs (``-1``: no limit; ``None``: 1000 unless ``max_steps`` is set).
        max_steps: Stop after this many optimizer steps (``-1``: no limit).
        limit_train_batches: Batches per training epoch: an int count or a float fraction.
        limit_val_batches: Batches per validation run: an int count or a float fraction (0 disables).
        limit_test_batches: Batches of the test loop: an int count or a float fraction.
        limit_predict_batches: Batches of the predict loop: an int count or a float fraction.
        val_check_interval: Validate every N training batches (int) or at this fraction of an epoch (float).
        check_val_every_n_epoch: Validate every N epochs (``None``: count ``val_check_interval`` across epochs).
        num_sanity_val_steps: Validation batches run before training (``-1``: all, ``0``: none).
        accumulate_grad_batches: Accumulate gradients over this many batches per optimizer step.
        gradient_clip_val: Clip gradients to this norm or value (``None`` or 0: no clipping).
        gradient_clip_algorithm: ``"norm"`` or ``"value"``.
        accelerator: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"gpu"`` or ``"mps"``.
        devices: Device count, indices (``[0, 1]``, ``"0,1"``), ``"auto"`` or ``-1`` (all).
        strategy: ``"auto"``, ``"single_device"``, ``"ddp"``, ``"ddp_spawn"``, ``"fsdp"``, or ``"ddp_sharded"`` /
            ``"fsdp_sharded"`` (checkpoints are sharded directories, written in the background).
        precision: ``"32-true"``, ``"64-true"``, ``"16-mixed"``, ``"bf16-mixed"``, ``"16-true"``, ``"bf16-true"``.
        listeners: Listener objects, installed besides the defaults; Lightning-style callbacks
            (``interlock.lightning.Callback``) may be among them.
        callbacks: Lightning's name for ``listeners`` (pass one of the two).
        logger: ``True`` (the default ``CSVLogger``), ``False`` (none), or a listener or list of them instead.
        enable_checkpointing: ``False``: no default ``ModelCheckpoint`` (passing one is then an error).
        enable_progress_bar: ``False``: no default ``ProgressBar`` (passing one is then an error).
        enable_model_summary: Print the module's layer table at the start of each fit (the default, as in
            Lightning; ``None`` means ``True``); ``False``: no default ``ModelSummary`` listener.
        enable_trace: ``False``: no default ``EventTrace`` (interlock's own flag).
        min_epochs: A stop request (early stopping) waits until this many epochs are done.
        min_steps: A stop request waits until this many optimizer steps are done.
        overfit_batches: Train and validate on the first N batches (int) or fraction (float), unshuffled.
        log_every_n_steps: Per-step logging cadence of the loggers that have one (``TensorBoardLogger``).
        reload_dataloaders_every_n_epochs: Ask the module or data module for its training loader again
            every N epochs (and its validation loaders before a fit's validation), as Lightning (0: never).
        default_root_dir: Where ``runs/version_N`` folders are made (default: the working directory).
        seed: Seed python, numpy and torch when a stage starts (after the model was built: to seed the
            initial weights too, call ``interlock.seed_everything(seed)`` before building it, as in Lightning).
        deterministic: ``True``: torch's deterministic algorithms, cuDNN's autotuner off and cuBLAS's
            reproducible workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8``); ``"warn"``: the same, warning
            where a kernel has none; ``False``: turn them off; ``None``: leave torch's setting (Lightning's).
        benchmark: ``torch.backends.cudnn.benchmark``; ``None`` leaves it (``False`` when deterministic).
        detect_anomaly: Run each fit under ``torch.autograd.set_detect_anomaly(True)`` (slow; it names the
            forward operation whose backward made a NaN), as Lightning's.
        fast_dev_run: Run 1 (or N) batch of each loop to check the code paths.
        chart: A custom statechart file; every action and guard it names must be registered.
        actions: Your chart's actions by name, ``fn(run)`` returning ``None`` or updates (``{"ema.update": fn}``).
        guards: Your chart's guards by name, ``fn(facts) -> bool``: a pure function of the frozen
            :class:`~interlock.core.step.Facts` (state, counters, config).
        extensions: :class:`~interlock.Extension` objects: actions, binders, guards, effects, payload keys,
            counter operations and slot types your chart names, each bundle under its own name
            (docs/extending.md). A name that another owner registered is an error naming both.
    """

    def __init__(
        self,
        *,
        max_epochs: int | None = None,
        max_steps: int = -1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        val_check_interval: int | float = 1.0,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int = 2,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        accelerator: Any = "auto",
        devices: Any = "auto",
        strategy: str = "auto",
        precision: Any = "32-true",
        listeners: Sequence[Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        logger: bool | Listener | Sequence[Listener] | None = True,
        enable_checkpointing: bool = True,
        enable_progress_bar: bool = True,
        enable_model_summary: bool | None = None,
        enable_trace: bool = True,
        min_epochs: int | None = None,
        min_steps: int | None = None,
        overfit_batches: int | float = 0.0,
        log_every_n_steps: int = 50,
        reload_dataloaders_every_n_epochs: int = 0,
        default_root_dir: str | os.PathLike[str] | None = None,
        seed: int | None = None,
        deterministic: bool | Literal["warn"] | None = None,
        benchmark: bool | None = None,
        detect_anomaly: bool = False,
        fast_dev_run: bool | int = False,
        chart: str | os.PathLike[str] | None = None,
        actions: Mapping[str, Callable[[Run], Any]] | None = None,
        guards: Mapping[str, Callable[[Facts], bool]] | None = None,
        extensions: Sequence[Extension] = (),
        **lightning_only: Any,
    ) -> None:
        check_lightning_flags(lightning_only, Trainer.__init__)
        summary = check_model_summary(enable_model_summary)
        self.config = TrainerConfig(
            max_epochs=max_epochs,
            max_steps=max_steps,
            limit_train_batches=limit_train_batches,
            limit_val_batches=limit_val_batches,
            limit_test_batches=limit_test_batches,
            limit_predict_batches=limit_predict_batches,
            val_check_interval=val_check_interval,
            check_val_every_n_epoch=check_val_every_n_epoch,
            num_sanity_val_steps=num_sanity_val_steps,
            accumulate_grad_batches=accumulate_grad_batches,
            gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm=gradient_clip_algorithm,
            fast_dev_run=fast_dev_run,
            min_epochs=min_epochs,
            min_steps=min_steps,
            overfit_batches=overfit_batches,
            log_every_n_steps=log_every_n_steps,
            reload_dataloaders_every_n_epochs=reload_dataloaders_every_n_epochs,
        )
        deterministic = check_deterministic(deterministic)
        passed = listeners if listeners is not None else callbacks
        #: what was passed as listeners/callbacks, in its order (Lightning lists trainer.callbacks in it)
        self.given: tuple[Any, ...] = (
            () if passed is None else tuple(passed) if isinstance(passed, Sequence) else (passed,)
        )
        listeners, own = split_callbacks("listeners", listeners)
        callbacks, given = split_callbacks("callbacks", callbacks)
        #: the Lightning-style callbacks, called by the chart's hook actions (Lightning's order)
        self.lightning_callbacks: tuple[Any, ...] = (*own, *given)
        installed = resolve_listeners(
            listeners, callbacks, logger, enable_checkpointing, enable_progress_bar, enable_trace, self.config, summary
        )
        self.hardware = resolve_hardware(accelerator, devices, strategy, precision)
        set_torch_flags(deterministic, benchmark)
        self.seed = seed
        if not isinstance(detect_anomaly, bool):
            raise TypeError(f"Trainer(detect_anomaly={detect_anomaly!r}) must be True or False")
        self.detect_anomaly = detect_anomaly
        self.root = Path(default_root_dir or os.getcwd())
        self.statechart: Chart = load_chart(chart)
        for stage in ("fit", "validate", "test", "predict"):  # each stage's definition is in its state's with:
            if stage in self.statechart.states:
                try:
                    stage_def(self.statechart, stage)
                except ValueError as exc:
                    raise ChartError(str(self.statechart.source), [str(exc)]) from None
        self.registry = default_registry()
        if isinstance(extensions, Extension) or not isinstance(extensions, Sequence):
            raise TypeError(f"Trainer(extensions={extensions!r}): pass a list of interlock.Extension objects")
        for ext in extensions:
            if not isinstance(ext, Extension):
                raise TypeError(
                    f"Trainer(extensions=[...]) got {ext!r}; each item must be an interlock.Extension "
                    "(plain functions go in actions= / guards=)"
                )
            self.registry.extend(ext)
        for name, fn in (actions or {}).items():
            self.registry.add_action(name, fn)
        for name, guard in (guards or {}).items():
            self.registry.add_guard(name, guard)
        self.bus = EventBus(self.statechart.leaves, self.statechart.tags)
        self.runtime = Runtime(self.statechart, self.bus, self.registry)
        self.listeners = order_listeners(installed)
        self._batch_ends = [n for n, t in self.statechart.tags.items() if "train_batch_end" in t]
        if self.lightning_callbacks and self._batch_ends:
            # their on_train_batch_end: the event's first handler (before a checkpoint's save)
            handler: Any = batch_end_handler(lambda: self.runtime.current_run)  # (event): no state snapshot built
            self.bus.on("#train_batch_end", handler, source="callbacks")
        self._subscribe()

    def _subscribe(self) -> None:
        """Subscribe each listener's handlers, observers and recorders (loggers learn the rate monitors first)."""
        monitors = [x for x in self.listeners if isinstance(x, LearningRateMonitor)]
        for listener in self.listeners:
            if self.config.fast_dev_run and isinstance(listener, LoggerListener):
                continue  # fast_dev_run suppresses logging (Lightning's: its loggers become DummyLoggers)
            listener.bind_tags(self.bus.tags)
            bind = getattr(listener, "bind_lr_monitors", None)
            if bind is not None:
                bind(monitors)
            for pattern, handler, every, once in listener.subscriptions():
                self.bus.on(pattern, handler, every=every, once=once, source=listener.key)
            for observer in listener.observers():
                self.bus.observe(observer, source=listener.key)
            for recorder in listener.recorders():
                self.bus.record(recorder, source=listener.key)

    def _attach_module_callbacks(self, module: Any) -> None:
        """Install what the module's ``configure_callbacks()`` returns, as Lightning at each stage's start.

        A returned listener (or Lightning-style callback) replaces the trainer's of its type (or of a
        base type); the others are added; checkpoint listeners run last. The change stays for the
        trainer's later stages, as in Lightning.
        """
        if not overrides(module, "configure_callbacks"):
            return
        returned = module.configure_callbacks()
        items = [] if returned is None else [returned] if not isinstance(returned, Sequence) else list(returned)
        if not items:
            return
        plain, callbacks = split_callbacks("configure_callbacks", items)
        listeners = _module_listeners(type(module).__name__, plain or [])
        if callbacks:
            kept_cbs = [c for c in self.lightning_callbacks if not any(isinstance(n, type(c)) for n in callbacks)]
            self.lightning_callbacks = (*kept_cbs, *callbacks)
            if self._batch_ends and not any(s.source == "callbacks" for s in self.bus.handlers(self._batch_ends[0])):
                handler: Any = batch_end_handler(lambda: self.runtime.current_run)
                self.bus.on("#train_batch_end", handler, source="callbacks")
        if not listeners:
            return
        for listener in listeners:
            listener.configure(self.config)
        kept = [x for x in self.listeners if not any(isinstance(n, type(x)) for n in listeners)]
        self.bus.remove_sources({x.key for x in self.listeners})  # re-subscribed below, in the new order
        ordered = order_listeners([*kept, *listeners])
        last: list[Listener] = [x for x in ordered if isinstance(x, ModelCheckpoint)]  # Lightning: checkpoints last
        self.listeners = [x for x in ordered if not isinstance(x, ModelCheckpoint)] + last
        self._subscribe()

    # -- events and state -------------------------------------------------------------
    def on(
        self, pattern: str, handler: Handler | None = None, *, every: int | None = None, once: bool | int = False
    ) -> Any:
        """Call ``handler(event, state)`` on events matching the glob ``pattern``; a decorator without ``handler``."""
        return self.bus.on(pattern, handler, every=every, once=once)

    def observe(self, observer: Observer) -> Observer:
        """Call ``observer(name, trigger, source, count, epoch, global_step, batch_idx)`` on every transition."""
        return self.bus.observe(observer)

    @property
    def state(self) -> TrainerState:
        """Everything the trainer knows about the run (frozen)."""
        return self.runtime.state

    @property
    def run_dir(self) -> Path:
        """Where this trainer's outputs go: ``default_root_dir/runs/version_N``, or the resumed run's own.

        A stage claims the directory at set-up (a new ``version_N`` is created atomically, so two
        trainers never share one); before the first stage this is the directory it would claim now.
        """
        if self.runtime.state.run_dir:
            return Path(self.runtime.state.run_dir)
        return next_run_dir(self.root)

    def _session(self) -> Session:
        checks = tuple(_restore_check(listener) for listener in self.listeners)
        return Session(
            self.runtime,
            self.config,
            self.hardware,
            self.root,
            self.runtime.state.run_dir,
            self.seed,
            restore_checks=checks,
            loggers=self._loggers(),
            callbacks=self.lightning_callbacks,
            listeners=tuple(self.listeners),
            given=self.given,
            train_opened=self.__dict__.pop("_train_opened", False),
            detect_anomaly=self.detect_anomaly,
        )

    def _loggers(self) -> tuple[LoggerListener, ...]:
        """The logger listeners (the module's ``self.loggers``), told of the checkpoint listeners they upload."""
        loggers = tuple(x for x in self.listeners if isinstance(x, LoggerListener))
        checkpoints = [x for x in self.listeners if isinstance(x, ModelCheckpoint)]
        for logger in loggers:
            bind = getattr(logger, "bind_checkpoints", None)
            if bind is not None:
                bind(checkpoints)
        return loggers

    def _launch(self, module: Module, call: Callable[[Session], Any], fit: bool = False, datamodule: Any = None) -> Any:
        """Run ``call`` through the strategy's launcher.

        A launcher that starts new processes sends rank 0's result, state and
        weights back, so ``module`` and ``self.state`` end as the run did. After a
        ``fit``, what :meth:`save_checkpoint` can write (or why not) is kept.
        """
        self.__dict__["_module"] = module  # what a later validate/test/predict without a module runs
        hparams = logged_hparams(module, datamodule)  # save_hyperparameters(logger=False): not logged
        for logger in self.listeners:
            bind = getattr(logger, "bind_hyperparameters", None)
            if bind is not None and isinstance(logger, LoggerListener):
                bind(hparams)
        self._attach_module_callbacks(module)
        session, strategy = self._session(), self.hardware.strategy
        if fit:
            self.__dict__["_fitted"] = _DURING_FIT
        try:
            if not strategy.launches_processes:
                return strategy.launch(call, session)

            def child() -> tuple[Any, dict[str, Any], dict[str, Any]]:
                result = call(session)
                return result, self.runtime.state.to_dict(), strategy.model_state_dict(module)  # gathered if sharded

            result, state, weights = strategy.launch(child)
            module.load_state_dict(weights)
            self.runtime.restore(TrainerState.from_dict(state))
            return result
        finally:
            ended = self.__dict__.setdefault("_ended", {})  # the last run of each stage, read after the calls
            if session.ended is None:  # it ran in other processes: what this process kept is out of date
                ended.clear()
            else:
                ended[session.ended.stage] = session.ended
            if fit:
                spawned = strategy.launches_processes
                kept = keep_finished(None, self.runtime.state, strategy) if spawned else session.fitted
                self.__dict__["_fitted"] = kept or "the last fit stopped before it started"

    def save_checkpoint(self, filepath: str | os.PathLike[str], weights_only: bool = False) -> None:
        """Write the checkpoint of the last fit as it ended, as Lightning's ``trainer.save_checkpoint`` after fit.

        It holds the fit's final state, optimizer, scheduler and data position, and the module's
        weights as they are now; ``fit(ckpt_path=filepath)`` with a larger ``max_epochs`` continues it
        exactly, and ``Module.load_from_checkpoint`` reads it. ``weights_only``: no optimizer or
        scheduler state. During a fit, a listener returns ``interlock.SaveCheckpoint(path)`` instead.
        """
        kept = self.__dict__.get("_fitted", NO_FIT)
        if not isinstance(kept, FinishedFit):
            raise RuntimeError(f"trainer.save_checkpoint({str(filepath)!r}): {kept}")
        kept.save(filepath, weights_only)

    def init_module(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[None]:
        """Make a module's tensors on this trainer's device and precision's dtype (Lightning's ``trainer.init_module``).

        ``with trainer.init_module(): model = Net()`` allocates once, where the run will use it;
        ``empty_init=True`` skips weight initialisation, for a module a checkpoint then fills.
        """
        return tensor_init_context(self.hardware, empty_init)

    # -- entry points -----------------------------------------------------------------
    def fit(
        self,
        module: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        *,
        datamodule: Any = None,
    ) -> dict[str, float]:
        """Train; return the latest metrics. ``ckpt_path`` (a file or ``"last"``) resumes exactly.

        ``datamodule`` (an :class:`~interlock.DataModule` or a Lightning one; also accepted in place of
        ``train_dataloaders``) hands out the loaders instead. The run continues in the run directory
        the checkpoint file is in (``RUN/checkpoints/x.ckpt``: ``RUN``); ``"last"`` is this trainer's
        run's ``last.ckpt``, or the newest run's under ``default_root_dir``. A second ``fit`` of the same
        trainer continues its state with the next epoch (nothing to train when its limits are reached:
        raise ``max_epochs``).
        """
        module = unwrap_compiled(module)
        check_ckpt_path(ckpt_path, "fit")
        if datamodule is None and is_datamodule(train_dataloaders):
            train_dataloaders, datamodule = None, train_dataloaders
        check_datamodule(
            datamodule, {"train_dataloaders": train_dataloaders, "val_dataloaders": val_dataloaders}, "fit"
        )
        if datamodule is None and train_dataloaders is None and not provides(module, "train"):
            raise TypeError(
                "Trainer.fit() needs train_dataloaders or datamodule=; pass one of them, or define "
                f"train_dataloader() on {type(module).__name__}"
            )
        return self._launch(  # type: ignore[no-any-return]
            module,
            lambda s: s.fit(module, train_dataloaders, val_dataloaders, ckpt_path, datamodule),
            fit=True,
            datamodule=datamodule,
        )

    def validate(
        self,
        module: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: Any = None,
        *,
        datamodule: Any = None,
        verbose: bool = True,
    ) -> list[dict[str, float]]:
        """Run the validation loop once; return its metrics, one dict per loader (as Lightning).

        ``module``: ``None`` runs the module of this trainer's latest stage, with the best checkpoint of its
        fit unless ``ckpt_path`` says otherwise (Lightning's rule, with its warning). ``ckpt_path``: ``None``
        (the module's weights), a path, ``"last"``, or ``"best"`` (the best ``ModelCheckpoint`` file of this
        trainer's fit). ``verbose`` prints the results table on rank 0, as Lightning.
        """
        results = self._evaluate("validate", module, dataloaders, ckpt_path, datamodule)
        return _report("validate", results, verbose, self.hardware.strategy)

    def test(
        self,
        module: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: Any = None,
        *,
        datamodule: Any = None,
        verbose: bool = True,
    ) -> list[dict[str, float]]:
        """Run the test loop once; return its metrics, one dict per loader: ``trainer.test(...)[0]["test_loss"]``.

        ``module``, ``ckpt_path`` and ``verbose`` as for :meth:`validate`.
        """
        return _report("test", self._evaluate("test", module, dataloaders, ckpt_path, datamodule), verbose,
                       self.hardware.strategy)  # fmt: skip

    def predict(
        self,
        module: Module | None = None,
        dataloaders: Any = None,
        ckpt_path: Any = None,
        *,
        datamodule: Any = None,
        return_predictions: bool | None = None,
    ) -> Any:
        """Run the predict loop; return what ``predict_step`` returned for each batch (a list per loader if several).

        ``module``: ``None`` runs the module of this trainer's latest stage (with its fit's best checkpoint
        unless ``ckpt_path`` says otherwise, as for :meth:`validate`). ``return_predictions=False``
        keeps nothing and returns ``None`` (Lightning's: memory stays flat over a long predict whose
        ``predict_step`` or hooks write the outputs themselves); ``None`` means ``True``.
        """
        if return_predictions is not None and not isinstance(return_predictions, bool):
            raise ValueError(f"Trainer.predict(return_predictions={return_predictions!r}) must be None, True or False")
        keep = return_predictions is not False
        return self._evaluate("predict", module, dataloaders, ckpt_path, datamodule, keep)

    def _evaluate(
        self,
        stage: str,
        module: Module | None,
        dataloaders: Any,
        ckpt_path: Any,
        datamodule: Any,
        return_predictions: bool = True,
    ) -> Any:
        module = unwrap_compiled(module)
        connected = module is None  # Lightning's rule: a call without a module runs the fit's best weights
        if module is None:
            module = self.__dict__.get("_module")
            if module is None:
                raise TypeError(
                    f"Trainer.{stage}() got no module and this trainer has run none yet: pass the module "
                    f"(trainer.{stage}(model, ...)), or fit it first with this trainer"
                )
        check_ckpt_path(ckpt_path, stage)
        if datamodule is None and is_datamodule(dataloaders):
            dataloaders, datamodule = None, dataloaders
        check_datamodule(datamodule, {"dataloaders": dataloaders}, stage)
        key = {"validate": "val", "test": "test", "predict": "predict"}[stage]
        if datamodule is None and dataloaders is None and not provides(module, key):
            raise TypeError(
                f"Trainer.{stage}() needs dataloaders or datamodule=; pass one of them, or define "
                f"{LOADER_METHODS[key]}() on {type(module).__name__}"
            )
        if connected and ckpt_path is None:
            ckpt_path = _best_for_a_call_without_module(stage, self.hardware.strategy.is_global_zero)
        if ckpt_path is not None and str(ckpt_path) == "best":
            try:
                ckpt_path = best_checkpoint(self.listeners, self.runtime.state, stage)
            except CheckpointError as exc:
                if not connected:
                    raise
                raise CheckpointError(
                    f"Trainer.{stage}() got no module, so it runs the best checkpoint of this trainer's fit, as "
                    f"Lightning's does, and there is none: {exc}. Pass the module (trainer.{stage}(model, ...)) to "
                    "use its weights as they are"
                ) from None
        return self._launch(
            module,
            lambda s: s.evaluate(stage, module, dataloaders, ckpt_path, datamodule, return_predictions),
            datamodule=datamodule,
        )

    # -- debugging --------------------------------------------------------------------
    def chart(self, format: str = "mermaid", trace: str | os.PathLike[str] | None = None) -> str | bytes:
        """The statechart as Mermaid, DOT, SVG or PNG, with a run's trace overlaid when given."""
        from interlock.viz import read_trace, render

        summary = read_trace(trace, self.statechart) if trace is not None else None
        return render(self.statechart, format, summary)

    def subscribers(self) -> list[tuple[str, list[str]]]:
        """For each event, its handlers in delivery order (what ``interlock listeners`` prints)."""
        return [(n, [s.source for s in self.bus.handlers(n)]) for n in self.statechart.leaves if self.bus.handlers(n)]

    def __repr__(self) -> str:
        return f"Trainer({self.hardware.describe()}, at={self.runtime.at!r})"


_COMPILED = ("forward", "training_step", "validation_step", "test_step", "predict_step")


def _best_for_a_call_without_module(stage: str, say: bool) -> str:
    """``"best"``, with Lightning's warning: validate/test/predict without a module use the fit's best checkpoint."""
    if say:
        warnings.warn(
            f"Trainer.{stage}() was called without a module: the best checkpoint of the previous fit is used, as "
            f"Lightning's trainer does. Pass ckpt_path='best' or 'last' to choose (this warning goes), or the module "
            f"(trainer.{stage}(model, ...)) to use its weights as they are",
            stacklevel=4,
        )
    return "best"


_DURING_FIT = (
    "a fit is running; to save at a moment of the run, return interlock.SaveCheckpoint(path) from a listener "
    "(a Lightning callback's trainer.save_checkpoint(path) does so)"
)


def _module_listeners(owner: str, items: list[Any]) -> list[Listener]:
    for item in items:
        if not isinstance(item, Listener):
            raise TypeError(
                f"{owner}.configure_callbacks() returned {item!r:.80}, which is neither a Listener nor a "
                "Lightning-style Callback: return instances of interlock.Listener subclasses or of "
                "interlock.lightning.Callback"
            )
    return list(items)


def unwrap_compiled(module: Any) -> Any:
    """The module inside ``torch.compile(module)``, with its forward and steps compiled (Lightning's ``from_compiled``).

    The run trains the module itself (``torch.compile`` shares its parameters), through the compiled
    callables; anything else is returned as it is.
    """
    if type(module).__name__ != "OptimizedModule" or not hasattr(module, "_orig_mod"):
        return module
    inner, compile_ = module._orig_mod, module.dynamo_ctx
    originals = inner.__dict__.setdefault("_interlock_uncompiled", {})
    for name in _COMPILED:
        fn = originals.setdefault(name, getattr(inner, name))
        inner.__dict__[name] = compile_(fn)
    return inner


def results_table(stage: str, results: list[dict[str, float]]) -> str:
    """The metrics of an evaluation, one column per loader (what Lightning prints after validate/test)."""
    if not any(results):
        return ""
    names = sorted({k.split("/dataloader_idx_")[0] for r in results for k in r})
    columns = [f"{stage.capitalize()} metric", *(f"DataLoader {i}" for i in range(len(results)))]
    rows = []
    for name in names:
        row = [name]
        for i, result in enumerate(results):
            value = result.get(name, result.get(f"{name}/dataloader_idx_{i}"))
            row.append("" if value is None else f"{value:.6g}")
        rows.append(row)
    widths = [max(len(line[c]) for line in [columns, *rows]) + 2 for c in range(len(columns))]
    rule = "-" * sum(widths)
    body = ["".join(cell.center(w) for cell, w in zip(line, widths, strict=True)) for line in rows]
    head = "".join(cell.center(w) for cell, w in zip(columns, widths, strict=True))
    return "\n".join([rule, head, rule, *body, rule])


def _report(stage: str, results: list[dict[str, float]], verbose: bool, strategy: Any) -> list[dict[str, float]]:
    """Print :func:`results_table` on global rank 0 when ``verbose``; return the results."""
    if not isinstance(verbose, bool):
        raise ValueError(f"Trainer.{stage}(verbose={verbose!r}): pass True (print the results table) or False")
    if verbose and getattr(strategy, "is_global_zero", True):
        table = results_table(stage, results)
        if table:
            print(table)
    return results


def _restore_check(listener: Listener) -> Callable[[TrainerState, str], TrainerState]:
    """``listener.check_restored`` applied to its part of a checkpoint's state."""

    def check(state: TrainerState, run_dir: str) -> TrainerState:
        stored = state.listeners.get(listener.key)
        if stored is None:
            return state
        checked = listener.check_restored(stored, run_dir)
        if checked is stored:
            return state
        return state.replace(listeners={**state.listeners, listener.key: checked})

    return check
