"""``interlock inspect``: a checkpoint as readable, JSON-ready data, without building a model."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from interlock.connectors.checkpoint import READABLE_FORMATS, is_sharded, upgrade
from interlock.core.errors import CheckpointError
from interlock.plugins.checkpoint_io import TorchCheckpointIO

__all__ = ["plain", "summarize_checkpoint", "to_json"]


def _tensor(t: torch.Tensor) -> list[Any]:
    return [list(t.shape), str(t.dtype).removeprefix("torch.")]


def plain(value: Any) -> Any:
    """JSON-ready copy of checkpoint data: each tensor becomes ``[shape, dtype]``."""
    if isinstance(value, torch.Tensor):
        return _tensor(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def to_json(value: Any, indent: int = 0, lead: int = 0, width: int = 100) -> str:
    """Indented JSON whose lists and objects stay on one line when they fit in ``width`` columns.

    ``lead`` is how many columns precede the value on its first line (e.g. its key).
    """
    flat = json.dumps(value, separators=(", ", ": "))
    if not isinstance(value, dict | list) or not value or indent + lead + len(flat) <= width:
        return flat
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(value, list):
        items = [inner + to_json(v, indent + 2, 0, width) for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    items = [
        f"{inner}{json.dumps(k)}: {to_json(v, indent + 2, len(json.dumps(k)) + 2, width)}" for k, v in value.items()
    ]
    return "{\n" + ",\n".join(items) + f"\n{pad}}}"


def _sharded(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sharded directory's manifest (every file hash-checked) and plain part, tensors as empty specs."""
    from interlock.plugins import sharded_io

    manifest = sharded_io.read_manifest(path)
    ckpt = TorchCheckpointIO().load_checkpoint(os.path.join(path, sharded_io.META), map_location="cpu")
    specs = sharded_io.tensor_specs(path)
    ckpt["state_dict"] = {k.removeprefix("model."): v for k, v in specs.items() if k.startswith("model.")}
    ckpt["optimizer_states"] = {k: v for k, v in specs.items() if k.startswith("optimizers.")}
    files = manifest["files"]
    header = {
        "format": manifest["format"],
        "version": manifest.get("version"),
        "world_size": manifest.get("world_size"),
        "files": len(files),
        "bytes": sum(int(f.get("bytes", 0)) for f in files.values()),
    }
    return header, ckpt


def _history_length(ckpt: Mapping[str, Any], state: Mapping[str, Any]) -> int:
    """Rows of the history: the fingerprint's count (rows in RUN/history.jsonl), else the rows held inline."""
    fingerprint = ckpt.get("history")
    if isinstance(fingerprint, Mapping) and isinstance(fingerprint.get("rows"), int):
        return int(fingerprint["rows"])
    return len(state.get("history", ()))


def summarize_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What the checkpoint at ``path`` holds; raises :class:`CheckpointError` for a bad file.

    The load refuses a path that is not a regular file, and a checkpoint over the load limits
    (a pickle bomb, a cycle, deep nesting: :func:`~interlock.plugins.checkpoint_io.check_bounded`),
    before :func:`plain` walks anything.
    """
    io = TorchCheckpointIO()
    if is_sharded(path):
        header, ckpt = _sharded(path)
    else:
        header = io.read_header(path)
        ckpt = io.load_checkpoint(path, map_location="cpu")
    written = ckpt.get("format")
    ckpt = upgrade(ckpt)  # format 1's names for the weights and optimizer states: read as format 2's
    for key in ("format", "state", "state_dict"):
        if key not in ckpt:
            raise CheckpointError(f"{path} is not an interlock checkpoint: it has no {key!r} entry")
    state = ckpt["state"]
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{path} holds a {type(state).__name__} as its trainer state, not a dict")
    progress = state.get("progress", {}) if isinstance(state.get("progress"), Mapping) else {}
    model = ckpt["state_dict"] if isinstance(ckpt["state_dict"], Mapping) else {}
    rng = ckpt.get("rng", {})
    return {
        "file": os.fspath(path),
        "header": header,
        "format": written,
        "format_supported": written in READABLE_FORMATS,
        "chart": state.get("chart"),
        "stage": state.get("stage"),
        "status": state.get("status"),
        "epoch": progress.get("epoch"),
        "global_step": progress.get("global_step"),
        "batch_idx": progress.get("batch_idx"),
        "train_batches": progress.get("train_batches"),
        "should_stop": state.get("should_stop"),
        "stop_reason": state.get("stop_reason"),
        "seed": state.get("seed"),
        "run_dir": state.get("run_dir"),
        "metrics": plain(state.get("metrics", {})),
        "best_metrics": plain(state.get("best_metrics", {})),
        "history_length": _history_length(ckpt, state),
        "history": plain(ckpt["history"]) if isinstance(ckpt.get("history"), Mapping) else None,
        "listeners": plain(state.get("listeners", {})),
        "data": plain(state.get("data", {})),
        "rng": sorted(rng) if isinstance(rng, Mapping) else [],
        "model": plain(model),
        "model_parameters": sum(t.numel() for t in model.values() if isinstance(t, torch.Tensor)),
        "optimizers": plain(ckpt.get("optimizer_states", [])),
        "schedulers": plain(ckpt.get("lr_schedulers", [])),
        "precision": plain(ckpt.get("precision", {})),
        "replay_to": _replay_to(ckpt.get("replay_to")),
    }


def _replay_to(rec: Any) -> dict[str, Any] | None:
    """A replay's save between checkpoint states: what a resume re-executes (``None``: an ordinary checkpoint)."""
    if not isinstance(rec, Mapping):
        return None
    steps = rec.get("transitions")
    last = steps[-1] if isinstance(steps, list) and steps and isinstance(steps[-1], Mapping) else {}
    return {
        "format": rec.get("format"),
        "run_dir": rec.get("run_dir"),
        "from": rec.get("from"),
        "to": rec.get("to"),
        "state": last.get("event"),
        "chart": rec.get("chart"),
    }
