"""Optimizers and LR schedulers from ``configure_optimizers``, as in Lightning."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.metrics import batch_end_outputs, loss_of
from interlock.core.hooks import own_hook
from interlock.core.logging import refuse_logs
from interlock.core.module import overrides, takes_batch_idx
from interlock.core.progress import Counters
from interlock.core.registry import NOOP, Action, Guard, Registry
from interlock.core.run import Run
from interlock.core.slots import Fill, OptimSlot, SlotError
from interlock.core.step import Facts
from interlock.core.updates import ReplaceOptimizer, SetDataPosition, SetLearningRate, SetStageFacts, Update
from interlock.plugins import grads

__all__ = [
    "Scheduler", "StepOptimizer", "configure_optimizers", "is_manual", "module_step_action", "register",
    "step_schedulers",
]  # fmt: skip


@attrs.define
class Scheduler:
    """An LR scheduler with how often it steps."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True
    #: what ``LearningRateMonitor`` logs its rate as (``None``: ``lr-<optimizer class>``), Lightning's ``name``
    name: str | None = None

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
        name = spec.get("name")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"lr_scheduler name={name!r}; must be a str (the name LearningRateMonitor logs)")
        made = Scheduler(spec["scheduler"], interval, frequency, spec.get("monitor"), strict, name)
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
    if result is None:  # Lightning warns and fits with a mock optimizer that never steps
        raise TypeError(
            "configure_optimizers() returned None: Lightning would only warn and run the fit with no optimizer; "
            "interlock refuses a fit that cannot train. Return an optimizer (torch.optim.SGD(self.parameters(), "
            "lr=0.0) leaves the weights as they are), or run trainer.validate() to run steps without training"
        )
    raise TypeError(
        f"configure_optimizers() returned {result!r}; return an optimizer, a list of optimizers, "
        "or a dict {'optimizer': opt, 'lr_scheduler': scheduler_or_dict}"
    )


def _step_scheduler(scheduler: Any, metric: Any) -> None:
    if metric is None:
        scheduler.step()
    else:
        scheduler.step(metric)


def step_schedulers(
    schedulers: list[Scheduler],
    interval: str,
    count: int,
    metrics: Mapping[str, float],
    stepper: Callable[[Any, Any], None] = _step_scheduler,
) -> None:
    """Step the schedulers of ``interval`` that are due at ``count`` (1-based: the epoch, or the batch in the epoch).

    A ``ReduceLROnPlateau`` steps with its monitored metric; when that is missing it raises
    (``strict``, the default) or warns and skips the step, as in Lightning. ``stepper(scheduler,
    metric)`` does the step (the module's ``lr_scheduler_step`` when it overrides it).
    """
    for s in schedulers:
        if s.interval != interval or count % s.frequency:
            continue
        if not s.reduce_on_plateau:
            stepper(s.scheduler, None)
            continue
        assert s.monitor is not None
        if s.monitor in metrics:
            stepper(s.scheduler, metrics[s.monitor])
            continue
        message = (
            f"ReduceLROnPlateau conditioned on metric {s.monitor!r}, which is not available; the metrics are "
            f"{sorted(metrics)}: return it from a step, or fix the 'monitor' key of the lr_scheduler dict"
        )
        if s.strict:
            raise KeyError(message)
        warnings.warn(f"{message}; strict=False: skipping the learning rate update", RuntimeWarning, stacklevel=2)


#: the module's hooks that replace a part of the optimizer step when it overrides them
_STEP_HOOKS = ("optimizer_step", "configure_gradient_clipping", "optimizer_zero_grad")


def _needs_closure(optimizer: torch.optim.Optimizer) -> bool:
    """The optimizer's ``step`` requires a closure (LBFGS): it re-evaluates the loss."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return closure is not None and closure.default is inspect.Parameter.empty


def _scheduler_stepper(module: Any, ahead: bool = False) -> Callable[[Any, Any], None]:
    """The module's ``lr_scheduler_step`` when it overrides it, else the default step.

    ``ahead``: the module sees ``global_step`` with this batch's step counted, as Lightning steps
    step-interval schedulers after counting it.
    """
    if not overrides(module, "lr_scheduler_step"):
        return _step_scheduler
    if not ahead:
        return module.lr_scheduler_step  # type: ignore[no-any-return]

    def step(scheduler: Any, metric: Any) -> None:
        view = module.__dict__.get("_interlock_view")
        if view is not None:
            view.ahead = 1
        try:
            module.lr_scheduler_step(scheduler, metric)
        finally:
            if view is not None:
                view.ahead = 0

    return step


class StepOptimizer:
    """The optimizer as the module's ``optimizer_step`` receives it (Lightning's ``LightningOptimizer``).

    ``step(closure)`` runs the closure, clips the gradients and steps through the precision plugin;
    everything else is the optimizer's own.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, step: Callable[[torch.optim.Optimizer, Any], Any]) -> None:
        self.optimizer, self._step = optimizer, step

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"optimizer.step() got {sorted(kwargs)}; interlock's optimizer step takes only closure=")
        return self._step(self.optimizer, closure)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)


