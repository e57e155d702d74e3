"""Data on the module, as Lightning has it: *_dataloader() methods, prepare_data, configure_model and the
batch-transfer hooks, called at Lightning's moments (weights bitwise equal to Lightning 2.6.6's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import interlock
from _lightning_twin import interlock_trainer, lightning_trainer, pl
from conftest import only


class RandomDataset(Dataset[torch.Tensor]):
    """Lightning's BoringModel data: drawn from the global RNG when the loader is made."""

    def __init__(self, size: int, length: int) -> None:
        self.data = torch.randn(length, size)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]


class Boring:
    """Lightning's bug-report model: its loaders are methods that draw their data when called."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)
        self.calls: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)  # type: ignore[no-any-return]

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self(batch).sum()

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("valid_loss", self(batch).sum())

    def test_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("test_loss", self(batch).sum())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)  # type: ignore[attr-defined]

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup({getattr(stage, 'value', stage)})")

    def configure_model(self) -> None:
        self.calls.append("configure_model")

    def train_dataloader(self) -> DataLoader[Any]:
        self.calls.append("train_dataloader")
        return DataLoader(RandomDataset(8, 64), batch_size=2, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        self.calls.append("val_dataloader")
        return DataLoader(RandomDataset(8, 16), batch_size=4)

    def test_dataloader(self) -> DataLoader[Any]:
        self.calls.append("test_dataloader")
        return DataLoader(RandomDataset(8, 16), batch_size=4)


def pair(body: type = Boring) -> tuple[Any, Any]:
    torch.manual_seed(0)
    lit = type("Lit", (body, pl.LightningModule), {})()
    torch.manual_seed(0)
    port = type("Port", (body, interlock.Module), {})()
    return lit, port


def test_module_dataloaders_train_bitwise_as_lightning(tmp_path: Path) -> None:
    """trainer.fit(model) takes the module's loaders, made after setup/configure_model with Lightning's RNG."""
    lit, port = pair()
    torch.manual_seed(1)
    lt = lightning_trainer(tmp_path / "pl", max_epochs=2)
    lt.fit(lit)
    torch.manual_seed(1)
    it = interlock_trainer(tmp_path / "il", max_epochs=2)
    it.fit(port)
    for key, value in lit.state_dict().items():
        assert torch.equal(port.state_dict()[key], value), key
    assert it.state.metrics["valid_loss"] == pytest.approx(float(lt.callback_metrics["valid_loss"]), rel=1e-6)
    assert port.calls == lit.calls == [
        "prepare_data", "setup(fit)", "configure_model", "val_dataloader", "train_dataloader",
    ]  # fmt: skip
    torch.manual_seed(2)
    theirs = lt.test(lit, verbose=False)[0]["test_loss"]
    torch.manual_seed(2)
    assert it.test(port)[0]["test_loss"] == pytest.approx(theirs, rel=1e-6)


def test_fit_without_loaders_or_a_train_dataloader_names_the_method(tmp_path: Path) -> None:
    """A module without train_dataloader and no loaders passed: the error names train_dataloader()."""

    class Bare(interlock.Module):
        def training_step(self, batch: Any, batch_idx: int) -> Any: ...

        def configure_optimizers(self) -> Any: ...

    with pytest.raises(TypeError, match=r"train_dataloader\(\) on Bare"):
        interlock_trainer(tmp_path).fit(Bare())


class Transfer(Boring):
    """Batch-transfer hooks that record their order and alter the batch on the way."""

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls.append(f"before({dataloader_idx})")
        return batch * 2

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self.calls.append(f"transfer({device.type},{dataloader_idx})")
        return batch.to(device) + 1

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls.append(f"after({dataloader_idx})")
        return batch / 3


def without_loaders(calls: list[str]) -> list[str]:
    return [c for c in calls if not c.endswith("_dataloader")]


def test_batch_transfer_hooks_run_in_lightnings_order_and_change_the_batch(tmp_path: Path) -> None:
    """before -> transfer -> after for every batch (train and validation); the weights match Lightning's."""
    lit, port = pair(Transfer)
    torch.manual_seed(1)
    lightning_trainer(tmp_path / "pl", max_epochs=1, limit_train_batches=3, limit_val_batches=2).fit(lit)
    torch.manual_seed(1)
    interlock_trainer(tmp_path / "il", max_epochs=1, limit_train_batches=3, limit_val_batches=2).fit(port)
    # interlock makes the training loader at set-up; Lightning after the sanity check (whose RNG it isolates)
    assert without_loaders(port.calls) == without_loaders(lit.calls)
    assert port.calls.count("transfer(cpu,0)") == 2 + 3 + 2  # sanity, training, validation batches
    for key, value in lit.state_dict().items():
        assert torch.equal(port.state_dict()[key], value), key


def test_datamodule_transfer_hooks_win_over_the_modules(tmp_path: Path) -> None:
    """A data module defining on_before_batch_transfer is used in place of the module's (Lightning's rule)."""
    seen: list[str] = []

    class DM(interlock.DataModule):
        def train_dataloader(self) -> Any:
            return DataLoader(RandomDataset(8, 8), batch_size=4)

        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            seen.append("dm")
            return batch

    _, port = pair(Transfer)
    interlock_trainer(tmp_path, max_epochs=1).fit(port, datamodule=DM())
    assert seen == ["dm", "dm"] and "before(0)" not in port.calls and port.calls.count("after(0)") == 2


def test_prepare_data_per_node_false_runs_on_global_rank_zero(tmp_path: Path) -> None:
    """The module's prepare_data runs in the one process of a single-device run, whatever prepare_data_per_node."""
    _, port = pair()
    port.prepare_data_per_node = False
    interlock_trainer(tmp_path, max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0).fit(port)
    assert port.calls.count("prepare_data") == 1


def test_configure_model_builds_layers_the_optimizer_then_trains(tmp_path: Path) -> None:
    """Layers made in configure_model exist before configure_optimizers and are trained."""

    class Lazy(interlock.Module):
        def configure_model(self) -> None:
            if not hasattr(self, "head"):
                self.head = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.head(batch).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> Any:
            return DataLoader(RandomDataset(8, 8), batch_size=4)

    m = Lazy()
    interlock_trainer(tmp_path, max_epochs=1).fit(m)
    before = torch.nn.Linear(8, 1)
    assert m.head.weight.shape == before.weight.shape and m.head.weight.grad is None


class _Rows(torch.utils.data.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((4,), float(i))


def test_a_stage_releases_its_loader_workers(tmp_path: Path) -> None:
    """After fit and validate with num_workers=2, no loader iterator or worker process is left for the GC to stop."""
    import gc
    import multiprocessing

    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    class Mean(interlock.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return self.lin(batch).pow(2).mean()

        def validation_step(self, batch: torch.Tensor, batch_idx: int) -> dict[str, torch.Tensor]:
            return {"val_loss": self.lin(batch).pow(2).mean()}

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.DataLoader(_Rows(), batch_size=4, num_workers=2, shuffle=True)
    trainer = interlock.Trainer(**only(), max_epochs=2, default_root_dir=str(tmp_path))
    trainer.fit(Mean(), data, data)
    trainer.validate(Mean(), data)
    alive = [o for o in gc.get_objects() if isinstance(o, _MultiProcessingDataLoaderIter) and not o._shutdown]
    assert alive == []  # before: the last epoch's iterator, kept by the run until a collection that waited 5 s
    assert multiprocessing.active_children() == []
