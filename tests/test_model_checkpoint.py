"""ModelCheckpoint: save points, file names, top-k bookkeeping in the state, safe deletion, resume."""

from __future__ import annotations

import datetime
import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from conftest import TinyModule, loader, only
from interlock import Event, SaveCheckpoint, SetListenerState
from interlock.core.state import Progress, TrainerState
from interlock.listeners import checkpoint as checkpoint_module
from interlock.listeners import default_listeners
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.plugins.checkpoint_io import TorchCheckpointIO


class Scripted(TinyModule):
    """Validation reports ``losses[i]`` as val_loss in its i-th validation (counted from ``start``)."""

    def __init__(self, losses: list[float], start: int = 0) -> None:
        super().__init__()
        self.losses, self.calls = losses, start - 1

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        if batch_idx == 0:
            self.calls += 1
        return {"loss": torch.tensor(self.losses[self.calls])}


def fit(root: Path, mc: ModelCheckpoint, module: TinyModule | None = None, val: bool = True, **kw: Any) -> Any:
    kw.setdefault("max_epochs", 1)
    ckpt = kw.pop("ckpt", None)
    trainer = interlock.Trainer(**only(mc), default_root_dir=root, num_sanity_val_steps=0, **kw)
    trainer.fit(module or TinyModule(), loader(64, 8), loader(16, 8) if val else None, ckpt_path=ckpt)
    return trainer


def files(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*.ckpt"))


def state_at(epoch: int = 2, step: int = 30, **metrics: float) -> TrainerState:
    return TrainerState(progress=Progress(epoch=epoch, global_step=step), metrics=metrics, run_dir="/runs/v0")


def test_file_names_fill_epoch_step_and_metrics() -> None:
    """Templates take '{epoch}', '{step}' and metrics with format specs; 'name=' is added unless written."""
    state = state_at(val_loss=0.123456)
    name = lambda **kw: ModelCheckpoint(**kw).format_checkpoint_name(state)  # noqa: E731
    assert name() == "epoch=2-step=30.ckpt"
    assert name(filename="epoch={epoch}-step={step}-{val_loss:.3f}") == "epoch=2-step=30-val_loss=0.123.ckpt"
    assert name(filename="{epoch:02d}-{val_loss:.2f}") == "epoch=02-val_loss=0.12.ckpt"
    assert name(filename="best-{missing}") == "best-missing=0.ckpt"
    assert ModelCheckpoint(filename="m").format_checkpoint_name(state, ver=2) == "m-v2.ckpt"


def test_it_decides_through_updates_and_writes_nothing(tmp_path: Path) -> None:
    """A save point returns its stored bookkeeping and SaveCheckpoint requests; the listener itself writes no file."""
    mc = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_last=True)
    event = Event("fit.train.epoch_end", "epoch_end", "fit.train.val.end", 1, 2, 30, 4)
    updates = mc.on_train_epoch_end(event, state_at(val_loss=0.5))
    assert updates is not None
    store, *saves = updates
    assert isinstance(store, SetListenerState) and store.key == "ModelCheckpoint"
    assert saves == [
        SaveCheckpoint(str(tmp_path / "epoch=2-step=30.ckpt"), "top_k"),
        SaveCheckpoint(str(tmp_path / "last.ckpt"), "last"),
    ]
    assert store.value["best"] == "epoch=2-step=30.ckpt" and store.value["best_score"] == 0.5  # relative to dirpath
    after = state_at(val_loss=0.5).replace(listeners={store.key: store.value})
    assert mc.best_model_path(after) == str(tmp_path / "epoch=2-step=30.ckpt")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("mode", "kept"), [("min", [3, 4]), ("max", [0, 2])])
def test_top_k_keeps_the_k_best_files(tmp_path: Path, mode: str, kept: list[int]) -> None:
    """With a monitor, exactly the k best checkpoints stay on disk and best_model_path names the best."""
    losses = [5.0, 3.0, 4.0, 1.0, 2.0]
    mc = ModelCheckpoint(monitor="val_loss", mode=mode, save_top_k=2, filename="{epoch}")
    trainer = fit(tmp_path, mc, Scripted(losses), max_epochs=5)
    assert files(tmp_path) == [f"epoch={e}.ckpt" for e in kept]
    best = kept[0] if losses[kept[0]] == (min if mode == "min" else max)(losses) else kept[1]
    assert Path(mc.best_model_path(trainer.state)).name == f"epoch={best}.ckpt"
    assert mc.best_model_score(trainer.state) == losses[best]
    assert sorted(Path(p).name for p in mc.best_k_models(trainer.state)) == files(tmp_path)


