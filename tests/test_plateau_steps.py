"""A step-interval ReduceLROnPlateau steps where Lightning steps it: after the batch's hooks and its validation."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interlock
from conftest import loader, only
from interlock.listeners import ModelCheckpoint

pl = pytest.importorskip("pytorch_lightning")


def _optim(module: Any, monitor: str, frequency: int) -> Any:
    opt = torch.optim.SGD(module.parameters(), lr=1.0)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5, threshold=0.2)
    config = {"scheduler": plateau, "monitor": monitor, "interval": "step", "frequency": frequency}
    return {"optimizer": opt, "lr_scheduler": config}


class _Steps:
    """Records the learning rate each training step uses and each on_train_batch_end sees."""

    def __init__(self, monitor: str, frequency: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.monitor, self.frequency, self.lrs = monitor, frequency, []

    def _lr(self) -> float:
        return float(self.trainer.optimizers[0].param_groups[0]["lr"])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.lrs.append(("step", self._lr()))
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.lrs.append(("batch_end", self._lr()))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> Any:
        return _optim(self, self.monitor, self.frequency)


def _classes() -> tuple[type, type]:
    from interlock.lightning import LightningModule

    class Ours(_Steps, LightningModule):  # type: ignore[misc]
        pass

    class Theirs(_Steps, pl.LightningModule):  # type: ignore[misc]
        pass

    return Ours, Theirs


FLAGS: dict[str, Any] = {"max_epochs": 3, "limit_train_batches": 7, "num_sanity_val_steps": 0}


@pytest.mark.parametrize(
    ("monitor", "frequency", "accumulate"), [("val_loss", 3, 1), ("val_loss", 3, 3), ("train_loss", 1, 2)]
)
def test_plateau_steps_after_the_batch_end_and_validation_as_lightning(
    tmp_path: Path, monitor: str, frequency: int, accumulate: int
) -> None:
    """On a validation metric it sees the validation of its batch; every learning rate is Lightning's."""
    Ours, Theirs = _classes()
    ours, theirs = Ours(monitor, frequency), Theirs(monitor, frequency)
    flags = {**FLAGS, "val_check_interval": 3, "accumulate_grad_batches": accumulate}
    interlock.lightning.Trainer(**only(), default_root_dir=tmp_path, **flags).fit(ours, loader(128, 8), loader(32))
    lightning = pl.Trainer(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path / "pl", **flags,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lightning.fit(theirs, loader(128, 8), loader(32))
    assert ours.lrs == theirs.lrs and len({lr for _, lr in ours.lrs}) > 1  # it reduced
    assert all(torch.equal(a, b) for a, b in zip(ours.net.parameters(), theirs.net.parameters(), strict=True))


class Native(interlock.Module):
    """The native module: a step-interval plateau on ``monitor``."""

    def __init__(self, monitor: str, frequency: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.monitor, self.frequency = monitor, frequency

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> Any:
        made = _optim(self, self.monitor, self.frequency)
        self.opt = made["optimizer"]
        return made


def _fit(root: Path, config: dict[str, Any], ckpt: Path | None = None) -> tuple[list[torch.Tensor], list[float]]:
    """A fit saving after every optimizer step (resumed from ``ckpt``): its final weights and learning rates."""
    module = Native(config["monitor"], config["frequency"])
    trainer = interlock.Trainer(
        **only(ModelCheckpoint(dirpath=root / "ck", every_n_train_steps=1, save_top_k=-1, filename="{step}")),
        default_root_dir=root, max_epochs=3, limit_train_batches=config["limit"], num_sanity_val_steps=0,
        val_check_interval=config["val_every"], accumulate_grad_batches=config["accumulate"],
    )  # fmt: skip
    trainer.fit(module, loader(128, 8), loader(32), ckpt_path=ckpt)
    return [p.detach().clone() for p in module.parameters()], [float(g["lr"]) for g in module.opt.param_groups]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    config=st.fixed_dictionaries(
        {
            "monitor": st.sampled_from(["val_loss", "train_loss"]),
            "frequency": st.integers(1, 3),
            "accumulate": st.integers(1, 3),
            "val_every": st.sampled_from([2, 3, 1.0]),
            "limit": st.sampled_from([5, 7]),
        }
    ),
    pick=st.floats(0.0, 1.0),
)
def test_a_resume_at_any_step_steps_the_plateau_as_the_whole_run(
    tmp_path_factory: pytest.TempPathFactory, config: dict[str, Any], pick: float
) -> None:
    """Resumed from any step's checkpoint, the weights and learning rate end bitwise as the uninterrupted run's."""
    if config["monitor"] == "val_loss":  # it steps where validation has run (a missing monitor is an error)
        every = config["val_every"]
        config = {**config, "frequency": every if isinstance(every, int) else config["limit"]}
    root = tmp_path_factory.mktemp("plateau")
    weights, lrs = _fit(root / "whole", config)
    files = sorted((root / "whole" / "ck").glob("*.ckpt"))
    assert files
    ckpt = files[min(int(pick * len(files)), len(files) - 1)]
    resumed, resumed_lrs = _fit(root / "resumed", config, ckpt)
    assert resumed_lrs == lrs
    assert all(torch.equal(a, b) for a, b in zip(weights, resumed, strict=True))
