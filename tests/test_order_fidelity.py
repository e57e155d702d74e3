"""Hook order and fidelity against pytorch-lightning 2.6.6: checkpoint loading, failures, metrics per stage."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from conftest import loader
from interlock.listeners import ModelCheckpoint

pl = pytest.importorskip("pytorch_lightning")
for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
    logging.getLogger(_name).setLevel(logging.ERROR)

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


class Records:
    """Mixed into both modules: the order of setup, on_load_checkpoint and configure_optimizers."""

    seen: list[str]
    net: torch.nn.Module

    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.seen = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        return None

    def setup(self, stage: str) -> None:
        self.seen.append(f"setup:{getattr(stage, 'value', stage)}")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.seen.append("on_load_checkpoint")

    def configure_optimizers(self) -> Any:
        self.seen.append("configure_optimizers")
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


class Lit(Records, pl.LightningModule):  # type: ignore[misc,name-defined]
    def __init__(self) -> None:
        super().__init__()
        self._build()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1]))


class Port(Records, interlock.Module):
    def __init__(self) -> None:
        super().__init__()
        self._build()

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])}


def _lit(tmp: Path, **kw: Any) -> Any:
    return pl.Trainer(**{"default_root_dir": tmp, "max_epochs": 1, "num_sanity_val_steps": 0, **QUIET, **kw})


def _ours(tmp: Path, **kw: Any) -> interlock.Trainer:
    return interlock.Trainer(**{"default_root_dir": tmp, "max_epochs": 1, "num_sanity_val_steps": 0, **QUIET, **kw})


def test_resumed_fit_loads_the_checkpoint_before_configure_optimizers_as_lightning(tmp_path: Path) -> None:
    """A resumed fit calls setup, on_load_checkpoint, then configure_optimizers, in Lightning's order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = _lit(tmp_path / "pl", callbacks=[pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "pl" / "c")])
        first.fit(Lit(), loader(32, 16))
        lit = Lit()
        _lit(tmp_path / "pl", max_epochs=2, enable_checkpointing=False).fit(
            lit, loader(32, 16), ckpt_path=next((tmp_path / "pl" / "c").glob("*.ckpt"))
        )
    ours = _ours(tmp_path / "il")
    ours.fit(Port(), loader(32, 16))
    port = Port()
    _ours(tmp_path / "il", max_epochs=2).fit(port, loader(32, 16), ckpt_path="last")
    assert lit.seen == ["setup:fit", "on_load_checkpoint", "configure_optimizers"]
    assert port.seen == lit.seen


def test_test_with_the_best_checkpoint_calls_on_load_checkpoint_as_lightning(tmp_path: Path) -> None:
    """test(ckpt_path="best") calls the module's on_load_checkpoint after setup, as Lightning does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit = Lit()
        trainer = _lit(tmp_path / "pl", callbacks=[pl.callbacks.ModelCheckpoint(monitor="val_loss")])
        trainer.fit(lit, loader(32, 16), loader(16, 16, seed=1))
        lit.seen.clear()
        trainer.test(lit, loader(16, 16, seed=2), ckpt_path="best", verbose=False)
    port = Port()
    ours = _ours(tmp_path / "il", listeners=[ModelCheckpoint(monitor="val_loss")])
    ours.fit(port, loader(32, 16), loader(16, 16, seed=1))
    port.seen.clear()
    ours.test(port, loader(16, 16, seed=2), ckpt_path="best")
    assert lit.seen == ["setup:test", "on_load_checkpoint"]
    assert port.seen == lit.seen


def test_a_fraction_interval_counted_across_epochs_is_refused_as_lightning() -> None:
    """val_check_interval=0.5 with check_val_every_n_epoch=None raises at construction, naming the fix."""
    with pytest.raises(pl.utilities.exceptions.MisconfigurationException, match="val_check_interval"):
        pl.Trainer(val_check_interval=0.5, check_val_every_n_epoch=None)
    with pytest.raises(ValueError, match=r"val_check_interval=0\.5.*must be an int.*check_val_every_n_epoch=1"):
        interlock.Trainer(val_check_interval=0.5, check_val_every_n_epoch=None)
