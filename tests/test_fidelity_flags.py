"""Lightning fidelity of EarlyStopping and the Trainer flags, checked against pytorch-lightning itself."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from conftest import loader, make_data, only
from interlock.listeners import CSVLogger, EarlyStopping, EventTrace, ModelCheckpoint, ProgressBar, TensorBoardLogger

pl = pytest.importorskip("pytorch_lightning")

BATCHES = 4  # loader(64, 16)
VALUES = [5.0, 4.0, 4.5, 4.2, 4.1, 4.3, 4.4, 1.0, 1.0, 1.0]


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)


class Ours(interlock.Module):
    """Reports the scripted training metric ``m`` (constant within an epoch) and a scripted ``val_score``."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.calls, self.val_calls, self.seen = _net(), 0, 0, []

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        self.seen.append(round(float(x[0, 0]), 5))
        value = VALUES[self.calls // BATCHES]
        self.calls += 1
        return {"loss": torch.nn.functional.cross_entropy(self.net(x), y), "m": torch.tensor(value)}

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        self.val_calls += 1
        return {"score": torch.tensor(VALUES[(self.val_calls - 1)])}

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Theirs(pl.LightningModule):
    """The same module under Lightning: ``self.log`` with Lightning's epoch-level options."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.calls, self.val_calls, self.seen = _net(), 0, 0, []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.seen.append(round(float(x[0, 0]), 5))
        self.log("m", VALUES[self.calls // BATCHES], on_step=False, on_epoch=True)
        self.calls += 1
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_calls += 1
        self.log("val_score", VALUES[self.val_calls - 1])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run_both(tmp_path: Path, monitor: str, val: bool, es: dict[str, Any], **flags: Any) -> tuple[Any, ...]:
    """Fit both with EarlyStopping(monitor, **es) and ``flags``: (ours, theirs, our stopped_epoch, theirs)."""
    flags = {"max_epochs": 10, "num_sanity_val_steps": 0, "limit_val_batches": 1, **flags}
    ours, theirs = Ours(), Theirs()
    trainer = interlock.Trainer(
        **only(EarlyStopping(monitor, **es)), default_root_dir=tmp_path, accelerator="cpu", **flags
    )
    trainer.fit(ours, loader(64, 16), loader(16, 16) if val else None)
    callback = pl.callbacks.EarlyStopping("val_score" if monitor == "val_score" else "m", **es)
    lightning = pl.Trainer(
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=tmp_path / "pl",
        **flags,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lightning.fit(theirs, loader(64, 16), loader(16, 16) if val else None)
    return ours, theirs, trainer.state.listeners["EarlyStopping"]["stopped_epoch"], callback.stopped_epoch


@pytest.mark.parametrize(
    ("monitor", "val", "es", "flags"),
    [
        ("train_m", False, {"patience": 2}, {}),
        ("train_m", True, {"patience": 2}, {}),
        ("train_m", False, {"patience": 2}, {"min_epochs": 7}),
        ("train_m", False, {"patience": 1}, {"min_steps": 22}),
        ("train_m", False, {"patience": 3, "min_delta": 0.25}, {}),
        ("train_m", False, {"stopping_threshold": 4.15}, {}),
        ("val_score", True, {"patience": 1}, {"check_val_every_n_epoch": 2}),
        ("train_m", True, {"patience": 2, "check_on_train_epoch_end": True}, {"check_val_every_n_epoch": 2}),
    ],
)
def test_early_stopping_stops_where_lightning_does(
    tmp_path: Path, monitor: str, val: bool, es: dict[str, Any], flags: dict[str, Any]
) -> None:
    """A training metric is checked at each epoch end (with or without validation); min_epochs/min_steps defer it."""
    ours, theirs, stopped, expected = run_both(tmp_path, monitor, val, es, **flags)
    assert stopped == expected
    assert (ours.calls, ours.val_calls) == (theirs.calls, theirs.val_calls)


def test_early_stopping_missing_monitor_is_lightnings_runtime_error(tmp_path: Path) -> None:
    """strict: a RuntimeError naming the available metrics (Lightning's type), never a KeyError at validation."""
    with pytest.raises(RuntimeError, match=r"'nope'.*\['train_loss', 'train_m', 'val_score'\]"):
        run_both(tmp_path, "nope", True, {})
    with pytest.raises(ValueError, match=r"check_on_train_epoch_end='yes'"):
        EarlyStopping("m", check_on_train_epoch_end="yes")  # type: ignore[arg-type]


def test_overfit_batches_takes_the_first_batches_unshuffled_as_lightning(tmp_path: Path) -> None:
    """overfit_batches=2: two training and two validation batches per epoch, the same two each epoch, unshuffled."""
    data = make_data(64, 0)
    ours, theirs = Ours(), Theirs()
    trainer = interlock.Trainer(
        **only(), max_epochs=2, overfit_batches=2, num_sanity_val_steps=0, default_root_dir=tmp_path, accelerator="cpu"
    )
    shuffled = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
    with pytest.warns(UserWarning, match="turning off the training dataloader shuffling"):
        trainer.fit(ours, shuffled, loader(64, 8))
    lightning = pl.Trainer(
        max_epochs=2,
        overfit_batches=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=tmp_path / "pl",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lightning.fit(theirs, torch.utils.data.DataLoader(data, batch_size=8, shuffle=True), loader(64, 8))
    assert ours.seen == theirs.seen and len(ours.seen) == 4 and ours.seen[:2] == ours.seen[2:]
    assert ours.val_calls == theirs.val_calls == 4


def _keys(trainer: interlock.Trainer) -> list[str]:
    return [listener.key for listener in trainer.listeners]


def test_defaults_are_kept_when_listeners_are_added_and_removed_by_the_flags(tmp_path: Path) -> None:
    """Adding a listener keeps the defaults; one of a default's kind replaces it; the enable_* flags remove them."""
    added = interlock.Trainer(listeners=[EarlyStopping("m")], default_root_dir=tmp_path)
    assert _keys(added) == [
        "ProgressBar",
        "ModelSummary",
        "CSVLogger",
        "EventTrace",
        "EarlyStopping",
        "ModelCheckpoint",
    ]
    mine = ModelCheckpoint(monitor="val_loss")
    replaced = interlock.Trainer(callbacks=[mine, ProgressBar(refresh_rate=5)], default_root_dir=tmp_path)
    assert sorted(_keys(replaced)) == ["CSVLogger", "EventTrace", "ModelCheckpoint", "ModelSummary", "ProgressBar"]
    assert mine in replaced.listeners
    bare = interlock.Trainer(
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_trace=False,
        default_root_dir=tmp_path,
    )
    assert bare.listeners == []
    logger = CSVLogger(name="other.csv")
    assert interlock.Trainer(logger=logger, enable_trace=False, default_root_dir=tmp_path).listeners[2] is logger
    assert isinstance(
        interlock.Trainer(logger=[logger, EventTrace()], default_root_dir=tmp_path).listeners[2], CSVLogger
    )


def test_logger_false_writes_no_metrics_file(tmp_path: Path) -> None:
    """logger=False: a fit writes no metrics.csv; the default writes one."""
    for logger in (False, True):
        root = tmp_path / str(logger)
        trainer = interlock.Trainer(max_epochs=1, logger=logger, enable_progress_bar=False, default_root_dir=root)
        trainer.fit(Ours(), loader(64, 16))
        assert (trainer.run_dir / "metrics.csv").exists() is logger


def test_fast_dev_run_logs_nothing_as_lightning(tmp_path: Path) -> None:
    """fast_dev_run: the loggers write nothing (Lightning's DummyLogger), the default CSV and a TensorBoard alike."""
    from interlock.lightning.loggers import TensorBoardLogger

    for logger in (True, TensorBoardLogger(str(tmp_path / "tb"))):
        root = tmp_path / type(logger).__name__
        trainer = interlock.Trainer(fast_dev_run=True, logger=logger, enable_progress_bar=False, default_root_dir=root)
        trainer.fit(Ours(), loader(64, 16), loader(32, 16))
        assert trainer.state.global_step == 1  # it ran: one batch
        assert not (trainer.run_dir / "metrics.csv").exists()
    assert not (tmp_path / "tb").exists()


def test_disabled_default_with_an_explicit_listener_is_refused_as_lightning_does(tmp_path: Path) -> None:
    """enable_checkpointing=False with a ModelCheckpoint (or the progress bar's pair) errors, in both frameworks."""
    with pytest.raises(ValueError, match=r"enable_checkpointing=False.*ModelCheckpoint"):
        interlock.Trainer(enable_checkpointing=False, listeners=[ModelCheckpoint()])
    with pytest.raises(ValueError, match=r"enable_progress_bar=False.*ProgressBar"):
        interlock.Trainer(enable_progress_bar=False, callbacks=[ProgressBar()])
    with pytest.raises(Exception, match="enable_checkpointing=False"):
        pl.Trainer(enable_checkpointing=False, callbacks=[pl.callbacks.ModelCheckpoint()], logger=False)
    with pytest.raises(TypeError, match=r"callbacks is Lightning's name for listeners"):
        interlock.Trainer(listeners=[], callbacks=[])


@pytest.mark.parametrize(
    ("flag", "value", "hint"),
    [
        ("gpus", 1, "accelerator='gpu', devices=N"),
        ("sync_batchnorm", True, "convert_sync_batchnorm"),
        ("profiler", "simple", "interlock.listeners.Profiler"),
        ("barebones", True, "enable_checkpointing=False"),
        ("num_nodes", 2, "torchrun"),
        ("plugins", ["x"], "precision="),
        ("max_epoch", 3, "did you mean max_epochs"),
    ],
)
def test_lightning_arguments_interlock_lacks_name_the_equivalent(flag: str, value: Any, hint: str) -> None:
    """A Lightning-only argument (or a typo) is a TypeError that names what to use instead."""
    with pytest.raises(TypeError, match=rf"{flag}=.*{hint}|{flag}.*{hint}"):
        interlock.Trainer(**{flag: value})


def test_lightning_arguments_at_their_off_value_are_accepted(tmp_path: Path) -> None:
    """Lightning's 'off' values of the arguments interlock lacks change nothing and are accepted."""
    trainer = interlock.Trainer(
        benchmark=None,
        sync_batchnorm=False,
        num_nodes=1,
        detect_anomaly=False,
        inference_mode=True,
        enable_model_summary=True,
        default_root_dir=tmp_path,
    )
    assert trainer.config.log_every_n_steps == 50


def test_tensorboard_takes_the_trainers_log_every_n_steps() -> None:
    """TensorBoardLogger() follows Trainer(log_every_n_steps=); an explicit cadence wins."""
    follows, own = TensorBoardLogger(), TensorBoardLogger(log_every_n_steps=7)
    interlock.Trainer(listeners=[follows], log_every_n_steps=3)
    interlock.Trainer(listeners=[own], log_every_n_steps=3)
    assert (follows.log_every_n_steps, own.log_every_n_steps) == (3, 7)
    with pytest.raises(ValueError, match=r"min_epochs=-1"):
        interlock.Trainer(min_epochs=-1)


# -- ModelCheckpoint against Lightning -----------------------------------------------------
def checkpoint_both(tmp_path: Path, val: bool, ckpt: dict[str, Any], **flags: Any) -> tuple[Any, Any, Any]:
    """Fit both with a ModelCheckpoint(**ckpt) writing to its own dirpath: (our trainer, our listener, theirs)."""
    flags = {"max_epochs": 4, "num_sanity_val_steps": 0, "limit_val_batches": 1, **flags}
    mine = ModelCheckpoint(dirpath=tmp_path / "ours", **ckpt)
    trainer = interlock.Trainer(**only(mine), default_root_dir=tmp_path, accelerator="cpu", **flags)
    trainer.fit(Ours(), loader(64, 16), loader(16, 16) if val else None)
    monitor = ckpt.get("monitor")
    theirs_kw = {**ckpt, "monitor": "m" if monitor == "train_m" else monitor}
    theirs = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "theirs", **theirs_kw)
    lightning = pl.Trainer(
        callbacks=[theirs],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=tmp_path / "pl",
        **flags,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lightning.fit(Theirs(), loader(64, 16), loader(16, 16) if val else None)
    return trainer, mine, theirs


def _names(paths: Any) -> list[str]:
    return sorted(Path(p).name for p in paths)


@pytest.mark.parametrize(
    ("val", "ckpt", "flags"),
    [
        (True, {"monitor": "train_m", "save_top_k": 2}, {}),
        (False, {"monitor": "train_m", "save_top_k": 2, "save_last": True}, {}),
        (True, {"monitor": "val_score", "save_top_k": 2}, {"check_val_every_n_epoch": 2}),
        (True, {"monitor": "train_m", "save_top_k": -1}, {"check_val_every_n_epoch": 2}),
        (True, {"monitor": "train_m", "save_top_k": 1, "save_on_train_epoch_end": True}, {}),
        (True, {"monitor": "epoch", "mode": "max", "save_top_k": 2}, {}),
        (True, {"monitor": "step", "save_top_k": 1}, {}),
        (True, {"filename": "{epoch}-{step}", "auto_insert_metric_name": False, "save_top_k": -1}, {}),
        (False, {"filename": "fixed", "save_top_k": -1}, {}),
        (False, {"filename": "fixed", "save_top_k": -1, "enable_version_counter": False}, {}),
    ],
)
def test_model_checkpoint_keeps_what_lightning_keeps(
    tmp_path: Path, val: bool, ckpt: dict[str, Any], flags: dict[str, Any]
) -> None:
    """Files, best_k_models (names and scores), best_model_path and last_model_path are Lightning's."""
    trainer, mine, theirs = checkpoint_both(tmp_path, val, ckpt, **flags)
    state = trainer.state
    assert _names((tmp_path / "ours").iterdir()) == _names((tmp_path / "theirs").iterdir())
    ours_k = {Path(p).name: s for p, s in mine.best_k_models(state).items()}
    theirs_k = {Path(p).name: (None if s is None else float(s)) for p, s in theirs.best_k_models.items()}
    if ckpt.get("monitor") is None:
        ours_k = dict.fromkeys(ours_k)
        theirs_k = dict.fromkeys(theirs_k)
    assert ours_k == pytest.approx(theirs_k)
    assert Path(mine.best_model_path(state)).name == Path(theirs.best_model_path).name
    assert Path(mine.last_model_path(state)).name == Path(theirs.last_model_path).name


def test_save_weights_only_writes_no_training_state_and_cannot_resume(tmp_path: Path) -> None:
    """save_weights_only: the file holds weights but no optimizer state; resuming a fit from it is refused."""
    mine = ModelCheckpoint(dirpath=tmp_path / "w", save_weights_only=True, save_last=True)
    trainer = interlock.Trainer(**only(mine), max_epochs=1, default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(Ours(), loader(64, 16))
    last = mine.last_model_path(trainer.state)
    again = interlock.Trainer(**only(), max_epochs=2, default_root_dir=tmp_path, accelerator="cpu")
    with pytest.raises(Exception, match="save_weights_only=True"):
        again.fit(Ours(), loader(64, 16), ckpt_path=last)


class _Logs:
    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.log("loss", loss)  # type: ignore[attr-defined]
        self.log_dict({"other": 1.0})  # type: ignore[attr-defined]
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("v", 1.0)  # type: ignore[attr-defined]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


def test_barebones_turns_off_what_lightnings_does_and_self_log_with_its_warning(tmp_path: Path) -> None:
    """Trainer(barebones=True): the same weights, no checkpoint, logger, bar or summary, no sanity check, self.log
    ignored with Lightning's warning (no metrics); asking for one of those features is Lightning's ValueError."""
    import warnings

    import interlock.lightning as il
    from _twins import twins

    runs = []
    for lib, cls in ((pl, twins(_Logs)[0]), (il, twins(_Logs)[1])):
        module = cls()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = lib.Trainer(max_epochs=2, barebones=True, default_root_dir=tmp_path / lib.__name__)
            trainer.fit(module, loader(32, 8), loader(16, 8))
        said = sorted({str(w.message) for w in caught if "barebones" in str(w.message)})
        made = sorted(p.suffix for p in (tmp_path / lib.__name__).rglob("*") if p.suffix in (".ckpt", ".csv"))
        runs.append(
            ([p.tolist() for p in module.parameters()], dict(trainer.callback_metrics), trainer.callbacks, said)
        )
        assert trainer.barebones and made == []
    assert runs[1] == runs[0] and len(runs[1][3]) == 1
    for flag, value in [("enable_checkpointing", True), ("logger", True), ("num_sanity_val_steps", 2),
                        ("fast_dev_run", 1), ("log_every_n_steps", 5), ("detect_anomaly", True)]:  # fmt: skip
        with pytest.raises(ValueError) as theirs:
            pl.Trainer(barebones=True, **{flag: value})
        with pytest.raises(ValueError) as ours:
            il.Trainer(barebones=True, **{flag: value})
        assert str(ours.value) == str(theirs.value)
