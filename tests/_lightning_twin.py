"""One tiny regression model, as a LightningModule and as its interlock port, for side-by-side tests."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock
from conftest import only

pl = __import__("pytest").importorskip("pytorch_lightning")
logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


def data(n: int = 10, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g))


def loader(n: int = 10, seed: int = 0, batch_size: int = 1) -> DataLoader[Any]:
    return DataLoader(data(n, seed), batch_size=batch_size)


def _loss(layer: torch.nn.Module, batch: Any) -> torch.Tensor:
    return torch.nn.functional.mse_loss(layer(batch[0]), batch[1])


class LitTwin(pl.LightningModule):  # type: ignore[name-defined]
    """Records (sanity?, (epoch, train batch), batch_idx, dataloader_idx) for every validation batch."""

    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(3, 1)
        self.calls: list[tuple[Any, ...]] = []
        self.at: tuple[int, int] = (0, -1)
        self.stop_at = stop_at

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)  # type: ignore[no-any-return]

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0])  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.at = (self.current_epoch, batch_idx)
        if self.stop_at is not None and self.global_step + 1 == self.stop_at:
            self.trainer.should_stop = True
        return _loss(self.layer, batch)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.calls.append((self.trainer.sanity_checking, self.at, batch_idx, dataloader_idx))
        self.log("val_loss", _loss(self.layer, batch), batch_size=len(batch[0]))

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("test_loss", _loss(self.layer, batch), batch_size=len(batch[0]))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Twin(interlock.Module):
    """The port: the same weights, the same losses."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)  # type: ignore[no-any-return]

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0])  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return _loss(self.layer, batch)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return _loss(self.layer, batch)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return _loss(self.layer, batch)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def lightning_trainer(root: Path, **kwargs: Any) -> Any:
    warnings.filterwarnings("ignore", module="pytorch_lightning")
    warnings.filterwarnings("ignore", module="lightning_fabric")
    return pl.Trainer(
        accelerator="cpu",
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=root,
        **kwargs,
    )


def interlock_trainer(root: Path, **kwargs: Any) -> interlock.Trainer:
    flags = {**only(*kwargs.pop("listeners", [])), **kwargs}  # exactly the listeners given, no defaults
    return interlock.Trainer(accelerator="cpu", default_root_dir=root, **flags)
