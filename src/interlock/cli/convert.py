"""``interlock convert SRC DST --to FORMAT``: rewrite a checkpoint in another format.

Each format is one function ``(src, dst) -> summary`` in :data:`CONVERTERS`; ``--to`` picks it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from interlock.connectors.weights import read_state_dict

__all__ = ["CONVERTERS", "convert", "to_weights"]


def _save_atomically(obj: object, dst: Path) -> None:
    """``torch.save`` to a temporary file next to ``dst``, then rename it over ``dst``."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_weights(src: Path, dst: Path) -> str:
    """The bare state dict of an interlock (or Lightning) checkpoint, as a plain ``torch.save`` file.

    Load it with ``module.load_state_dict(torch.load(dst, weights_only=True))``.
    """
    weights = read_state_dict(src)
    _save_atomically(weights, dst)
    return f"{len(weights)} tensors; load with module.load_state_dict(torch.load({str(dst)!r}, weights_only=True))"


CONVERTERS: dict[str, Callable[[Path, Path], str]] = {"weights": to_weights}
"""``--to`` name -> converter ``(src, dst) -> one-line summary``."""


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], to: str = "weights") -> str:
    """Write ``src`` to ``dst`` in format ``to`` (a key of :data:`CONVERTERS`); return a summary line."""
    if to not in CONVERTERS:
        raise ValueError(f"--to {to!r} is not a known format; choose one of {sorted(CONVERTERS)}")
    source, target = Path(src), Path(dst)
    if target.exists() and source.exists() and target.resolve() == source.resolve():
        raise ValueError(f"{dst} is the source itself; write the converted file somewhere else")
    return CONVERTERS[to](source, target)
