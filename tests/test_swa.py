"""StochasticWeightAveraging: the averaged weights end the fit, equal to Lightning's, and survive a resume."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interlock
from _lightning_twin import LitTwin, Twin, interlock_trainer, lightning_trainer, loader
from conftest import TinyModule
from conftest import loader as tiny_loader
from interlock.listeners import StochasticWeightAveraging
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.listeners.swa import swalr

pl = pytest.importorskip("pytorch_lightning")


class Scheduled(Twin):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)}


class LitScheduled(LitTwin):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)}


class TwoGroups(Twin):
    def configure_optimizers(self) -> Any:
        return torch.optim.SGD([{"params": [self.layer.weight]}, {"params": [self.layer.bias], "lr": 0.05}], lr=0.1)


class LitTwoGroups(LitTwin):
    def configure_optimizers(self) -> Any:
        return torch.optim.SGD([{"params": [self.layer.weight]}, {"params": [self.layer.bias], "lr": 0.05}], lr=0.1)


def fit_both(tmp_path: Path, swa: dict[str, Any], max_epochs: int = 6, kind: str = "") -> tuple[Any, Any]:
    """Fit Lightning's model with its SWA and the port with interlock's: (our module, theirs)."""
    pairs = {"": (Twin, LitTwin), "groups": (TwoGroups, LitTwoGroups), "scheduled": (Scheduled, LitScheduled)}
    ours, theirs = (cls() for cls in pairs[kind])
    trainer = interlock_trainer(tmp_path / "ours", max_epochs=max_epochs, listeners=[StochasticWeightAveraging(**swa)])
    trainer.fit(ours, loader(12, batch_size=4))
    lit = lightning_trainer(
        tmp_path / "pl", max_epochs=max_epochs, callbacks=[pl.callbacks.StochasticWeightAveraging(**swa)]
    )
    lit.fit(theirs, loader(12, batch_size=4))
    return ours, theirs


@pytest.mark.parametrize(
    ("swa", "kind"),
    [
        ({"swa_lrs": 0.05, "swa_epoch_start": 0.5, "annealing_epochs": 2}, ""),
        ({"swa_lrs": 0.02, "swa_epoch_start": 2, "annealing_epochs": 3, "annealing_strategy": "linear"}, ""),
        ({"swa_lrs": 0.3, "swa_epoch_start": 1, "annealing_epochs": 0}, ""),
        ({"swa_lrs": [0.01, 0.2], "swa_epoch_start": 0.3, "annealing_epochs": 2}, "groups"),
        ({"swa_lrs": 0.2, "swa_epoch_start": 3, "annealing_epochs": 2}, "scheduled"),
    ],
)
def test_final_weights_equal_lightnings_bitwise(tmp_path: Path, swa: dict[str, Any], kind: str) -> None:
    """The fit ends with the averaged weights, bit for bit Lightning's (same float ops in the same order)."""
    ours, theirs = fit_both(tmp_path, swa, kind=kind)
    for mine, lit in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(mine, lit), (mine, lit)


def test_the_average_differs_from_the_last_weights(tmp_path: Path) -> None:
    """Without the listener the last weights differ from SWA's: the transfer really happened."""
    ours, _ = fit_both(tmp_path, {"swa_lrs": 0.05, "swa_epoch_start": 0.5, "annealing_epochs": 2})
    plain = Twin()
    interlock_trainer(tmp_path / "plain", max_epochs=6).fit(plain, loader(12, batch_size=4))
    assert not torch.equal(plain.layer.weight, ours.layer.weight)