class _Closure:
    """``optimizer_closure``: the loss of the step (computed, with backward, before the optimizer step).

    The first call returns it; another call (an optimizer that re-evaluates, such as LBFGS) zeroes
    the gradients and runs the training step and backward again.
    """

    def __init__(self, run: Run) -> None:
        self.run, self.calls = run, 0

    def __call__(self) -> Any:
        self.calls += 1
        run = self.run
        if self.calls == 1:
            return run.step.loss
        module: Any = run.module
        for optimizer in run.optimizers:
            optimizer.zero_grad()
        with torch.enable_grad():
            fn: Any = run.steps.get("training_step") or module.training_step
            fn = run.slot(HardwareSlot).precision.forward(fn, run.device.type)
            outputs = (
                fn(run.step.batch, run.step.index) if takes_batch_idx(module.training_step) else fn(run.step.batch)
            )
            module.__dict__.pop("_interlock_logs", None)  # a re-evaluation logs nothing (its step already did)
            loss = loss_of(outputs)
            backward = module.backward if overrides(module, "backward") else None
            run.slot(HardwareSlot).precision.backward(loss) if backward is None else backward(loss)
        return loss


def module_step_action(run: Run) -> Callable[[], None]:
    """The optimizer step with the module's ``optimizer_step``/``configure_gradient_clipping``/``optimizer_zero_grad``.

    Lightning's order: ``optimizer_step(epoch, batch_idx, optimizer, closure)``; its
    ``optimizer.step(closure)`` runs the closure, unscales (16-mixed) and clips (the module's
    ``configure_gradient_clipping``, or the Trainer's flags), then steps. The grads are zeroed after
    the step unless the module zeroes them itself (``optimizer_zero_grad``, before backward).
    """
    module: Any = run.module
    cfg, precision, step, counters = run.config, run.slot(HardwareSlot).precision, run.step, run.counters
    custom_clip = overrides(module, "configure_gradient_clipping")
    custom_step = overrides(module, "optimizer_step")
    zero_after = not overrides(module, "optimizer_zero_grad") and getattr(module, "zero_grad_after_step", True)
    by_norm = cfg.gradient_clip_algorithm == "norm"

    def clip(optimizer: torch.optim.Optimizer) -> None:
        if custom_clip or cfg.clip_val is not None:
            precision.unscale_gradients(optimizer)
        if custom_clip:
            # Lightning passes its Trainer's algorithm, None unless one was passed ("value" always was)
            passed = cfg.gradient_clip_val is not None or cfg.gradient_clip_algorithm != "norm"
            algorithm = cfg.gradient_clip_algorithm if passed else None
            module.configure_gradient_clipping(
                optimizer, gradient_clip_val=cfg.gradient_clip_val, gradient_clip_algorithm=algorithm
            )
        elif cfg.clip_val is not None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            if by_norm:
                torch.nn.utils.clip_grad_norm_(params, cfg.clip_val)
            else:
                torch.nn.utils.clip_grad_value_(params, cfg.clip_val)

    def optimizer_step(optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None) -> Any:
        def wrapped() -> Any:
            out = closure() if closure is not None else None
            clip(optimizer)
            return out

        if precision.uses_scaler:  # the scaler cannot re-evaluate a closure: run it first (Lightning's order)
            out = wrapped()
            precision.optimizer_step(optimizer)
            return out
        result = precision.optimizer_step(optimizer, wrapped)
        return result

    def act() -> None:
        for optimizer in run.optimizers:
            closure = _Closure(run)
            if custom_step:
                module.optimizer_step(counters.epoch, step.index, StepOptimizer(optimizer, optimizer_step), closure)
                if not closure.calls:
                    raise RuntimeError(
                        f"{type(module).__name__}.optimizer_step() did not run the closure: call "
                        "optimizer.step(closure=optimizer_closure) in it (Lightning raises too: 'The closure hasn't "
                        "been executed')"
                    )
            else:
                optimizer_step(optimizer, closure)
            if zero_after:
                grads.zero_grad(optimizer)

    return act


