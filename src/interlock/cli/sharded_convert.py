"""``interlock convert``: a sharded checkpoint directory to one checkpoint file, and back.

Sharded -> file gathers every shard in this process (no process group, no model built)
and writes an ordinary interlock checkpoint: full tensors, the optimizer state keyed by
integer parameter ids as ``torch.optim`` writes it, rank 0's RNG states. File -> sharded
writes a one-rank sharded directory that any world size resumes from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from interlock.connectors.checkpoint import upgrade
from interlock.core.errors import CheckpointError
from interlock.plugins import sharded_io
from interlock.plugins.checkpoint_io import TorchCheckpointIO
from interlock.plugins.sharded_writer import save_sharded

__all__ = ["file_to_sharded", "sharded_to_file"]


def _by_ids(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state dict keyed by parameter names -> keyed by integer ids (the order of its groups)."""
    ids = {name: i for i, name in enumerate(n for group in state["param_groups"] for n in group["params"])}
    return {
        "state": {ids[name]: value for name, value in state.get("state", {}).items()},
        "param_groups": [{**g, "params": [ids[n] for n in g["params"]]} for g in state["param_groups"]],
    }


def _by_names(state: dict[str, Any], names: list[str], source: str) -> dict[str, Any]:
    """An optimizer state dict keyed by integer ids -> keyed by the parameter names ``names`` (in id order)."""
    count = sum(len(g["params"]) for g in state["param_groups"])
    if count != len(names):
        raise CheckpointError(
            f"{source}: the optimizer covers {count} parameters but the model holds {len(names)} tensors (buffers?), "
            "so its integer ids cannot be matched to names; resume from the file instead, or save sharded from a run"
        )
    return {
        "state": {names[int(i)]: value for i, value in state["state"].items()},
        "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]} for g in state["param_groups"]],
    }


def sharded_to_file(src: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write the sharded checkpoint ``src`` (a directory) as the single checkpoint file ``out``."""
    src = Path(src)
    sharded_io.read_manifest(src)
    io = TorchCheckpointIO()
    ckpt = upgrade(io.load_checkpoint(src / sharded_io.META))
    tensors = sharded_io.load_all(src)  # the directory's own names: model.*, optimizers.*
    ckpt["state_dict"] = dict(tensors.get("model", {}))
    ckpt["optimizer_states"] = [_by_ids(o) for o in tensors.get("optimizers", [])]
    ckpt["grads"] = {}
    io.save_checkpoint(ckpt, out)
    return Path(out)


def file_to_sharded(src: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write the checkpoint file ``src`` as the sharded checkpoint directory ``out`` (one rank's shards)."""
    io = TorchCheckpointIO()
    ckpt = upgrade(io.load_checkpoint(src))
    for key in ("format", "state", "state_dict"):
        if key not in ckpt:
            raise CheckpointError(f"{src} is not an interlock checkpoint: it has no {key!r} entry")
    names = list(ckpt["state_dict"])
    optimizers = [_by_names(o, names, str(src)) for o in ckpt.get("optimizer_states", [])]
    tensors = {"model": ckpt["state_dict"], "optimizers": optimizers}
    meta = {k: v for k, v in ckpt.items() if k not in ("state_dict", "optimizer_states", "grads")}
    save_sharded(Path(out), tensors, meta, {"rng": ckpt.get("rng")})
    return Path(out)
