"""LR schedulers and LearningRateMonitor as Lightning 2.6.6 runs them, checked against it."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from conftest import loader, only
from interlock.listeners import LearningRateMonitor

pl = pytest.importorskip("pytorch_lightning")


def _optim(params: Any, kind: str) -> Any:
    opt = torch.optim.SGD(params, lr=1.0)
    if kind == "step-freq3":
        return {
            "optimizer": opt,
            "lr_scheduler": {
                "scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5),
                "interval": "step",
                "frequency": 3,
            },
        }
    if kind == "epoch-freq2":
        return {
            "optimizer": opt,
            "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5), "frequency": 2},
        }
    if kind == "plateau-no-monitor":
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt)}
    if kind == "plateau-missing-lax":
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "nope", "strict": False}}
    raise AssertionError(kind)


class Ours(interlock.Module):
    """Records the learning rate each training step uses."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net, self.kind, self.lrs = torch.nn.Linear(4, 2), kind, []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.lrs.append(self.optimizer_lr)
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        result = _optim(self.parameters(), self.kind)
        self.opt = result["optimizer"]
        return result

    @property
    def optimizer_lr(self) -> float:
        return float(self.opt.param_groups[0]["lr"])


class Theirs(pl.LightningModule):
    """The same under Lightning."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net, self.kind, self.lrs = torch.nn.Linear(4, 2), kind, []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.lrs.append(float(self.optimizers().param_groups[0]["lr"]))
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return _optim(self.parameters(), self.kind)


def fit_both(tmp_path: Path, kind: str) -> tuple[Ours, Theirs]:
    ours, theirs = Ours(kind), Theirs(kind)
    flags = {"max_epochs": 3, "num_sanity_val_steps": 0, "accelerator": "cpu"}
    interlock.Trainer(**only(), default_root_dir=tmp_path, **flags).fit(ours, loader(64, 16))
    lightning = pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path / "pl",
        **flags,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lightning.fit(theirs, loader(64, 16))
    return ours, theirs


@pytest.mark.parametrize("kind", ["step-freq3", "epoch-freq2", "plateau-missing-lax"])
def test_schedulers_step_when_lightnings_do(tmp_path: Path, kind: str) -> None:
    """A step scheduler's frequency counts batches within the epoch; strict=False skips a missing monitor."""
    ours, theirs = fit_both(tmp_path, kind)
    assert ours.lrs == theirs.lrs and len(ours.lrs) == 12


def test_plateau_without_monitor_fails_at_setup_in_both(tmp_path: Path) -> None:
    """ReduceLROnPlateau without a monitor is refused before the first training step, naming the fix."""
    ours, theirs = Ours("plateau-no-monitor"), Theirs("plateau-no-monitor")
    with pytest.raises(ValueError, match=r"ReduceLROnPlateau without a monitor.*\"monitor\": \"val_loss\""):
        interlock.Trainer(**only(), max_epochs=1, default_root_dir=tmp_path, accelerator="cpu").fit(ours, loader())
    with pytest.raises(Exception, match="must include a monitor"):
        pl.Trainer(logger=False, enable_checkpointing=False, max_epochs=1, default_root_dir=tmp_path).fit(
            theirs, loader()
        )
    assert ours.lrs == theirs.lrs == []


def test_lr_monitor_default_logs_each_optimizer_at_its_schedulers_interval() -> None:
    """LearningRateMonitor(): an epoch scheduler's rate at epoch starts, a step one's at steps, no scheduler at both."""
    monitor = LearningRateMonitor()
    assert monitor.logging_interval is None
    from interlock.core.events import Event

    def log(name: str, payload: Any) -> Any:
        handler = monitor.on_epoch_start if name.endswith("epoch_start") else monitor.on_optimizer_step
        out = handler(Event(name, "t", "s", 1, 0, 0, 0, {"lr": payload}))
        return None if out is None else dict(out.metrics)

    rates = (("SGD", (0.1,), "epoch"), ("SGD", (0.2,), "step"), ("Adam", (0.3, 0.4), ""))
    assert log("fit.train.epoch_start", rates) == {"lr-SGD": 0.1, "lr-Adam/pg1": 0.3, "lr-Adam/pg2": 0.4}
    assert log("fit.train.batch.optimizer_step", rates) == {"lr-SGD-1": 0.2, "lr-Adam/pg1": 0.3, "lr-Adam/pg2": 0.4}
    assert log("fit.train.batch.optimizer_step", (("SGD", (0.1,), "epoch"),)) is None
    with pytest.raises(ValueError, match=r"logging_interval='hour'.*None"):
        LearningRateMonitor(logging_interval="hour")
