"""What the chart's actions and guards work on: a frozen plan and the live objects torch needs.

:class:`RunPlan` is what one call of ``fit``/``validate``/``test``/``predict`` was
asked to do; it never changes. :class:`Run` adds the live objects: the module,
its optimizers and schedulers, the plugins, the data feeds and the batch in
flight (:class:`Step`). What the trainer *knows* is not here: actions read it as
``run.state`` (frozen) and change it only by returning updates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs
import torch

from interlock.core.chart import Chart
from interlock.core.config import TrainerConfig
from interlock.core.progress import Counters
from interlock.core.slots import CallbacksSlot, CheckpointSlot, DeviceSlot, DistSlot, OptimSlot, SlotError
from interlock.core.state import TrainerState

__all__ = ["Run", "RunPlan", "StageDef", "Step", "stage_def"]


@attrs.frozen
class StageDef:
    """What a stage is, from its state's ``with:`` in the chart (``fit: {loaders: [train, val], ...}``).

    ``loaders``: the loader keys it reads, the first one required; ``requires``: the module methods it
    calls; ``loader_steps``: the method a given optional loader needs (``{val: validation_step}``).
    """

    loaders: tuple[str, ...]
    requires: tuple[str, ...] = ()
    loader_steps: Mapping[str, str] = attrs.field(factory=dict)


def stage_def(chart: Chart, stage: str) -> StageDef:
    """The definition of ``stage`` in ``chart``; ``ValueError`` naming what is missing or malformed."""
    spec = chart.states.get(stage)
    if spec is None:
        stages = [
            n for n, st in chart.states.items() if "." not in n and isinstance(st.params.get("loaders"), list | tuple)
        ]
        raise ValueError(
            f"chart {chart.source} has no state {stage!r}, so it cannot run stage {stage!r}; its stages: {stages}"
        )
    params = spec.params
    loaders, requires, steps = params.get("loaders"), params.get("requires", ()), params.get("loader_steps", {})
    if not isinstance(loaders, list | tuple):
        loaders = ()
    good = (
        bool(loaders)
        and all(isinstance(x, str) for x in (*loaders, *requires))
        and isinstance(steps, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in steps.items())
    )
    if not good:
        raise ValueError(
            f"chart {chart.source}: state {stage!r} must define the stage in its with:, e.g. "
            "`with: {loaders: [train, val], requires: [training_step], loader_steps: {val: validation_step}}` "
            f"(loaders: a non-empty list of names); it has {dict(params)}"
        )
    return StageDef(tuple(loaders), tuple(requires), dict(steps))


@attrs.frozen
class RunPlan:
    """One stage as asked: which, with what flags, data, checkpoint and seed.

    ``run_dir`` is the run directory the trainer already has (from an earlier stage), ``""``
    when it has none yet: the stage then continues a checkpoint's run or claims a new
    ``root/runs/version_N``.
    """

    stage: str
    config: TrainerConfig
    loaders: Mapping[str, Iterable[Any] | None]
    run_dir: str
    root: str
    seed: int | None = None
    ckpt_path: Any = None
    #: the data module the loaders come from (``None``: the loaders were passed)
    datamodule: Any = None
    #: the module's own ``*_dataloader()`` methods give the loaders that were not passed (Lightning's fallback)
    module_loaders: bool = False
    #: predict keeps what ``predict_step`` returned (``False``: Lightning's ``return_predictions=False``, nothing kept)
    return_predictions: bool = True
    #: the training loader's first iterator was opened before the fit, in an isolated global RNG (Lightning's
    #: learning-rate sweep sets its loaders up so): opening it draws nothing from the global RNG
    train_opened: bool = False

    @property
    def loads_later(self) -> bool:
        """Some loaders are made at set-up (by the data module or the module), not passed."""
        return self.datamodule is not None or self.module_loaders


@attrs.define(slots=True)
class Step:
    """The batch in flight: what was fetched, and what the step made of it."""

    batch: Any = None
    index: int = 0
    outputs: Any = None
    loss: torch.Tensor | None = None
    #: what this training batch logged on step for the loggers (``self.log(..., logger=True)``), by logger name
    logged: dict[str, float] = attrs.field(factory=dict)


S = TypeVar("S")


def _no_state() -> TrainerState:
    return TrainerState()


@attrs.define(slots=True, eq=False)
class Run:
    """The live objects of one stage, shared by its actions and guards.

    ``dist`` is what the strategy set up (step wrappers, metric reduction, stop
    agreement); ``feeds`` one data feed per loader (``train``, ``val``, ...).
    ``counters`` and ``state`` are the runtime's, read-only here.

    ``slots`` holds one typed slot per owner (:mod:`interlock.core.slots`), by type:
    ``run.slot(OptimSlot)``; the plugins (``hardware``) and the preemption flag (``signals``) are
    slots filled when the run is made. An extension's slot types live there too. An action fills or
    replaces a slot by returning ``Fill(slot)``, never by assigning here.
    """

    plan: RunPlan
    module: torch.nn.Module
    counters: Counters = attrs.field(factory=Counters)
    state_ref: Callable[[], TrainerState] = _no_state
    facts_ref: Callable[[], TrainerState] = _no_state
    feeds: dict[str, Any] = attrs.field(factory=dict)
    step: Step = attrs.field(factory=Step)
    predictions: list[Any] = attrs.field(factory=list)
    #: the exception that is ending the stage (its text and where it was raised are in the state)
    error: BaseException | None = None
    #: the typed slots of the stage by type (``run.slot(OptimSlot)``); filled by ``Fill`` updates
    slots: dict[type, Any] = attrs.field(factory=dict)
    #: the chart being run (set by the runtime): where a saved state resumes
    chart: Chart | None = None

    def slot(self, kind: type[S]) -> S:
        """The filled slot of type ``kind``; ``SlotError`` naming it when nothing has filled it."""
        try:
            return self.slots[kind]  # type: ignore[no-any-return]
        except KeyError:
            have = ", ".join(sorted(k.__name__ for k in self.slots)) or "none"
            raise SlotError(
                f"slot {kind.__name__} is not filled in this stage (filled: {have}); an action that declares "
                f"writes=(its name,) fills it by returning Fill({kind.__name__}(...))"
            ) from None

    @property
    def device(self) -> torch.device:
        """The device of this process (the ``device`` slot; the CPU before ``accelerator.setup``)."""
        slot = self.slots.get(DeviceSlot)
        return torch.device("cpu") if slot is None else slot.device

    @property
    def prepare_batch(self) -> Callable[..., Any] | None:
        """Device move and input cast of a fetched batch (the ``device`` slot; ``None``: used as they come)."""
        slot = self.slots.get(DeviceSlot)
        return None if slot is None else slot.prepare_batch

    @property
    def dist(self) -> Any:
        """What the strategy set up (the ``dist`` slot; ``None`` before ``strategy.setup_module``, after teardown)."""
        slot = self.slots.get(DistSlot)
        return None if slot is None else slot.dist

    @property
    def steps(self) -> dict[str, Callable[..., Any]]:
        """The step callables through the strategy's wrapper (the ``dist`` slot); the module's own when absent."""
        slot = self.slots.get(DistSlot)
        return {} if slot is None else slot.steps

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers (``[]`` before ``optim.configure`` filled the ``optim`` slot)."""
        slot = self.slots.get(OptimSlot)
        return [] if slot is None else slot.optimizers

    @property
    def schedulers(self) -> list[Any]:
        """The LR schedulers (``[]`` before ``optim.configure`` filled the ``optim`` slot)."""
        slot = self.slots.get(OptimSlot)
        return [] if slot is None else slot.schedulers

    @property
    def callbacks(self) -> tuple[Any, ...]:
        """The trainer's Lightning-style callbacks (the ``callbacks`` slot)."""
        return self.slot(CallbacksSlot).callbacks

    @property
    def loggers(self) -> tuple[Any, ...]:
        """The trainer's logger listeners (what the module sees as ``self.loggers``)."""
        return self.slot(CallbacksSlot).loggers

    @property
    def listeners(self) -> tuple[Any, ...]:
        """The trainer's listeners (what callbacks may read)."""
        return self.slot(CallbacksSlot).listeners

    @property
    def checkpoint(self) -> CheckpointSlot:
        """The ``checkpoint`` slot (checkpoint writer, what was loaded, the run directory's lock)."""
        return self.slot(CheckpointSlot)

    @property
    def state(self) -> TrainerState:
        """What the trainer knows now (frozen)."""
        return self.state_ref()

    @property
    def facts(self) -> TrainerState:
        """The state as last updated, without the live chart position and counters: no snapshot is built.

        For guards on the per-batch path that read ``should_stop``, ``metrics`` or ``data``.
        """
        return self.facts_ref()

    @property
    def config(self) -> TrainerConfig:
        return self.plan.config

    @property
    def stage(self) -> str:
        return self.plan.stage
