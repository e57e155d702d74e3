"""What a checkpoint holds, and restoring one: returns the saved state.

``dump`` gathers the serialized state (chart position, counters, listener
states, data position), the module, optimizers, schedulers, precision plugin
state and RNG states into plain data. ``restore`` checks that the checkpoint
fits the module *before* changing anything, loads the tensors in place, and
returns the saved :class:`TrainerState`, which the trainer applies as a
``RestoreState`` update.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from interlock.connectors.metrics import scalars
from interlock.connectors.optim import Scheduler
from interlock.connectors.rng import RestoreRNG, get_rng_states
from interlock.core.errors import CheckpointError, Preempted
from interlock.core.registry import Action, Registry
from interlock.core.run import Run
from interlock.core.state import TrainerState
from interlock.core.updates import Interrupt, RestoreState, SaveCheckpoint, SetRunInfo, Update
from interlock.plugins.strategy import Strategy

__all__ = [
    "CHECKPOINT_FORMAT",
    "check_fits",
    "check_resumable",
    "dump",
    "register",
    "resolve_ckpt_path",
    "restore",
]

CHECKPOINT_FORMAT = "interlock.checkpoint/1"


def dump(
    state: TrainerState,
    module: torch.nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    schedulers: Sequence[Scheduler],
    precision_state: Mapping[str, Any],
    data_state: Any = None,
    strategy: Strategy | None = None,
) -> dict[str, Any]:
    """Everything needed to continue the run, as plain data and tensors.

    ``strategy`` gathers the model and optimizer state (full, even when sharded);
    with it this is a collective call: every rank must make it. In one process the
    gradients are kept too, for a save between the batches of one accumulation
    window (``accumulate_grad_batches > 1``).
    """
    strategy = strategy if strategy is not None else Strategy()
    state_dict = state.to_dict()
    if data_state is not None:
        state_dict["data"] = {**state_dict["data"], "dataset": data_state}
    return {
        "format": CHECKPOINT_FORMAT,
        "state": state_dict,
        "model": strategy.model_state_dict(module),
        "optimizers": [strategy.optimizer_state_dict(module, o) for o in optimizers],
        "schedulers": [s.scheduler.state_dict() for s in schedulers],
        "precision": dict(precision_state),
        "rng": get_rng_states(),
        "grads": (
            {name: p.grad for name, p in module.named_parameters() if p.grad is not None}
            if strategy.world_size == 1
            else {}
        ),
    }


def check_fits(ckpt: Mapping[str, Any], module: torch.nn.Module, source: str) -> None:
    """Raise :class:`CheckpointError` unless the checkpoint's weights fit ``module`` exactly."""
    for key in ("format", "state", "model"):
        if key not in ckpt:
            raise CheckpointError(f"{source} is not an interlock checkpoint: it has no {key!r} entry")
    if ckpt["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{source} has format {ckpt['format']!r}; this interlock reads {CHECKPOINT_FORMAT!r}")
    saved, own = ckpt["model"], module.state_dict()
    missing = sorted(set(own) - set(saved))
    unexpected = sorted(set(saved) - set(own))
    misshapen = sorted(
        f"{k}: checkpoint {tuple(saved[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(own) & set(saved)
        if isinstance(saved[k], torch.Tensor) and saved[k].shape != own[k].shape
    )
    if missing or unexpected or misshapen:
        parts = [
            f"{name}: {', '.join(v[:10])}{' ...' if len(v) > 10 else ''}"
            for name, v in (("missing keys", missing), ("unexpected keys", unexpected), ("misshapen", misshapen))
            if v
        ]
        raise CheckpointError(
            f"{source} was saved from a different model ({type(module).__name__} does not match): " + "; ".join(parts)
        )