def closes_window(i: int, every: int, limit: int | None) -> bool:
    """Whether the ``i``-th batch of an epoch (1-based) closes its accumulation window of ``every``, or the epoch."""
    return every == 1 or i % every == 0 or (limit is not None and i >= limit)


def window_closed(run: Run) -> Callable[[], bool]:
    """Whether the training batch that ended last closed its accumulation window (the optimizer stepped there).

    Lightning's ``not _should_accumulate()`` at that batch's end: its index is a multiple of the
    (scheduled) factor, it was the epoch's last, or the data ran out with the window stepped.
    """
    counters, config = run.counters, run.config

    def closed() -> bool:
        facts = run.facts
        every = facts.accumulate_grad_batches or config.accumulate_grad_batches
        return closes_window(counters.batch_idx, every, facts.limits.get("train")) or bool(
            facts.data.get("window_stepped")
        )

    return closed


def is_manual(run: Run) -> bool:
    """The module optimizes itself (``automatic_optimization = False``)."""
    return getattr(run.module, "automatic_optimization", True) is False


def accumulation(run: Run) -> Callable[[], int] | None:
    """The accumulation factor read at each batch when a listener schedules it; ``None``: the Trainer's, fixed.

    A listener with ``schedules_accumulation`` (``GradientAccumulationScheduler``) returns
    ``SetAccumulation``; the state's factor then wins over ``accumulate_grad_batches`` (0: not set).
    """
    if not any(getattr(listener, "schedules_accumulation", False) for listener in run.listeners):
        return None
    fixed = run.config.accumulate_grad_batches
    return lambda: run.facts.accumulate_grad_batches or fixed


def accumulate_factor(run: Run) -> Callable[[], int]:
    """The accumulation factor of the batch in flight (scheduled by a listener, or the Trainer's)."""
    fixed = run.config.accumulate_grad_batches
    return accumulation(run) or (lambda: fixed)


def batch_end_outputs_of(run: Run) -> Callable[[], Any]:
    """What Lightning's ``on_train_batch_end`` gets as ``outputs`` for the batch in flight (``batch_end_outputs``)."""
    step, factor = run.step, accumulate_factor(run)
    manual = getattr(run.module, "automatic_optimization", True) is False
    return lambda: batch_end_outputs(step.outputs, manual, factor())


def _check_index(run: Run, index: int, what: str) -> None:
    if not run.optimizers:
        raise RuntimeError(f"{what} cannot be applied outside a fit (no optimizer yet)")
    if not 0 <= index < len(run.optimizers):
        raise IndexError(f"optimizer index {index} is out of range: the module has {len(run.optimizers)} optimizer(s)")


