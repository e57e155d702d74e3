"""reload_dataloaders_every_n_epochs asks for the loaders again on Lightning's schedule, and resumes exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

import interlock
from interlock.lightning import LightningDataModule
from interlock.listeners import ModelCheckpoint

QUIET: dict[str, Any] = {
    "logger": False,
    "enable_progress_bar": False,
    "enable_trace": False,
    "enable_model_summary": False,
    "accelerator": "cpu",
    "num_sanity_val_steps": 0,
}


def _data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g))


class Curriculum(LightningDataModule):
    """Loaders that grow with the epoch they are asked for at (``self.trainer.current_epoch``)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, int]] = []

    @property
    def epoch(self) -> int:
        return int(self.trainer.current_epoch) if self.trainer is not None else 0

    def train_dataloader(self) -> DataLoader[Any]:
        self.asked.append(("train", self.epoch))
        return DataLoader(_data(4 + 2 * self.epoch, self.epoch), batch_size=2, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        self.asked.append(("val", self.epoch))
        return DataLoader(_data(2 + self.epoch, 50 + self.epoch), batch_size=2)


class Seen(interlock.Module):
    """Dropout on the global RNG; records each batch."""

    def __init__(self, dm: Curriculum) -> None:
        super().__init__()
        self.layer, self.drop = torch.nn.Linear(3, 1), torch.nn.Dropout(0.3)
        self.seen: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.seen.append((self.current_epoch, batch_idx, round(float(x[0, 0]), 6)))
        return torch.nn.functional.mse_loss(self.layer(self.drop(x)), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _schedule_run(root: Path, every: int) -> tuple[Curriculum, Seen, list[Path]]:
    torch.manual_seed(0)
    dm = Curriculum()
    whole = Seen(dm)
    saver = ModelCheckpoint(every_n_train_steps=1, save_top_k=-1)
    flags = {"max_epochs": 4, "reload_dataloaders_every_n_epochs": every, **QUIET}
    interlock.Trainer(default_root_dir=root, callbacks=[saver], **flags).fit(whole, datamodule=dm)
    return dm, whole, sorted(root.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime_ns)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(every=st.integers(1, 2), pick=st.floats(0, 1))
def test_a_resume_from_any_step_with_reloaded_loaders_ends_bitwise(
    tmp_path_factory: pytest.TempPathFactory, every: int, pick: float
) -> None:
    """A resume asks for the loaders of the epoch it continues, then follows the schedule: same batches, weights.

    With ``every=2`` a resume inside an epoch that did not reload asks for that epoch's loader (Lightning's
    way), which an epoch-dependent loader makes different: it warns, and the check is the reload epochs'.
    """
    dm, whole, files = _schedule_run(tmp_path_factory.mktemp("whole"), every)
    assert [e for k, e in dm.asked if k == "train"] == list(range(0, 4, every))
    chosen = files[min(int(pick * len(files)), len(files) - 1)]
    step = int(chosen.stem.split("step=")[1])
    epoch = whole.seen[step - 1][0]
    assume(epoch % every == 0)  # inside an epoch that reloaded (the others warn: the next test)
    torch.manual_seed(7)
    dm2 = Curriculum()
    resumed = Seen(dm2)
    flags = {"max_epochs": 4, "reload_dataloaders_every_n_epochs": every, **QUIET}
    interlock.Trainer(default_root_dir=tmp_path_factory.mktemp("resumed"), **flags).fit(
        resumed, datamodule=dm2, ckpt_path=str(chosen)
    )
    assert resumed.seen == whole.seen[step:]
    assert torch.equal(resumed.layer.weight, whole.layer.weight) and torch.equal(resumed.layer.bias, whole.layer.bias)


def test_a_resume_inside_an_epoch_that_did_not_reload_warns(tmp_path: Path) -> None:
    """Every 2 epochs, a resume inside epoch 1 asks for epoch 1's loader where the run used epoch 0's: it says so."""
    _, whole, files = _schedule_run(tmp_path / "whole", 2)
    inside = next(p for p in files if whole.seen[int(p.stem.split("step=")[1]) - 1][:2] == (1, 0))
    dm = Curriculum()
    trainer = interlock.Trainer(max_epochs=4, reload_dataloaders_every_n_epochs=2, default_root_dir=tmp_path, **QUIET)
    with pytest.warns(UserWarning, match=r"resuming in epoch 1 asks train_dataloader\(\) .* asked for in epoch 0"):
        trainer.fit(Seen(dm), datamodule=dm, ckpt_path=str(inside))
    assert ("train", 1) in dm.asked


def test_the_number_of_validation_loaders_must_stay_the_same(tmp_path: Path) -> None:
    """A reload that changes how many validation loaders there are is an error naming the rule."""

    class Grows(Curriculum):
        def val_dataloader(self) -> Any:  # type: ignore[override]
            return [DataLoader(_data(2, i), batch_size=2) for i in range(1 + self.epoch)]

    dm = Grows()

    class Indexed(Seen):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            super().validation_step(batch, batch_idx)

    trainer = interlock.Trainer(max_epochs=3, reload_dataloaders_every_n_epochs=1, default_root_dir=tmp_path, **QUIET)
    with pytest.raises(ValueError, match=r"returned 2 loader\(s\) at epoch 1, and the fit started with 1"):
        trainer.fit(Indexed(dm), datamodule=dm)


def test_a_negative_interval_is_refused() -> None:
    """reload_dataloaders_every_n_epochs below 0 names the flag and its meaning."""
    with pytest.raises(ValueError, match=r"reload_dataloaders_every_n_epochs.*0: never"):
        interlock.Trainer(reload_dataloaders_every_n_epochs=-1)