def test_a_resumed_fit_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    """Stopped after epoch 3 (inside the averaging) and resumed from last.ckpt, the final weights are the same."""
    swa = {"swa_lrs": 0.05, "swa_epoch_start": 2, "annealing_epochs": 3}
    whole = Twin()
    interlock_trainer(tmp_path / "whole", max_epochs=6, listeners=[StochasticWeightAveraging(**swa)]).fit(
        whole, loader(12, batch_size=4)
    )
    first = interlock_trainer(
        tmp_path / "cut", max_epochs=4, listeners=[StochasticWeightAveraging(**swa), ModelCheckpoint(save_last=True)]
    )
    # the first run's 4 epochs are the whole run's first 4 (max_epochs=4 does not change swa_start: an int)
    first.fit(Twin(), loader(12, batch_size=4))
    ckpt = Path(first.state.run_dir) / "checkpoints" / "last.ckpt"
    assert ckpt.is_file()
    stored = first.state.listener_state("StochasticWeightAveraging")
    assert stored["n_averaged"] == 3 and stored["latest_update_epoch"] == 3
    resumed = Twin()
    interlock_trainer(tmp_path / "cut", max_epochs=6, listeners=[StochasticWeightAveraging(**swa)]).fit(
        resumed, loader(12, batch_size=4), ckpt_path=ckpt
    )
    for a, b in zip(whole.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_stopped_fit_keeps_its_own_weights(tmp_path: Path) -> None:
    """As Lightning: a fit that stops before its last epoch ends with the trained weights, not the average."""
    swa = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=1)
    stopper = interlock_trainer(tmp_path, max_epochs=6, listeners=[swa])
    stopper.on("fit.train.epoch_end", lambda e, s: interlock.Stop("enough") if s.epoch == 2 else None)
    module = Twin()
    stopper.fit(module, loader(12, batch_size=4))
    assert swa.n_averaged(stopper.state) == 3
    average = stopper.state.listener_state("StochasticWeightAveraging")["average"]
    assert not torch.equal(average[0], module.layer.weight.detach())


@settings(max_examples=60, deadline=None)
@given(
    lr=st.floats(1e-4, 1.0),
    swa_lr=st.floats(1e-4, 1.0),
    epochs=st.integers(0, 6),
    strategy=st.sampled_from(["cos", "linear"]),
    steps=st.integers(1, 9),
)
def test_the_schedule_equals_swalr(lr: float, swa_lr: float, epochs: int, strategy: str, steps: int) -> None:
    """Step by step, the learning rate is torch's SWALR's, bit for bit."""
    weight = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([weight], lr=lr)
    opt.param_groups[0]["initial_lr"] = swa_lr
    sched = torch.optim.swa_utils.SWALR(opt, swa_lr=swa_lr, anneal_epochs=epochs, anneal_strategy=strategy)  # type: ignore[arg-type]
    current = swalr(lr, swa_lr, 0, epochs, strategy)
    assert current == opt.param_groups[0]["lr"]
    for k in range(1, steps):
        opt.step()
        sched.step()
        current = swalr(current, swa_lr, k, epochs, strategy)
        assert current == opt.param_groups[0]["lr"] and math.isfinite(current)


class WithScheduler(TinyModule):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {
            "optimizer": opt,
            "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1), "interval": "step"},
        }


class WithBatchNorm(TinyModule):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(4)


@pytest.mark.parametrize(("module", "says"), [(WithScheduler, "every batch"), (WithBatchNorm, "batch-norm")])
def test_what_it_cannot_do_is_refused_at_the_fit_start(tmp_path: Path, module: type, says: str) -> None:
    """A per-batch scheduler or batch-norm layers fail the fit at its start, naming what to do instead."""
    trainer = interlock_trainer(tmp_path, max_epochs=2, listeners=[StochasticWeightAveraging(0.1)])
    with pytest.raises(ValueError, match=says):
        trainer.fit(module(), tiny_loader(32, 16))
    assert trainer.state.global_step == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"swa_lrs": 0.0},
        {"swa_lrs": [0.1, -1.0]},
        {"swa_lrs": 0.1, "swa_epoch_start": 0},
        {"swa_lrs": 0.1, "swa_epoch_start": 1.5},
        {"swa_lrs": 0.1, "annealing_epochs": -1},
        {"swa_lrs": 0.1, "annealing_strategy": "step"},
        {"swa_lrs": 0.1, "avg_fn": 3},
        {"swa_lrs": 0.1, "device": 0},
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any]) -> None:
    """Each bad argument raises at construction, naming itself."""
    name = [k for k in kwargs if k != "swa_lrs"] or ["swa_lrs"]
    with pytest.raises(ValueError, match=name[-1]):
        StochasticWeightAveraging(**kwargs)


def test_a_fraction_needs_an_epoch_limit(tmp_path: Path) -> None:
    """swa_epoch_start=0.8 with max_steps and no max_epochs fails at the fit start, naming the int form."""
    trainer = interlock_trainer(tmp_path, max_steps=4, listeners=[StochasticWeightAveraging(0.1)])
    with pytest.raises(ValueError, match="as an int"):
        trainer.fit(TinyModule(), tiny_loader(32, 16))
