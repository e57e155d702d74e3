"""validate/test/predict as Lightning calls them: without the model (the trainer's last one) and with verbose."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from conftest import TinyModule, loader, only
from interlock.listeners import ModelCheckpoint
from interlock.trainer.trainer import results_table


class DM(interlock.DataModule):
    def train_dataloader(self) -> Any:
        return loader()

    def val_dataloader(self) -> Any:
        return loader(32)

    def test_dataloader(self) -> Any:
        return loader(32, seed=1)

    def predict_dataloader(self) -> Any:
        return loader(32, seed=1)


def test_test_without_the_model_runs_the_fitted_one_from_the_best_checkpoint(tmp_path: Path) -> None:
    """trainer.test(ckpt_path="best", datamodule=dm) tests the fitted module's best weights, as Lightning."""
    torch.manual_seed(0)
    model = TinyModule()
    ckpt = ModelCheckpoint(monitor="val_loss", mode="min")
    trainer = interlock.Trainer(max_epochs=3, **only(ckpt), default_root_dir=tmp_path)
    trainer.fit(model, datamodule=DM())
    without = trainer.test(ckpt_path="best", datamodule=DM(), verbose=False)
    fresh = TinyModule()
    other = interlock.Trainer(**only(), default_root_dir=tmp_path)
    expected = other.test(fresh, ckpt_path=ckpt.best_model_path(trainer.state), datamodule=DM(), verbose=False)
    assert without == expected and without[0]["test_loss"] > 0
    assert len(trainer.predict(datamodule=DM())) == 2


def test_a_stage_without_a_model_on_a_fresh_trainer_names_the_fix(tmp_path: Path) -> None:
    """A fresh trainer has no module to run: the error says to pass one or fit first."""
    with pytest.raises(TypeError, match="pass the module"):
        interlock.Trainer(**only(), default_root_dir=tmp_path).validate(datamodule=DM())


def test_verbose_prints_the_results_table_and_false_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """verbose=True (the default) prints each metric with its value; verbose=False prints no table."""
    trainer = interlock.Trainer(**only(), default_root_dir=tmp_path)
    results = trainer.validate(TinyModule(), loader(32))
    out = capsys.readouterr().out
    assert "Validate metric" in out and "val_loss" in out and f"{results[0]['val_loss']:.6g}" in out
    trainer.validate(TinyModule(), loader(32), verbose=False)
    assert "Validate metric" not in capsys.readouterr().out


def test_results_table_has_one_column_per_loader() -> None:
    """Two loaders' results (Lightning's /dataloader_idx_N suffixes) share one row per metric name."""
    table = results_table("test", [{"test_loss/dataloader_idx_0": 1.5}, {"test_loss/dataloader_idx_1": 2.25}])
    row = next(line for line in table.splitlines() if "test_loss" in line)
    assert row.split() == ["test_loss", "1.5", "2.25"] and "DataLoader 1" in table
    assert results_table("test", [{}]) == ""


def test_verbose_must_be_a_bool(tmp_path: Path) -> None:
    """verbose="yes" is refused naming the values accepted."""
    with pytest.raises(ValueError, match="True"):
        interlock.Trainer(**only(), default_root_dir=tmp_path).test(TinyModule(), loader(), verbose="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("keep", [True, False])
def test_predict_without_returning_keeps_no_prediction_alive(tmp_path: Path, keep: bool) -> None:
    """return_predictions=False holds no earlier batch's output (memory stays flat); True holds every one."""
    import gc
    import weakref

    made: list[weakref.ref[torch.Tensor]] = []
    alive_before: list[int] = []

    class Writer(TinyModule):
        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            gc.collect()
            alive_before.append(sum(r() is not None for r in made[:-1]))  # all but the previous batch's
            out = self(batch[0])
            made.append(weakref.ref(out))
            return out

    trainer = interlock.Trainer(**only(), default_root_dir=tmp_path)
    got = trainer.predict(Writer(), loader(64, batch_size=8), return_predictions=keep)
    assert len(made) == 8
    if keep:
        assert len(got) == 8 and alive_before == [max(0, i - 1) for i in range(8)]
    else:
        assert got is None and alive_before == [0] * 8
    with pytest.raises(ValueError, match="return_predictions='no'"):
        trainer.predict(Writer(), loader(8), return_predictions="no")  # type: ignore[arg-type]
