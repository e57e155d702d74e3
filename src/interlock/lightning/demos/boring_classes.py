"""Random data and small models for trying things out and for tests (Lightning's ``boring_classes``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from interlock.core.datamodule import DataModule
from interlock.core.module import Module

__all__ = [
    "BoringDataModule",
    "BoringDataModuleNoLen",
    "BoringModel",
    "DemoModel",
    "IterableBoringDataModule",
    "ManualOptimBoringModel",
    "Net",
    "RandomDataset",
    "RandomDictDataset",
    "RandomIterableDataset",
    "RandomIterableDatasetWithLen",
]


class RandomDataset(Dataset[torch.Tensor]):
    """``length`` vectors of ``size`` standard normal values, drawn when made."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomDictDataset(Dataset[dict[str, torch.Tensor]]):
    """As :class:`RandomDataset`, each item ``{"a": x, "b": x + 2}``."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        item = self.data[index]
        return {"a": item, "b": item + 2}

    def __len__(self) -> int:
        return self.len


class RandomIterableDataset(IterableDataset[torch.Tensor]):
    """``count`` vectors of ``size`` normal values, drawn as iterated."""

    def __init__(self, size: int, count: int) -> None:
        self.count, self.size = count, size

    def __iter__(self) -> Iterator[torch.Tensor]:
        for _ in range(self.count):
            yield torch.randn(self.size)


class RandomIterableDatasetWithLen(RandomIterableDataset):
    """:class:`RandomIterableDataset` with a length."""

    def __len__(self) -> int:
        return self.count


class BoringModel(Module):
    """A ``Linear(32, 2)`` trained towards ones with MSE; SGD(lr=0.1) with a ``StepLR``; its own random loaders."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)  # type: ignore[no-any-return]

    def loss(self, preds: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        target = torch.ones_like(preds) if labels is None else labels
        return torch.nn.functional.mse_loss(preds, target)

    def step(self, batch: Any) -> torch.Tensor:
        return self.loss(self(batch))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(RandomDataset(32, 64))


class ManualOptimBoringModel(BoringModel):
    """:class:`BoringModel` with manual optimization."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt = self.optimizers()
        loss = self.step(batch)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return loss


class BoringDataModule(DataModule):
    """256 random vectors split into four 64-item subsets: train, val, test, predict."""

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.random_train = Subset(self.random_full, indices=range(64))
        if stage in ("fit", "validate"):
            self.random_val = Subset(self.random_full, indices=range(64, 128))
        if stage == "test":
            self.random_test = Subset(self.random_full, indices=range(128, 192))
        if stage == "predict":
            self.random_predict = Subset(self.random_full, indices=range(192, 256))

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.random_predict)


class DemoModel(Module):
    """``relu(Linear(32, out_dim)(x))`` whose sum is minimised with Adam."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self(batch).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class BoringDataModuleNoLen(DataModule):
    """Lightning's ``BoringDataModuleNoLen``: the boring data as iterable datasets (loaders without a length)."""

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.random_train = RandomIterableDataset(32, 512)
        if stage in ("fit", "validate"):
            self.random_val = RandomIterableDataset(32, 128)
        if stage == "test":
            self.random_test = RandomIterableDataset(32, 256)
        if stage == "predict":
            self.random_predict = RandomIterableDataset(32, 64)

    def train_dataloader(self) -> DataLoader[torch.Tensor]:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader[torch.Tensor]:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader[torch.Tensor]:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader[torch.Tensor]:
        return DataLoader(self.random_predict)


class Net(torch.nn.Module):
    """Lightning's demo MNIST convolutional net (its layers, in its order)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, 1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = torch.nn.Dropout(0.25)
        self.dropout2 = torch.nn.Dropout(0.5)
        self.fc1 = torch.nn.Linear(9216, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = torch.nn.functional
        x = f.max_pool2d(f.relu(self.conv2(f.relu(self.conv1(x)))), 2)
        x = self.dropout1(x)
        x = f.relu(self.fc1(torch.flatten(x, 1)))
        return f.log_softmax(self.fc2(self.dropout2(x)), dim=1)


class IterableBoringDataModule(DataModule):
    """Lightning's ``IterableBoringDataModule``: per stage, a map-style and an iterable random dataset, two loaders.

    Training cycles the two together (a list of training loaders: ``CombinedLoader``'s ``max_size_cycle``);
    evaluation and prediction run them one after the other (``dataloader_idx`` 0 and 1).
    """

    #: how many vectors each stage's datasets hold (Lightning's sizes)
    SIZES = {"fit": 16, "validate": 32, "test": 64, "predict": 128}

    def setup(self, stage: str) -> None:
        def pair(count: int) -> list[Dataset[torch.Tensor]]:
            return [RandomDataset(4, count), RandomIterableDataset(4, count)]

        if stage == "fit":
            self.train_datasets = pair(self.SIZES["fit"])
        if stage in ("fit", "validate"):
            self.val_datasets = pair(self.SIZES["validate"])
        if stage == "test":
            self.test_datasets = pair(self.SIZES["test"])
        if stage == "predict":
            self.predict_datasets = pair(self.SIZES["predict"])

    def train_dataloader(self) -> list[DataLoader[torch.Tensor]]:
        return [DataLoader(ds) for ds in self.train_datasets]

    def val_dataloader(self) -> list[DataLoader[torch.Tensor]]:
        return [DataLoader(ds) for ds in self.val_datasets]

    def test_dataloader(self) -> list[DataLoader[torch.Tensor]]:
        return [DataLoader(ds) for ds in self.test_datasets]

    def predict_dataloader(self) -> list[DataLoader[torch.Tensor]]:
        return [DataLoader(ds) for ds in self.predict_datasets]
