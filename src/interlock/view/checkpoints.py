"""The checkpoints of a run as the view lists them: chart state, step, metrics, resume command."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from interlock.core.errors import CheckpointError
from interlock.plugins.checkpoint_io import SHARDED_MANIFEST, TorchCheckpointIO
from interlock.view.runs import files

__all__ = ["checkpoint_rows", "resume_command"]

_cache: dict[tuple[str, int, int], dict[str, Any]] = {}


def resume_command(ckpt: Path, argv: Sequence[str] | None = None) -> str:
    """``interlock fit ARGV --ckpt_path CKPT``: ``argv`` are the run's own arguments (any --ckpt_path dropped)."""
    kept: list[str] = []
    skip = False
    for arg in argv or ():
        if skip:
            skip = False
        elif arg == "--ckpt_path":
            skip = True
        elif not arg.startswith("--ckpt_path=") and arg != "--view":
            kept.append(arg)
    if not kept or kept[0] != "fit":
        kept = ["fit", *kept[1:]] if kept else ["fit"]
    return shlex.join(["interlock", *kept, "--ckpt_path", str(ckpt)])


def _scalar(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value if isinstance(value, int | float | str | bool) or value is None else repr(value)


def _sharded_size(path: Path) -> int:
    """The bytes of a sharded checkpoint directory, as its manifest lists them."""
    try:
        listed = json.loads((path / SHARDED_MANIFEST).read_text(encoding="utf-8"))["files"].values()
        return sum(int(entry["bytes"]) for entry in listed)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0


def _summary(path: Path) -> dict[str, Any]:
    """Chart state, stage, progress and metrics of one checkpoint (weights_only load, no model built).

    A sharded directory is summarized from its ``meta.ckpt`` (the shards are not read).
    """
    try:
        source = path / "meta.ckpt" if path.is_dir() else path
        ckpt = TorchCheckpointIO().load_checkpoint(source, map_location="cpu")
    except (CheckpointError, OSError, RuntimeError, ValueError) as exc:
        return {"error": str(exc).splitlines()[0][:300]}
    state = ckpt.get("state") if isinstance(ckpt, Mapping) else None
    if not isinstance(state, Mapping):
        return {"error": "not an interlock checkpoint (no trainer state)"}
    progress: Mapping[str, Any] = state["progress"] if isinstance(state.get("progress"), Mapping) else {}
    metrics: Mapping[str, Any] = state["metrics"] if isinstance(state.get("metrics"), Mapping) else {}
    return {
        "chart": state.get("chart"),
        "stage": state.get("stage"),
        "status": state.get("status"),
        "epoch": progress.get("epoch"),
        "global_step": progress.get("global_step"),
        "metrics": {str(k): _scalar(v) for k, v in metrics.items()},
    }


def checkpoint_rows(run: Path, argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per ``checkpoints/*.ckpt`` of ``run``: file name, size, summary and resume command."""
    rows = []
    for name, st in files(run):
        path = run / "checkpoints" / name
        key = (str(path), st.st_mtime_ns, st.st_size)
        if key not in _cache:
            _cache[key] = _summary(path)
            if path.is_dir():
                _cache[key]["sharded"] = True
                _cache[key]["bytes"] = _sharded_size(path)
        rows.append(
            {
                "name": name,
                "size": _cache[key].get("bytes", st.st_size),
                "mtime": st.st_mtime,
                **_cache[key],
                "resume": resume_command(path.absolute(), argv),
            }
        )
    return rows
