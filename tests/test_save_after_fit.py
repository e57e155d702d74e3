"""Trainer.save_checkpoint(path) after fit: the fit's checkpoint as it ended, continued exactly by a longer fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader
from interlock.connectors.finished import keep_finished
from interlock.core.state import TrainerState
from interlock.plugins.strategy import Strategy

QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "accelerator": "cpu"}


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def _fit(root: Path, epochs: int, ckpt_path: Path | None = None) -> tuple[interlock.Trainer, TinyModule]:
    torch.manual_seed(0)
    module = TinyModule(dropout=0.3, scheduler=True)  # dropout and shuffling draw from the global RNG
    trainer = interlock.Trainer(max_epochs=epochs, default_root_dir=root, **QUIET)
    trainer.fit(module, loader(48, 8, shuffle=True), loader(16, 8), ckpt_path=ckpt_path)
    return trainer, module


@settings(max_examples=4, deadline=None)
@given(first=st.integers(1, 3), more=st.integers(1, 2), draws=st.integers(0, 50))
def test_a_checkpoint_saved_after_fit_continues_bitwise_like_one_longer_fit(
    tmp_path_factory: pytest.TempPathFactory, first: int, more: int, draws: int
) -> None:
    """fit(N), save_checkpoint, fit(N+M, ckpt_path) trains bitwise as fit(N+M), whatever drew random numbers between."""
    root = tmp_path_factory.mktemp("after")
    trainer, _ = _fit(root / "a", first)
    torch.rand(draws)  # the user's code between fit and save: the checkpoint keeps the RNG as the fit ended
    path = root / "kept" / "final.ckpt"  # its folder does not exist yet
    trainer.save_checkpoint(path)
    resumed, module = _fit(root / "b", first + more, ckpt_path=path)
    straight, reference = _fit(root / "c", first + more)
    assert (resumed.state.current_epoch, resumed.state.global_step) == (first + more, straight.state.global_step)
    mine, theirs = _weights(module), _weights(reference)
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)


def test_the_checkpoint_holds_the_fit_as_it_ended_and_the_weights_as_they_are(tmp_path: Path) -> None:
    """After test(), the file still holds the fit's state and optimizer; the weights are the module's now."""
    trainer, module = _fit(tmp_path, 2)
    fitted = trainer.state
    trainer.test(module, loader(16, 8))
    with torch.no_grad():
        module.net[0].bias.add_(1.0)  # changed after fit: saved as it is now, as Lightning does
    trainer.save_checkpoint(tmp_path / "x.ckpt")
    ckpt = interlock.load_checkpoint(tmp_path / "x.ckpt")
    assert ckpt["trainer_state"]["stage"] == "fit" and ckpt["trainer_state"]["status"] == "finished"
    assert (ckpt["epoch"], ckpt["global_step"]) == (fitted.current_epoch, fitted.global_step) == (2, 12)
    assert torch.equal(ckpt["state_dict"]["net.0.bias"], module.net[0].bias)
    assert ckpt["optimizer_states"] and ckpt["optimizer_states"][0]["state"]  # SGD momentum buffers


def test_weights_only_leaves_the_optimizer_out_and_loads_into_a_module(tmp_path: Path) -> None:
    """save_checkpoint(path, weights_only=True): weights without optimizer state; load_from_checkpoint reads it."""
    trainer, module = _fit(tmp_path, 1)
    trainer.save_checkpoint(tmp_path / "w.ckpt", weights_only=True)
    ckpt = interlock.load_checkpoint(tmp_path / "w.ckpt")
    assert ckpt["optimizer_states"] == []
    loaded = TinyModule.load_from_checkpoint(tmp_path / "w.ckpt")
    mine, theirs = loaded.state_dict(), module.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)


def test_save_checkpoint_before_any_fit_says_there_is_nothing_to_save(tmp_path: Path) -> None:
    """Before a fit, the error says no fit has finished and names torch.save of the weights; no file is made."""
    trainer = interlock.Trainer(default_root_dir=tmp_path, **QUIET)
    with pytest.raises(RuntimeError, match=r"no fit has finished.*torch\.save"):
        trainer.save_checkpoint(tmp_path / "x.ckpt")
    trainer.validate(TinyModule(), loader(16, 8))  # other stages leave nothing to save either
    with pytest.raises(RuntimeError, match=r"no fit has finished"):
        trainer.save_checkpoint(tmp_path / "x.ckpt")
    assert not (tmp_path / "x.ckpt").exists()


class Breaks(TinyModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.current_epoch == 1:
            raise ValueError("boom")
        return super().training_step(batch, batch_idx)


def test_after_a_failed_fit_the_error_names_the_checkpoints_it_wrote(tmp_path: Path) -> None:
    """A fit that failed has no end to save: the error says how it ended and names ckpt_path='last'."""
    failing = interlock.Trainer(max_epochs=3, default_root_dir=tmp_path, **QUIET)
    with pytest.raises(ValueError, match="boom"):
        failing.fit(Breaks(), loader(48, 8))
    with pytest.raises(RuntimeError, match=r"ended failed.*ckpt_path='last'"):
        failing.save_checkpoint(tmp_path / "x.ckpt")
    assert not (tmp_path / "x.ckpt").exists()


def test_during_fit_the_native_trainer_names_save_checkpoint_the_update(tmp_path: Path) -> None:
    """A listener that holds the trainer and calls save_checkpoint mid-fit is told to return SaveCheckpoint."""
    seen: list[str] = []

    class Holder(interlock.Listener):
        @interlock.listen("fit.train.epoch_end")
        def save(self, event: Any, state: Any) -> None:
            try:
                trainer.save_checkpoint(tmp_path / "mid.ckpt")
            except RuntimeError as exc:
                seen.append(str(exc))

    trainer = interlock.Trainer(max_epochs=1, default_root_dir=tmp_path, listeners=[Holder()], **QUIET)
    trainer.fit(TinyModule(), loader(16, 8))
    assert seen and "a fit is running" in seen[0] and "SaveCheckpoint" in seen[0]
    trainer.save_checkpoint(tmp_path / "end.ckpt")  # once it has finished, it saves
    assert (tmp_path / "end.ckpt").is_file()


def test_a_directory_is_refused_naming_a_file_path(tmp_path: Path) -> None:
    """save_checkpoint(a directory) is an error asking for a file path; nothing is written into it."""
    trainer, _ = _fit(tmp_path / "run", 1)
    with pytest.raises(IsADirectoryError, match="pass a file path"):
        trainer.save_checkpoint(tmp_path)


class _Spread(Strategy):
    world_size = 2


def test_a_distributed_fit_names_saving_during_fit() -> None:
    """Over several processes the reason names ModelCheckpoint(save_last=True) and SaveCheckpoint."""
    why = keep_finished(None, TrainerState(status="finished"), _Spread())
    assert isinstance(why, str) and "save_last=True" in why and "SaveCheckpoint" in why


def test_the_run_kept_after_predict_does_not_hold_the_predictions(tmp_path: Path) -> None:
    """Predictions the caller drops are freed: the run kept for reading after the call does not hold them."""
    import gc
    import weakref

    trainer = interlock.Trainer(default_root_dir=tmp_path, **QUIET)
    predictions = trainer.predict(TinyModule(), loader(16, 8))
    assert predictions is not None
    first = weakref.ref(predictions[0])
    del predictions
    gc.collect()
    assert first() is None
