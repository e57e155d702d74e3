"""The built-in example: an MLP on the 8x8 handwritten digits (shipped, never downloaded).

The data is the UCI optical-recognition digits set as bundled by scikit-learn
(1,797 images), stored in ``digits.npz`` beside this file.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from interlock.core.module import Module

__all__ = ["DigitsClassifier", "DigitsData", "load_digits"]


def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """Images scaled to [0, 1] as ``float32 (N, 64)`` and labels as ``int64 (N,)``."""
    with resources.files("interlock.examples").joinpath("digits.npz").open("rb") as f:
        data = np.load(f)
        images, labels = data["images"], data["labels"]
    return torch.from_numpy(images.astype(np.float32) / 16.0), torch.from_numpy(labels.astype(np.int64))


class DigitsData:
    """Train / validation / test loaders over a fixed, seeded split (70% / 15% / 15%)."""

    def __init__(self, batch_size: int = 32, num_workers: int = 0, split_seed: int = 0) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"DigitsData(batch_size={batch_size!r}) must be an int >= 1")
        self.batch_size, self.num_workers = batch_size, num_workers
        x, y = load_digits()
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(split_seed))
        n_train, n_val = int(0.7 * len(x)), int(0.15 * len(x))
        parts = order[:n_train], order[n_train : n_train + n_val], order[n_train + n_val :]
        self.train_set, self.val_set, self.test_set = (TensorDataset(x[i], y[i]) for i in parts)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.val_set, batch_size=256, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.test_set, batch_size=256, num_workers=self.num_workers)

    def predict_dataloader(self) -> DataLoader[Any]:
        return self.test_dataloader()


class DigitsClassifier(Module):
    """64 -> hidden -> 10 MLP with dropout; reports loss and accuracy."""

    def __init__(self, hidden: int = 128, lr: float = 0.05, dropout: float = 0.1, step_size: int = 10) -> None:
        super().__init__()
        self.lr, self.step_size = lr, step_size
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, hidden),
            torch.nn.ReLU(),
            torch.nn.Dropout(dropout),
            torch.nn.Linear(hidden, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.net(x)
        return logits

    def _shared(self, batch: Any) -> dict[str, torch.Tensor]:
        x, y = batch
        logits = self(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        return {"loss": loss, "acc": (logits.argmax(dim=1) == y).float().mean()}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        return self._shared(batch)

    def test_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        return self._shared(batch)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        logits: torch.Tensor = self(batch[0])
        return logits.argmax(dim=1)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=self.step_size, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": sched}
