"""Typed slots: the live objects of a stage, one slot per owner, instead of a shared bag.

A *slot* is a small mutable attrs class holding the live torch / IO objects one owner
needs across a stage (the optimizers, the checkpoint being resumed, an EMA copy of the
weights). Its type is registered under a name (``optim``, ``ema``) with an owner, and
actions and guards declare the slots they read and write when they are registered::

    @reg.action("optim.step", reads=("optim",))

The :class:`~interlock.core.run.Run` of a stage holds one instance per filled slot,
looked up by type (``run.slot(OptimSlot)``). An action fills or replaces a slot by
returning :class:`Fill` (``Fill(OptimSlot(optimizers, schedulers))``); the runtime then
binds again every action and guard that declared reading it, so binders capture the
slot's objects once, never look them up lazily, and a slot may be replaced whole. A
binder that reads a slot nobody has filled yet is not called: the action raises a
:class:`SlotError` naming the slot and the actions that write it, if it ever runs.

What the trainer *knows* never lives in a slot: that is the frozen
:class:`~interlock.core.state.TrainerState`, changed by returned updates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch

from interlock.core.updates import Update

__all__ = [
    "BUILTIN_SLOTS",
    "CallbacksSlot",
    "CheckpointSlot",
    "DataSlot",
    "DeviceSlot",
    "DistSlot",
    "EvalSlot",
    "Fill",
    "OptimSlot",
    "RngSlot",
    "SlotError",
    "SlotSpec",
]


class SlotError(LookupError):
    """A slot was read before anything filled it, is unknown, or was written without declaring it."""


@attrs.frozen
class SlotSpec:
    """A registered slot type: its name (``reads=("optim",)``), class, owner module and one-line doc."""

    name: str
    kind: type
    owner: str
    doc: str = ""


@attrs.frozen
class Fill(Update):
    """Fill (or replace) the slot of ``slot``'s type with ``slot``; the actions reading it are bound again.

    Returned by an action that declared the slot's name in ``writes``.
    """

    slot: Any


@attrs.define(slots=True, eq=False)
class OptimSlot:
    """The optimizers and LR schedulers ``configure_optimizers()`` returned (owner: ``optim``).

    ``manual_steps`` records the optimizer steps a manual-optimization ``training_step`` took
    in the batch in flight; the chart's ``manual`` counter operation turns them into
    ``global_step`` and clears the record (the user's optimizer never writes a counter).
    """

    optimizers: list[torch.optim.Optimizer] = attrs.field(factory=list)
    schedulers: list[Any] = attrs.field(factory=list)
    manual_steps: int = 0


@attrs.define(slots=True, eq=False)
class CheckpointSlot:
    """The checkpoint writer and what a stage loaded or holds open (owner: ``checkpoint``).

    ``io`` writes and reads checkpoint files; ``restore_checks`` check a checkpoint's state
    for the run directory it continues in (the listeners'); ``loaded`` is the checkpoint read
    at set-up until ``checkpoint.restore`` applies it (``(ckpt, source, saved_state)``);
    ``history`` the run's metric history log; ``lock`` the run directory's lock while held;
    ``resumed`` the checkpoint the stage continues (``""``: none); ``bus`` the stage's event bus (a
    checkpoint saved by a replay between checkpoint states observes the re-executed transitions on it).
    ``kept_weights``: the module's own weights (on the CPU) while a checkpoint's are loaded ahead of the
    optimizers for callbacks' ``on_load_checkpoint``, put back if the rest of the checkpoint is refused.
    """

    io: Any = None
    restore_checks: tuple[Callable[..., Any], ...] = ()
    loaded: tuple[Any, str, Any] | None = None
    history: Any = None
    lock: Any = None
    resumed: str = ""
    bus: Any = None
    kept_weights: dict[str, Any] | None = None


@attrs.define(slots=True, eq=False)
class CallbacksSlot:
    """The trainer's Lightning-style callbacks, loggers, listeners and their view (owner: ``callbacks``).

    ``trained_through`` is the epoch whose training has ended (once ``on_train_end`` has run, in a
    fit with nothing left to train, after a resume at an epoch's end until the next epoch) and
    ``sanity`` is set while the sanity check runs (what the view's ``current_epoch`` /
    ``sanity_checking`` read between hooks). ``writers`` names the calls running now whose writes
    to the view are taken when they return (a callback's hook, a ``LightningModule``'s step or
    hook), innermost last: the view accepts writes only then.
    """

    callbacks: tuple[Any, ...] = ()
    loggers: tuple[Any, ...] = ()
    listeners: tuple[Any, ...] = ()
    view: Any = None
    given: tuple[Any, ...] = ()  # the listeners and callbacks as passed to the Trainer, in that order
    trained_through: int = -1  # the last epoch whose training has ended (-1: none); current_epoch counts it done
    sanity: bool = False
    writers: list[str] = attrs.field(factory=list)


@attrs.define(slots=True, eq=False)
class EvalSlot:
    """Each submodule's training mode before each evaluation loop put the module in eval (owner: ``eval``).

    ``grad_was``: whether gradients were enabled before each loop turned them off.
    ``before_sanity``: the metrics as the sanity check found them, put back when it ends.
    """

    was_training: dict[str, dict[Any, bool]] = attrs.field(factory=dict)  # by loop: each module's flag
    grad_was: dict[str, bool] = attrs.field(factory=dict)
    before_sanity: Any = None


@attrs.define(slots=True, eq=False)
class RngSlot:
    """The random states saved while the sanity check runs isolated (owner: ``rng``)."""

    isolated: Any = None


@attrs.define(slots=True, eq=False)
class DeviceSlot:
    """The device of this process and how a fetched batch gets onto it (owner: ``accelerator``).

    ``prepare_batch(batch, dataloader_idx)`` moves and casts a batch (the module's batch-transfer
    hooks included); ``None``: batches are used as they come.
    """

    device: torch.device = attrs.field(factory=lambda: torch.device("cpu"))
    prepare_batch: Callable[..., Any] | None = None


@attrs.define(slots=True, eq=False)
class DistSlot:
    """What the strategy set up for the stage (owner: ``strategy``).

    ``dist``: metric reduction, stop agreement, world size and rank (``None`` before set-up and
    after teardown); ``steps``: the step callables through the strategy's wrapper
    (``training_step`` through DDP, ...), the module's own when absent.
    """

    dist: Any = None
    steps: dict[str, Callable[..., Any]] = attrs.field(factory=dict)


@attrs.define(slots=True, eq=False)
class DataSlot:
    """The stage's data feeds once set-up has made and prepared them (owner: ``data``): one per loader key."""

    feeds: dict[str, Any] = attrs.field(factory=dict)


#: The built-in slot types: name -> (class, owner module).
BUILTIN_SLOTS: dict[str, tuple[type, str]] = {
    "optim": (OptimSlot, "interlock.connectors.optim"),
    "checkpoint": (CheckpointSlot, "interlock.connectors.checkpoint"),
    "callbacks": (CallbacksSlot, "interlock.connectors.callbacks"),
    "eval": (EvalSlot, "interlock.loops.evaluation"),
    "device": (DeviceSlot, "interlock.connectors.hardware"),
    "dist": (DistSlot, "interlock.connectors.hardware"),
    "data": (DataSlot, "interlock.connectors.data"),
    "rng": (RngSlot, "interlock.connectors.rng"),
}
