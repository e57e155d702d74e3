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

__all__ = ["CONVERTERS", "convert", "to_file", "to_sharded", "to_weights"]


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


def to_file(src: Path, dst: Path) -> str:
    """A sharded checkpoint directory as one checkpoint file (gathered in this process, no model built)."""
    from interlock.cli.sharded_convert import sharded_to_file  # torch.distributed.checkpoint: slow to import

    return f"one checkpoint file {sharded_to_file(src, dst)}"


def to_sharded(src: Path, dst: Path) -> str:
    """A checkpoint file as a sharded directory that any world size resumes from."""
    from interlock.cli.sharded_convert import file_to_sharded

    return f"a sharded checkpoint directory {file_to_sharded(src, dst)}"


CONVERTERS: dict[str, Callable[[Path, Path], str]] = {"weights": to_weights, "file": to_file, "sharded": to_sharded}
"""``--to`` name -> converter ``(src, dst) -> one-line summary``."""


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], to: str = "weights") -> str:
    """Write ``src`` to ``dst`` in format ``to`` (a key of :data:`CONVERTERS`); return a summary line."""
    if to not in CONVERTERS:
        raise ValueError(f"--to {to!r} is not a known format; choose one of {sorted(CONVERTERS)}")
    source, target = Path(src), Path(dst)
    if target.exists() and source.exists() and target.resolve() == source.resolve():
        raise ValueError(f"{dst} is the source itself; write the converted file somewhere else")
    return CONVERTERS[to](source, target)
