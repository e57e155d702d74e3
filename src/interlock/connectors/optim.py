"""Optimizers and LR schedulers from ``configure_optimizers``, as in Lightning."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from interlock.core.registry import Action, Guard, Registry
from interlock.core.run import Run
from interlock.core.updates import ReplaceOptimizer, SetLearningRate

__all__ = ["Scheduler", "configure_optimizers", "is_manual", "register", "step_schedulers"]


@attrs.define
class Scheduler:
    """An LR scheduler with how often it steps."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True

    @property
    def reduce_on_plateau(self) -> bool:
        """A ``ReduceLROnPlateau``: it steps with the monitored metric."""
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _scheduler(spec: Any) -> Scheduler:
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"scheduler", "interval", "frequency", "monitor", "name", "strict"}
        if "scheduler" not in spec or unknown:
            raise ValueError(
                f"lr_scheduler dict {dict(spec)!r} must have 'scheduler' and only "
                "'interval', 'frequency', 'monitor', 'name', 'strict'"
            )
        interval = spec.get("interval", "epoch")
        if interval not in ("epoch", "step"):
            raise ValueError(f"lr_scheduler interval={interval!r}; choose 'epoch' or 'step'")
        frequency = spec.get("frequency", 1)
        if not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"lr_scheduler frequency={frequency!r}; must be an int >= 1")
        strict = spec.get("strict", True)
        if not isinstance(strict, bool):
            raise ValueError(f"lr_scheduler strict={strict!r}; must be True or False")
        made = Scheduler(spec["scheduler"], interval, frequency, spec.get("monitor"), strict)
    elif not hasattr(spec, "step") or not hasattr(spec, "state_dict"):
        raise TypeError(f"lr_scheduler {spec!r} is not an LR scheduler (it needs step() and state_dict())")
    else:
        made = Scheduler(spec)
    if made.reduce_on_plateau and not made.monitor:
        raise ValueError(
            "configure_optimizers() returned a ReduceLROnPlateau without a monitor: it steps with a metric, so "
            'name one: {"optimizer": optimizer, "lr_scheduler": scheduler, "monitor": "val_loss"} '
            "(as Lightning requires)"
        )
    return made


def configure_optimizers(result: Any) -> tuple[list[torch.optim.Optimizer], list[Scheduler]]:
    """Normalise what ``configure_optimizers`` returned.

    Accepts an optimizer; a list/tuple of optimizers; a pair ``([optimizers], [schedulers])``;
    or a dict (or list of dicts) with ``optimizer`` and optional ``lr_scheduler``.
    """
    if isinstance(result, torch.optim.Optimizer):
        return [result], []
    if isinstance(result, Mapping):
        result = [result]
    if isinstance(result, Sequence) and len(result) == 2 and all(isinstance(x, Sequence) for x in result):
        opts, scheds = configure_optimizers(list(result[0]))[0], [_scheduler(s) for s in result[1]]
        return opts, scheds
    if isinstance(result, Sequence) and result:
        optimizers: list[torch.optim.Optimizer] = []
        schedulers: list[Scheduler] = []
        for item in result:
            if isinstance(item, torch.optim.Optimizer):
                optimizers.append(item)
            elif isinstance(item, Mapping) and isinstance(item.get("optimizer"), torch.optim.Optimizer):
                unknown = set(item) - {"optimizer", "lr_scheduler", "monitor"}
                if unknown:
                    raise ValueError(f"configure_optimizers dict has unknown keys {sorted(unknown)}")
                optimizers.append(item["optimizer"])
                if item.get("lr_scheduler") is not None:
                    sched = item["lr_scheduler"]
                    if item.get("monitor") and not isinstance(sched, Mapping):
                        sched = {"scheduler": sched, "monitor": item["monitor"]}
                    schedulers.append(_scheduler(sched))
            else:
                break
        else:
            return optimizers, schedulers
    raise TypeError(
        f"configure_optimizers() returned {result!r}; return an optimizer, a list of optimizers, "
        "or a dict {'optimizer': opt, 'lr_scheduler': scheduler_or_dict}"
    )


def step_schedulers(schedulers: list[Scheduler], interval: str, count: int, metrics: Mapping[str, float]) -> None:
    """Step the schedulers of ``interval`` that are due at ``count`` (1-based: the epoch, or the batch in the epoch).

    A ``ReduceLROnPlateau`` steps with its monitored metric; when that is missing it raises
    (``strict``, the default) or warns and skips the step, as in Lightning.
    """
    for s in schedulers:
        if s.interval != interval or count % s.frequency:
            continue
        if not s.reduce_on_plateau:
            s.scheduler.step()
            continue
        assert s.monitor is not None
        if s.monitor in metrics:
            s.scheduler.step(metrics[s.monitor])
            continue
        message = (
            f"ReduceLROnPlateau conditioned on metric {s.monitor!r}, which is not available; the metrics are "
            f"{sorted(metrics)}: return it from a step, or fix the 'monitor' key of the lr_scheduler dict"
        )
        if s.strict:
            raise KeyError(message)
        warnings.warn(f"{message}; strict=False: skipping the learning rate update", RuntimeWarning, stacklevel=2)


