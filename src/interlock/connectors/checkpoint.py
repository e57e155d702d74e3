"""What a checkpoint holds, and restoring one: returns the saved state.

``dump`` gathers the serialized state (chart position, counters, listener
states, data position), the module, optimizers, schedulers, precision plugin
state and RNG states into plain data. ``restore`` checks that the checkpoint
fits the module *before* changing anything, loads the tensors in place, and
returns the saved :class:`TrainerState`, which the trainer applies as a
``RestoreState`` update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from interlock.connectors.optim import Scheduler
from interlock.connectors.rng import get_rng_states
from interlock.core.errors import CheckpointError
from interlock.core.state import TrainerState
from interlock.plugins.strategy import Strategy

__all__ = ["CHECKPOINT_FORMAT", "check_fits", "check_resumable", "dump", "restore"]

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
    try:
        state = TrainerState.from_dict(ckpt["state"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source} holds an invalid trainer state: {exc}") from None
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