def test_dropped_files_are_deleted_only_after_their_replacement_exists(tmp_path: Path) -> None:
    """Once a top-k file is on disk, one always is: never delete-then-write (saves finish in the background)."""
    mc = ModelCheckpoint(every_n_train_steps=1, save_top_k=1)
    trainer = interlock.Trainer(max_epochs=2, **only(mc), default_root_dir=tmp_path)
    seen: list[int] = []
    trainer.on("*", lambda event: seen.append(len(files(tmp_path))))
    trainer.fit(TinyModule(), loader(64, 8))
    first = next(i for i, n in enumerate(seen) if n)
    assert min(seen[first:]) >= 1 and seen[-1] == 1
    assert files(tmp_path) == ["epoch=1-step=16.ckpt"]


def test_a_dropped_file_survives_when_its_replacement_cannot_be_written(tmp_path: Path, monkeypatch: Any) -> None:
    """The run fails naming the checkpoint it could not put in place; the file it was to replace is kept."""
    mc = ModelCheckpoint(every_n_train_steps=4, save_top_k=1, filename="{step}")
    trainer = interlock.Trainer(max_epochs=1, **only(mc), default_root_dir=tmp_path)
    real = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name == "step=8.ckpt":
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(interlock.CheckpointError, match=r"step=8\.ckpt: No space left on device"):
        trainer.fit(TinyModule(), loader(64, 8))
    assert trainer.state.status == "failed"
    assert files(tmp_path) == ["step=4.ckpt"]


def test_without_monitor_only_the_latest_is_kept(tmp_path: Path) -> None:
    """The default keeps one file, the latest, saved after each validation."""
    mc = ModelCheckpoint()
    trainer = fit(tmp_path, mc, max_epochs=3)
    assert files(tmp_path) == ["epoch=2-step=24.ckpt"]
    assert mc.best_model_path(trainer.state).endswith("epoch=2-step=24.ckpt")
    assert mc.last_model_path(trainer.state) == ""


def test_every_n_epochs_without_validation_saves_at_those_epoch_ends(tmp_path: Path) -> None:
    """every_n_epochs=2 over 4 epochs without validation saves after epochs 1 and 3."""
    fit(tmp_path, ModelCheckpoint(every_n_epochs=2, save_top_k=-1, filename="{epoch}"), val=False, max_epochs=4)
    assert files(tmp_path) == ["epoch=1.ckpt", "epoch=3.ckpt"]


def test_every_n_train_steps_counts_optimizer_steps(tmp_path: Path) -> None:
    """With gradient accumulation a step is saved once, not at each of its batches."""
    mc = ModelCheckpoint(every_n_train_steps=2, save_top_k=-1, filename="{step}")
    fit(tmp_path, mc, val=False, accumulate_grad_batches=2)
    assert files(tmp_path) == ["step=2.ckpt", "step=4.ckpt"]


class StepScores(TinyModule):
    """Training step i (from 0) returns ``scores[i]`` as ``score`` beside its loss."""

    def __init__(self, scores: list[float]) -> None:
        super().__init__()
        self.scores = scores

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return {"loss": super().training_step(batch, batch_idx), "score": torch.tensor(self.scores[batch_idx])}


@pytest.mark.parametrize("mode", ["min", "max"])
def test_step_saves_rank_on_the_scalars_that_step_returned(tmp_path: Path, mode: str) -> None:
    """A step save point ranks and names its file by that step's returned scalars (Lightning's step log)."""
    scores = [5.0, 3.0, 8.0, 1.0, 7.0, 2.0, 9.0, 6.0]
    mc = ModelCheckpoint(
        every_n_train_steps=1, monitor="train_score", mode=mode, save_top_k=2, filename="{step}-{train_score:.0f}"
    )
    trainer = fit(tmp_path, mc, StepScores(scores), val=False)
    best = sorted(scores, reverse=mode == "max")[:2]
    kept = sorted(f"step={scores.index(v) + 1}-train_score={v:.0f}.ckpt" for v in best)
    assert files(tmp_path) == kept
    assert mc.best_model_score(trainer.state) == best[0]