def is_manual(run: Run) -> bool:
    """The module optimizes itself (``automatic_optimization = False``)."""
    return getattr(run.module, "automatic_optimization", True) is False


def _check_index(run: Run, index: int, what: str) -> None:
    if not run.optimizers:
        raise RuntimeError(f"{what} cannot be applied outside a fit (no optimizer yet)")
    if not 0 <= index < len(run.optimizers):
        raise IndexError(f"optimizer index {index} is out of range: the module has {len(run.optimizers)} optimizer(s)")


def register(reg: Registry) -> None:
    """``optim.*`` actions and guard, and the ``SetLearningRate`` / ``ReplaceOptimizer`` effects."""

    @reg.action("optim.configure")
    def configure(run: Run, params: Mapping[str, Any]) -> Action:
        """Build the optimizers and LR schedulers the module's configure_optimizers() returns."""

        def act() -> None:
            module: Any = run.module
            run.optimizers[:], run.schedulers[:] = configure_optimizers(module.configure_optimizers())
            if is_manual(run):
                cfg = run.config
                if cfg.accumulate_grad_batches != 1 or cfg.gradient_clip_val is not None:
                    raise ValueError(
                        f"{type(module).__name__} uses manual optimization (automatic_optimization = False), so "
                        f"accumulate_grad_batches={cfg.accumulate_grad_batches} / gradient_clip_val="
                        f"{cfg.gradient_clip_val} do not apply (as in Lightning); leave them at their defaults and "
                        "accumulate or clip in training_step (self.clip_gradients(opt, ...))"
                    )

        return act

    @reg.guard("optim.manual")
    def manual(run: Run, params: Mapping[str, Any]) -> Guard:
        """The module steps its optimizers itself in training_step (``automatic_optimization = False``)."""
        value = is_manual(run)
        return lambda: value

    @reg.guard("optim.step_due")
    def step_due(run: Run, params: Mapping[str, Any]) -> Guard:
        """The batch closes an accumulation window (accumulate_grad_batches) or the epoch's last batch."""
        accumulate, step = run.config.accumulate_grad_batches, run.step
        if accumulate == 1:
            return lambda: True

        def due() -> bool:
            limit = run.feeds["train"].limit
            i = step.index + 1
            return i % accumulate == 0 or (limit is not None and i >= limit)

        return due

    @reg.action("optim.step")
    def step(run: Run, params: Mapping[str, Any]) -> Action:
        """Step every optimizer through the precision plugin (clipping first), zero the grads, step schedulers."""
        cfg, batch, schedulers = run.config, run.step, run.schedulers
        stepper = run.hardware.precision.step_action(
            run.optimizers, cfg.gradient_clip_val, cfg.gradient_clip_algorithm == "norm"
        )

        def act() -> None:
            stepper()
            if schedulers:  # Lightning counts the batch within the epoch for a step scheduler's frequency
                step_schedulers(schedulers, "step", batch.index + 1, run.facts.metrics)

        return act

    @reg.action("optim.step_epoch_schedulers")
    def step_epoch(run: Run, params: Mapping[str, Any]) -> Action:
        """Step the LR schedulers that step once an epoch."""
        counters = run.counters

        manual = is_manual(run)

        def act() -> None:
            if run.schedulers and not manual:  # under manual optimization training_step steps them (Lightning's)
                step_schedulers(run.schedulers, "epoch", counters.epoch + 1, run.facts.metrics)

        return act

    @reg.effect(SetLearningRate)
    def set_lr(run: Run) -> Callable[[Any], None]:
        """Set the learning rate of every param group of one optimizer."""

        def apply(update: SetLearningRate) -> None:
            _check_index(run, update.optimizer, "SetLearningRate")
            for group in run.optimizers[update.optimizer].param_groups:
                group["lr"] = update.lr

        return apply

    @reg.effect(ReplaceOptimizer)
    def replace(run: Run) -> Callable[[Any], None]:
        """Swap one optimizer for a new one over the module's parameters."""

        def apply(update: ReplaceOptimizer) -> None:
            _check_index(run, update.index, "ReplaceOptimizer")
            run.optimizers[update.index] = update.factory(run.module.parameters())

        return apply
