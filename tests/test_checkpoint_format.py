"""A trainer checkpoint is a torch.save archive with Lightning's key names; format-1 files still resume exactly."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import torch

import interlock
from conftest import TinyModule, loader
from interlock.plugins.checkpoint_io import MAGIC, TorchCheckpointIO

QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "accelerator": "cpu"}
FORMAT_1_NAMES = {"state_dict": "model", "optimizer_states": "optimizers", "lr_schedulers": "schedulers"}


def _fit(root: Path, epochs: int, ckpt_path: Path | None = None) -> tuple[interlock.Trainer, TinyModule]:
    torch.manual_seed(0)
    module = TinyModule(dropout=0.2, scheduler=True)
    trainer = interlock.Trainer(max_epochs=epochs, default_root_dir=root, **QUIET)
    trainer.fit(module, loader(48, 8, shuffle=True), loader(16, 8), ckpt_path=ckpt_path)
    return trainer, module


def test_torch_load_reads_a_trainer_checkpoint_with_lightnings_names(tmp_path: Path) -> None:
    """torch.load(last.ckpt, weights_only=True) gives the weights under state_dict, as from a Lightning file."""
    trainer, module = _fit(tmp_path, 1)
    last = trainer.run_dir / "checkpoints" / "last.ckpt"
    raw = torch.load(last, weights_only=True)
    assert {"state_dict", "optimizer_states", "lr_schedulers", "state"} <= set(raw)
    assert all(torch.equal(raw["state_dict"][k], v) for k, v in module.state_dict().items())
    assert raw["optimizer_states"][0]["param_groups"][0]["momentum"] == 0.9
    assert raw["lr_schedulers"][0]["step_size"] == 1
    assert (raw["epoch"], raw["global_step"]) == (0, 6)  # saved at the end of epoch 0, Lightning's current_epoch
    mine = interlock.load_checkpoint(last)  # the verified reader gives the same tensors
    assert all(torch.equal(mine["state_dict"][k], raw["state_dict"][k]) for k in raw["state_dict"])


def _as_format_1(path: Path, out: Path) -> Path:
    """``path`` rewritten as interlock 1 wrote it: the old key names, MAGIC and the header before the payload."""
    ckpt = TorchCheckpointIO().load_checkpoint(path)
    old: dict[str, Any] = {FORMAT_1_NAMES.get(k, k): v for k, v in ckpt.items()}
    old["format"] = "interlock.checkpoint/1"
    buffer = io.BytesIO()
    torch.save(old, buffer)
    payload = buffer.getvalue()
    header = {
        "format": "interlock-checkpoint",
        "version": 1,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "payload_bytes": len(payload),
        "created": "2026-01-01T00:00:00.000+00:00",
    }
    out.write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + payload)
    return out


def _buffers(view: dict[str, Any]) -> list[torch.Tensor]:
    return [entry["momentum_buffer"] for entry in view["optimizer_states"][0]["state"].values()]


def test_a_format_1_checkpoint_resumes_bitwise_like_the_current_one(tmp_path: Path) -> None:
    """The same checkpoint in format 1 and in format 2 resumes to the same weights; both read the same."""
    trainer, _ = _fit(tmp_path / "first", 1)
    saved = trainer.run_dir / "checkpoints" / "last.ckpt"
    old = _as_format_1(saved, tmp_path / "old.ckpt")
    assert not old.read_bytes().startswith(b"PK")  # the earlier layout, as interlock 1 wrote it
    new_view, old_view = interlock.load_checkpoint(saved), interlock.load_checkpoint(old)
    assert all(torch.equal(x, y) for x, y in zip(_buffers(new_view), _buffers(old_view), strict=True))
    assert (old_view["epoch"], old_view["global_step"]) == (new_view["epoch"], new_view["global_step"])
    _, from_new = _fit(tmp_path / "new", 3, ckpt_path=saved)
    _, from_old = _fit(tmp_path / "old", 3, ckpt_path=old)
    a, b = from_new.state_dict(), from_old.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
