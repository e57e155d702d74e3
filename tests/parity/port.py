"""The interlock side: the port of ``lit.LitModel`` as docs/porting.md tells a user to write it.

``style="return"`` is today's port (the step returns its scalars: ``train_loss``, ``val_loss``,
``val_acc``); the ``log*`` styles keep Lightning's ``self.log`` calls unchanged (pending
``interlock.Module.log``). Hooks and manual optimization are written exactly as in Lightning.
"""

from __future__ import annotations

from typing import Any

import interlock
from parity.body import Body, HookRecorder, loaders, with_overrides
from parity.case import DataSpec, ModuleSpec


class PortModel(Body, interlock.Module):
    def __init__(self, spec: ModuleSpec) -> None:
        super().__init__()
        self._build(spec)
        if spec.manual:
            self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, acc = self._scores(batch, "training_step")
        if self.spec.manual:
            opts = self.optimizers()  # type: ignore[attr-defined]
            opts = opts if isinstance(opts, list) else [opts]
            for opt in opts:
                opt.zero_grad()
            self.manual_backward(loss)  # type: ignore[attr-defined]
            for opt in opts:
                opt.step()
        if self.spec.style == "return":
            return None if self.spec.manual else loss  # metric train_loss
        log: Any = self
        if self.spec.style == "log_epoch":
            log.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        elif self.spec.style == "log_dict":
            log.log_dict({"train_loss": loss, "train_acc": acc})
        else:
            log.log("train_loss", loss)
        return None if self.spec.manual else loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        loss, acc = self._scores(batch, "validation_step")
        if self.spec.style == "return":
            return {"loss": loss, "acc": acc}  # metrics val_loss, val_acc
        self.log_dict({"val_loss": loss, "val_acc": acc})  # type: ignore[attr-defined]
        return None

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        loss, acc = self._scores(batch, "test_step")
        if self.spec.style == "return":
            return {"loss": loss, "acc": acc}  # metrics test_loss, test_acc
        self.log_dict({"test_loss": loss, "test_acc": acc})  # type: ignore[attr-defined]
        return None


class PortHooked(HookRecorder, PortModel):  # type: ignore[misc,valid-type]
    pass


class PortData(getattr(interlock, "DataModule", object)):  # type: ignore[misc]
    """The LightningDataModule, ported: the same methods on ``interlock.DataModule``."""

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


def port_module(spec: ModuleSpec) -> PortModel:
    return with_overrides(PortHooked if spec.hooks else PortModel, spec)(spec)  # type: ignore[no-any-return]
