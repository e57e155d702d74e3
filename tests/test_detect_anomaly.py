"""Trainer(detect_anomaly=True) and Lightning's inference_mode flag, as Lightning's."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
import interlock.lightning as il
from _twins import twins
from conftest import loader

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


class Watches:
    """Records whether autograd's anomaly mode is on in each step."""

    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.modes: list[tuple[str, bool]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.modes.append(("train", torch.is_anomaly_enabled()))
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if not self.trainer.sanity_checking:  # type: ignore[attr-defined]
            self.modes.append(("val", torch.is_anomaly_enabled()))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.modes.append(("test", torch.is_anomaly_enabled()))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


def test_detect_anomaly_is_on_in_the_fit_as_in_lightning_and_off_after(tmp_path: Path) -> None:
    """With detect_anomaly=True training and in-fit validation run in anomaly mode, a later test does not, and the
    mode is off again after each call; the weights are Lightning's."""
    pl = pytest.importorskip("pytorch_lightning")
    for name in ("pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    Lit, Ours = twins(Watches)
    runs = []
    for trainer_cls, module in ((pl.Trainer, Lit()), (il.Trainer, Ours())):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = trainer_cls(max_epochs=1, limit_train_batches=2, detect_anomaly=True, **QUIET)
            trainer.fit(module, loader(32, 8), loader(16, 8))
            after_fit = torch.is_anomaly_enabled()
            trainer.test(module, loader(8, 8), verbose=False)
        runs.append((module.modes, after_fit, torch.is_anomaly_enabled(), [p.tolist() for p in module.parameters()]))
    assert runs[1] == runs[0]
    assert runs[1][0][0] == ("train", True) and runs[1][0][-1] == ("test", False)


class NaNBackward(interlock.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.sqrt(self.w - self.w).sum() + 0 * batch[0].sum()  # d sqrt(0) = inf, times 0: NaN

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_detect_anomaly_names_the_operation_whose_backward_made_nan(tmp_path: Path) -> None:
    """A NaN gradient fails the fit naming SqrtBackward with detect_anomaly=True; without it the fit trains on."""
    with pytest.raises(RuntimeError, match="SqrtBackward0.*returned nan"):
        interlock.Trainer(max_epochs=1, detect_anomaly=True, default_root_dir=tmp_path, **QUIET).fit(
            NaNBackward(), loader(16, 8)
        )
    assert not torch.is_anomaly_enabled()
    module = NaNBackward()
    interlock.Trainer(max_epochs=1, default_root_dir=tmp_path, **QUIET).fit(module, loader(16, 8))
    assert torch.isnan(module.w).all()
    with pytest.raises(TypeError, match="detect_anomaly"):
        interlock.Trainer(detect_anomaly="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("inference_mode", [True, False])
def test_lightnings_inference_mode_flag_is_accepted_with_the_same_results(inference_mode: bool) -> None:
    """inference_mode=False (torch.no_grad, what interlock evaluates under) and True give the same test results."""
    _, Ours = twins(Watches)
    trainer = il.Trainer(inference_mode=inference_mode, **QUIET)
    module = Ours()
    assert trainer.test(module, loader(16, 8), verbose=False) == [{}]
    assert module.modes == [("test", False), ("test", False)]


def test_anomaly_mode_turned_on_by_the_user_stays_on_without_the_flag(tmp_path: Path) -> None:
    """detect_anomaly=False leaves torch's own setting: a fit under the user's set_detect_anomaly(True) keeps it."""
    _, Ours = twins(Watches)
    module = Ours()
    with torch.autograd.set_detect_anomaly(True):
        interlock.Trainer(max_epochs=1, limit_train_batches=1, default_root_dir=tmp_path, **QUIET).fit(
            module, loader(16, 8)
        )
    assert module.modes == [("train", True)]
