"""When validation runs inside fit, and the epoch after fit: interlock beside Lightning 2.6.6."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import interlock
from _lightning_twin import LitTwin, Twin, interlock_trainer, lightning_trainer, loader

CASES: dict[str, dict[str, Any]] = {
    "float interval that does not divide the epoch": {"max_epochs": 1, "val_check_interval": 0.3},
    "max_steps mid-epoch": {"max_steps": 5},
    "max_steps mid-epoch with an int interval": {"max_steps": 5, "val_check_interval": 3},
    "max_steps mid-second-epoch": {"max_steps": 15},
    "sanity check capped by limit_val_batches": {"max_epochs": 1, "limit_val_batches": 1},
    "two epochs": {"max_epochs": 2},
    "int interval counted across epochs": {"max_epochs": 3, "val_check_interval": 20, "check_val_every_n_epoch": None},
    "fractional limit_val_batches": {"max_epochs": 1, "limit_val_batches": 0.5, "num_sanity_val_steps": -1},
}


def lightning_run(root: Path, stop_at: int | None = None, **kwargs: Any) -> tuple[list[Any], list[Any], int]:
    module, trainer = LitTwin(stop_at), lightning_trainer(root, **kwargs)
    trainer.fit(module, loader(10), loader(4, seed=1))
    vals = sorted({at for sanity, at, _, _ in module.calls if not sanity})
    sanity = [c for c in module.calls if c[0]]
    return vals, sanity, trainer.current_epoch


def interlock_run(root: Path, stop_at: int | None = None, **kwargs: Any) -> tuple[list[Any], list[Any], Any]:
    trainer = interlock_trainer(root, **kwargs)
    vals: list[tuple[int, int]] = []
    sanity: list[int] = []
    trainer.on("fit.train.val.start", lambda e, s: vals.append((s.epoch, s.batch_idx - 1)))
    trainer.on("fit.sanity.batch.end", lambda e, s: sanity.append(s.progress.eval_batch_idx))
    if stop_at is not None:
        trainer.on("fit.train.batch.end", lambda e, s: interlock.Stop("asked") if s.global_step == stop_at else None)
    trainer.fit(Twin(), loader(10), loader(4, seed=1))
    return vals, sanity, trainer.state


@pytest.mark.parametrize("case", list(CASES))
def test_validation_runs_where_lightning_validates_and_current_epoch_matches(tmp_path: Path, case: str) -> None:
    """Validation positions, sanity batches and the epoch after fit equal Lightning's for each schedule."""
    kwargs = CASES[case]
    lit_vals, lit_sanity, lit_epoch = lightning_run(tmp_path / "pl", **kwargs)
    vals, sanity, state = interlock_run(tmp_path / "il", **kwargs)
    assert vals == lit_vals
    assert len(sanity) == len(lit_sanity)
    assert state.current_epoch == lit_epoch
    assert state.epoch == lit_epoch - 1  # the resume cursor stays on the last epoch trained


def test_a_stop_asked_mid_epoch_validates_first_as_lightning(tmp_path: Path) -> None:
    """should_stop set at step 5 of a 10-batch epoch validates at that batch, then ends the fit (both trainers)."""
    lit_vals, _, lit_epoch = lightning_run(tmp_path / "pl", stop_at=5, max_epochs=3)
    vals, _, state = interlock_run(tmp_path / "il", stop_at=5, max_epochs=3)
    assert vals == lit_vals == [(0, 4)]
    assert state.current_epoch == lit_epoch == 1 and state.global_step == 5


def test_a_stop_in_an_epoch_without_validation_does_not_validate(tmp_path: Path) -> None:
    """With check_val_every_n_epoch=2 a stop in epoch 0 does not validate (as in Lightning)."""
    lit_vals, _, _ = lightning_run(tmp_path / "pl", stop_at=5, max_epochs=3, check_val_every_n_epoch=2)
    vals, _, _ = interlock_run(tmp_path / "il", stop_at=5, max_epochs=3, check_val_every_n_epoch=2)
    assert vals == lit_vals == []


@pytest.mark.parametrize("limit", [None, 5])
def test_an_int_interval_longer_than_the_epoch_raises_early_as_lightning(tmp_path: Path, limit: Any) -> None:
    """val_check_interval=20 with a 10 (or 5) batch epoch and check_val_every_n_epoch=1 is refused at set-up."""
    kwargs = {"max_epochs": 2, "val_check_interval": 20, "limit_train_batches": limit}
    with pytest.raises(ValueError, match="val_check_interval"):
        lightning_run(tmp_path / "pl", **kwargs)
    trainer = interlock_trainer(tmp_path / "il", **kwargs)
    steps: list[int] = []
    trainer.on("fit.train.batch.end", lambda e, s: steps.append(s.global_step))
    with pytest.raises(ValueError, match=r"val_check_interval=20\) is longer .*check_val_every_n_epoch=None"):
        trainer.fit(Twin(), loader(10), loader(4, seed=1))
    assert steps == []  # nothing trained


def test_current_epoch_is_zero_after_a_fit_that_trains_nothing(tmp_path: Path) -> None:
    """max_epochs=0 leaves Lightning's current_epoch at 0; interlock's current_epoch too."""
    lit = lightning_trainer(tmp_path / "pl", max_epochs=0)
    lit.fit(LitTwin(), loader(10), loader(4, seed=1))
    trainer = interlock_trainer(tmp_path / "il", max_epochs=0)
    trainer.fit(Twin(), loader(10), loader(4, seed=1))
    assert trainer.state.current_epoch == lit.current_epoch == 0


def test_current_epoch_during_fit_is_the_epoch(tmp_path: Path) -> None:
    """While the fit runs, current_epoch is the 0-based epoch being trained."""
    trainer = interlock_trainer(tmp_path, max_epochs=2)
    seen: list[tuple[int, int]] = []
    trainer.on("fit.train.epoch_end", lambda e, s: seen.append((s.epoch, s.current_epoch)))
    trainer.fit(Twin(), loader(10))
    assert seen == [(0, 0), (1, 1)] and trainer.state.current_epoch == 2
