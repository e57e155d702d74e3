"""BaseFinetuning and BackboneFinetuning: Lightning's weights and learning rates; exact resumes across unfreezing."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock.lightning as il
from _twins import twins
from conftest import loader

pl = pytest.importorskip("pytorch_lightning")
for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
    logging.getLogger(_name).setLevel(logging.ERROR)

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}


class Backboned:
    """A backbone with a batch norm, and a head; SGD with momentum over what is trainable, lrs recorded per epoch."""

    def _build(self) -> None:
        torch.manual_seed(0)
        self.backbone = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh())
        self.head = torch.nn.Linear(8, 2)
        self.lrs: list[list[float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.head(self.backbone(batch[0])), batch[1])

    def on_train_epoch_start(self) -> None:
        self.lrs.append([g["lr"] for g in self.optimizers().param_groups])  # type: ignore[attr-defined]

    def configure_optimizers(self) -> Any:
        trainable = [p for p in self.parameters() if p.requires_grad]  # type: ignore[attr-defined]
        return torch.optim.SGD(trainable, lr=0.1, momentum=0.9)


def _custom(package: Any) -> Any:
    class UnfreezeFirstLayer(package.callbacks.BaseFinetuning):  # type: ignore[misc,name-defined]
        def freeze_before_training(self, pl_module: Any) -> None:
            self.freeze([pl_module.backbone[0], pl_module.backbone[1]], train_bn=False)

        def finetune_function(self, pl_module: Any, epoch: int, optimizer: Any) -> None:
            if epoch == 1:
                self.unfreeze_and_add_param_group(pl_module.backbone[0], optimizer, train_bn=False)
            if epoch == 2:
                self.unfreeze_and_add_param_group(pl_module.backbone[1], optimizer, lr=0.05)

    return UnfreezeFirstLayer()


CALLBACKS = {
    "backbone": lambda package: package.callbacks.BackboneFinetuning(
        unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 1.5, backbone_initial_ratio_lr=0.2
    ),
    "backbone-aligned": lambda package: package.callbacks.BackboneFinetuning(
        unfreeze_backbone_at_epoch=1, backbone_initial_lr=0.04, train_bn=False
    ),
    "custom": _custom,
}


def _fit(package: Any, cls: type, kind: str, root: Path, epochs: int, **more: Any) -> tuple[Any, Any]:
    module = cls()
    callback = CALLBACKS[kind](package)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = package.Trainer(max_epochs=epochs, default_root_dir=root, callbacks=[callback], **QUIET)
        trainer.fit(module, loader(48, 8, shuffle=True), **more)
    return module, trainer


@pytest.mark.parametrize("kind", sorted(CALLBACKS))
def test_finetuning_callbacks_train_and_schedule_as_lightnings(kind: str, tmp_path: Path) -> None:
    """Frozen then unfrozen backbones train to Lightning's weights (batch-norm statistics included) with Lightning's
    learning rate per param group at each epoch."""
    Lit, Ours = twins(Backboned)
    torch.manual_seed(1)
    theirs, _ = _fit(pl, Lit, kind, tmp_path / "pl", 4)
    torch.manual_seed(1)
    mine, _ = _fit(il, Ours, kind, tmp_path / "il", 4)
    assert mine.lrs == theirs.lrs and len(mine.lrs[-1]) > 1, (mine.lrs, theirs.lrs)
    for (name, a), b in zip(theirs.state_dict().items(), mine.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("kind", ["backbone", "custom"])
def test_a_fit_resumed_after_unfreezing_trains_as_the_uninterrupted_one(kind: str, tmp_path: Path) -> None:
    """Stopped after the unfreezing epoch and resumed from last.ckpt, the fit rebuilds the added param groups before
    the optimizer's state loads into them: the weights and learning rates equal one uninterrupted fit's."""
    _, Ours = twins(Backboned)
    torch.manual_seed(1)
    whole, _ = _fit(il, Ours, kind, tmp_path / "whole", 4)
    torch.manual_seed(1)
    _, first = _fit(il, Ours, kind, tmp_path / "parts", 2)
    resumed, _ = _fit(il, Ours, kind, tmp_path / "parts", 4, ckpt_path=first.checkpoint_callback.last_model_path)
    assert resumed.lrs == whole.lrs[2:]
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_backbone_finetuning_without_a_backbone_names_it() -> None:
    """BackboneFinetuning on a module without an nn.Module `backbone` fails at the fit's start, naming it."""

    class Headless(il.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = torch.nn.Identity()
            self.head = torch.nn.Linear(4, 2)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self.head(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.head.parameters(), lr=0.1)

    module = Headless()
    del module.backbone
    trainer = il.Trainer(max_epochs=1, callbacks=[il.callbacks.BackboneFinetuning()], **QUIET)
    with pytest.raises(AttributeError, match="backbone"):
        trainer.fit(module, loader(16, 8))


def test_a_base_finetuning_without_its_methods_says_which() -> None:
    """A BaseFinetuning subclass that does not implement freeze_before_training fails at set-up, naming it."""

    class Nothing(il.callbacks.BaseFinetuning):  # type: ignore[misc,name-defined]
        pass

    module = twins(Backboned)[1]()
    with pytest.raises(NotImplementedError, match="freeze_before_training"):
        il.Trainer(max_epochs=1, callbacks=[Nothing()], **QUIET).fit(module, loader(16, 8))