def test_train_time_interval_saves_when_the_interval_has_passed(tmp_path: Path, monkeypatch: Any) -> None:
    """With a clock advancing 4 s per batch and a 10 s interval, saves come at batches 4 and 7."""
    ticks = iter(range(4, 10_000, 4))
    monkeypatch.setattr(checkpoint_module, "time", type("Clock", (), {"time": staticmethod(lambda: next(ticks))}))
    mc = ModelCheckpoint(train_time_interval=datetime.timedelta(seconds=10), save_top_k=-1, filename="{step}")
    fit(tmp_path, mc, val=False)
    assert files(tmp_path) == ["step=4.ckpt", "step=7.ckpt"]


def test_save_last_rewrites_last_ckpt_at_each_epoch_end(tmp_path: Path) -> None:
    """save_last writes last.ckpt at epoch end even when no other trigger fires; it holds the final epoch end."""
    mc = ModelCheckpoint(every_n_train_steps=1000, save_last=True)
    trainer = fit(tmp_path, mc, max_epochs=2)
    assert files(tmp_path) == ["last.ckpt"]
    state = TorchCheckpointIO().load_checkpoint(mc.last_model_path(trainer.state))["state"]
    assert (state["chart"], state["progress"]["epoch"]) == ("fit.train.epoch_end", 1)


def test_nan_is_never_better_than_a_number(tmp_path: Path) -> None:
    """A NaN score is kept only while there is room; any number replaces it."""
    mc = ModelCheckpoint(monitor="val_loss", filename="{epoch}")
    trainer = fit(tmp_path, mc, Scripted([math.nan, 2.0, 3.0]), max_epochs=3)
    assert files(tmp_path) == ["epoch=1.ckpt"] and mc.best_model_score(trainer.state) == 2.0


def test_repeated_names_get_versions(tmp_path: Path) -> None:
    """A repeated name gets -v1, -v2 when a monitor keeps all; without one the latest is overwritten (Lightning)."""
    fit(tmp_path / "all", ModelCheckpoint(filename="model", save_top_k=-1, monitor="val_loss"), max_epochs=3)
    assert files(tmp_path / "all") == ["model-v1.ckpt", "model-v2.ckpt", "model.ckpt"]
    fit(tmp_path / "none", ModelCheckpoint(filename="model", save_top_k=-1), max_epochs=3)
    assert files(tmp_path / "none") == ["model.ckpt"]
    fit(tmp_path / "one", ModelCheckpoint(filename="model"), max_epochs=3)
    assert files(tmp_path / "one") == ["model.ckpt"]
    unversioned = ModelCheckpoint(filename="model", save_top_k=-1, monitor="val_loss", enable_version_counter=False)
    fit(tmp_path / "off", unversioned, max_epochs=3)
    assert files(tmp_path / "off") == ["model.ckpt"]


def test_bookkeeping_survives_resume(tmp_path: Path) -> None:
    """Top-k paths and scores are state: 2 epochs + resume to 4 keep the same files as 4 epochs in one go."""
    losses = [4.0, 1.0, 3.0, 2.0]
    make = lambda: ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True, filename="{epoch}")  # noqa: E731
    whole = fit(tmp_path / "whole", mc := make(), Scripted(losses), max_epochs=4)
    fit(tmp_path / "split", make(), Scripted(losses), max_epochs=2)
    resumed = fit(tmp_path / "split", mc, Scripted(losses, start=2), max_epochs=4, ckpt="last")
    relative = lambda t: {Path(p).name: s for p, s in mc.best_k_models(t.state).items()}  # noqa: E731
    assert relative(resumed) == relative(whole) == {"epoch=1.ckpt": 1.0, "epoch=3.ckpt": 2.0}
    assert files(tmp_path / "split") == files(tmp_path / "whole") == ["epoch=1.ckpt", "epoch=3.ckpt", "last.ckpt"]


def test_a_missing_monitored_metric_is_an_error_once_validation_ran(tmp_path: Path) -> None:
    """A monitor that names no metric fails the run at the first epoch end, listing the metrics there are."""
    with pytest.raises(KeyError, match=r"monitor='val_los'.*val_loss"):
        fit(tmp_path, ModelCheckpoint(monitor="val_los"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "best"},
        {"save_top_k": -2},
        {"save_top_k": 3},
        {"every_n_train_steps": 2, "every_n_epochs": 1},
        {"every_n_epochs": 1, "train_time_interval": 5.0},
        {"train_time_interval": 0},
        {"save_last": "link"},
        {"filename": ""},
    ],
)
def test_invalid_arguments_are_rejected(kwargs: dict[str, Any]) -> None:
    """Bad values and conflicting triggers raise ValueError naming the argument."""
    with pytest.raises(ValueError, match="ModelCheckpoint"):
        ModelCheckpoint(**kwargs)


