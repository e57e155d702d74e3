"""Small helpers shared by the built-in listeners (they see only ``interlock.core``)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from interlock.core.state import TrainerState

__all__ = ["ROW_KEYS", "format_metrics", "is_rank_zero", "loss_tensor", "output_dir", "row_metrics", "stage_starts"]

#: Keys of a history row that describe it rather than measure something.
ROW_KEYS = ("stage", "epoch", "global_step")


def stage_starts(tags: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """The first event of each stage (tagged ``stage_start``).

    The state holds this process's rank by then (the trainer sets it during setup) and, unlike
    later, before a resumed run's state is restored from rank 0's checkpoint.
    """
    return frozenset(name for name, t in tags.items() if "stage_start" in t)


def output_dir(save_dir: str | os.PathLike[str] | None, state: TrainerState, who: str) -> Path:
    """``save_dir`` when given, else the run directory the trainer put in the state."""
    if save_dir is not None:
        return Path(save_dir)
    if not state.run_dir:
        raise RuntimeError(
            f"{who} has no output directory: state.run_dir is empty (it is set by the Trainer); "
            f"pass {who}(save_dir=...) to choose one"
        )
    return Path(state.run_dir)


def is_rank_zero(cached: bool | None, state: TrainerState) -> bool:
    """Whether this process writes: the rank read at the stage start (``cached``), else the state's."""
    return state.is_global_zero if cached is None else cached


def loss_tensor(outputs: Any) -> torch.Tensor | None:
    """The loss in what a training step returned (a tensor, or a dict's ``"loss"``); None when absent."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, Mapping):
        loss = outputs.get("loss")
        return loss if isinstance(loss, torch.Tensor) else None
    return None


def row_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """The numeric measurements of a history row (its descriptive keys left out)."""
    return {
        k: float(v)
        for k, v in row.items()
        if k not in ROW_KEYS and isinstance(v, int | float) and not isinstance(v, bool)
    }


def bar_metrics(state: TrainerState, prefix: str = "") -> dict[str, float]:
    """The metrics a progress bar shows: all but those the module logged with ``prog_bar=False`` (as Lightning).

    A metric logged on step and epoch shows as ``<name>_step``/``<name>_epoch``, not under its bare name.
    Metrics the module did not log (returned scalars, listeners') show; ``prefix`` keeps the names starting with it.
    """
    shown = state.prog_bar
    return {k: v for k, v in state.metrics.items() if k.startswith(prefix) and shown.get(k, True)}


def format_metrics(metrics: Mapping[str, Any]) -> str:
    """``name=value`` pairs with 4 significant digits, in name order."""
    parts = []
    for name in sorted(metrics):
        value = metrics[name]
        if isinstance(value, float) and math.isfinite(value):
            parts.append(f"{name}={value:.4g}")
        else:
            parts.append(f"{name}={value}")
    return " ".join(parts)
