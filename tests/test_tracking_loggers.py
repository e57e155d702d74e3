"""MLFlowLogger and WandbLogger against the real libraries, offline: metrics, parameters, models, resume, failures."""

from __future__ import annotations

import importlib.util
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock
from _wandb_reader import read_run
from interlock.listeners import MLFlowLogger, WandbLogger
from interlock.listeners.checkpoint import ModelCheckpoint

pytest.importorskip("mlflow")
pl = pytest.importorskip("pytorch_lightning")
logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No server: MLflow's file store allowed, W&B offline in a temporary directory."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    yield


def loader() -> DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)), batch_size=2)


class Body:
    """The twin's steps, shared by its Lightning and interlock classes."""

    peek = True  # read self.logger.experiment in each step (as a module logging an image would)
    layer: torch.nn.Module
    seen: list[str]
    hparams: Any
    logger: Any
    log: Any

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.log("a", loss, on_step=True, on_epoch=True)
        self.log("b", loss * 2)
        self.log("hidden", loss, on_step=True, logger=False)
        if self.peek:
            self.seen.append(type(self.logger.experiment).__name__ if self.logger is not None else "")
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("v", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.layer.parameters(), lr=self.hparams.lr)


class LitTwin(Body, pl.LightningModule):  # type: ignore[misc,name-defined]
    def __init__(self, lr: float = 0.1, width: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.layer, self.seen = torch.nn.Linear(width, 1), []


class Twin(Body, interlock.Module):
    def __init__(self, lr: float = 0.1, width: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.layer, self.seen = torch.nn.Linear(width, 1), []


class Recorder(pl.loggers.logger.Logger):  # type: ignore[misc,name-defined]
    """Lightning logger keeping every log_metrics call."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, dict[str, float]]] = []
        self.params: dict[str, Any] = {}

    name, version, experiment = "rec", 0, None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.rows.append((int(step or 0), {k: float(v) for k, v in metrics.items()}))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        self.params.update(params)


def lightning_history(epochs: int = 2) -> tuple[dict[str, list[tuple[int, float]]], dict[str, Any]]:
    """What Lightning 2.6.6 sends a logger for the twin: name -> [(step, value)], and the hyper-parameters."""
    rec = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(
            max_epochs=epochs, log_every_n_steps=2, logger=rec, enable_progress_bar=False,
            enable_checkpointing=False, enable_model_summary=False, accelerator="cpu",
        )  # fmt: skip
        trainer.fit(LitTwin(), loader(), loader())
    out: dict[str, list[tuple[int, float]]] = {}
    for step, metrics in rec.rows:
        for k, v in metrics.items():
            out.setdefault(k, []).append((step, v))
    return out, rec.params


class Quiet(Twin):
    peek = False


def fit(root: Path, logger: Any, epochs: int = 2, module: Twin | None = None, **flags: Any) -> interlock.Trainer:
    trainer = interlock.Trainer(
        max_epochs=epochs, log_every_n_steps=2, logger=logger, enable_progress_bar=False, enable_trace=False,
        default_root_dir=root, accelerator="cpu", seed=0, **flags,
    )  # fmt: skip
    module = module or Twin()
    trainer.fit(module, loader(), loader())
    trainer.module_seen = module.seen  # type: ignore[attr-defined]
    return trainer


def mlflow_history(logger: MLFlowLogger) -> dict[str, list[tuple[int, float]]]:
    client, run_id = logger.experiment, logger.run_id
    names = client.get_run(run_id).data.metrics
    return {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)] for k in names}


def same_series(ours: dict[str, list[tuple[int, float]]], theirs: dict[str, list[tuple[int, float]]]) -> None:
    for name, series in theirs.items():
        got = sorted(ours.get(name, []))
        assert [s for s, _ in got] == sorted(s for s, _ in series), name
        assert [v for _, v in got] == pytest.approx([v for _, v in sorted(series)], rel=1e-5), name
    assert set(ours) - set(theirs) <= {"train_loss"}  # interlock's own metric of the returned loss


# -- MLflow ------------------------------------------------------------------------------
def test_mlflow_holds_every_metric_lightning_logs_at_its_steps_and_the_hyperparameters(tmp_path: Path) -> None:
    """A fit with MLFlowLogger leaves Lightning's metrics, step numbers and parameters in the MLflow store."""
    logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"), run_name="twin", tags={"team": "a"})
    trainer = fit(tmp_path, logger)
    theirs, params = lightning_history()
    same_series(mlflow_history(logger), theirs)
    run = logger.experiment.get_run(logger.run_id)
    assert run.data.params == {k: str(v) for k, v in params.items()} == {"lr": "0.1", "width": "3"}
    assert run.info.status == "FINISHED" and run.info.run_name == "twin" and run.data.tags["team"] == "a"
    assert set(trainer.module_seen) == {"MlflowClient"}  # type: ignore[attr-defined]


class QuietTwin(Twin):
    def __init__(self, lr: float = 0.1, width: int = 3) -> None:
        super().__init__(lr, width)
        self.save_hyperparameters(logger=False)


def test_hyperparameters_saved_with_logger_false_stay_out_of_the_tracker(tmp_path: Path) -> None:
    """save_hyperparameters(logger=False) records hparams (checkpoints keep them) but logs none, as in Lightning."""
    logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"))
    module = QuietTwin()
    fit(tmp_path, logger, epochs=1, module=module)
    assert dict(module.hparams) == {"lr": 0.1, "width": 3}
    assert logger.experiment.get_run(logger.run_id).data.params == {}


def test_mlflow_resumed_fit_continues_the_same_run(tmp_path: Path) -> None:
    """Resuming from last.ckpt logs into the stored run: one run, each epoch row once, as an uncut fit."""
    store = str(tmp_path / "mlruns")
    first = MLFlowLogger(save_dir=store)
    fit(tmp_path, first, epochs=1, callbacks=[ModelCheckpoint(save_last=True)])
    last = next(Path(tmp_path).rglob("last.ckpt"))
    second = MLFlowLogger(save_dir=store)
    trainer = interlock.Trainer(
        max_epochs=2, log_every_n_steps=2, logger=second, enable_progress_bar=False, enable_trace=False,
        default_root_dir=tmp_path, accelerator="cpu", seed=0,
    )  # fmt: skip
    trainer.fit(Twin(), loader(), loader(), ckpt_path=last)
    assert second.run_id == first.run_id
    runs = second.experiment.search_runs([second.experiment_id])
    assert len(runs) == 1
    theirs, _ = lightning_history(epochs=2)
    same_series(mlflow_history(second), theirs)


def test_mlflow_log_model_all_uploads_each_kept_checkpoint(tmp_path: Path) -> None:
    """log_model='all': every checkpoint ModelCheckpoint kept is an artifact (its stem), with its metadata."""
    logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"), log_model="all")
    checkpoint = ModelCheckpoint(monitor="v", save_top_k=2, save_last=True)
    trainer = fit(tmp_path, logger, epochs=3, callbacks=[checkpoint])
    kept = {Path(p).stem for p in checkpoint.best_k_models(trainer.state)} | {"last"}
    client = logger.experiment
    uploaded = {a.path for a in client.list_artifacts(logger.run_id)}
    assert kept <= uploaded
    for stem in kept:
        files = {Path(a.path).name for a in client.list_artifacts(logger.run_id, stem)}
        assert files == {f"{stem}.ckpt", "metadata.yaml", "aliases.txt"}


def test_mlflow_log_model_true_uploads_at_the_end_only(tmp_path: Path) -> None:
    """log_model=True: the files kept at the end are uploaded, not those dropped on the way."""
    logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"), log_model=True)
    checkpoint = ModelCheckpoint(monitor="v", save_top_k=1)
    trainer = fit(tmp_path, logger, epochs=3, callbacks=[checkpoint])
    uploaded = {a.path for a in logger.experiment.list_artifacts(logger.run_id)}
    assert uploaded == {Path(checkpoint.best_model_path(trainer.state)).stem}


def test_a_failing_store_warns_once_and_the_run_and_its_checkpoints_go_on(tmp_path: Path) -> None:
    """A tracking store that raises on every write costs one warning: the fit ends and saves its checkpoints."""
    logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"))

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    logger._client.log_batch = full
    with pytest.warns(RuntimeWarning) as caught:
        trainer = fit(tmp_path, logger, epochs=2, callbacks=[ModelCheckpoint(save_last=True)])
    ours = [w for w in caught if "MLFlowLogger could not" in str(w.message)]
    assert len(ours) == 1 and "No space left on device" in str(ours[0].message)
    assert trainer.state.status == "finished" and trainer.state.epoch == 1
    assert (Path(trainer.state.run_dir) / "checkpoints" / "last.ckpt").is_file()


def test_a_store_that_cannot_open_a_run_does_not_fail_the_fit(tmp_path: Path) -> None:
    """An experiment that cannot be created (the server gone) warns, and the fit finishes."""
    logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"))

    def gone(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("server gone")

    logger._client.get_experiment_by_name = gone
    with pytest.warns(RuntimeWarning, match="server gone"):
        trainer = fit(tmp_path, logger, module=Quiet())
    assert trainer.state.status == "finished"


def test_bad_arguments_are_refused_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """log_model must be False/True/'all'; a refused file store and a missing library name the fix."""
    with pytest.raises(ValueError, match="log_model"):
        MLFlowLogger(save_dir=str(tmp_path), log_model="best")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    with pytest.raises(ValueError, match="MLFLOW_ALLOW_FILE_STORE=true"):
        MLFlowLogger(save_dir=str(tmp_path / "refused"))
    with pytest.raises(ValueError, match="offline"):
        WandbLogger(offline=True, log_model=True)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install 'interlock\[wandb\]'"):
        WandbLogger(offline=True)


# -- W&B ---------------------------------------------------------------------------------
def _wandb_runs(save_dir: Path) -> list[Path]:
    return sorted((save_dir / "wandb").glob("offline-run-*"))


def test_wandb_offline_run_summary_holds_the_final_metrics_and_config(tmp_path: Path) -> None:
    """A fit with WandbLogger(offline=True) leaves a run whose summary holds the last value of each metric."""
    pytest.importorskip("wandb")
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="p")
    trainer = fit(tmp_path, logger)
    theirs, params = lightning_history()
    (folder,) = _wandb_runs(tmp_path)
    run = read_run(folder)
    summary = run["summary"]
    for name, series in theirs.items():
        assert summary[name] == pytest.approx(series[-1][1], rel=1e-5), name
    assert summary["trainer/global_step"] == theirs["a_epoch"][-1][0]
    assert run["config"] == {"lr": 0.1, "width": 3} == params
    steps = {(row["trainer/global_step"], k) for row in run["history"] for k in row if not k.startswith("_")}
    assert steps >= {(s, k) for k, series in theirs.items() for s, _ in series}
    assert set(trainer.module_seen) == {"Run"}  # type: ignore[attr-defined]


def test_wandb_resumed_fit_continues_the_same_run(tmp_path: Path) -> None:
    """Resuming from last.ckpt re-opens the W&B run of the stored id; its summary ends at the full fit's values."""
    pytest.importorskip("wandb")
    first = WandbLogger(save_dir=str(tmp_path), offline=True, project="p")
    fit(tmp_path, first, epochs=1, callbacks=[ModelCheckpoint(save_last=True)])
    first_id = first.version
    second = WandbLogger(save_dir=str(tmp_path), offline=True, project="p")
    trainer = interlock.Trainer(
        max_epochs=2, log_every_n_steps=2, logger=second, enable_progress_bar=False, enable_trace=False,
        default_root_dir=tmp_path, accelerator="cpu", seed=0,
    )  # fmt: skip
    trainer.fit(Twin(), loader(), loader(), ckpt_path=next(Path(tmp_path).rglob("last.ckpt")))
    assert second.version == first_id
    runs = _wandb_runs(tmp_path)
    assert len(runs) == 2
    theirs, _ = lightning_history(epochs=2)
    summary = read_run(runs[-1])["summary"]
    assert {read_run(r)["id"] for r in runs} == {first_id}
    assert summary["a_epoch"] == pytest.approx(theirs["a_epoch"][-1][1], rel=1e-5)


def test_the_gan_logs_its_sample_grid_to_wandb_through_logger_experiment(tmp_path: Path) -> None:
    """With a WandbLogger the GAN's epoch-end grid is a wandb.Image in the run's history, one per epoch."""
    pytest.importorskip("wandb")
    from conftest import only
    from interlock.examples.gan import GAN, ring_data

    torch.manual_seed(0)
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="p")
    trainer = interlock.Trainer(max_epochs=2, seed=3, **only(logger), default_root_dir=tmp_path)
    trainer.fit(GAN(), ring_data(64, batch_size=16))
    (folder,) = _wandb_runs(tmp_path)
    images = [row for row in read_run(folder)["history"] if "samples" in row]
    assert [row["trainer/global_step"] for row in images] == [8, 16]
    assert all(row["samples"]["_type"] == "image-file" for row in images)
    assert images[-1]["samples"]["width"] == images[-1]["samples"]["height"] == 64


def test_a_wandb_that_cannot_start_warns_once_and_the_fit_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wandb.init raising (the service gone) costs one warning per stage: the fit finishes with its checkpoints."""
    wandb = pytest.importorskip("wandb")

    def gone(**kwargs: Any) -> None:
        raise ConnectionError("wandb service gone")

    monkeypatch.setattr(wandb, "init", gone)
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="p")
    with pytest.warns(RuntimeWarning) as caught:
        trainer = fit(tmp_path, logger, module=Quiet(), callbacks=[ModelCheckpoint(save_last=True)])
    ours = [w for w in caught if "WandbLogger could not" in str(w.message)]
    assert len(ours) == 1 and "wandb service gone" in str(ours[0].message)
    assert trainer.state.status == "finished"
    assert (Path(trainer.state.run_dir) / "checkpoints" / "last.ckpt").is_file()
