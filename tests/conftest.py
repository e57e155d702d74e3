"""Shared fixtures: a tiny model and data that train in milliseconds."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock

# A shell that starts a command in the background without job control (`make test &` in a script) starts it
# with SIGINT ignored, and an ignored signal stays ignored in every process started from it: the runs the
# Ctrl-C tests interrupt would never see their SIGINT. A handler here is reset to the default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The files that take longest (measured with --durations=0), run first: `make test` hands whole files to two
# workers in collection order, so a long file collected last would leave one worker waiting for the other.
# A file not named here keeps its place after these; the order changes no result, only when each file runs.
SLOWEST_FIRST = (
    "test_dcp.py",
    "test_bench_tool.py",
    "test_view.py",
    "test_preemption.py",
    "test_resume.py",
    "test_ddp.py",
    "test_runs.py",
    "test_replay.py",
    "test_sharded_writer.py",
    "test_reliability_io.py",
    "test_faults_tool.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the slowest files to the front, keeping the order within each file and among the rest."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


class TinyModule(interlock.Module):
    """A 4 -> 8 -> 2 MLP with dropout; returns loss (and acc in evaluation)."""

    def __init__(self, lr: float = 0.1, dropout: float = 0.0, scheduler: bool = False) -> None:
        super().__init__()
        self.lr, self.scheduler = lr, scheduler
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(8, 2)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        out = self(x)
        return {"loss": torch.nn.functional.cross_entropy(out, y), "acc": (out.argmax(1) == y).float().mean()}

    test_step = validation_step

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0])  # the inputs of an (x, y) batch (the default would pass forward the pair, as Lightning)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        if not self.scheduler:
            return opt
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)}


def make_data(n: int = 64, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def loader(n: int = 64, batch_size: int = 16, shuffle: bool = False, seed: int = 0) -> DataLoader[Any]:
    return DataLoader(make_data(n, seed), batch_size=batch_size, shuffle=shuffle)


@pytest.fixture
def tiny() -> TinyModule:
    torch.manual_seed(0)
    return TinyModule()


@pytest.fixture
def trainer_factory(tmp_path: Any) -> Any:
    def make(**kwargs: Any) -> interlock.Trainer:
        kwargs = {**only(*kwargs.pop("listeners", [])), **kwargs}
        kwargs.setdefault("default_root_dir", tmp_path)
        kwargs.setdefault("accelerator", "cpu")
        return interlock.Trainer(**kwargs)

    return make


class NoPredictData:
    """A data class with training data only (no predict_dataloader)."""

    def train_dataloader(self) -> DataLoader[Any]:
        return loader()


def only(*listeners: Any) -> dict[str, Any]:
    """Trainer flags that install exactly ``listeners``: the defaults are switched off, as a test means it."""
    from interlock.listeners import ModelCheckpoint, ProgressBar

    return {
        "listeners": list(listeners),
        "logger": False,
        "enable_trace": False,
        "enable_model_summary": False,
        "enable_progress_bar": any(isinstance(x, ProgressBar) for x in listeners),
        "enable_checkpointing": any(isinstance(x, ModelCheckpoint) for x in listeners),
    }