def test_default_listeners_end_with_a_model_checkpoint() -> None:
    """The default listeners save last.ckpt, and ModelCheckpoint comes last so it saves what the others updated."""
    last = default_listeners()[-1]
    assert isinstance(last, ModelCheckpoint) and last.save_last


def test_requests_for_one_file_write_it_once_and_remove_all_it_replaces(tmp_path: Path, monkeypatch: Any) -> None:
    """Two SaveCheckpoint requests for one path at one point write it once; the files each one replaces go."""
    old_a, old_b, new = tmp_path / "a.ckpt", tmp_path / "b.ckpt", tmp_path / "new.ckpt"
    for path in (old_a, old_b):
        TorchCheckpointIO().save_checkpoint({"old": 1}, path)
    writes: list[str] = []
    real = TorchCheckpointIO.save_checkpoint

    def counting(self: TorchCheckpointIO, checkpoint: dict[str, Any], path: Any) -> None:
        writes.append(Path(path).name)
        real(self, checkpoint, path)

    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", counting)
    trainer = interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path)
    trainer.on(
        "fit.train.epoch_end",
        lambda e: [SaveCheckpoint(str(new), replaces=(str(old_a),)), SaveCheckpoint(str(new), replaces=(str(old_b),))],
    )
    trainer.fit(TinyModule(), loader(64, 8))
    assert writes == ["new.ckpt"]
    assert files(tmp_path) == ["new.ckpt"]


def test_files_already_in_the_directory_are_versioned_around_not_overwritten(tmp_path: Path) -> None:
    """A second run into the same dirpath writes -v1 files (and last-v1.ckpt) and leaves the first run's bytes alone."""
    folder = tmp_path / "ck"
    make = lambda: ModelCheckpoint(dirpath=folder, save_top_k=-1, save_last=True)  # noqa: E731
    fit(tmp_path / "first", make(), max_epochs=2)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert sorted(before) == ["epoch=0-step=8.ckpt", "epoch=1-step=16.ckpt", "last.ckpt"]
    second = fit(tmp_path / "second", mc := make(), max_epochs=2)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name in before} == before
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*before, "epoch=0-step=8-v1.ckpt", "epoch=1-step=16-v1.ckpt", "last-v1.ckpt"]
    )
    assert Path(mc.last_model_path(second.state)).name == "last-v1.ckpt"
    unversioned = ModelCheckpoint(dirpath=folder, save_top_k=-1, save_last=True, enable_version_counter=False)
    fit(tmp_path / "third", unversioned, max_epochs=1)  # Lightning's flag: overwrite instead
    assert (folder / "last.ckpt").read_bytes() != before["last.ckpt"]


def test_a_resumed_run_names_files_as_its_first_run_did(tmp_path: Path) -> None:
    """The files found at the start are state: a resume continues the first run's names, not -v1 of its own files."""
    folder = tmp_path / "ck"
    (folder).mkdir()
    (folder / "epoch=1.ckpt").write_bytes(b"from an older run")
    make = lambda: ModelCheckpoint(dirpath=folder, filename="{epoch}", save_top_k=-1, save_last=True)  # noqa: E731
    fit(tmp_path / "a", mc := make(), max_epochs=2)
    resumed = fit(tmp_path / "a", mc, max_epochs=3, ckpt=str(folder / "last.ckpt"))
    assert sorted(p.name for p in folder.iterdir()) == [
        "epoch=0.ckpt", "epoch=1-v1.ckpt", "epoch=1.ckpt", "epoch=2.ckpt", "last.ckpt"
    ]  # fmt: skip
    assert (folder / "epoch=1.ckpt").read_bytes() == b"from an older run"
    assert Path(mc.last_model_path(resumed.state)).name == "last.ckpt"


def test_the_last_name_is_a_template_and_its_previous_file_goes(tmp_path: Path) -> None:
    """CHECKPOINT_NAME_LAST = 'last-{epoch}' names the file by epoch; each new one replaces the one before."""
    mc = ModelCheckpoint(dirpath=tmp_path / "ck", save_last=True, save_top_k=0)
    mc.CHECKPOINT_NAME_LAST = "last-{epoch}"
    trainer = fit(tmp_path, mc, max_epochs=3)
    assert files(tmp_path / "ck") == ["last-epoch=2.ckpt"]
    assert Path(mc.last_model_path(trainer.state)).name == "last-epoch=2.ckpt"
