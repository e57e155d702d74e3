"""Bit-for-bit comparison of nested checkpoint-like data (what "exact resume" means)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["differences", "relocate"]


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ; tensors and floats must match bit for bit (``[]`` when equal).

    Dicts must have the same keys in the same order, sequences the same length;
    tensors the same dtype, shape and bytes; floats the same bits (so ``nan``
    equals the same ``nan`` and ``0.0`` differs from ``-0.0``).
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return [f"{where}: {type(a).__name__} vs {type(b).__name__}"]
        if a.dtype != b.dtype or a.shape != b.shape:
            return [f"{where}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"]
        same = torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
        return [] if same else [f"{where}: tensors differ (max abs diff {(a.double() - b.double()).abs().max()})"]
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return [f"{where}: keys {list(a)} vs {list(b)}"]
        return [d for k in a for d in differences(a[k], b[k], f"{where}/{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if a.hex() == b.hex() else [f"{where}: {a!r} vs {b!r}"]
    return [] if (type(a), a) == (type(b), b) else [f"{where}: {a!r} vs {b!r}"]


def relocate(value: Any, path: str, placeholder: str = "<run>") -> Any:
    """``value`` with ``path`` replaced by ``placeholder`` in every string (keys included).

    Two runs in different directories compare equal once their run directory is relocated.
    """
    if isinstance(value, str):
        return value.replace(path, placeholder)
    if isinstance(value, dict):
        return {relocate(k, path, placeholder): relocate(v, path, placeholder) for k, v in value.items()}
    if isinstance(value, list):
        return [relocate(v, path, placeholder) for v in value]
    return value