def saved_state(ckpt: Mapping[str, Any], source: str) -> TrainerState:
    """The trainer state a checkpoint holds; :class:`CheckpointError` when it is not a valid one."""
    try:
        return TrainerState.from_dict(ckpt["state"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source} holds an invalid trainer state: {exc}") from None


def check_resumable(
    ckpt: Mapping[str, Any],
    module: torch.nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    schedulers: Sequence[Scheduler],
    source: str,
) -> TrainerState:
    """Raise :class:`CheckpointError` unless a fit can continue from ``ckpt``; return its saved state.

    Checks what :func:`restore` loads (weights, trainer state, optimizer and
    scheduler counts, gradients) and changes nothing, so a bad
    checkpoint is refused before the run starts.
    """
    check_fits(ckpt, module, source)
    state = saved_state(ckpt, source)
    saved_opts = ckpt.get("optimizers", [])
    if optimizers and len(saved_opts) != len(optimizers):
        raise CheckpointError(
            f"{source} has {len(saved_opts)} optimizer state(s) but configure_optimizers() "
            f"returned {len(optimizers)} optimizer(s)"
        )
    if schedulers and len(ckpt.get("schedulers", [])) != len(schedulers):
        raise CheckpointError(
            f"{source} has {len(ckpt.get('schedulers', []))} LR scheduler state(s) but configure_optimizers() "
            f"returned {len(schedulers)}"
        )
    params = dict(module.named_parameters())
    for name, grad in (ckpt.get("grads") or {}).items():
        if name not in params or not isinstance(grad, torch.Tensor) or grad.shape != params[name].shape:
            raise CheckpointError(f"{source} holds a gradient for {name!r}, which does not fit this model")
    return state


def restore(
    ckpt: Mapping[str, Any],
    module: torch.nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    schedulers: Sequence[Scheduler],
    source: str,
    strategy: Strategy | None = None,
) -> TrainerState:
    """Load weights, gradients, optimizer and scheduler states in place (through ``strategy``); return the state."""
    strategy = strategy if strategy is not None else Strategy()
    state = check_resumable(ckpt, module, optimizers, schedulers, source)
    strategy.load_model_state_dict(module, ckpt["model"])
    saved_grads = ckpt.get("grads") or {}
    for name, param in module.named_parameters():
        grad = saved_grads.get(name)
        param.grad = None if grad is None else grad.to(device=param.device, dtype=param.dtype)
    for optimizer, saved in zip(optimizers, ckpt.get("optimizers", []), strict=False):
        strategy.load_optimizer_state_dict(module, optimizer, saved)
        if state.global_step > 0:  # it has stepped in this run: torch need not warn "scheduler before optimizer"
            optimizer._opt_called = True  # type: ignore[attr-defined]
    for sched, saved in zip(schedulers, ckpt.get("schedulers", []), strict=False):
        sched.scheduler.load_state_dict(saved)
    return state


def resolve_ckpt_path(ckpt_path: str | os.PathLike[str], root: Path) -> Path:
    """``"last"`` is the newest ``last.ckpt`` under ``root``; anything else is a path."""
    if str(ckpt_path) == "last":
        found = sorted(root.glob("**/last.ckpt"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise CheckpointError(f"ckpt_path='last' but there is no last.ckpt under {root}; pass a checkpoint path")
        return found[-1]
    return Path(ckpt_path)


_LOADED = "interlock.checkpoint"


def _write(run: Run, path: str) -> None:
    """Gather the checkpoint (a collective under DDP/FSDP) and write it on rank 0."""
    state = run.state
    train = run.feeds.get("train")
    if train is not None and train.last_outputs is not None:  # the epoch's train metrics, if resumed mid-way
        state = state.replace(data={**state.data, "last_train": scalars(train.last_outputs, "train")})
    strategy = run.hardware.strategy
    payload = dump(
        state,
        run.module,
        run.optimizers,
        run.schedulers,
        run.hardware.precision.state_dict(),
        train.data.data_state() if train is not None else None,
        strategy,
    )
    if strategy.is_global_zero:
        run.checkpoint_io.save_checkpoint(payload, path)
    strategy.barrier()


def register(reg: Registry) -> None:
    """``checkpoint.*`` actions and the ``SaveCheckpoint`` effect (the writer)."""

    @reg.action("checkpoint.load")
    def load(run: Run, params: Mapping[str, Any]) -> Action:
        """Read ckpt_path and check that its weights fit the module; a resumed fit keeps writing in its run."""

        def act() -> Update | None:
            if run.plan.ckpt_path is None:
                return None
            path = resolve_ckpt_path(run.plan.ckpt_path, Path(run.plan.root))
            ckpt = run.checkpoint_io.load_checkpoint(path, map_location=run.device)
            check_fits(ckpt, run.module, str(path))
            run.extras[_LOADED] = (ckpt, str(path))
            if run.stage != "fit":
                return None
            saved = saved_state(ckpt, str(path))
            return SetRunInfo(run_dir=saved.run_dir or run.plan.run_dir)

        return act

    @reg.action("checkpoint.load_weights")
    def load_weights(run: Run, params: Mapping[str, Any]) -> Action:
        """Load the checkpoint's weights into the module (validate/test/predict with ckpt_path)."""

        def act() -> None:
            loaded = run.extras.pop(_LOADED, None)
            if loaded is not None:
                run.hardware.strategy.load_model_state_dict(run.module, loaded[0]["model"])

        return act

    @reg.action("checkpoint.restore")
    def restore_(run: Run, params: Mapping[str, Any]) -> Action:
        """Resume: check the whole checkpoint against the run, load it, and return its state (the chart jumps there)."""

        def act() -> list[Update] | None:
            loaded = run.extras.pop(_LOADED, None)
            if loaded is None:
                return None
            ckpt, source = loaded
            strategy = run.hardware.strategy
            state = restore(ckpt, run.module, run.optimizers, run.schedulers, source, strategy)
            run.hardware.precision.load_state_dict(ckpt.get("precision", {}))
            now = run.state  # this process's rank and run directory, not the saving process's
            restored = state.replace(
                stage="fit",
                status="running",
                global_rank=now.global_rank,
                world_size=now.world_size,
                run_dir=now.run_dir,
            )
            updates: list[Update] = [RestoreState(restored)]
            if ckpt.get("rng") is not None:
                updates.append(RestoreRNG(ckpt["rng"]))
            return updates

        return act

    @reg.action("checkpoint.save_preempted")
    def save_preempted(run: Run, params: Mapping[str, Any]) -> Action:
        """Save ``last.ckpt`` here (a batch boundary) and end the fit as interrupted by the signal."""

        def act() -> list[Update]:
            path = Path(run.state.run_dir or run.plan.run_dir) / "checkpoints" / "last.ckpt"
            return [SaveCheckpoint(str(path), "preempted"), Interrupt(Preempted(run.signals.signum))]

        return act

    @reg.action("checkpoint.wait")
    def wait(run: Run, params: Mapping[str, Any]) -> Action:
        """Wait until every checkpoint of the stage is durable; raise the first failed save."""
        return run.checkpoint_io.wait  # type: ignore[no-any-return]

    @reg.effect(SaveCheckpoint)
    def writer(run: Run) -> Callable[[Any], None]:
        """Write the checkpoint, then delete the files it replaces once it is in place."""

        def save(request: SaveCheckpoint) -> None:
            _write(run, request.path)
            if run.hardware.strategy.is_global_zero:
                for old in request.replaces:
                    run.checkpoint_io.remove_checkpoint(old, replaced_by=request.path)

        return save
