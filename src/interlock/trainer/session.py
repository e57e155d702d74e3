"""One call of fit/validate/test/predict: build the run's objects, restore, run the stage.

The trainer facade delegates here. This module wires connectors into a
:class:`~interlock.loops.context.RunContext`, resolves ``ckpt_path``, and gives
the runtime its effect handlers (checkpoint writes, learning-rate and optimizer
changes). Everything the trainer *knows* still lives only in the runtime's state.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from interlock.connectors import checkpoint as ckpt_connector
from interlock.connectors.data import EpochData, prepare_loader
from interlock.connectors.hardware import Hardware
from interlock.connectors.metrics import scalars
from interlock.connectors.optim import configure_optimizers
from interlock.connectors.rng import seed_everything
from interlock.connectors.signals import PreemptionFlag
from interlock.core.config import TrainerConfig
from interlock.core.errors import CheckpointError
from interlock.core.module import Module
from interlock.core.state import TrainerState
from interlock.core.updates import ReplaceOptimizer, RestoreState, SaveCheckpoint, SetLearningRate
from interlock.loops.context import RunContext
from interlock.loops.evaluation import run_eval
from interlock.loops.fit import run_fit
from interlock.loops.stage import run_stage
from interlock.plugins.checkpoint_io import TorchCheckpointIO
from interlock.plugins.environments import SLURMEnvironment
from interlock.trainer.runtime import Runtime

__all__ = ["Session", "resolve_ckpt_path"]


def preemption_signals(environ: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """SIGTERM always; under SLURM also its requeue signal (SIGUSR1, from ``sbatch --signal=USR1@90``)."""
    if SLURMEnvironment.detect(environ):
        return (signal.SIGTERM, SLURMEnvironment.requeue_signal)
    return (signal.SIGTERM,)


def resolve_ckpt_path(ckpt_path: str | os.PathLike[str], root: Path) -> Path:
    """``"last"`` is the newest ``last.ckpt`` under ``root``; anything else is a path."""
    if str(ckpt_path) == "last":
        found = sorted(root.glob("**/last.ckpt"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise CheckpointError(f"ckpt_path='last' but there is no last.ckpt under {root}; pass a checkpoint path")
        return found[-1]
    return Path(ckpt_path)


@attrs.define
class Session:
    """Runs one stage for the trainer."""

    runtime: Runtime
    config: TrainerConfig
    hardware: Hardware
    root: Path
    run_dir: Path
    seed: int | None
    checkpoint_io: TorchCheckpointIO = attrs.field(factory=lambda: TorchCheckpointIO(background=True))
    preempt_signals: tuple[int, ...] = attrs.field(factory=preemption_signals)
    _loaders: dict[str, Iterable[Any] | None] = attrs.field(factory=dict, init=False)

    def context(self, module: Module, loaders: dict[str, Iterable[Any] | None]) -> RunContext:
        hw = self.hardware
        device = hw.device
        ctx = RunContext(module=module, config=self.config, precision=hw.precision, device=device)
        if device.type != "cpu":
            ctx.move = lambda batch: hw.accelerator.move_to_device(batch, device)
        self._loaders = loaders
        return ctx

    def _setup_module(self, ctx: RunContext, fit: bool) -> None:
        """Device, precision, strategy wrapping, data sharding, then optimizers (in that order)."""
        hw, strategy = self.hardware, self.hardware.strategy
        hw.accelerator.setup_device(ctx.device)
        strategy.setup_environment(ctx.device, hw.accelerator.default_backend())
        ctx.module = hw.precision.convert_module(ctx.module.to(ctx.device))
        dist = strategy.setup_module(ctx.module, ctx.device)
        ctx.steps, ctx.reduce_metrics_fn, ctx.agree = dist.steps, dist.reduce_metrics, dist.agree
        ctx.vote = dist.vote
        for name, loader in self._loaders.items():
            if loader is not None:
                ctx.data[name] = EpochData(prepare_loader(loader, dist.world_size, dist.rank))
        if fit:
            ctx.optimizers, ctx.schedulers = configure_optimizers(ctx.module.configure_optimizers())
            self.runtime.effects[SetLearningRate] = lambda u: _set_lr(ctx, u)
            self.runtime.effects[ReplaceOptimizer] = lambda u: _replace_optimizer(ctx, u)

    def _load(self, ckpt_path: Any, ctx: RunContext, resume: bool = False) -> dict[str, Any]:
        """Read and check a checkpoint (all of it when ``resume``); changes nothing."""
        path = resolve_ckpt_path(ckpt_path, self.root)
        ckpt = self.checkpoint_io.load_checkpoint(path, map_location=ctx.device)
        if resume:
            ckpt_connector.check_resumable(ckpt, ctx.module, ctx.optimizers, ctx.schedulers, str(path))
        else:
            ckpt_connector.check_fits(ckpt, ctx.module, str(path))
        return ckpt

    def _restore(self, ckpt: dict[str, Any], ctx: RunContext, source: str) -> None:
        state = ckpt_connector.restore(ckpt, ctx.module, ctx.optimizers, ctx.schedulers, source, self.hardware.strategy)
        self.hardware.precision.load_state_dict(ckpt.get("precision", {}))
        ctx.rng_to_restore = ckpt.get("rng")
        chart = state.chart
        if chart in ("finished", "fit.end") or chart not in self.runtime.chart.checkpoint_states:
            chart = "fit.train.epoch_end"
        now = self.runtime.state  # this process's rank, not the saving process's
        restored = attrs.evolve(
            state, chart=chart, stage="fit", status="running", global_rank=now.global_rank, world_size=now.world_size
        )
        self.runtime.apply(RestoreState(restored))

    def save(self, request: SaveCheckpoint, state: TrainerState, ctx: RunContext) -> None:
        """Write ``request.path``, then delete the files it replaces once it is in place."""
        self._write(request.path, state, ctx)
        if self.hardware.strategy.is_global_zero:
            for old in request.replaces:
                self.checkpoint_io.remove_checkpoint(old, replaced_by=request.path)

    def _write(self, path: str, state: TrainerState, ctx: RunContext) -> None:
        train = ctx.data.get("train")
        if train is not None and train.last_outputs is not None:  # the epoch's train metrics, if resumed mid-way
            state = attrs.evolve(state, data={**state.data, "last_train": scalars(train.last_outputs, "train")})
        payload = ckpt_connector.dump(
            state,
            ctx.module,
            ctx.optimizers,
            ctx.schedulers,
            self.hardware.precision.state_dict(),
            train.data_state() if train is not None else None,
            self.hardware.strategy,
        )
        strategy = self.hardware.strategy
        if strategy.is_global_zero:
            self.checkpoint_io.save_checkpoint(payload, path)
        strategy.barrier()

    def fit(self, module: Module, train: Iterable[Any], val: Iterable[Any] | None, ckpt_path: Any) -> dict[str, float]:
        ctx = self.context(module, {"train": train, "val": val})
        flag = PreemptionFlag(self.preempt_signals)
        ctx.preemption = flag
        ctx.request_preemption_save = lambda: self.runtime.apply(
            SaveCheckpoint(
                str(Path(self.runtime.state.run_dir or self.run_dir) / "checkpoints" / "last.ckpt"), "preempted"
            ),
            source="preemption",
        )
        self.runtime.save_checkpoint = lambda request, state: self.save(request, state, ctx)
        self.runtime.metric_mode = module.mode_of
        loaded: dict[str, Any] = {}

        def setup() -> None:
            _require(
                module, ["training_step", "configure_optimizers"] + (["validation_step"] if val is not None else [])
            )
            if self.seed is not None:
                seed_everything(self.seed)
            self.runtime.evolve(seed=self.seed, run_dir=str(self.run_dir))
            self._setup_module(ctx, fit=True)
            if self.hardware.strategy.is_global_zero:
                print(self.hardware.describe(), file=sys.stderr)
            strategy = self.hardware.strategy
            self.runtime.evolve(global_rank=strategy.global_rank, world_size=strategy.world_size)
            if ckpt_path is not None:
                loaded["ckpt"] = self._load(ckpt_path, ctx, resume=True)
                # a resumed run keeps writing where it started
                self.runtime.evolve(run_dir=loaded["ckpt"]["state"].get("run_dir") or str(self.run_dir))
            flag.install()

        def body() -> None:
            if loaded:
                self._restore(loaded["ckpt"], ctx, str(ckpt_path))
            run_fit(self.runtime, ctx)

        run_stage(self.runtime, "fit", setup, body, lambda: self._teardown(ctx, flag))
        return dict(self.runtime.state.metrics)

    def evaluate(self, stage: str, module: Module, loader: Iterable[Any], ckpt_path: Any) -> Any:
        key = {"validate": "val", "test": "test", "predict": "predict"}[stage]
        ctx = self.context(module, {key: loader})

        def setup() -> None:
            _require(module, [] if stage == "predict" else [f"{'validation' if stage == 'validate' else stage}_step"])
            self.runtime.evolve(run_dir=str(self.run_dir))
            self._setup_module(ctx, fit=False)
            strategy = self.hardware.strategy
            self.runtime.evolve(global_rank=strategy.global_rank, world_size=strategy.world_size)
            if ckpt_path is not None:
                ckpt = self._load(ckpt_path, ctx)
                self.hardware.strategy.load_model_state_dict(ctx.module, ckpt["model"])

        def body() -> Any:
            metrics = run_eval(self.runtime, ctx, stage)
            return ctx.predictions if stage == "predict" else metrics

        return run_stage(self.runtime, stage, setup, body, lambda: self._teardown(ctx, None))

    def _teardown(self, ctx: RunContext, flag: PreemptionFlag | None) -> None:
        try:
            self.checkpoint_io.wait()  # every checkpoint of the run is in place (or its error raised) here
        finally:
            if flag is not None:
                flag.uninstall()
            self.runtime.save_checkpoint = None
            self.runtime.effects.clear()
            self.hardware.strategy.teardown()
            self.hardware.accelerator.teardown()


def _require(module: Module, methods: list[str]) -> None:
    """Raise before anything runs when the module lacks a method the stage needs."""
    for name in methods:
        if getattr(type(module), name) is getattr(Module, name):
            getattr(module, name)(*([None, 0] if name.endswith("_step") else []))


def _set_lr(ctx: RunContext, update: SetLearningRate) -> None:
    _check_index(ctx, update.optimizer)
    for group in ctx.optimizers[update.optimizer].param_groups:
        group["lr"] = update.lr


def _replace_optimizer(ctx: RunContext, update: ReplaceOptimizer) -> None:
    _check_index(ctx, update.index)
    ctx.optimizers[update.index] = update.factory(ctx.module.parameters())


def _check_index(ctx: RunContext, index: int) -> None:
    if not 0 <= index < len(ctx.optimizers):
        raise IndexError(f"optimizer index {index} is out of range: the module has {len(ctx.optimizers)} optimizer(s)")
