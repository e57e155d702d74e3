"""The module's Lightning hooks as chart actions, and what the module may see of the run.

Each hook is an action named after it (``module.on_train_epoch_end``); the evaluation
loops' hooks are ``module.on_eval_*``, resolved by the loop's ``with: {step: ...}``
(``validation_step`` -> ``on_validation_*``). An action is bound once per stage; when the
module does not define the hook it is bound to ``NOOP``, which the runtime leaves out, so an
unused hook costs nothing. A hook may ``self.log`` (Lightning's per-hook defaults) and
return updates.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from interlock.connectors import callbacks
from interlock.connectors.data import loader_count
from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.lightning_state import TrainerFn
from interlock.connectors.metrics import batch_size
from interlock.connectors.optim import accumulate_factor, accumulation, batch_end_outputs_of
from interlock.core.errors import ChartEvent
from interlock.core.hooks import own_hook
from interlock.core.logging import take
from interlock.core.module import ModuleView, overrides
from interlock.core.registry import NOOP, Action, Registry
from interlock.core.run import Run
from interlock.core.slots import CallbacksSlot, DataSlot, OptimSlot
from interlock.core.updates import Update, as_updates

__all__ = ["HOOKS", "check_hook_names", "register"]

_TRAIN = (
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_train_epoch_start",
    "on_train_epoch_end", "on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward",
    "on_before_optimizer_step", "on_before_zero_grad",
)  # fmt: skip
_EVAL = ("start", "epoch_start", "batch_start", "batch_end", "epoch_end", "end")
#: Every hook interlock calls on a module (Lightning 2.6.6's ModelHooks names).
HOOKS = (
    *_TRAIN,
    *(f"on_{loop}_{what}" for loop in ("validation", "test", "predict") for what in _EVAL),
    "on_save_checkpoint",
    "on_load_checkpoint",
)
#: Methods of Lightning's LightningModule that are not hooks but look like them.
_NOT_HOOKS = {"on_gpu", "on_validation_model_eval", "on_validation_model_train", "on_test_model_eval",
              "on_test_model_train", "on_validation_model_zero_grad", "on_before_batch_transfer",
              "on_after_batch_transfer"}  # fmt: skip


def check_hook_names(module: Any) -> None:
    """Warn about methods named like a hook that is not one, naming the nearest real hook."""
    for name in dir(type(module)):
        if not name.startswith("on_") or name in HOOKS or name in _NOT_HOOKS:
            continue
        if not callable(getattr(type(module), name, None)):
            continue
        words = sorted(name.split("_"))  # the same words reordered (on_validation_end_epoch) first, then difflib
        near = [h for h in HOOKS if sorted(h.split("_")) == words] or difflib.get_close_matches(name, HOOKS, 1, 0.75)
        if near:
            warnings.warn(
                f"{type(module).__name__}.{name} looks like a hook but is not one, so it is never called; "
                f"did you mean {near[0]}?",
                UserWarning,
                stacklevel=2,
            )


def _ended_epoch(run: Run) -> int:
    """The epoch whose training has ended (the callbacks' slot's ``trained_through``; -1 without one or before)."""
    slot = run.slots.get(CallbacksSlot)
    return slot.trained_through if slot is not None else -1


def _eval_loop(params: Mapping[str, Any], action: str) -> str:
    step = str(params.get("step", ""))
    if not step.endswith("_step"):
        raise KeyError(f"{action} needs `with: {{step: validation_step|test_step|predict_step}}` on a state above it")
    return step.removesuffix("_step")


def _module_call(
    run: Run, hook: str, loop: str, suffix: Callable[[], str] | None = None
) -> Callable[..., list[Update]] | None:
    """``call(*args, **kwargs)`` of the module's ``hook`` returning its updates; ``None`` when it has none.

    ``suffix()`` ends the names of the step-level values it logs (an evaluation loader's ``/dataloader_idx_N``).
    """
    module = run.module
    if own_hook(module, hook) is None:  # neither written nor inherited from a class that wrote it
        return None
    method = getattr(module, hook)
    mdict = module.__dict__
    train = loop == "train"  # its step-level values also go to the loggers' step rows
    step = run.step
    shown = callbacks.view(run) if callbacks.shows_trainer(module) else None
    writers, who = run.slot(CallbacksSlot).writers, f"{type(module).__name__}.{hook}"

    def call(*args: Any, **kwargs: Any) -> list[Update]:
        if shown is None:
            out = method(*args, **kwargs)
        else:  # what a LightningModule writes to self.trainer in the hook (should_stop, save_checkpoint)
            writers.append(who)
            callbacks.ending(shown, hook)
            try:
                out = method(*args, **kwargs)
            finally:
                writers.pop()
                callbacks.ending(shown, None)
        skip = hook == "on_train_batch_start" and type(out) is int and out == -1
        updates = [] if skip else as_updates(out, f"{type(module).__name__}.{hook}")
        logs = mdict.get("_interlock_logs")
        if logs:
            sink, tail = step.logged if train else None, suffix() if suffix is not None else ""
            updates.extend(take(logs, hook, loop, lambda: batch_size(step.batch) or 1, sink, tail))
        if shown is not None:
            updates.extend(shown.take_updates())
        if skip:  # Lightning's -1: the rest of the epoch (and its validation) is skipped; the chart says where to
            raise ChartEvent("skip_epoch", f"{type(module).__name__}.on_train_batch_start returned -1", updates)
        return updates

    return call


def hook_calls(
    run: Run, hook: str, loop: str, suffix: Callable[[], str] | None = None
) -> list[Callable[..., list[Update]]]:
    """Who runs ``hook``, in Lightning's order: the callbacks, then the module.

    ``on_train_epoch_end`` runs the monitoring callbacks (``EarlyStopping``, ``ModelCheckpoint``)
    after the module, so they see what it logged there. The callbacks' ``on_train_batch_end`` runs
    at the ``fit.train.batch.end`` event instead (:func:`~interlock.connectors.callbacks.batch_end_handler`).
    """
    epoch_end = hook == "on_train_epoch_end"
    others = False if epoch_end else None  # at the epoch end, the monitoring callbacks run after the module
    parts = (
        None if hook == "on_train_batch_end" else callbacks.caller(run, hook, loop, others, suffix),
        _module_call(run, hook, loop, suffix),
        callbacks.caller(run, hook, loop, True) if epoch_end else None,
    )
    return [p for p in parts if p is not None]


def _bind_hook(
    run: Run,
    hook: str,
    args: Callable[[], tuple[Any, ...]],
    loop: str,
    each_optimizer: bool,
    suffix: Callable[[], str] | None = None,
) -> Action:
    parts = hook_calls(run, hook, loop, suffix)
    if not parts:
        return NOOP
    if each_optimizer:  # per optimizer: the callbacks, then the module (Lightning)

        def per_optimizer() -> list[Update]:
            return [u for optimizer in run.optimizers for part in parts for u in part(optimizer)]

        return per_optimizer
    # Lightning passes the stage by keyword; a LightningModule's run passes Lightning's TrainerFn (a str: "fit", ...)
    stage = TrainerFn(run.stage) if callbacks.shows_trainer(run.module) else run.stage
    if hook == "teardown":  # only for a stage that ended well (none after a failure)
        return lambda: [] if run.error is not None else [u for part in parts for u in part(stage=stage)]
    if hook == "setup":
        return lambda: [u for part in parts for u in part(stage=stage)]
    if len(parts) == 1:
        only = parts[0]
        return lambda: only(*args())

    def all_parts() -> list[Update]:
        given = args()
        return [u for part in parts for u in part(*given)]

    return all_parts


def register(reg: Registry) -> None:
    """``module.<hook>`` for the training hooks, ``module.on_eval_*`` for the evaluation loops', ``module.attach``."""

    def args_of(run: Run, hook: str) -> Callable[[], tuple[Any, ...]]:
        step = run.step
        if hook.endswith("batch_start"):
            return lambda: (step.batch, step.index)
        if hook == "on_train_batch_end":  # Lightning's outputs: a dict, its loss detached (and divided)
            outputs = batch_end_outputs_of(run)
            return lambda: (outputs(), step.batch, step.index)
        if hook.endswith("batch_end"):
            return lambda: (step.outputs, step.batch, step.index)
        if hook == "on_before_backward":  # Lightning's: the loss divided by the accumulation factor
            factor = accumulate_factor(run)

            def divided() -> tuple[Any, ...]:
                n, loss = factor(), step.loss
                return (loss / n if n > 1 and loss is not None else loss,)

            return divided
        return tuple

    for hook in _TRAIN:

        def bind(run: Run, params: Mapping[str, Any], hook: str = hook) -> Action:
            each = hook in ("on_before_optimizer_step", "on_before_zero_grad")
            action = _bind_hook(run, hook, args_of(run, hook), "train", each)
            if hook == "on_train_end" and run.slots.get(CallbacksSlot) is not None:
                # from here on current_epoch counts the last epoch as done (the module's and the view's, Lightning's)
                slot, inner = run.slot(CallbacksSlot), action

                def ended() -> Any:
                    slot.trained_through = run.counters.epoch
                    return None if inner is NOOP else inner()

                return ended
            if action is NOOP:
                return action
            if hook in ("on_before_backward", "on_after_backward"):  # no backward for a step that returned None
                step, backward_hook = run.step, action
                return lambda: None if step.loss is None else backward_hook()
            scheduled = accumulation(run) if hook == "on_before_zero_grad" else None
            if scheduled is not None:
                step, inner = run.step, action
                return lambda: inner() if step.index % scheduled() == 0 else None
            if hook == "on_before_zero_grad" and run.config.accumulate_grad_batches > 1:
                every, step, inner = run.config.accumulate_grad_batches, run.step, action
                return lambda: inner() if step.index % every == 0 else None
            return action

        bind.__doc__ = f"Call the callbacks' and the module's {hook} (a no-op when none has it)."
        reg.action(f"module.{hook}")(bind)

    for what in _EVAL:

        def bind_eval(run: Run, params: Mapping[str, Any], what: str = what) -> Action:
            loop = _eval_loop(params, f"module.on_eval_{what}")
            hook = f"on_{loop}_{what}"
            args, suffix = args_of(run, hook), None
            feeds = run.slot(DataSlot).feeds  # bound once set-up has made the loaders (a data module's too)
            if what.startswith("batch_") and loader_count(feeds, str(params.get("data", loop))) > 1:
                plain, counters = args, run.counters  # several loaders: Lightning adds dataloader_idx

                def args() -> tuple[Any, ...]:
                    return (*plain(), counters.eval_loader)

                def suffix() -> str:  # and ends the step-level names the hook logs with it
                    return f"/dataloader_idx_{counters.eval_loader}"

            return _bind_hook(run, hook, args, "eval", False, suffix)

        bind_eval.__doc__ = (
            f"Call the callbacks' and the module's on_<loop>_{what} (on_validation_{what}, ...; "
            "a no-op when none has it)."
        )
        reg.action(f"module.on_eval_{what}", reads=("data",))(bind_eval)

    @reg.action("module.configure_model")
    def configure_model(run: Run, params: Mapping[str, Any]) -> Action:
        """The module's ``configure_model()`` after ``setup``, before the device move and the optimizers (Lightning's).

        Called at every stage's set-up, as in Lightning: make it idempotent (build only what is missing). A module
        that still defines Lightning's deprecated ``configure_sharded_model()`` instead gets Lightning's warning, and
        that is called (defining both is refused at set-up: ``loops.stage.check_module``).
        """
        module: Any = run.module
        name = type(module).__name__
        if callable(getattr(type(module), "configure_sharded_model", None)):
            warnings.warn(
                f"You have overridden `{name}.configure_sharded_model` which is deprecated. Please override the "
                "`configure_model` hook instead (Lightning's warning; interlock calls it where configure_model runs)",
                DeprecationWarning,
                stacklevel=2,
            )
            return lambda: as_updates(module.configure_sharded_model(), f"{name}.configure_sharded_model") or None
        if not overrides(module, "configure_model"):
            return NOOP
        return lambda: as_updates(module.configure_model(), f"{name}.configure_model") or None

    for hook in ("on_sanity_check_start", "on_sanity_check_end"):

        def bind_sanity(run: Run, params: Mapping[str, Any], hook: str = hook) -> Action:
            if not run.callbacks and not callbacks.shows_trainer(run.module):
                return NOOP  # nobody reads the view's sanity_checking
            call = callbacks.caller(run, hook, "eval")
            starting, slot = hook.endswith("start"), run.slot(CallbacksSlot)

            def act() -> list[Update] | None:
                slot.sanity = True  # the view's sanity_checking holds from one hook to the other
                try:
                    return None if call is None else call()
                finally:
                    slot.sanity = starting

            return act

        bind_sanity.__doc__ = f"Call the callbacks' {hook} (Lightning has no module hook for it)."
        reg.action(f"callbacks.{hook}")(bind_sanity)

    @reg.action("callbacks.on_exception")
    def on_exception(run: Run, params: Mapping[str, Any]) -> Action:
        """Call the callbacks' on_exception with the exception that is ending the stage (none: nothing)."""
        call = callbacks.caller(run, "on_exception", "train")
        if call is None:
            return NOOP
        return lambda: call(run.error) if run.error is not None else None

    @reg.action("callbacks.training_ended")
    def training_ended(run: Run, params: Mapping[str, Any]) -> Action:
        """The fit trains nothing: ``current_epoch`` counts the last epoch as done from here (as after on_train_end)."""
        slot = run.slots.get(CallbacksSlot)
        if slot is None:
            return NOOP

        def act() -> None:
            slot.trained_through = run.counters.epoch

        return act

    @reg.action("callbacks.flush")
    def flush(run: Run, params: Mapping[str, Any]) -> Action:
        """Apply what callbacks asked in hooks run inside a manual training_step (backward, optimizer step)."""
        if getattr(run.module, "automatic_optimization", True):
            return NOOP
        hooked = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")
        if not run.callbacks and not any(own_hook(run.module, h) for h in hooked):
            return NOOP
        return lambda: callbacks.view(run).take_updates()

    @reg.action("module.attach", reads=("hardware",))
    def attach(run: Run, params: Mapping[str, Any]) -> Action:
        """Show the module the stage's counters, optimizers and backward (not the trainer); warn on misnamed hooks.

        A data module with ``attach_trainer`` (``interlock.lightning.LightningDataModule``) gets the trainer view.
        """

        def act() -> None:
            module: Any = run.module
            check_hook_names(module)
            precision = run.slot(HardwareSlot).precision
            if hasattr(module, "attach"):
                strategy = run.slot(HardwareSlot).strategy
                backward = precision.backward
                if overrides(module, "backward"):  # manual_backward goes through the module's backward (Lightning's)

                    def backward(loss: Any, *args: Any, **kwargs: Any) -> None:
                        module.backward(precision.scale(loss), *args, **kwargs)

                backward, step = _manual_hooks(run, backward, precision.optimizer_step)
                view = ModuleView(
                    run.counters, lambda: run.slots.get(OptimSlot), backward, step,
                    global_rank=int(getattr(strategy, "global_rank", 0)),
                    local_rank=int(getattr(strategy, "local_rank", 0)),
                    world_size=int(getattr(strategy, "world_size", 1)),
                    loggers=run.loggers,
                    precision=precision.flag,
                    trained=lambda: run.stage != "fit" or _ended_epoch(run) == run.counters.epoch,
                    trainer=lambda: callbacks.view(run),
                )  # fmt: skip
                module.attach(view)
            dm = run.plan.datamodule  # a LightningDataModule's self.trainer (before its prepare_data and setup)
            if dm is not None and callable(getattr(dm, "attach_trainer", None)):
                dm.attach_trainer(lambda: callbacks.view(run))

        return act


def _manual_hooks(run: Run, backward: Callable[..., Any], step: Callable[..., Any]) -> tuple[Any, Any]:
    """Manual optimization's backward and optimizer step, calling the hooks around them as Lightning does.

    ``manual_backward`` runs on_before_backward and on_after_backward (callbacks, then the module);
    ``optimizer.step()`` runs on_before_optimizer_step. What those hooks log is taken with the step's
    own logs; what callbacks ask is applied after training_step (``callbacks.flush``).
    """
    before, after = hook_calls(run, "on_before_backward", "train"), hook_calls(run, "on_after_backward", "train")
    pre_step = hook_calls(run, "on_before_optimizer_step", "train")

    def keep(updates: list[Update]) -> None:
        if updates:
            callbacks.view(run).keep(updates)

    def manual_backward(loss: Any, *args: Any, **kwargs: Any) -> None:
        for part in before:
            keep(part(loss))
        backward(loss, *args, **kwargs)
        for part in after:
            keep(part())

    def optimizer_step(optimizer: Any, closure: Any = None) -> Any:
        for part in pre_step:
            keep(part(optimizer))
        return step(optimizer, closure)

    return (manual_backward if before or after else backward), (optimizer_step if pre_step else step)