def register(reg: Registry) -> None:
    """``optim.*`` actions and guard, and the ``SetLearningRate`` / ``ReplaceOptimizer`` effects."""

    @reg.action("optim.configure", writes=("optim",))
    def configure(run: Run, params: Mapping[str, Any]) -> Action:
        """Build the optimizers and LR schedulers the module's configure_optimizers() returns (fills ``optim``)."""

        def act() -> list[Update]:
            module: Any = run.module
            optimizers, schedulers = configure_optimizers(module.configure_optimizers())
            refuse_logs(module, "configure_optimizers")
            if len(optimizers) > 1 and not is_manual(run):  # Lightning 2's rule: which would the step's loss step?
                raise RuntimeError(
                    f"{type(module).__name__}.configure_optimizers() returned {len(optimizers)} optimizers: training "
                    "with several optimizers needs manual optimization (as in Lightning): set "
                    "self.automatic_optimization = False and step them in training_step "
                    "(opt1, opt2 = self.optimizers()), or return one optimizer over all the parameters"
                )
            if is_manual(run):
                cfg = run.config
                scheduled = [x.key for x in run.listeners if getattr(x, "schedules_accumulation", False)]
                if scheduled:
                    raise ValueError(
                        f"{type(module).__name__} uses manual optimization (automatic_optimization = False), and "
                        f"{scheduled[0]} schedules gradient accumulation, which applies to automatic optimization "
                        "only (as in Lightning); remove the listener, or accumulate in training_step"
                    )
                flags = [f"accumulate_grad_batches={cfg.accumulate_grad_batches}"] * (cfg.accumulate_grad_batches != 1)
                flags += [f"gradient_clip_val={cfg.gradient_clip_val}"] * (cfg.clip_val is not None)
                if flags:
                    raise ValueError(
                        f"{type(module).__name__} uses manual optimization (automatic_optimization = False), so "
                        f"Trainer({', '.join(flags)}) does not apply (as in Lightning); remove it and "
                        "accumulate or clip in training_step (self.clip_gradients(opt, ...))"
                    )
            return [Fill(OptimSlot(optimizers, list(schedulers))), SetStageFacts(manual_optimization=is_manual(run))]

        return act

    @reg.guard("optim.manual")
    def manual(params: Mapping[str, Any]) -> Guard:
        """The module steps its optimizers itself in training_step (``automatic_optimization = False``)."""

        def manual_(facts: Facts) -> bool:
            return facts.state.manual_optimization

        return manual_

    @reg.guard("optim.step_due")
    def step_due(params: Mapping[str, Any]) -> Guard:
        """The batch closes an accumulation window (accumulate_grad_batches or a scheduled factor), or the epoch."""

        def due(facts: Facts) -> bool:
            every = facts.state.accumulate_grad_batches or facts.config.accumulate_grad_batches
            return every == 1 or closes_window(facts.progress.batch_idx + 1, every, facts.state.limits.get("train"))

        return due

    @reg.guard("optim.window_open")
    def window_open(params: Mapping[str, Any]) -> Guard:
        """The epoch's data ran out with batches accumulated since the last optimizer step, not stepped yet."""

        def open_(facts: Facts) -> bool:
            data = facts.state.data
            if facts.state.manual_optimization or not data.get("exhausted") or data.get("window_stepped"):
                return False
            every = facts.state.accumulate_grad_batches or facts.config.accumulate_grad_batches
            return facts.progress.batch_idx % every != 0

        return open_

    @reg.action("optim.close_window")
    def close_window(run: Run, params: Mapping[str, Any]) -> Action:
        """Note that the epoch's last, unfinished accumulation window stepped (``optim.window_open`` reads it)."""
        return lambda: SetDataPosition({"window_stepped": True})

    @reg.action("optim.step", reads=("optim", "hardware"))
    def step(run: Run, params: Mapping[str, Any]) -> Action:
        """Step every optimizer through the precision plugin (clipping first), zero the grads, step schedulers.

        The step-interval schedulers that are due step; at the epoch's last batch, the epoch-interval
        ones too (not ``ReduceLROnPlateau``: ``optim.step_epoch_schedulers``), as Lightning does. The
        module's ``optimizer_step`` / ``configure_gradient_clipping`` / ``optimizer_zero_grad`` /
        ``lr_scheduler_step`` are called in their place when it overrides them (Lightning's hooks).
        """
        cfg, batch, module, optim = run.config, run.step, run.module, run.slot(OptimSlot)
        schedulers = optim.schedulers
        custom = any(overrides(module, name) for name in _STEP_HOOKS)
        sched_step = _scheduler_stepper(module, ahead=True)
        precision = run.slot(HardwareSlot).precision
        if custom or any(_needs_closure(o) for o in optim.optimizers):
            stepper = module_step_action(run)
        else:
            zero = getattr(module, "zero_grad_after_step", True)
            stepper = precision.step_action(optim.optimizers, cfg.clip_val, cfg.gradient_clip_algorithm == "norm", zero)
            if precision.uses_scaler:  # a step that returned None made no gradient to unscale: Lightning skips it
                scaled = stepper

                def stepper() -> None:
                    if batch.loss is not None:
                        scaled()

        # a ReduceLROnPlateau steps after the batch's hooks and validation (optim.plateau_step)
        per_step = [s for s in schedulers if s.interval == "step" and not s.reduce_on_plateau]
        at_last = [s for s in schedulers if s.interval == "epoch" and not s.reduce_on_plateau]
        if not per_step and not at_last:  # the slot's list is never changed in place: a new one is bound again
            return stepper
        counters = run.counters

        def act() -> None:
            stepper()
            # Lightning counts the batch within the epoch for a step scheduler's frequency
            if per_step:
                step_schedulers(per_step, "step", batch.index + 1, run.facts.metrics, sched_step)
            if at_last:  # Lightning: at the epoch's last batch, before its on_train_batch_end and validation
                limit = run.facts.limits.get("train")
                if limit is not None and batch.index + 1 >= limit:
                    step_schedulers(at_last, "epoch", counters.epoch + 1, run.facts.metrics, sched_step)

        return act

    @reg.action("module.optimizer_zero_grad", reads=("optim",))
    def zero_grad(run: Run, params: Mapping[str, Any]) -> Action:
        """The module's ``optimizer_zero_grad`` before backward, at the first batch of each accumulation (Lightning's).

        Without an override it zeroes each optimizer's gradients there when the module keeps them past the
        step (``zero_grad_after_step = False``, as a ``LightningModule``); otherwise it is a no-op and the
        optimizer step zeroes them.
        """
        module = run.module
        custom = overrides(module, "optimizer_zero_grad")
        if is_manual(run) or not (custom or not getattr(module, "zero_grad_after_step", True)):
            return NOOP
        every, step, counters, scheduled = run.config.accumulate_grad_batches, run.step, run.counters, accumulation(run)
        optimizers = run.slot(OptimSlot).optimizers

        def act() -> None:
            if step.index % (every if scheduled is None else scheduled()) == 0:
                for optimizer in optimizers:
                    if custom:
                        module.optimizer_zero_grad(counters.epoch, step.index, optimizer)  # type: ignore[operator]
                    else:
                        grads.zero_grad(optimizer)  # Lightning's default optimizer_zero_grad: optimizer.zero_grad()

        return act

    @reg.action("module.zero_grad")
    def stage_zero_grad(run: Run, params: Mapping[str, Any]) -> Action:
        """Release the gradients a module kept past its last optimizer step, as each stage starts (Lightning's).

        Only for a module with ``zero_grad_after_step = False`` (a ``LightningModule``): Lightning calls
        ``zero_grad()`` at the start of every fit, validate, test and predict; a module whose gradients
        are zeroed after each step has none left.
        """
        module: Any = run.module
        if getattr(module, "zero_grad_after_step", True):
            return NOOP
        return lambda: module.zero_grad() and None

    @reg.action("module.on_validation_model_zero_grad")
    def val_zero_grad(run: Run, params: Mapping[str, Any]) -> Action:
        """Before validation inside fit, when no accumulation window is open: release the gradients (Lightning's).

        The module's ``on_validation_model_zero_grad`` when it overrides it, else ``module.zero_grad()``
        for a module that keeps its gradients past the optimizer step; nothing otherwise (they are freed).
        """
        module: Any = run.module
        custom = own_hook(module, "on_validation_model_zero_grad")
        if custom is None and getattr(module, "zero_grad_after_step", True):
            return NOOP
        release = (lambda: custom(module)) if custom is not None else module.zero_grad
        closed = window_closed(run)
        return lambda: release() if closed() else None

    @reg.action("optim.plateau_step", reads=("optim",))
    def step_plateau(run: Run, params: Mapping[str, Any]) -> Action:
        """Step the step-interval ``ReduceLROnPlateau`` schedulers once a batch that stepped has ended.

        Lightning's order: after the batch's ``on_train_batch_end`` and after the validation that
        runs at that batch, so a monitored validation metric is the new one. The chart runs this
        action where the next batch is fetched and on the ways from a batch (or its validation) to
        the epoch's end and to a preemption; it steps once per batch that stepped the optimizer: the
        batch it ran at is kept in ``state.data``, so a resume at the batch's end steps it as the
        uninterrupted run does.
        """
        schedulers = [s for s in run.slot(OptimSlot).schedulers if s.interval == "step" and s.reduce_on_plateau]
        if not schedulers or is_manual(run):  # under manual optimization training_step steps them (Lightning's)
            return NOOP
        counters, sched_step, closed = run.counters, _scheduler_stepper(run.module), window_closed(run)

        def act() -> Update | None:
            facts = run.facts
            i = counters.batch_idx  # the batches of this epoch so far: the one that ended is the i-th
            at = f"{counters.epoch}:{i}"
            if not i or not closed() or facts.data.get("plateau_stepped") == at:  # i == 0: the epoch's first fetch
                return None
            step_schedulers(schedulers, "step", i, facts.metrics, sched_step)
            return SetDataPosition({"plateau_stepped": at})

        return act

    @reg.action("optim.step_epoch_schedulers", reads=("optim",))
    def step_epoch(run: Run, params: Mapping[str, Any]) -> Action:
        """At the end of an epoch that ran to its last batch, step the ``ReduceLROnPlateau`` epoch schedulers.

        Lightning's rules: the other epoch schedulers stepped at the last batch (``optim.step``),
        except when the data ran out before its limit (a loader without a length), so that its last
        batch is known only now; an epoch that ``max_steps`` or a stop ended early steps none.
        """
        counters, schedulers = run.counters, run.slot(OptimSlot).schedulers
        if is_manual(run):  # under manual optimization training_step steps them (Lightning's)
            return NOOP
        plateau = [s for s in schedulers if s.interval == "epoch" and s.reduce_on_plateau]
        every = [s for s in schedulers if s.interval == "epoch"]
        if not every:
            return NOOP
        sched_step = _scheduler_stepper(run.module)

        def act() -> None:
            facts = run.facts
            limit = facts.limits.get("train")
            if facts.data.get("skipped") or (limit is not None and counters.batch_idx >= limit):
                due = plateau  # the others stepped at the last batch (or the skipped one: optim.skip_batch)
            elif facts.data.get("exhausted"):
                due = every  # the data ran out: its last batch was not known when it ran
            else:
                return  # max_steps or a stop ended the epoch early
            step_schedulers(due, "epoch", counters.epoch + 1, facts.metrics, sched_step)

        return act

    @reg.action("optim.skip_batch", reads=("optim",))
    def skip_batch(run: Run, params: Mapping[str, Any]) -> Action:
        """A batch ``on_train_batch_start`` skipped (-1) ends the epoch: the schedulers and gradients as Lightning's.

        The due step-interval and the epoch-interval schedulers step (not ``ReduceLROnPlateau``), and the
        gradients of an unfinished accumulation are dropped (Lightning zeroes them at the next window's start).
        """
        if is_manual(run):
            return NOOP
        optim, batch, counters = run.slot(OptimSlot), run.step, run.counters
        every, scheduled = run.config.accumulate_grad_batches, accumulation(run)
        plain = [s for s in optim.schedulers if not s.reduce_on_plateau]
        sched_step = _scheduler_stepper(run.module)

        def act() -> None:
            if batch.index % (every if scheduled is None else scheduled()):
                for optimizer in optim.optimizers:
                    optimizer.zero_grad()
            if plain:
                metrics = run.facts.metrics
                step_schedulers(plain, "step", batch.index + 1, metrics, sched_step)
                step_schedulers(plain, "epoch", counters.epoch + 1, metrics, sched_step)

        return act

    def count_manual(run: Run) -> Callable[[Counters], None]:
        """Count the steps a manual training_step recorded in the ``optim`` slot (global_step), and the batch."""
        optim = run.slots.get(OptimSlot)

        def op(c: Counters) -> None:
            if optim is None:
                raise SlotError("the 'manual' counter operation reads the 'optim' slot, which optim.configure fills")
            c.global_step += optim.manual_steps
            optim.manual_steps = 0
            c.batch_idx += 1
            c.train_batches += 1

        return op

    reg.counter("manual", count_manual, bind=True)

    @reg.effect(SetLearningRate)
    def set_lr(run: Run) -> Callable[[Any], None]:
        """Set the learning rate of every param group of one optimizer (or of one group)."""

        def apply(update: SetLearningRate) -> None:
            _check_index(run, update.optimizer, "SetLearningRate")
            groups = run.optimizers[update.optimizer].param_groups
            if update.group is not None and not 0 <= update.group < len(groups):
                raise IndexError(
                    f"SetLearningRate(group={update.group}) is out of range: optimizer {update.optimizer} has "
                    f"{len(groups)} param group(s)"
                )
            for group in groups if update.group is None else [groups[update.group]]:
                group["lr"] = update.lr

        return apply

    @reg.effect(ReplaceOptimizer)
    def replace(run: Run) -> Callable[[Any], None]:
        """Swap one optimizer for a new one over the module's parameters."""

        def apply(update: ReplaceOptimizer) -> None:
            _check_index(run, update.index, "ReplaceOptimizer")
            run.optimizers[update.index] = update.factory(run.module.parameters())

        return apply
