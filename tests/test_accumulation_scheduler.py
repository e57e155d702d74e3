"""GradientAccumulationScheduler: the accumulation changes by epoch exactly as Lightning's, and resumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from _lightning_twin import LitTwin, Twin, interlock_trainer, lightning_trainer, loader
from interlock.listeners import GradientAccumulationScheduler
from interlock.listeners.checkpoint import ModelCheckpoint

pl = pytest.importorskip("pytorch_lightning")


class ZeroGradTwin(Twin):
    """Overrides optimizer_zero_grad: it must be called at the first batch of each accumulation window."""

    def __init__(self) -> None:
        super().__init__()
        self.zeroed: list[tuple[int, int]] = []

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self.zeroed.append((epoch, batch_idx))
        optimizer.zero_grad()


class LitZeroGradTwin(LitTwin):
    def __init__(self) -> None:
        super().__init__()
        self.zeroed: list[tuple[int, int]] = []

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self.zeroed.append((epoch, batch_idx))
        optimizer.zero_grad()


@pytest.mark.parametrize("scheduling", [{1: 2, 3: 3}, {0: 4}, {2: 5, 4: 1}, {0: 2, 1: 7}])
def test_global_step_and_weights_equal_lightnings(tmp_path: Path, scheduling: dict[int, int]) -> None:
    """Per epoch factors over 7 batches (the last batch of an epoch always steps): same steps and weights."""
    ours = ZeroGradTwin()
    trainer = interlock_trainer(tmp_path / "ours", max_epochs=5, listeners=[GradientAccumulationScheduler(scheduling)])
    trainer.fit(ours, loader(7, batch_size=1))
    theirs = LitZeroGradTwin()
    lit = lightning_trainer(
        tmp_path / "pl", max_epochs=5, callbacks=[pl.callbacks.GradientAccumulationScheduler(dict(scheduling))]
    )
    lit.fit(theirs, loader(7, batch_size=1))
    assert trainer.state.global_step == lit.global_step
    assert ours.zeroed == theirs.zeroed
    for mine, lit_param in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(mine, lit_param)


def test_the_factor_changes_the_step_count(tmp_path: Path) -> None:
    """{1: 3} over 2 epochs of 6 batches: 6 steps then 2 (not 12): the listener really changes accumulation."""
    trainer = interlock_trainer(tmp_path, max_epochs=2, listeners=[GradientAccumulationScheduler({1: 3})])
    trainer.fit(Twin(), loader(6, batch_size=1))
    assert trainer.state.global_step == 6 + 2
    assert trainer.state.accumulate_grad_batches == 3


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    """Cut mid-epoch (an epoch accumulating 3) and resumed from its checkpoint: the factor and weights carry on."""
    schedule = {1: 3}
    whole = Twin()
    interlock_trainer(tmp_path / "whole", max_epochs=3, listeners=[GradientAccumulationScheduler(schedule)]).fit(
        whole, loader(7, batch_size=1)
    )
    first = interlock_trainer(
        tmp_path / "cut",
        max_epochs=3,
        max_steps=8,
        listeners=[GradientAccumulationScheduler(schedule), ModelCheckpoint(every_n_train_steps=4, save_top_k=-1)],
    )
    first.fit(Twin(), loader(7, batch_size=1))
    assert (first.state.epoch, first.state.batch_idx, first.state.accumulate_grad_batches) == (1, 3, 3)
    ckpts = sorted((Path(first.state.run_dir) / "checkpoints").glob("*step=8*.ckpt"))
    assert ckpts, list((Path(first.state.run_dir) / "checkpoints").iterdir())
    resumed = Twin()
    interlock_trainer(tmp_path / "cut", max_epochs=3, listeners=[GradientAccumulationScheduler(schedule)]).fit(
        resumed, loader(7, batch_size=1), ckpt_path=ckpts[0]
    )
    for a, b in zip(whole.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


def test_refusals(tmp_path: Path) -> None:
    """Bad schedules, a fixed accumulate_grad_batches and manual optimization are refused by name."""
    with pytest.raises(TypeError, match="non-empty"):
        GradientAccumulationScheduler({})
    with pytest.raises(ValueError, match="epochs must be ints >= 0"):
        GradientAccumulationScheduler({-1: 2})
    with pytest.raises(ValueError, match="factors must be ints >= 1"):
        GradientAccumulationScheduler({1: 0})
    with pytest.raises(ValueError, match="accumulate_grad_batches=2"):
        interlock_trainer(tmp_path, accumulate_grad_batches=2, listeners=[GradientAccumulationScheduler({1: 2})])

    class Manual(Twin):
        automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            opt = self.optimizers()
            loss = super().training_step(batch, batch_idx)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            return loss

    trainer = interlock_trainer(tmp_path, max_epochs=1, listeners=[GradientAccumulationScheduler({1: 2})])
    with pytest.raises(ValueError, match="manual optimization"):
        trainer.fit(Manual(), loader(4, batch_size=1))
