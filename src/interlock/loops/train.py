"""The training batch's own work: the module's step, and what an event of it carries.

Chart region ``fit.train.batch`` (the data, precision and optimizer actions are
their connectors')::

    fetch [data.fetch] -fetched-> step [module.training_step] -backward-> backward [precision.backward]
    backward -optimizer_step [optim.step_due]-> optimizer_step [optim.step] -stepped-> end
    backward -accumulate-> end
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from interlock.connectors.callbacks import module_writes
from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.metrics import logged_batch_size, loss_of
from interlock.core.logging import take
from interlock.core.module import takes_batch_idx
from interlock.core.registry import Action, Registry
from interlock.core.run import Run
from interlock.core.slots import DataSlot, DeviceSlot, DistSlot

__all__ = ["learning_rates", "register"]


def learning_rates(run: Run) -> tuple[tuple[Any, ...], ...]:
    """What ``LearningRateMonitor`` reads, per optimizer (the ``lr`` payload).

    Its class name, each param group's learning rate, its first scheduler's interval (``""``: none),
    each group's ``name`` (``None``: none), its schedulers as ``(position, name, interval)``, and each
    group's ``(momentum, weight_decay)`` (``betas[0]`` for an Adam-like optimizer; ``None`` when absent).
    """
    out = []
    for o in run.optimizers:
        mine = (s for s in enumerate(run.schedulers) if getattr(s[1].scheduler, "optimizer", None) is o)
        scheduled = tuple((i, s.name, s.interval) for i, s in mine)
        groups = o.param_groups
        rates = tuple(float(g["lr"]) for g in groups)
        interval = scheduled[0][2] if scheduled else ""
        betas = "betas" in o.defaults
        extra = tuple((g["betas"][0] if betas else g.get("momentum"), g.get("weight_decay")) for g in groups)
        out.append((type(o).__name__, rates, interval, tuple(g.get("name") for g in groups), scheduled, extra))
    return tuple(out)


def register(reg: Registry) -> None:
    """``module.warn_eval_modes``, ``module.training_step`` and the payload keys of training events."""

    @reg.action("module.warn_eval_modes")
    def warn_eval_modes(run: Run, params: Mapping[str, Any]) -> Action:
        """Warn, as Lightning does, when submodules are in eval mode as training starts; change nothing.

        The trainer never calls ``.train()``: the modes are the user's (a frozen BatchNorm backbone stays
        frozen), and each evaluation loop puts back every submodule's mode when it ends (``eval.close``).
        """
        module = run.module

        def act() -> None:
            frozen = [name for name, m in module.named_modules() if not m.training]
            if frozen:
                warnings.warn(
                    f"Found {len(frozen)} module(s) in eval mode at the start of training. This may lead to "
                    "unexpected behavior during training. If this is intentional, you can ignore this warning.",
                    UserWarning,
                    stacklevel=2,
                )

        return act

    @reg.action("module.training_step", reads=("data", "device", "dist", "hardware"))
    def training_step(run: Run, params: Mapping[str, Any]) -> Action:
        """Run ``training_step(batch, batch_idx)`` (through the strategy's wrapper and the precision's autocast)."""
        step, steps, precision = run.step, run.slot(DistSlot).steps, run.slot(HardwareSlot).precision
        wrap = None if precision.is_plain else precision.forward
        feed, device = run.slot(DataSlot).feeds.get("train"), run.slot(DeviceSlot).device.type
        mdict = run.module.__dict__  # what the module logs is buffered here (self.log)
        manual = getattr(run.module, "automatic_optimization", True) is False
        with_idx = takes_batch_idx(getattr(run.module, "training_step"))  # noqa: B009  # training_step(self, batch) gets the batch alone
        world = int(getattr(run.slot(HardwareSlot).strategy, "world_size", 1))

        def infer() -> int:
            return logged_batch_size(step.batch)

        def act() -> list[Any] | None:
            # the strategy's wrapper is looked up each time, never kept: teardown must be able to free it
            fn: Any = steps.get("training_step") or run.module.training_step
            if wrap is not None:
                fn = wrap(fn, device)
            outputs = fn(step.batch, step.index) if with_idx else fn(step.batch)
            step.outputs = outputs
            if feed is not None:
                feed.last_outputs = outputs
            step.loss = None if manual else outputs if type(outputs) is Tensor else _loss(outputs, world)
            logs = mdict.get("_interlock_logs")
            return take(logs, "training_step", "train", infer, step.logged) if logs else None

        return module_writes(run, act, f"{type(run.module).__name__}.training_step")

    @reg.payload_key("batch")
    def batch(run: Run) -> Any:
        """The batch in flight."""
        step = run.step
        return lambda: step.batch

    @reg.payload_key("batch_idx")
    def batch_idx(run: Run) -> Any:
        """Its index in the epoch (in the loop, for evaluation)."""
        step = run.step
        return lambda: step.index

    @reg.payload_key("outputs")
    def outputs(run: Run) -> Any:
        """What the step returned."""
        step = run.step
        return lambda: step.outputs

    @reg.payload_key("logged", lazy=True)
    def logged(run: Run) -> Any:
        """What the batch logged on step for the loggers (``self.log(..., logger=True)``), by logger name."""
        step = run.step
        return lambda: dict(step.logged)

    @reg.payload_key("lr", lazy=True)
    def lr(run: Run) -> Any:
        """The learning rate of each optimizer's param groups."""
        return lambda: learning_rates(run)


def _loss(outputs: Any, world_size: int) -> Tensor | None:
    """The loss of an automatic step's outputs; ``None`` (the step returned ``None``) skips its backward (Lightning's).

    Lightning refuses a skipped step with several processes (the others would wait in the gradient all-reduce).
    """
    if outputs is not None:
        return loss_of(outputs)
    if world_size > 1:
        raise RuntimeError(
            "training_step returned None, which skips the step's backward, and this run has "
            f"{world_size} processes: the others would wait for its gradients (Lightning refuses it too). "
            "Return the loss on every process (multiply it by 0 to make the step count for nothing)"
        )
    return None
