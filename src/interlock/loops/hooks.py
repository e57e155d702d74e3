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

from interlock.connectors.metrics import batch_size
from interlock.core.logging import take
from interlock.core.module import ModuleView, overrides
from interlock.core.registry import NOOP, Action, Registry
from interlock.core.run import Run
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


def _eval_loop(params: Mapping[str, Any], action: str) -> str:
    step = str(params.get("step", ""))
    if not step.endswith("_step"):
        raise KeyError(f"{action} needs `with: {{step: validation_step|test_step|predict_step}}` on a state above it")
    return step.removesuffix("_step")


def _bind_hook(run: Run, hook: str, args: Callable[[], tuple[Any, ...]], loop: str, each_optimizer: bool) -> Action:
    module = run.module
    fn = getattr(type(module), hook, None)
    if fn is None or not callable(fn):
        return NOOP
    method = getattr(module, hook)
    mdict = module.__dict__
    step = run.step

    def results(out: Any) -> list[Update]:
        updates = as_updates(out, f"{type(module).__name__}.{hook}")
        logs = mdict.get("_interlock_logs")
        if logs:
            updates.extend(take(logs, hook, loop, lambda: batch_size(step.batch)))
        return updates

    if each_optimizer:

        def per_optimizer() -> list[Update]:
            updates: list[Update] = []
            for optimizer in run.optimizers:
                updates.extend(results(method(optimizer)))
            return updates

        return per_optimizer
    if hook in ("setup", "teardown"):  # Lightning passes the stage by keyword
        return lambda: results(method(stage=run.stage))
    return lambda: results(method(*args()))


def register(reg: Registry) -> None:
    """``module.<hook>`` for the training hooks, ``module.on_eval_*`` for the evaluation loops', ``module.attach``."""

    def args_of(run: Run, hook: str) -> Callable[[], tuple[Any, ...]]:
        step = run.step
        if hook.endswith("batch_start"):
            return lambda: (step.batch, step.index)
        if hook.endswith("batch_end"):
            return lambda: (step.outputs, step.batch, step.index)
        if hook == "on_before_backward":
            return lambda: (step.loss,)
        return tuple

    for hook in _TRAIN:

        def bind(run: Run, params: Mapping[str, Any], hook: str = hook) -> Action:
            each = hook in ("on_before_optimizer_step", "on_before_zero_grad")
            action = _bind_hook(run, hook, args_of(run, hook), "train", each)
            if hook == "on_before_zero_grad" and action is not NOOP and run.config.accumulate_grad_batches > 1:
                every, step, inner = run.config.accumulate_grad_batches, run.step, action
                return lambda: inner() if step.index % every == 0 else None
            return action

        bind.__doc__ = f"Call the module's {hook} (a no-op when it has none)."
        reg.action(f"module.{hook}")(bind)

    for what in _EVAL:

        def bind_eval(run: Run, params: Mapping[str, Any], what: str = what) -> Action:
            hook = f"on_{_eval_loop(params, f'module.on_eval_{what}')}_{what}"
            return _bind_hook(run, hook, args_of(run, hook), "eval", False)

        bind_eval.__doc__ = f"Call the module's on_<loop>_{what} (on_validation_{what}, ...; a no-op when it has none)."
        reg.action(f"module.on_eval_{what}")(bind_eval)

    @reg.action("module.configure_model")
    def configure_model(run: Run, params: Mapping[str, Any]) -> Action:
        """The module's ``configure_model()`` after ``setup``, before the device move and the optimizers (Lightning's).

        Called at every stage's set-up, as in Lightning: make it idempotent (build only what is missing).
        """
        module: Any = run.module
        if not overrides(module, "configure_model"):
            return NOOP
        return lambda: as_updates(module.configure_model(), f"{type(module).__name__}.configure_model") or None

    @reg.action("module.attach")
    def attach(run: Run, params: Mapping[str, Any]) -> Action:
        """Show the module the stage's counters, optimizers and backward (not the trainer); warn on misnamed hooks."""

        def act() -> None:
            module: Any = run.module
            check_hook_names(module)
            precision = run.hardware.precision
            if hasattr(module, "attach"):
                strategy = run.hardware.strategy
                backward = precision.backward
                if overrides(module, "backward"):  # manual_backward goes through the module's backward (Lightning's)

                    def backward(loss: Any, *args: Any, **kwargs: Any) -> None:
                        module.backward(precision.scale(loss), *args, **kwargs)

                view = ModuleView(
                    run.counters, run.optimizers, run.schedulers, backward, precision.optimizer_step,
                    global_rank=int(getattr(strategy, "global_rank", 0)),
                    local_rank=int(getattr(strategy, "local_rank", 0)),
                    world_size=int(getattr(strategy, "world_size", 1)),
                    loggers=run.loggers,
                    precision=precision.flag,
                )  # fmt: skip
                module.attach(view)

        return act
