"""A LightningModule keeps its gradients past the optimizer step, as Lightning does; resumes stay exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
import interlock.lightning as il
from conftest import loader, only
from interlock.listeners import ModelCheckpoint


class Lit(il.LightningModule):
    """A LightningModule that logs its validation loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def test_after_fit_the_gradients_are_held_and_the_checkpoint_leaves_them_out(tmp_path: Path) -> None:
    """Lightning's module still has the last step's gradients after fit; a file saved then holds none of them."""
    module = Lit()
    trainer = il.Trainer(max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, logger=False)
    trainer.fit(module, loader(32, 8))
    assert all(p.grad is not None for p in module.parameters())
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    assert torch.load(tmp_path / "after.ckpt", weights_only=False)["grads"] == {}


def test_a_lightning_module_can_take_the_native_order(tmp_path: Path) -> None:
    """zero_grad_after_step = True frees the gradients after each step: none are left after fit."""

    class Lean(Lit):
        zero_grad_after_step = True

    module = Lean()
    il.Trainer(max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, logger=False).fit(
        module, loader(32, 8)
    )
    assert all(p.grad is None for p in module.parameters())


def _fit(root: Path, ckpt: Path | None = None) -> tuple[list[torch.Tensor], list[Path]]:
    """Validation every 2 batches inside windows of 3, a file at each validation's end; resumed from ``ckpt``."""
    module = Lit()
    trainer = interlock.Trainer(
        **only(ModelCheckpoint(dirpath=root / "ck", monitor="val_loss", save_top_k=-1, filename="{step}-{epoch}")),
        default_root_dir=root, max_epochs=2, accumulate_grad_batches=3, val_check_interval=2,
        num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(module, loader(64, 8), loader(16, 8), ckpt_path=ckpt)
    return [p.detach().clone() for p in module.parameters()], sorted((root / "ck").glob("*.ckpt"))


@pytest.mark.parametrize("pick", [0, 1, 2, -1])
def test_a_resume_inside_an_accumulation_window_is_bitwise(tmp_path: Path, pick: int) -> None:
    """Files saved inside an open window keep the gradients; resumed from any, the weights end as the whole run's."""
    weights, files = _fit(tmp_path / "whole")
    with_grads = [f for f in files if torch.load(f, weights_only=False)["grads"]]
    assert with_grads and len(with_grads) < len(files)  # some validations fall inside a window, some at its end
    resumed, _ = _fit(tmp_path / "resumed", files[pick])
    assert all(torch.equal(a, b) for a, b in zip(weights, resumed, strict=True))
