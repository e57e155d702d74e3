"""Data modules: Lightning's protocol, called by the chart's data.* actions, beside Lightning 2.6.6."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from _lightning_twin import LitTwin, Twin, interlock_trainer, lightning_trainer, loader, pl
from interlock.listeners import ModelCheckpoint


class Recorder:
    """The hooks of a data module, each recording its call."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.restored: Any = None
        self.batches_served = 0

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup:{getattr(stage, 'value', stage)}")

    def teardown(self, stage: str) -> None:
        self.calls.append(f"teardown:{getattr(stage, 'value', stage)}")

    def train_dataloader(self) -> Any:
        self.calls.append("train_dataloader")
        return loader(10)

    def val_dataloader(self) -> Any:
        self.calls.append("val_dataloader")
        return loader(4, seed=1)

    def test_dataloader(self) -> Any:
        self.calls.append("test_dataloader")
        return [loader(4, seed=1), loader(2, seed=2)]

    def predict_dataloader(self) -> Any:
        self.calls.append("predict_dataloader")
        return loader(3, seed=3)

    def state_dict(self) -> dict[str, Any]:
        return {"served": 7}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.restored = state


class Data(Recorder, interlock.DataModule):
    """An interlock data module."""


class LitData(Recorder, pl.LightningDataModule):
    """The same, as a LightningDataModule."""

    def __init__(self) -> None:
        Recorder.__init__(self)
        pl.LightningDataModule.__init__(self)


def hooks(calls: list[str]) -> list[str]:
    """The lifecycle hooks in order, and the set of loaders asked for (Lightning asks in its own order)."""
    return [c for c in calls if not c.endswith("_dataloader")]


@pytest.mark.parametrize("stage", ["fit", "validate", "test", "predict"])
def test_the_hooks_run_in_lightnings_order_for_each_stage(tmp_path: Path, stage: str) -> None:
    """prepare_data, setup(stage), the stage's loaders, teardown(stage): the same calls as under Lightning."""
    lit_dm, dm = LitData(), Data()
    kwargs = {"max_epochs": 1} if stage == "fit" else {}
    getattr(lightning_trainer(tmp_path / "pl", **kwargs), stage)(LitTwin(), datamodule=lit_dm)
    getattr(interlock_trainer(tmp_path / "il", **kwargs), stage)(Twin(), datamodule=dm)
    assert hooks(dm.calls) == hooks(lit_dm.calls) == ["prepare_data", f"setup:{stage}", f"teardown:{stage}"]
    assert sorted(set(dm.calls) - set(hooks(dm.calls))) == sorted(set(lit_dm.calls) - set(hooks(lit_dm.calls)))


def test_a_lightning_datamodule_trains_the_same_weights_as_the_loaders(tmp_path: Path) -> None:
    """fit(datamodule=LightningDataModule) and fit(loaders) give bitwise-equal weights and metrics."""
    with_dm, with_loaders = Twin(), Twin()
    a = interlock_trainer(tmp_path / "dm", max_epochs=2)
    a.fit(with_dm, datamodule=LitData())
    b = interlock_trainer(tmp_path / "loaders", max_epochs=2)
    b.fit(with_loaders, loader(10), loader(4, seed=1))
    assert all(torch.equal(x, y) for x, y in zip(with_dm.parameters(), with_loaders.parameters(), strict=True))
    assert dict(a.state.metrics) == dict(b.state.metrics)


def test_a_datamodule_may_be_passed_in_place_of_the_loaders(tmp_path: Path) -> None:
    """trainer.fit(module, dm) and trainer.test(module, dm) work as in Lightning; test returns one dict per loader."""
    trainer = interlock_trainer(tmp_path, max_epochs=1)
    trainer.fit(Twin(), Data())
    results = trainer.test(Twin(), Data())
    assert [set(r) for r in results] == [{"test_loss/dataloader_idx_0"}, {"test_loss/dataloader_idx_1"}]


def test_loaders_and_a_datamodule_together_are_an_early_error(tmp_path: Path) -> None:
    """Passing both names what was passed and the fix; nothing of the data module runs."""
    dm = Data()
    with pytest.raises(TypeError, match=r"both train_dataloaders and datamodule=Data\(\): pass the loaders or"):
        interlock_trainer(tmp_path).fit(Twin(), loader(10), datamodule=dm)
    with pytest.raises(TypeError, match=r"both dataloaders and datamodule"):
        interlock_trainer(tmp_path).validate(Twin(), loader(4), datamodule=dm)
    with pytest.raises(TypeError, match=r"has none of train_dataloader"):
        interlock_trainer(tmp_path).fit(Twin(), datamodule=object())
    assert dm.calls == []


def test_a_missing_loader_method_is_a_clear_error(tmp_path: Path) -> None:
    """A data module without test_dataloader cannot test: the error names the method."""

    class TrainOnly(interlock.DataModule):
        def train_dataloader(self) -> Any:
            return loader(10)

    with pytest.raises(TypeError, match=r"needs TrainOnly.test_dataloader\(\)"):
        interlock_trainer(tmp_path).test(Twin(), datamodule=TrainOnly())
    trainer = interlock_trainer(tmp_path, max_epochs=1)
    trainer.fit(Twin(), datamodule=TrainOnly())  # no val_dataloader: no validation, as in Lightning
    assert not any(r["stage"] == "val" for r in trainer.state.history)


def test_the_datamodule_state_is_saved_in_checkpoints_and_restored(tmp_path: Path) -> None:
    """state_dict() goes into every checkpoint; a resumed fit gives it back to load_state_dict()."""
    trainer = interlock_trainer(tmp_path, max_epochs=1, listeners=[ModelCheckpoint(save_last=True)])
    trainer.fit(Twin(), datamodule=Data())
    last = trainer.run_dir / "checkpoints" / "last.ckpt"
    dm = Data()
    resumed = interlock_trainer(tmp_path, max_epochs=2)
    resumed.fit(Twin(), datamodule=dm, ckpt_path=last)
    assert dm.restored == {"served": 7}
    assert "datamodule" not in resumed.state.data  # kept in the checkpoint, not in the live state


def test_the_datamodule_calls_are_chart_actions() -> None:
    """data.prepare and data.load run in set-up, data.teardown in teardown: visible on the chart."""
    chart = interlock.load_chart()
    assert {"data.prepare", "data.load"} <= set(chart.states["setup"].entry)
    assert "data.teardown" in chart.states["teardown"].entry
