"""The LearningRateFinder callback sweeps as the fit starts and refuses, by name, a sweep it cannot run there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock.lightning as il
from interlock.lightning.callbacks import LearningRateFinder, ModelCheckpoint
from interlock.lightning.utilities import MisconfigurationException

QUIET: dict[str, Any] = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


class Net(il.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.lr = 0.01
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def data() -> DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g)), batch_size=4)


def test_the_fit_trains_with_the_suggestion_from_the_same_start(tmp_path: Path) -> None:
    """After the sweep, the fit starts from the module's first weights and the RNG, at the suggested rate."""
    torch.manual_seed(0)
    swept, finder = Net(), LearningRateFinder(min_lr=1e-4, max_lr=0.3, num_training_steps=30, early_stop_threshold=None)
    trainer = il.Trainer(max_epochs=2, callbacks=[finder], default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(swept, data())
    lr = finder.optimal_lr.suggestion()
    assert lr is not None and swept.lr == lr
    assert [g["lr"] for g in trainer.optimizers[0].param_groups] == [lr]
    # the same fit without the finder, at that rate from the same first weights, ends bitwise the same
    torch.manual_seed(0)
    plain = Net()
    plain.lr = lr
    il.Trainer(max_epochs=2, default_root_dir=str(tmp_path / "plain"), **QUIET).fit(plain, data())
    for a, b in zip(swept.state_dict().values(), plain.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_sweep_elsewhere_than_the_fit_start_is_refused(tmp_path: Path) -> None:
    """A subclass sweeping at epoch starts (Lightning's milestones example) is refused, naming Tuner.lr_find."""

    class Milestones(LearningRateFinder):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            return

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self.lr_find(trainer, pl_module)

    trainer = il.Trainer(max_epochs=1, callbacks=[Milestones()], default_root_dir=str(tmp_path), **QUIET)
    with pytest.raises(NotImplementedError, match=r"Tuner\(trainer\)\.lr_find"):
        trainer.fit(Net(), data())


def test_resuming_with_a_finder_is_refused(tmp_path: Path) -> None:
    """fit(ckpt_path=...) with the finder is refused before anything runs: its sweep would reset the rate mid-run."""
    every = ModelCheckpoint(dirpath=str(tmp_path / "ck"), every_n_train_steps=4, save_top_k=-1)
    il.Trainer(max_epochs=1, callbacks=[every], default_root_dir=str(tmp_path), **QUIET).fit(Net(), data())
    trainer = il.Trainer(max_epochs=2, callbacks=[LearningRateFinder()], default_root_dir=str(tmp_path), **QUIET)
    with pytest.raises(NotImplementedError, match="remove the callback when resuming"):
        trainer.fit(Net(), data(), ckpt_path=str(tmp_path / "ck" / "epoch=0-step=4.ckpt"))


def test_a_bad_mode_is_lightnings_error() -> None:
    """An unknown mode raises Lightning's MisconfigurationException naming the modes."""
    with pytest.raises(MisconfigurationException, match="linear"):
        LearningRateFinder(mode="cosine")


def test_under_fast_dev_run_nothing_is_swept(tmp_path: Path) -> None:
    """With fast_dev_run the sweep is skipped (Lightning's warning) and the rate is left alone."""
    finder = LearningRateFinder()
    trainer = il.Trainer(fast_dev_run=True, callbacks=[finder], default_root_dir=str(tmp_path), **QUIET)
    model = Net()
    with pytest.warns(UserWarning, match="fast_dev_run"):
        trainer.fit(model, data())
    assert finder.optimal_lr is None and model.lr == 0.01
