"""The Lightning side: the LightningModule the port was made from, and a data module."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch

from parity.body import Body, HookRecorder, loaders, with_overrides
from parity.case import DataSpec, ModuleSpec


class LitModel(Body, pl.LightningModule):
    def __init__(self, spec: ModuleSpec) -> None:
        super().__init__()
        self._build(spec)
        self.automatic_optimization = not spec.manual

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, acc = self._scores(batch, "training_step")
        if self.spec.manual:
            opts = self.optimizers()
            opts = opts if isinstance(opts, list) else [opts]
            for opt in opts:
                opt.zero_grad()
            self.manual_backward(loss)
            for opt in opts:
                opt.step()
        if self.spec.style == "log_epoch":
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        elif self.spec.style == "log_dict":
            self.log_dict({"train_loss": loss, "train_acc": acc})
        else:
            self.log("train_loss", loss)
        return None if self.spec.manual else loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        loss, acc = self._scores(batch, "validation_step")
        self.log_dict({"val_loss": loss, "val_acc": acc})

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        loss, acc = self._scores(batch, "test_step")
        self.log_dict({"test_loss": loss, "test_acc": acc})


class LitHooked(HookRecorder, LitModel):  # type: ignore[misc,valid-type]
    pass


class LitData(pl.LightningDataModule):
    def __init__(self, data: DataSpec) -> None:
        super().__init__()
        self.data = data
        self.made: dict[str, Any] = {}

    def setup(self, stage: str) -> None:
        self.made = loaders(self.data)

    def train_dataloader(self) -> Any:
        return self.made["train"]

    def val_dataloader(self) -> Any:
        return self.made["val"]

    def test_dataloader(self) -> Any:
        return self.made["test"]

    def predict_dataloader(self) -> Any:
        return self.made["predict"]


def lit_module(spec: ModuleSpec) -> LitModel:
    return with_overrides(LitHooked if spec.hooks else LitModel, spec)(spec)  # type: ignore[no-any-return]


__all__ = ["LitData", "LitModel", "lit_module", "torch"]
