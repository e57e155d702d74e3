"""One call of fit/validate/test/predict: the run's plan and live objects, handed to the chart.

The trainer facade delegates here. A session builds the :class:`~interlock.core.run.Run`
(the frozen plan plus the objects torch needs) and asks the runtime to run the
stage; everything else is the chart's actions.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from interlock.connectors.data import Feed, loader_count, split_loaders
from interlock.connectors.finished import FinishedFit, keep_ended, keep_finished
from interlock.connectors.hardware import HardwareSlot
from interlock.connectors.replayto import FOLLOW_SOURCE
from interlock.connectors.rundir import release_run_dir
from interlock.connectors.signals import PreemptionFlag, SignalsSlot
from interlock.core.chart import Chart
from interlock.core.config import TrainerConfig
from interlock.core.datamodule import provides
from interlock.core.run import Run, RunPlan, stage_def
from interlock.core.slots import CallbacksSlot, CheckpointSlot, EvalSlot, RngSlot
from interlock.core.state import TrainerState
from interlock.plugins.checkpoint_io import TorchCheckpointIO
from interlock.plugins.environments import SLURMEnvironment
from interlock.trainer.runtime import Runtime

__all__ = ["Session", "preemption_signals"]


def module_gives_loaders(module: Any, chart: Chart, stage: str, loaders: Mapping[str, Any]) -> bool:
    """The module's own ``*_dataloader()`` makes a loader of ``stage`` that was not passed (Lightning's fallback)."""
    return any(loaders.get(key) is None and provides(module, key) for key in stage_def(chart, stage).loaders)


def preemption_signals(environ: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """SIGTERM always; under SLURM also its requeue signal (SIGUSR1, from ``sbatch --signal=USR1@90``)."""
    requeue = SLURMEnvironment.requeue_signal
    if SLURMEnvironment.detect(environ) and requeue is not None:
        return (int(signal.SIGTERM), int(requeue))
    return (int(signal.SIGTERM),)


@attrs.define
class Session:
    """Runs one stage for the trainer.

    ``run_dir`` is the trainer's run directory from an earlier stage (``""``: none yet);
    ``restore_checks`` check a checkpoint's state for the directory a resumed fit continues
    in (the listeners'). During fit the preemption signals and the first Ctrl-C save and stop.
    """

    runtime: Runtime
    config: TrainerConfig
    hardware: HardwareSlot
    root: Path
    run_dir: str
    seed: int | None
    checkpoint_io: TorchCheckpointIO = attrs.field(factory=lambda: TorchCheckpointIO(background=True))
    preempt_signals: tuple[int, ...] = attrs.field(factory=preemption_signals)
    restore_checks: tuple[Callable[[TrainerState, str], TrainerState], ...] = ()
    loggers: tuple[Any, ...] = ()
    callbacks: tuple[Any, ...] = ()
    listeners: tuple[Any, ...] = ()
    #: the listeners and callbacks as passed to the Trainer, in that order
    given: tuple[Any, ...] = ()
    #: ``Trainer(detect_anomaly=True)``: a fit runs under torch's autograd anomaly detection (in every process)
    detect_anomaly: bool = False
    #: the optimizers and LR schedulers the stage's run configured (read after it, as Lightning's trainer offers them)
    optimizers: list[Any] = attrs.field(factory=list)
    schedulers: list[Any] = attrs.field(factory=list)
    #: a fit's run kept for ``Trainer.save_checkpoint`` after it, or why it could not be (``None``: no fit ran)
    fitted: FinishedFit | str | None = None
    #: the run, kept to be read after its stage as it ended (``None``: over several processes, or none ran)
    ended: Run | None = None
    #: a fit's training loader was opened before it in an isolated RNG (:attr:`RunPlan.train_opened`)
    train_opened: bool = False

    def run(
        self,
        stage: str,
        module: Any,
        loaders: Mapping[str, Iterable[Any] | None],
        ckpt_path: Any,
        datamodule: Any = None,
        return_predictions: bool = True,
    ) -> Run:
        """Run ``stage`` of ``module`` over ``loaders`` (or ``datamodule``'s) through the chart; return the run."""
        plan = RunPlan(
            stage=stage,
            config=self.config,
            loaders=dict(loaders),
            run_dir=self.run_dir,
            root=str(self.root),
            seed=self.seed if stage == "fit" else None,
            ckpt_path=ckpt_path,
            datamodule=datamodule,
            module_loaders=datamodule is None and module_gives_loaders(module, self.runtime.chart, stage, loaders),
            return_predictions=return_predictions,
            train_opened=self.train_opened and stage == "fit",
        )
        feeds = {
            name: Feed(loader) for key, given in loaders.items() for name, loader in split_loaders(key, given).items()
        }
        run = Run(
            plan=plan,
            module=module,
            feeds=feeds,
            slots={
                HardwareSlot: self.hardware,
                SignalsSlot: SignalsSlot(
                    PreemptionFlag((*self.preempt_signals, int(signal.SIGINT)) if stage == "fit" else ())
                ),
                CheckpointSlot: CheckpointSlot(
                    io=self.checkpoint_io, restore_checks=self.restore_checks, bus=self.runtime.bus
                ),
                CallbacksSlot: CallbacksSlot(
                    self.callbacks, self.loggers, self.listeners, given=self.given, trained_through=self._refit(stage)
                ),
                EvalSlot: EvalSlot(),
                RngSlot: RngSlot(),
            },
        )
        try:
            # only turned on: detect_anomaly=False leaves torch's own setting (Lightning turns it off in its fit loop)
            anomaly = self.detect_anomaly and stage == "fit"
            # the evaluation loops turn gradients off and back on; a stage that failed inside one leaves them as found
            with (
                torch.autograd.set_detect_anomaly(True) if anomaly else contextlib.nullcontext(),
                torch.set_grad_enabled(torch.is_grad_enabled()),
            ):
                self.runtime.run(stage, run)
        finally:  # the chart's teardown releases it; this covers a teardown that failed before it could
            self.optimizers, self.schedulers = list(run.optimizers), list(run.schedulers)
            release_run_dir(run)
            state, strategy = self.runtime.state, self.hardware.strategy
            self.ended = keep_ended(run, state, strategy)
            if stage == "fit":
                self.fitted = keep_finished(self.ended, state, strategy)
            bus = self.runtime.bus  # a replay-to follower whose target the stage never reached
            if any(s.startswith(f"{FOLLOW_SOURCE}.") for s in bus.observer_sources()):
                bus.remove_sources({FOLLOW_SOURCE})
        return run

    def _refit(self, stage: str) -> int:
        """A fit after a fit that finished: the epoch whose training has ended already (-1: none)."""
        state = self.runtime.state
        finished = stage == "fit" and state.stage == "fit" and state.status == "finished"
        return state.progress.epoch if finished and state.progress.train_batches > 0 else -1

    def fit(
        self, module: Any, train: Iterable[Any] | None, val: Any, ckpt_path: Any, datamodule: Any = None
    ) -> dict[str, float]:
        self.run("fit", module, {"train": train, "val": val}, ckpt_path, datamodule)
        return dict(self.runtime.state.metrics)

    def evaluate(
        self,
        stage: str,
        module: Any,
        loader: Any,
        ckpt_path: Any,
        datamodule: Any = None,
        return_predictions: bool = True,
    ) -> Any:
        """Predictions (a list per loader when there are several; ``None`` when not kept), or metrics per loader."""
        key = stage_def(self.runtime.chart, stage).loaders[0]
        run = self.run(stage, module, {key: loader}, ckpt_path, datamodule, return_predictions)
        if stage == "predict":  # handed over: the run kept for reading after the call does not hold them too
            predictions, run.predictions = run.predictions, []
            return predictions if return_predictions else None
        state = self.runtime.state  # Lightning's return value: what went to the loggers (state.to_loggers)
        results = [{k: v for k, v in r.items() if state.to_loggers.get(k, True)} for r in state.loader_results]
        results += [{} for _ in range(loader_count(run.feeds, key) - len(results))]
        return results
