"""A stage's own decisions and checks: which stage runs, how it ended, whether the module can run it.

``idle|finished|... -setup-> setup -<stage> [stage.is_<stage>]-> <stage>... -> teardown``; then
``teardown -failed [run.failed]-> failed``, ``-interrupted [run.interrupted]-> interrupted`` or
``-finish / run.finish-> finished``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from interlock.core.errors import Preempted
from interlock.core.module import Module
from interlock.core.registry import Action, Guard, Registry
from interlock.core.run import Run
from interlock.core.updates import SetStatus

__all__ = ["register", "require"]

#: The module methods each stage calls (``validation_step`` only when there is validation data).
REQUIRED = {"fit": ("training_step", "configure_optimizers"), "validate": ("validation_step",), "test": ("test_step",)}


def require(module: Any, stage: str, has_val: bool) -> None:
    """Raise before anything runs when the module lacks a method the stage needs."""
    names = list(REQUIRED.get(stage, ()))
    if stage == "fit" and has_val:
        names.append("validation_step")
    for name in names:
        fn = getattr(type(module), name, None)
        if fn is None:
            raise TypeError(f"{type(module).__name__} has no {name}(); {stage} needs it")
        if fn is getattr(Module, name, None):
            getattr(module, name)(*([None, 0] if name.endswith("_step") else []))


def register(reg: Registry) -> None:
    """``stage.is_*`` and ``run.*`` guards, ``run.finish`` and ``module.check``."""
    for stage in ("fit", "validate", "test", "predict"):

        def is_stage(run: Run, params: Mapping[str, Any], stage: str = stage) -> Guard:
            return lambda: run.stage == stage

        is_stage.__doc__ = f"The stage being run is {stage}."
        reg.guard(f"stage.is_{stage}")(is_stage)

    @reg.guard("run.failed")
    def failed(run: Run, params: Mapping[str, Any]) -> Guard:
        """An exception is ending the stage (not an interruption)."""
        return lambda: run.error is not None and not isinstance(run.error, KeyboardInterrupt | Preempted)

    @reg.guard("run.interrupted")
    def interrupted(run: Run, params: Mapping[str, Any]) -> Guard:
        """Ctrl-C or a preemption signal is ending the stage."""
        return lambda: isinstance(run.error, KeyboardInterrupt | Preempted)

    @reg.action("run.finish")
    def finish(run: Run, params: Mapping[str, Any]) -> Action:
        """The stage ran to its end."""
        return lambda: SetStatus("finished")

    @reg.action("module.check")
    def check(run: Run, params: Mapping[str, Any]) -> Action:
        """The module has every method this stage calls."""
        return lambda: require(run.module, run.stage, run.plan.loaders.get("val") is not None)

    @reg.payload_key("exception")
    def exception(run: Run) -> Any:
        """The exception ending the stage (``None`` when it ends well)."""
        return lambda: run.error

    @reg.payload_key("error")
    def error(run: Run) -> Any:
        """``"Type: message"`` of that exception."""
        return lambda: None if run.error is None else f"{type(run.error).__name__}: {run.error}"

    @reg.payload_key("where")
    def where(run: Run) -> Any:
        """The state it was raised in."""
        return lambda: run.failed_in or None
