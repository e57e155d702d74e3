"""Lightning's WeightAveraging / EMAWeightAveraging: averaged validation, checkpoints, and exact resumes anywhere."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

import interlock.lightning as il
from interlock.core.errors import CheckpointError
from interlock.lightning.callbacks import Callback, EMAWeightAveraging, ModelCheckpoint, WeightAveraging
from interlock.plugins.checkpoint_io import TorchCheckpointIO

QUIET: dict[str, Any] = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


class Net(il.LightningModule):
    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Dropout(dropout), torch.nn.Linear(8, 1)
        )
        self.val_seen: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.val_seen.append(float(loss))
        self.log("val_loss", loss)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def loaders(shuffle: bool = True) -> tuple[DataLoader[Any], DataLoader[Any]]:
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g))
    return DataLoader(ds, batch_size=8, shuffle=shuffle), DataLoader(ds, batch_size=20)


def fit(root: Path, averaging: Any, ckpt_path: str | None = None, dropout: float = 0.3) -> tuple[Net, il.Trainer]:
    every = ModelCheckpoint(dirpath=str(root / "ck"), every_n_train_steps=1, save_top_k=-1)
    trainer = il.Trainer(
        max_epochs=3, callbacks=[averaging, every], default_root_dir=str(root), num_sanity_val_steps=0, **QUIET
    )
    torch.manual_seed(3)
    model = Net(dropout)
    trainer.fit(model, *loaders(), ckpt_path=ckpt_path)
    return model, trainer


def ema() -> EMAWeightAveraging:
    return EMAWeightAveraging(decay=0.7, update_starting_at_step=1, update_every_n_steps=2, update_starting_at_epoch=1)


@settings(max_examples=5, deadline=None)
@given(st.integers(1, 14))
def test_a_resume_from_any_step_ends_as_the_whole_run(tmp_path_factory: pytest.TempPathFactory, step: int) -> None:
    """With EMA, shuffling and dropout, a fit resumed from any step's file ends as the whole run, average and all."""
    root = tmp_path_factory.mktemp("whole")
    whole_avg = ema()
    whole, _ = fit(root, whole_avg)
    (path,) = [p for p in os.listdir(root / "ck") if p.endswith(f"-step={step}.ckpt")]
    again_avg = ema()
    again, trainer = fit(tmp_path_factory.mktemp("again"), again_avg, ckpt_path=str(root / "ck" / path))
    assert trainer.global_step == 15
    for a, b in zip(whole.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert whole_avg._average_model is not None and again_avg._average_model is not None
    for (k, a), (_, b) in zip(
        whole_avg._average_model.state_dict().items(), again_avg._average_model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), k
    assert again.val_seen == whole.val_seen[-len(again.val_seen) :]


def test_validation_and_the_end_see_the_average(tmp_path: Path) -> None:
    """Validation runs on the averaged weights and the module ends with them; a checkpoint holds both states."""
    averaging = WeightAveraging()
    model, _ = fit(tmp_path, averaging, dropout=0.0)
    assert averaging._average_model is not None
    averaged = {k.removeprefix("module."): v for k, v in averaging._average_model.state_dict().items()}
    for name, value in model.state_dict().items():
        assert torch.equal(value, averaged[name]), name
    ckpt = torch.load(tmp_path / "ck" / "epoch=2-step=15.ckpt", weights_only=False)
    assert int(ckpt["averaging_state"]["n_averaged"]) == 15
    assert ckpt["callbacks"]["WeightAveraging"] == {"latest_update_step": 15}
    assert not all(torch.equal(ckpt["state_dict"][k], v) for k, v in ckpt["current_model_state"].items())
    # the file's averaged weights are what the module validated with at the epoch's end
    check = Net()
    check.load_state_dict(ckpt["state_dict"])
    check.eval()
    x, y = loaders()[1].dataset.tensors  # type: ignore[attr-defined]
    with torch.no_grad():
        loss = float(torch.nn.functional.mse_loss(check.net(x), y))
    assert loss == pytest.approx((model.val_seen[-1] + model.val_seen[-2]) / 2, rel=1e-6)  # two batches of 20


class SeesWeights(Callback):
    def __init__(self) -> None:
        self.seen: torch.Tensor | None = None

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self.seen = pl_module.net[0].weight.detach().clone()


def test_callbacks_load_after_the_module_weights(tmp_path: Path) -> None:
    """A callback's on_load_checkpoint sees the module with the file's weights already in it (Lightning's order)."""
    fit(tmp_path / "a", WeightAveraging())
    path = tmp_path / "a" / "ck" / "epoch=0-step=3.ckpt"
    saved = torch.load(path, weights_only=False)["current_model_state"]["net.0.weight"]
    probe = SeesWeights()
    trainer = il.Trainer(
        max_epochs=1, callbacks=[probe], num_sanity_val_steps=0, default_root_dir=str(tmp_path), **QUIET
    )
    torch.manual_seed(3)
    trainer.fit(Net(), *loaders(), ckpt_path=str(path))
    # the file's state_dict is the average (WeightAveraging put it there); no WeightAveraging here to swap it
    assert probe.seen is not None and not torch.equal(probe.seen, saved)
    assert torch.equal(probe.seen, torch.load(path, weights_only=False)["state_dict"]["net.0.weight"])


def test_a_checkpoint_without_averaging_starts_the_average_at_its_weights(tmp_path: Path) -> None:
    """Resuming with WeightAveraging from a file saved without it warns and starts the average from its weights."""
    plain = ModelCheckpoint(dirpath=str(tmp_path / "plain"), every_n_train_steps=5, save_top_k=-1)
    trainer = il.Trainer(
        max_epochs=1, callbacks=[plain], num_sanity_val_steps=0, default_root_dir=str(tmp_path), **QUIET
    )
    trainer.fit(Net(), *loaders())
    averaging = WeightAveraging()
    with pytest.warns(UserWarning, match="not created with WeightAveraging"):
        fit(tmp_path / "b", averaging, ckpt_path=str(tmp_path / "plain" / "epoch=0-step=5.ckpt"))


def test_should_update_of_the_ema_is_lightnings() -> None:
    """EMAWeightAveraging updates on every n-th step from its start step, and at epochs from its start epoch."""
    e = EMAWeightAveraging(update_every_n_steps=3, update_starting_at_step=4, update_starting_at_epoch=2)
    assert [s for s in range(12) if e.should_update(step_idx=s)] == [6, 9]
    assert [s for s in range(5) if e.should_update(epoch_idx=s)] == [2, 3, 4]
    assert not EMAWeightAveraging(update_every_n_steps=0).should_update(step_idx=0)
    assert WeightAveraging().should_update(step_idx=0) and not WeightAveraging().should_update(epoch_idx=0)


def test_a_refused_optimizer_state_leaves_the_module_as_it_was(tmp_path: Path) -> None:
    """Weights loaded early for a callback's on_load_checkpoint are put back when the optimizer state is refused."""
    fit(tmp_path / "a", WeightAveraging())
    path = tmp_path / "a" / "ck" / "epoch=0-step=3.ckpt"
    io = TorchCheckpointIO()
    payload = io.load_checkpoint(path)
    model = Net()
    payload["optimizer_states"][0] = torch.optim.Adam(model.parameters()).state_dict()  # another optimizer's state
    bad = tmp_path / "bad.ckpt"
    io.save_checkpoint(payload, bad)
    torch.manual_seed(3)
    module = Net()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    trainer = il.Trainer(max_epochs=3, callbacks=[WeightAveraging()], default_root_dir=str(tmp_path / "b"), **QUIET)
    with pytest.raises(CheckpointError, match="optimizer_states"):
        trainer.fit(module, *loaders(), ckpt_path=str(bad))
    for name, value in module.state_dict().items():
        assert torch.equal(value, before[name]), name
