"""A stage's own decisions and checks: which stage runs, how it ended, whether the module can run it.

``idle|finished|... -setup-> setup -<stage> [stage.is_<stage>]-> <stage>... -> teardown``; then
``teardown -failed [run.failed]-> failed``, ``-interrupted [run.interrupted]-> interrupted`` or
``-finish / run.finish-> finished``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from interlock.core.module import Module, overrides
from interlock.core.registry import Action, Guard, Registry
from interlock.core.run import Run, StageDef, stage_def
from interlock.core.updates import SetStatus

__all__ = ["UNCALLED", "check_module", "register", "require"]

#: The module methods each stage calls (``validation_step`` only when there is validation data).


#: Lightning module methods interlock does not call, and what to write instead: defining one is an error at set-up.
UNCALLED = {
    "training_step_end": "removed in Lightning 2.0 (Lightning raises too): do the work in training_step",
    "validation_step_end": "removed in Lightning 2.0: do the work in validation_step",
    "test_step_end": "removed in Lightning 2.0: do the work in test_step",
    "training_epoch_end": "removed in Lightning 2.0: use on_train_epoch_end() and keep the outputs yourself",
    "validation_epoch_end": "removed in Lightning 2.0: use on_validation_epoch_end()",
    "test_epoch_end": "removed in Lightning 2.0: use on_test_epoch_end()",
}
_LIGHTNING_MODULES = {
    ("pytorch_lightning.core.module", "LightningModule"),
    ("lightning.pytorch.core.module", "LightningModule"),
}


def check_module(module: Any) -> None:
    """Refuse, at set-up, a Lightning ``LightningModule`` and any override interlock would never call."""
    for cls in type(module).__mro__:
        if (cls.__module__, cls.__name__) in _LIGHTNING_MODULES:
            raise TypeError(
                f"{type(module).__name__} subclasses {cls.__module__.split('.core')[0]}.LightningModule, whose "
                "self.log and hooks talk to a Lightning trainer, so interlock.Trainer cannot run it faithfully: "
                "subclass interlock.lightning.LightningModule instead (change the import; the rest stays)"
            )
    for name, instead in UNCALLED.items():
        if callable(getattr(type(module), name, None)):
            raise TypeError(f"{type(module).__name__}.{name}() is never called by interlock: {instead}")
    name = type(module).__name__
    if callable(getattr(type(module), "configure_sharded_model", None)) and overrides(module, "configure_model"):
        raise RuntimeError(  # Lightning's error and words
            f"Both `{name}.configure_model`, and `{name}.configure_sharded_model` are overridden. The latter is "
            "deprecated and it should be replaced with the former."
        )


def require(module: Any, stage: str, definition: StageDef, given: Mapping[str, Any]) -> None:
    """Raise before anything runs when the module lacks a method the stage needs (the chart's ``requires``).

    A method a given optional loader needs (``loader_steps``: ``{val: validation_step}``) is required too.
    """
    names = list(definition.requires)
    names += [step for key, step in definition.loader_steps.items() if given.get(key) is not None]
    for name in names:
        fn = getattr(type(module), name, None)
        if fn is None:
            raise TypeError(f"{type(module).__name__} has no {name}(); {stage} needs it")
        if fn is getattr(Module, name, None):
            getattr(module, name)(*([None, 0] if name.endswith("_step") else []))


def register(reg: Registry) -> None:
    """``stage.is_*`` and ``run.*`` guards, ``run.finish`` and ``module.check``."""
    for stage in ("fit", "validate", "test", "predict"):

        def is_stage(params: Mapping[str, Any], stage: str = stage) -> Guard:
            return lambda facts: facts.state.stage == stage

        is_stage.__doc__ = f"The stage being run is {stage}."
        reg.guard(f"stage.is_{stage}")(is_stage)

    @reg.guard("run.failed")
    def failed(params: Mapping[str, Any]) -> Guard:
        """An exception is ending the stage (not an interruption)."""
        return lambda facts: facts.state.status == "failed"

    @reg.guard("run.interrupted")
    def interrupted(params: Mapping[str, Any]) -> Guard:
        """Ctrl-C or a preemption signal is ending the stage."""
        return lambda facts: facts.state.status == "interrupted"

    @reg.action("run.finish")
    def finish(run: Run, params: Mapping[str, Any]) -> Action:
        """The stage ran to its end."""
        return lambda: SetStatus("finished")

    @reg.action("module.check")
    def check(run: Run, params: Mapping[str, Any]) -> Action:
        """The module is an interlock one, has every method this stage calls and no override interlock never calls."""

        def act() -> None:
            check_module(run.module)
            assert run.chart is not None
            require(run.module, run.stage, stage_def(run.chart, run.stage), run.plan.loaders)

        return act

    @reg.payload_key("exception")
    def exception(run: Run) -> Any:
        """The exception ending the stage (``None`` when it ends well)."""
        return lambda: run.error

    @reg.payload_key("error")
    def error(run: Run) -> Any:
        """``"Type: message"`` of that exception."""
        return lambda: run.facts.error or None

    @reg.payload_key("where")
    def where(run: Run) -> Any:
        """The state it was raised in."""
        return lambda: run.facts.failed_in or None
