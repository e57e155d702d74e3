"""Small data helpers Lightning exports from ``utilities``: ``move_data_to_device``, ``suggested_max_num_workers``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["extract_batch_size", "has_len_all_ranks", "move_data_to_device", "suggested_max_num_workers"]


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """``batch`` with everything that has ``.to(device)`` moved there, inside dicts, lists, tuples and named tuples."""
    target = torch.device(device) if isinstance(device, str | int) else device
    if isinstance(batch, Mapping):
        return type(batch)({k: move_data_to_device(v, target) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(move_data_to_device(v, target) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(move_data_to_device(v, target) for v in batch)
    to = getattr(batch, "to", None)
    if callable(to):
        moved = to(target)
        return batch if moved is None else moved  # an object whose .to() works in place returns None
    return batch


def suggested_max_num_workers(local_world_size: int) -> int:
    """An upper bound for ``DataLoader(num_workers=...)``: the usable CPUs per local process, less one (at least 1)."""
    if not isinstance(local_world_size, int) or local_world_size < 1:
        raise ValueError(f"suggested_max_num_workers(local_world_size={local_world_size!r}) must be an int >= 1")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cpus // local_world_size - 1)


def extract_batch_size(batch: Any) -> int:
    """The batch's size as ``self.log`` infers it (Lightning's rule); ``ValueError`` when it holds no tensor."""
    from interlock.connectors.metrics import logged_batch_size

    return logged_batch_size(batch)


def has_len_all_ranks(
    dataloader: Any, strategy: Any = None, allow_zero_length_dataloader_with_multiple_devices: bool = False
) -> bool:
    """Whether ``dataloader`` has a length (interlock agrees lengths across processes itself)."""
    try:
        return len(dataloader) >= 0
    except (TypeError, NotImplementedError):
        return False
