"""interlock.lightning: Lightning's import paths, the Trainer's read-only attributes, LightningCLI, helpers, demos."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

import interlock
import interlock.lightning as il
from dropin import harness

pl = pytest.importorskip("pytorch_lightning")


class Regression(il.LightningModule):
    def __init__(self, hidden: int = 4, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Data(il.LightningDataModule):
    def __init__(self, n: int = 16) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.data = TensorDataset(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g))

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data, batch_size=4)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data, batch_size=8)


class LitRegression(pl.LightningModule):  # type: ignore[name-defined,misc]
    def __init__(self, hidden: int = 4, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

    training_step = Regression.training_step
    validation_step = Regression.validation_step
    configure_optimizers = Regression.configure_optimizers


class LitData(pl.LightningDataModule):  # type: ignore[name-defined,misc]
    def __init__(self, n: int = 16) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.data = TensorDataset(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g))

    train_dataloader = Data.train_dataloader
    val_dataloader = Data.val_dataloader


def _fit(trainer_cls: Any, module: Any, ckpt: Any, root: Path) -> Any:
    trainer = trainer_cls(
        max_epochs=2, callbacks=[ckpt], default_root_dir=str(root), enable_progress_bar=False, logger=False
    )
    data = Data()
    trainer.fit(module, data.train_dataloader(), data.val_dataloader())
    return trainer


def test_trainer_attributes_read_after_fit_match_lightning(tmp_path: Path) -> None:
    """callback_metrics, current_epoch, global_step and the checkpoint's best path and score read as in Lightning."""
    from interlock.lightning.callbacks import ModelCheckpoint

    torch.manual_seed(0)
    lit_ckpt = pl.callbacks.ModelCheckpoint(monitor="val_loss")
    lit = _fit(pl.Trainer, LitRegression(), lit_ckpt, tmp_path / "pl")
    torch.manual_seed(0)
    ckpt = ModelCheckpoint(monitor="val_loss")
    mine = _fit(il.Trainer, Regression(), ckpt, tmp_path / "il")
    assert set(mine.callback_metrics) == set(lit.callback_metrics)
    for key, value in lit.callback_metrics.items():
        assert torch.equal(mine.callback_metrics[key], value), key
    assert mine.logged_metrics.keys() == lit.logged_metrics.keys()
    for key, value in lit.logged_metrics.items():
        assert torch.equal(mine.logged_metrics[key], value), key
    assert (mine.current_epoch, mine.global_step) == (lit.current_epoch, lit.global_step) == (2, 8)
    assert Path(mine.checkpoint_callback.best_model_path).name == Path(lit_ckpt.best_model_path).name
    assert Path(ckpt.best_model_path).name == Path(lit_ckpt.best_model_path).name
    assert torch.equal(ckpt.best_model_score, lit_ckpt.best_model_score)
    assert mine.checkpoint_callback.best_model_score == lit.checkpoint_callback.best_model_score
    assert isinstance(mine.model, Regression) and mine.lightning_module is mine.model
    assert mine.should_stop is False and mine.is_global_zero
    assert mine.log_dir == str(mine.run_dir)
    lit.validate(lit.model, Data().val_dataloader(), verbose=False)
    mine.validate(mine.model, Data().val_dataloader())
    assert mine.logged_metrics.keys() == lit.logged_metrics.keys() == {"val_loss"}
    assert torch.equal(mine.logged_metrics["val_loss"], lit.logged_metrics["val_loss"])


def test_returned_scalars_are_not_lightnings_callback_metrics_nor_evaluation_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """callback_metrics and validate()/test() hold what the module logged, as in Lightning; state.metrics all."""

    def returning(base: Any) -> Any:
        class Returning(base):  # type: ignore[misc,valid-type]
            def training_step(self, batch: Any, batch_idx: int) -> Any:
                loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
                self.log("logged", loss)
                self.log("not_to_loggers", loss, logger=False)
                return {"loss": loss, "extra": loss.detach() * 2}

            def validation_step(self, batch: Any, batch_idx: int) -> Any:
                loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
                self.log("val_logged", loss)
                return {"val_returned": loss}

            test_step = validation_step

        return Returning

    seen = []
    for trainer_cls, module_cls in ((pl.Trainer, returning(LitRegression)), (il.Trainer, returning(Regression))):
        torch.manual_seed(0)
        trainer = trainer_cls(
            max_epochs=2, default_root_dir=str(tmp_path), enable_progress_bar=False, logger=False,
            enable_checkpointing=False, enable_model_summary=False,
        )  # fmt: skip
        module = module_cls()
        trainer.fit(module, Data().train_dataloader(), Data().val_dataloader())
        after_fit = {k: float(v) for k, v in trainer.callback_metrics.items()}
        validated = trainer.validate(module, Data().val_dataloader(), verbose=False)
        tested = trainer.test(module, Data().val_dataloader(), verbose=False)
        seen.append((after_fit, validated, tested, {k: float(v) for k, v in trainer.callback_metrics.items()}))
        if trainer_cls is il.Trainer:  # interlock's own monitors still read the returned ones
            assert "test_val_returned" in trainer.state.metrics
    assert seen[0] == seen[1]
    assert set(seen[0][0]) == {"logged", "not_to_loggers", "val_logged"}
    assert [set(r) for r in seen[0][1]] == [{"val_logged"}]
    capsys.readouterr()
    trainer.test(module, Data().val_dataloader())  # the printed table is the returned results
    printed = capsys.readouterr().out
    assert "test_val_returned" not in printed and "val_logged" in printed


def test_lightning_callbacks_by_their_lightning_names_act_as_lightnings(tmp_path: Path) -> None:
    """EarlyStopping, LearningRateMonitor, Timer and TQDMProgressBar with Lightning's arguments act as Lightning's."""
    import interlock.lightning.callbacks as mine_cb

    outcomes = []
    for trainer_cls, module_cls, cb in ((pl.Trainer, LitRegression, pl.callbacks), (il.Trainer, Regression, mine_cb)):
        torch.manual_seed(0)
        model = module_cls(lr=2.0)  # diverges: early stopping stops it
        timer = cb.Timer(duration="00:01:00:00", interval="epoch", verbose=False)
        stopper = cb.EarlyStopping(monitor="val_loss", patience=1, mode="min", log_rank_zero_only=True)
        trainer = trainer_cls(
            max_epochs=20,
            callbacks=[
                stopper,
                cb.LearningRateMonitor(logging_interval="epoch"),
                cb.TQDMProgressBar(refresh_rate=5, leave=False),
                timer,
            ],
            logger=pl.loggers.CSVLogger(str(tmp_path / "pl")) if trainer_cls is pl.Trainer else None,
            default_root_dir=str(tmp_path),
            enable_checkpointing=False,
        )
        trainer.fit(model, Data().train_dataloader(), Data().val_dataloader())
        assert 0 < timer.time_elapsed() < 3600
        counters = (stopper.wait_count, stopper.stopped_epoch, stopper.best_score)
        outcomes.append((trainer.current_epoch, trainer.global_step, harness.weights(model), counters))
    assert outcomes[0][:2] == outcomes[1][:2] and outcomes[0][0] < 20
    (lit_wait, lit_stopped, lit_best), (wait, stopped, best) = outcomes[0][3], outcomes[1][3]
    assert (wait, stopped) == (lit_wait, lit_stopped) and stopped > 0  # Lightning's attributes, read after fit
    assert torch.equal(best, lit_best.float())
    assert harness.differences(outcomes[0][2], outcomes[1][2]) == []


def test_trainer_refuses_writes_naming_the_interlock_way(tmp_path: Path) -> None:
    """Setting a read-only attribute raises; should_stop names interlock.Stop; save_checkpoint before a fit says so."""
    trainer = il.Trainer(default_root_dir=str(tmp_path), enable_progress_bar=False)
    with pytest.raises(AttributeError, match=r"Stop"):
        trainer.should_stop = True  # type: ignore[misc]
    with pytest.raises(AttributeError, match=r"read-only"):
        trainer.current_epoch = 3  # type: ignore[misc]
    for flag in ("limit_val_batches", "accumulate_grad_batches", "num_sanity_val_steps", "gradient_clip_algorithm"):
        with pytest.raises(AttributeError, match=rf"trainer\.{flag} is read-only"):
            setattr(trainer, flag, 0)
    with pytest.raises(RuntimeError, match=r"no fit has finished"):
        trainer.save_checkpoint(tmp_path / "x.ckpt")


def test_save_checkpoint_after_fit_is_continued_as_lightnings(tmp_path: Path) -> None:
    """trainer.save_checkpoint(path) after fit: load_from_checkpoint and a longer fit from it end as Lightning's."""
    outcomes = []
    for trainer_cls, module_cls in ((pl.Trainer, LitRegression), (il.Trainer, Regression)):
        root = tmp_path / trainer_cls.__module__.split(".")[0]
        flags: dict[str, Any] = {
            "default_root_dir": str(root),
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        }
        torch.manual_seed(0)
        model = module_cls()
        trainer = trainer_cls(max_epochs=2, **flags)
        trainer.fit(model, Data().train_dataloader(), Data().val_dataloader())
        path = root / "kept" / "final.ckpt"  # a folder that does not exist yet: made, as Lightning does
        trainer.save_checkpoint(path)
        raw = torch.load(path, weights_only=True)  # what user code reads from any Lightning checkpoint
        read = (raw["epoch"], raw["global_step"], sorted(raw["state_dict"]), len(raw["optimizer_states"]))
        loaded = module_cls.load_from_checkpoint(path)
        torch.manual_seed(1)
        resumed = module_cls()
        longer = trainer_cls(max_epochs=4, **flags)
        longer.fit(resumed, Data().train_dataloader(), Data().val_dataloader(), ckpt_path=str(path))
        outcomes.append(
            (longer.current_epoch, longer.global_step, harness.weights(loaded), harness.weights(resumed), read)
        )
    (lit_epoch, lit_step, lit_loaded, lit_resumed, lit_read), (epoch, step, loaded, resumed, read) = outcomes
    assert (epoch, step) == (lit_epoch, lit_step) == (4, 16)
    assert read == lit_read and read[:2] == (2, 8)
    assert harness.differences(loaded, lit_loaded) == []
    assert harness.differences(resumed, lit_resumed) == []


def test_a_checkpoint_callback_read_before_it_ran_says_how() -> None:
    """best_model_path of a ModelCheckpoint no Trainer has run is an error naming what to do, not ''."""
    from interlock.lightning.callbacks import ModelCheckpoint

    with pytest.raises(RuntimeError, match=r"Trainer\(callbacks="):
        _ = ModelCheckpoint().best_model_path


def test_the_native_trainer_keeps_working_with_a_lightning_checkpoint_callback(tmp_path: Path) -> None:
    """interlock.Trainer finds the best checkpoint of interlock.lightning's ModelCheckpoint for ckpt_path='best'."""
    from interlock.lightning.callbacks import ModelCheckpoint

    trainer = il.Trainer(max_epochs=1, callbacks=[ModelCheckpoint(monitor="val_loss")], default_root_dir=str(tmp_path))
    model, data = Regression(), Data()
    trainer.fit(model, datamodule=data)
    out = trainer.validate(model, data.val_dataloader(), ckpt_path="best")
    assert set(out[0]) == {"val_loss"}


PUBLIC = {
    "interlock.lightning": ["LightningModule", "LightningDataModule", "Trainer", "Callback", "seed_everything"],
    "interlock.lightning.core": ["LightningModule", "LightningDataModule"],
    "interlock.lightning.callbacks": [
        "Callback",
        "ModelCheckpoint",
        "EarlyStopping",
        "LearningRateMonitor",
        "Timer",
        "TQDMProgressBar",
        "ProgressBar",
        "WeightAveraging",
        "EMAWeightAveraging",
    ],
    "interlock.lightning.callbacks.weight_averaging": ["WeightAveraging", "EMAWeightAveraging"],
    "interlock.lightning.loggers": ["CSVLogger", "TensorBoardLogger", "Logger"],
    "interlock.lightning.cli": ["LightningCLI", "SaveConfigCallback"],
    "interlock.lightning.utilities": [
        "rank_zero_only",
        "rank_zero_info",
        "rank_zero_warn",
        "AttributeDict",
        "grad_norm",
    ],
    "interlock.lightning.utilities.rank_zero": [
        "rank_zero_only",
        "rank_zero_info",
        "rank_zero_warn",
        "rank_zero_debug",
    ],
    "interlock.lightning.utilities.types": ["STEP_OUTPUT", "OptimizerLRScheduler"],
    "interlock.lightning.utilities.seed": ["isolate_rng"],
    "interlock.lightning.trainer": ["Trainer"],
    "interlock.lightning.trainer.states": ["TrainerFn", "RunningStage", "TrainerStatus", "TrainerState"],
    "interlock.lightning.demos": ["BoringModel", "BoringDataModule", "DemoModel", "LightningLSTM", "Transformer"],
    "interlock.lightning.demos.boring_classes": ["RandomDataset", "BoringModel", "BoringDataModule", "DemoModel"],
}


@pytest.mark.parametrize(("module", "names"), list(PUBLIC.items()))
def test_lightning_public_names_import_from_the_same_paths(module: str, names: list[str]) -> None:
    """Each name imports from interlock.lightning where it imports from pytorch_lightning."""
    mine = importlib.import_module(module)
    theirs = importlib.import_module(module.replace("interlock.lightning", "pytorch_lightning"))
    for name in names:
        assert hasattr(theirs, name), f"{name} is not Lightning's"
        assert getattr(mine, name) is not None


@pytest.mark.parametrize(
    ("module", "name", "says"),
    [
        ("callbacks", "ModelPruning", "prune"),
        ("callbacks", "SpikeDetection", "FiniteGuard"),
        ("loggers", "CometLogger", "not in interlock yet"),
        ("utilities", "measure_flops", "FlopCounterMode"),
        ("callbacks", "RichModelSummary", "the same table in plain text"),
    ],
)
def test_a_lightning_name_without_equivalent_fails_at_import_naming_the_alternative(
    module: str, name: str, says: str
) -> None:
    """`from interlock.lightning.X import Name` raises ImportError with the alternative, never a silent stand-in."""
    assert hasattr(importlib.import_module(f"pytorch_lightning.{module}"), name)
    with pytest.raises(ImportError, match=says):
        exec(f"from interlock.lightning.{module} import {name}")


@pytest.mark.parametrize(
    "module",
    ["", ".callbacks", ".loggers", ".utilities", ".strategies", ".accelerators", ".profilers", ".plugins", ".tuner"],
)
def test_every_lightning_public_name_imports_or_names_its_alternative(module: str) -> None:
    """Each name in Lightning's __all__ imports from interlock.lightning, or raises ImportError naming what to use."""
    theirs = importlib.import_module(f"pytorch_lightning{module}")
    mine = importlib.import_module(f"interlock.lightning{module}")
    for name in sorted(getattr(theirs, "__all__", ["Tuner"])):
        try:
            getattr(mine, name)
        except ImportError as exc:
            assert "interlock" in str(exc) and ": " in str(exc), (name, str(exc))
        except AttributeError:
            pytest.fail(f"interlock.lightning{module}.{name} neither exists nor names an alternative")


@pytest.mark.parametrize("depth", [0, 1, 2, 3, -1])
def test_model_summary_counts_as_lightnings(depth: int) -> None:
    """ModelSummary gives Lightning's layer names, types, parameter counts, modes and size at each depth."""
    from pytorch_lightning.utilities.model_summary import ModelSummary as Lit

    from interlock.lightning.utilities.model_summary import ModelSummary

    torch.manual_seed(0)
    model = LitRegression(hidden=6)
    model.net[1].eval()
    model.net[2].weight.requires_grad_(False)
    model.deep = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU()))
    lit, mine = Lit(model, max_depth=depth), ModelSummary(model, max_depth=depth)
    for name in (
        "layer_names",
        "layer_types",
        "param_nums",
        "training_modes",
        "total_training_modes",
        "total_parameters",
        "trainable_parameters",
        "total_layer_params",
        "model_size",
    ):
        assert getattr(mine, name) == getattr(lit, name), name
    assert all(n in str(mine) for n in mine.layer_names)
    with pytest.raises(ValueError, match="max_depth=-2"):
        ModelSummary(model, max_depth=-2)


def test_small_utilities_behave_as_lightnings() -> None:
    """move_data_to_device, suggested_max_num_workers, is_picklable and GradClipAlgorithmType match Lightning's."""
    from collections import namedtuple

    import pytorch_lightning.utilities as lit

    import interlock.lightning.utilities as mine

    Pair = namedtuple("Pair", "a b")
    batch = {"x": [torch.ones(2), (torch.zeros(1), "s")], "p": Pair(torch.ones(1), 3)}
    moved, expected = mine.move_data_to_device(batch, "cpu"), lit.move_data_to_device(batch, "cpu")
    assert repr(moved) == repr(expected) and isinstance(moved["p"], Pair)
    assert [mine.suggested_max_num_workers(n) for n in (1, 2, 64)] == [
        lit.suggested_max_num_workers(n) for n in (1, 2, 64)
    ]
    assert [mine.is_picklable(x) for x in (1, lambda: 1, [torch.ones(1)])] == [True, False, True]
    assert mine.GradClipAlgorithmType("norm") == "NORM" and mine.GradClipAlgorithmType.from_str("value") == "value"
    with pytest.raises(ValueError, match="local_world_size=0"):
        mine.suggested_max_num_workers(0)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        ("callbacks.ModelCheckpoint(save_last='link')", "save_last"),
        ("callbacks.ModelCheckpoint(save_on_exception=True)", "preemption"),
        ("callbacks.LearningRateMonitor(log_momentum=1)", "log_momentum=1. must be True or False"),
        ("callbacks.TQDMProgressBar(process_position=1)", "process_position"),
        ("loggers.TensorBoardLogger('.', log_graph=True)", "add_graph"),
        ("loggers.CSVLogger('.', flush_logs_every_n_steps=0)", "flush_logs_every_n_steps"),
    ],
)
def test_a_lightning_argument_interlock_cannot_honour_is_refused(make: str, says: str) -> None:
    """A Lightning constructor argument with no interlock meaning raises at construction, naming the way."""
    import interlock.lightning.callbacks as callbacks  # noqa: F401
    import interlock.lightning.loggers as loggers  # noqa: F401

    with pytest.raises(ValueError, match=says):
        eval(make)


def test_tensorboard_logger_writes_where_lightning_writes(tmp_path: Path) -> None:
    """TensorBoardLogger(save_dir, name, version, sub_dir) has Lightning's log_dir and gives its SummaryWriter."""
    from interlock.lightning.loggers import TensorBoardLogger

    for kwargs in ({}, {"name": "exp", "version": 3}, {"name": "exp", "version": "run_a", "sub_dir": "x"}):
        mine = TensorBoardLogger(str(tmp_path), **kwargs)  # type: ignore[arg-type]
        lit = pl.loggers.TensorBoardLogger(str(tmp_path), **kwargs)
        assert (mine.log_dir, mine.version) == (lit.log_dir, lit.version)
    trainer = il.Trainer(max_epochs=1, logger=mine, enable_progress_bar=False, default_root_dir=str(tmp_path))
    trainer.fit(Regression(), datamodule=Data())
    mine.experiment.add_scalar("extra", 1.0, 0)
    mine.experiment.flush()
    assert any(Path(mine.log_dir).glob("events.out.tfevents.*"))


def test_a_logger_override_interlock_never_calls_is_refused_when_defined() -> None:
    """A Logger subclass overriding log_graph or after_save_checkpoint is a TypeError naming what to do instead."""
    from interlock.lightning.loggers import Logger

    with pytest.raises(TypeError, match=r"Mine.log_graph is never called by interlock: call self.logger.log_graph"):

        class Mine(Logger):
            def log_graph(self, model: Any, input_array: Any = None) -> None: ...

    with pytest.raises(TypeError, match=r"after_save_checkpoint is never called by interlock"):

        class Other(Logger):
            def after_save_checkpoint(self, checkpoint_callback: Any) -> None: ...


def test_an_exception_in_a_lightning_logger_fails_the_run(tmp_path: Path) -> None:
    """The user's log_metrics raising is the run's failure (as in Lightning), and finalize hears "failed"."""
    from interlock.lightning.loggers import Logger

    heard: list[str] = []

    class Broken(Logger):
        name, version = "broken", 0

        def log_hyperparams(self, params: Any) -> None: ...

        def log_metrics(self, metrics: Any, step: Any = None) -> None:
            raise OSError("disk full")

        def finalize(self, status: str) -> None:
            heard.append(status)

    trainer = il.Trainer(max_epochs=1, logger=Broken(), log_every_n_steps=1, enable_progress_bar=False,
                         default_root_dir=str(tmp_path))  # fmt: skip
    with pytest.raises(OSError, match="disk full"):
        trainer.fit(Regression(), datamodule=Data())
    assert heard == ["failed"]


def test_loggers_write_where_lightning_writes(tmp_path: Path) -> None:
    """CSVLogger(save_dir, name) writes save_dir/name/version_N/metrics.csv and counts versions as Lightning."""
    from interlock.lightning.loggers import CSVLogger

    for expected in (0, 1):
        logger = CSVLogger(str(tmp_path), name="exp")
        assert (logger.version, logger.log_dir) == (expected, str(tmp_path / "exp" / f"version_{expected}"))
        lit = pl.loggers.CSVLogger(str(tmp_path / "pl"), name="exp")
        assert lit.version == expected
        trainer = il.Trainer(max_epochs=1, logger=logger, enable_progress_bar=False, default_root_dir=str(tmp_path))
        trainer.fit(Regression(), datamodule=Data())
        assert (Path(logger.log_dir) / "metrics.csv").is_file()
        assert trainer.logger is logger
        (tmp_path / "pl" / "exp" / f"version_{expected}").mkdir(parents=True)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 2.5, "inf"]), st.integers(1, 4), st.sampled_from(["/", "."]))
def test_grad_norm_matches_lightning(norm: Any, width: int, sep: str) -> None:
    """grad_norm gives Lightning's keys and values for any norm type, shape and separator."""
    from pytorch_lightning.utilities import grad_norm as lit_grad_norm

    from interlock.lightning.utilities import grad_norm

    torch.manual_seed(width)
    net = torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.Linear(width, 1))
    net(torch.randn(5, 3)).sum().backward()
    mine, theirs = grad_norm(net, norm, sep), lit_grad_norm(net, norm, sep)
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_grad_norm_refuses_a_non_positive_norm() -> None:
    """grad_norm(norm_type=0) names the valid norm types."""
    from interlock.lightning.utilities import grad_norm

    with pytest.raises(ValueError, match=r"norm_type=0"):
        grad_norm(torch.nn.Linear(1, 1), 0)


def test_rank_zero_only_runs_on_rank_zero_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """rank_zero_only calls the function when RANK is 0 (or unset) and returns the default elsewhere."""
    from interlock.lightning.utilities import rank_zero_only

    calls: list[int] = []
    fn = rank_zero_only(lambda x: calls.append(x) or x)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert fn(1) == 1
    monkeypatch.setenv("RANK", "1")
    assert fn(2) is None
    assert rank_zero_only(lambda: 5, default=-1)() == -1
    assert calls == [1]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("boring_classes.BoringModel", {}),
        ("boring_classes.DemoModel", {"out_dim": 3}),
        ("lstm.SimpleLSTM", {"vocab_size": 20, "ninp": 8, "nhid": 8, "nlayers": 2}),
        ("transformer.Transformer", {"vocab_size": 20, "ninp": 8, "nhid": 8, "nlayers": 1}),
    ],
)
def test_demo_models_start_from_lightnings_weights_and_outputs(name: str, args: dict[str, Any]) -> None:
    """The demo models have Lightning's architecture and init order: same seed, same weights, same outputs."""
    module, cls = name.rsplit(".", 1)
    out = []
    for package in ("pytorch_lightning", "interlock.lightning"):
        torch.manual_seed(0)
        model = getattr(importlib.import_module(f"{package}.demos.{module}"), cls)(**args).eval()
        torch.manual_seed(1)
        if cls == "SimpleLSTM":
            x = torch.randint(0, 20, (2, 5))
            y = model(x, model.init_hidden(2))[0]
        elif cls == "Transformer":
            x = torch.randint(0, 20, (2, 5))
            y = model(x, x)
        else:
            y = model(torch.randn(4, 32))
        out.append((harness.weights(model), y))
    assert harness.differences(out[0][0], out[1][0]) == []
    assert torch.equal(out[0][1], out[1][1])


def test_boring_datamodule_splits_as_lightning() -> None:
    """BoringDataModule draws the same data and splits it the same way per stage."""
    from pytorch_lightning.demos.boring_classes import BoringDataModule as Lit

    from interlock.lightning.demos import BoringDataModule

    for stage, loader in [("fit", "train_dataloader"), ("validate", "val_dataloader"), ("test", "test_dataloader")]:
        made = []
        for cls in (Lit, BoringDataModule):
            torch.manual_seed(0)
            dm = cls()
            dm.setup(stage)
            made.append(torch.cat(list(getattr(dm, loader)())))
        assert torch.equal(made[0], made[1])


def _cli_args(root: Path, *extra: str) -> list[str]:
    return [*extra, f"--trainer.default_root_dir={root}", "--trainer.enable_progress_bar=false", "--model.hidden=5"]


def test_lightning_cli_without_run_builds_model_data_and_trainer(tmp_path: Path) -> None:
    """LightningCLI(run=False) parses args, seeds, and leaves cli.model/datamodule/trainer for the user to run."""
    from interlock.lightning.callbacks import ModelCheckpoint
    from interlock.lightning.cli import LightningCLI

    cli = LightningCLI(
        Regression,
        Data,
        seed_everything_default=1234,
        run=False,
        trainer_defaults={"max_epochs": 2, "callbacks": ModelCheckpoint(monitor="val_loss")},
        args=_cli_args(tmp_path, "--trainer.max_epochs=1"),
    )
    assert cli.model.hparams == {"hidden": 5, "lr": 0.1}
    assert isinstance(cli.datamodule, Data) and isinstance(cli.trainer, il.Trainer)
    assert cli.config.seed_everything == 1234 and os.environ.get("INTERLOCK_GLOBAL_SEED") == "1234"
    assert cli.trainer.config.max_epochs == 1
    assert any(isinstance(x, ModelCheckpoint) for x in cli.trainer.listeners)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.checkpoint_callback.best_model_path
    assert (Path(cli.trainer.log_dir) / "config.yaml").is_file()


@pytest.mark.parametrize("command", ["fit", "validate"])
def test_lightning_cli_runs_a_subcommand(command: str, tmp_path: Path) -> None:
    """LightningCLI(args=[subcommand, ...]) runs trainer.<subcommand>(model, datamodule=...) and saves the config."""
    from interlock.lightning.cli import LightningCLI

    cli = LightningCLI(Regression, Data, args=_cli_args(tmp_path, command, "--trainer.max_epochs=1"))
    assert cli.subcommand == command
    assert cli.trainer.global_step == (4 if command == "fit" else 0)
    assert "val_loss" in cli.trainer.callback_metrics
    saved = (Path(cli.trainer.log_dir) / "config.yaml").read_text()
    assert "hidden: 5" in saved and "max_epochs: 1" in saved


def test_lightning_cli_trains_as_lightnings_cli(tmp_path: Path) -> None:
    """The same LightningCLI call gives the same seeded weights under Lightning and interlock.lightning."""
    from pytorch_lightning.cli import LightningCLI as LitCLI

    from interlock.lightning.cli import LightningCLI

    flags = ["--trainer.max_epochs=2", "--trainer.logger=false", "--trainer.enable_checkpointing=false"]
    lit = LitCLI(LitRegression, LitData, seed_everything_default=7, args=_cli_args(tmp_path / "pl", "fit", *flags))
    mine = LightningCLI(Regression, Data, seed_everything_default=7, args=_cli_args(tmp_path / "il", "fit", *flags))
    assert harness.differences(harness.weights(lit.model), harness.weights(mine.model)) == []


def test_lightning_cli_reads_the_same_config_file_as_lightnings(tmp_path: Path) -> None:
    """A LightningCLI YAML (seed, model, data, trainer with a callback by class_path) trains the same under both."""
    config = tmp_path / "config.yaml"
    trained = []
    for package, model, data in (
        ("pytorch_lightning", LitRegression, LitData),
        ("interlock.lightning", Regression, Data),
    ):
        config.write_text(
            "seed_everything: 11\n"
            "model:\n  hidden: 3\n  lr: 0.05\n"
            "data:\n  n: 12\n"
            "trainer:\n  max_epochs: 2\n  logger: false\n  enable_progress_bar: false\n"
            f"  default_root_dir: {tmp_path / package}\n"
            "  callbacks:\n"
            f"    - class_path: {package}.callbacks.EarlyStopping\n      init_args:\n        monitor: val_loss\n"
        )
        cli_cls = importlib.import_module(f"{package}.cli").LightningCLI
        cli = cli_cls(model, data, args=["fit", "--config", str(config)])
        assert cli.config.fit.seed_everything == 11
        assert any(type(c).__name__ == "EarlyStopping" for c in cli.trainer.callbacks)
        trained.append(harness.weights(cli.model))
    assert harness.differences(trained[0], trained[1]) == []


def test_the_switch_changes_only_import_lines() -> None:
    """switched() rewrites every Lightning import spelling and refuses a change to any other line."""
    text = "import lightning as L\nfrom lightning.pytorch.demos import X\nimport pytorch_lightning as pl\nx = 1\n"
    assert harness.switched(text).splitlines() == [
        "import interlock.lightning as L",
        "from interlock.lightning.demos import X",
        "import interlock.lightning as pl",
        "x = 1",
    ]
    assert harness.as_lightning(text).splitlines()[:2] == [
        "import pytorch_lightning as L",
        "from pytorch_lightning.demos import X",
    ]
    with pytest.raises(AssertionError, match="not imports"):
        harness.switched("import pytorch_lightning\ny = pytorch_lightning.Trainer()\n")


def test_the_trainer_takes_lightnings_signature_and_defaults() -> None:
    """interlock.lightning.Trainer has Lightning's parameters in order and accepts every Lightning default."""
    import inspect

    theirs = inspect.signature(pl.Trainer.__init__).parameters
    mine = inspect.signature(il.Trainer.__init__).parameters
    assert list(mine)[: len(theirs)] == list(theirs)
    defaults = {n: p.default for n, p in theirs.items() if n != "self"}
    assert all(mine[n].default == d for n, d in defaults.items())
    trainer = il.Trainer(**defaults)
    assert trainer.config.val_check_interval == 1.0 and trainer.config.num_sanity_val_steps == 2


def test_run_methods_take_lightnings_argument_order(tmp_path: Path) -> None:
    """fit(model, None, None, dm) is a datamodule (Lightning's order); predict(return_predictions=False) gives None."""
    trainer = il.Trainer(max_epochs=1, default_root_dir=str(tmp_path), enable_progress_bar=False)
    model, data = Regression(), Data()
    trainer.fit(model, None, None, data)
    assert trainer.global_step == 4
    loader = DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=2)

    class Predicting(Regression):
        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.net(batch[0])

    assert trainer.predict(Predicting(), loader, return_predictions=False) is None
    assert len(trainer.predict(Predicting(), loader)) == 2


@pytest.mark.parametrize(
    ("call", "says"),
    [
        ("trainer.fit(model, datamodule=data, weights_only=False)", "weights_only=False"),
        ("trainer.validate(model, datamodule=data, weights_only=False)", "weights_only=False"),
        ("trainer.test(model, datamodule=data, verbose='yes')", "verbose='yes'"),
        ("trainer.predict(model, datamodule=data, return_predictions=1)", "return_predictions=1"),
    ],
)
def test_run_arguments_interlock_cannot_honour_are_refused(call: str, says: str, tmp_path: Path) -> None:
    """weights_only=False and malformed verbose / return_predictions raise naming the value."""
    trainer, model, data = il.Trainer(default_root_dir=str(tmp_path)), Regression(), Data()
    with pytest.raises(ValueError, match=says):
        eval(call, {"trainer": trainer, "model": model, "data": data})


FLAG_ATTRIBUTES = [
    "max_epochs",
    "max_steps",
    "min_epochs",
    "min_steps",
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "val_check_interval",
    "check_val_every_n_epoch",
    "num_sanity_val_steps",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "overfit_batches",
    "log_every_n_steps",
    "fast_dev_run",
    "num_devices",
    "device_ids",
    "precision",
]


@settings(max_examples=20, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "max_epochs": st.sampled_from([None, 1, 5, -1]),
            "max_steps": st.sampled_from([-1, 7]),
            "limit_val_batches": st.sampled_from([None, 0.5, 3]),
            "accumulate_grad_batches": st.integers(1, 4),
            "gradient_clip_val": st.sampled_from([None, 0.5]),
            "num_sanity_val_steps": st.sampled_from([None, 0, -1]),
            "precision": st.sampled_from([None, "32-true", "bf16-mixed", 64]),
            "fast_dev_run": st.sampled_from([False, True, 3]),
            "overfit_batches": st.sampled_from([0.0, 2, 0.25]),
        },
    )
)
def test_flag_attributes_read_as_lightnings(flags: dict[str, Any]) -> None:
    """trainer.max_epochs, limit_*_batches, accumulate_grad_batches, ... read as Lightning's for the same flags."""
    lit = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, **flags)
    mine = il.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, **flags)
    for name in FLAG_ATTRIBUTES:
        assert getattr(mine, name) == getattr(lit, name), name


def test_max_time_adds_a_timer_as_lightning_does(tmp_path: Path) -> None:
    """Trainer(max_time=...) installs a Timer with that duration; a value interlock cannot honour still raises."""
    from interlock.lightning.callbacks import Timer

    trainer = il.Trainer(max_time="00:00:01:00", default_root_dir=str(tmp_path))
    timers = [x for x in trainer.listeners if isinstance(x, Timer)]
    assert len(timers) == 1 and timers[0].duration is not None and timers[0].duration.total_seconds() == 60
    with pytest.raises(TypeError, match="num_nodes"):
        il.Trainer(num_nodes=2)
    with pytest.raises(TypeError, match="model_registry"):
        il.Trainer(model_registry="me/model")


def test_the_native_package_does_not_load_the_adapter() -> None:
    """`import interlock` and a native fit load nothing of interlock.lightning (a plain module pays nothing)."""
    import subprocess
    import sys

    code = (
        "import sys, torch, interlock\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "class M(interlock.Module):\n"
        "    def __init__(self):\n        super().__init__(); self.l = torch.nn.Linear(2, 1)\n"
        "    def training_step(self, b, i):\n        return self.l(b[0]).sum()\n"
        "    def configure_optimizers(self):\n        return torch.optim.SGD(self.parameters(), lr=0.1)\n"
        "t = interlock.Trainer(max_steps=2, logger=False, enable_progress_bar=False, enable_checkpointing=False,"
        " enable_trace=False)\n"
        "t.fit(M(), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('interlock.lightning', 'pytorch_lightning'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(interlock.__file__).parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_adapter_trainer_is_the_native_trainer() -> None:
    """interlock.lightning.Trainer is an interlock.Trainer and LightningModule an interlock.Module (with a trainer
    view): the native API keeps working on them; the data module is the native one."""
    assert issubclass(il.Trainer, interlock.Trainer)
    assert issubclass(il.LightningModule, interlock.Module) and issubclass(il.LightningDataModule, interlock.DataModule)
    assert "trainer" in vars(il.LightningModule) and "trainer" not in vars(interlock.Module)


def _optimizer_args(package: str, scheduler: str) -> list[str]:
    args = ["--optimizer=Adam", "--optimizer.lr=0.01"]
    if scheduler == "step":
        args += ["--lr_scheduler=StepLR", "--lr_scheduler.step_size=1", "--lr_scheduler.gamma=0.5"]
    elif scheduler == "plateau":  # the CLI's own ReduceLROnPlateau, which names the metric it watches
        args += [
            f"--lr_scheduler={package}.cli.ReduceLROnPlateau", "--lr_scheduler.monitor=val_loss",
            "--lr_scheduler.patience=0", "--lr_scheduler.factor=0.5",
        ]  # fmt: skip
    return args


@pytest.mark.parametrize("scheduler", ["none", "step", "plateau"])
def test_lightning_cli_optimizer_options_train_as_lightnings(scheduler: str, tmp_path: Path) -> None:
    """--optimizer/--lr_scheduler replace the module's configure_optimizers, with Lightning's warning and weights."""
    flags = ["--trainer.max_epochs=3", "--trainer.logger=false", "--trainer.enable_checkpointing=false"]
    trained = []
    for package, model, data in (
        ("pytorch_lightning", LitRegression, LitData),
        ("interlock.lightning", Regression, Data),
    ):
        cli_cls = importlib.import_module(f"{package}.cli").LightningCLI
        args = _cli_args(tmp_path / package, "fit", *flags, *_optimizer_args(package, scheduler))
        with pytest.warns(UserWarning, match="configure_optimizers` will be overridden by `LightningCLI"):
            cli = cli_cls(model, data, seed_everything_default=5, args=args)
        optimizer = cli.trainer.optimizers[0]  # what the trainer trained with, as Lightning's trainer says
        assert optimizer is _optimizer_of(cli.model) and type(optimizer).__name__ == "Adam"
        intervals = [c.interval for c in cli.trainer.lr_scheduler_configs]
        assert intervals == ([] if scheduler == "none" else ["epoch"])
        trained.append((harness.weights(cli.model), optimizer.param_groups[0]["lr"]))
    assert harness.differences(trained[0][0], trained[1][0]) == []
    assert trained[0][1] == trained[1][1] == {"none": 0.01, "step": 0.01 * 0.5**3, "plateau": trained[0][1]}[scheduler]


def _optimizer_of(module: Any) -> Any:
    """The optimizer the module's (replaced) configure_optimizers hands out: the one that trained."""
    out = module.configure_optimizers()
    if isinstance(out, dict):
        return out["optimizer"]
    return out[0][0] if isinstance(out, tuple) else out


class NoOptimizers(il.LightningModule):
    """A module that leaves its optimizer to the command line (LightningCLI's --optimizer)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])


def test_lightning_cli_optimizer_serves_a_module_without_configure_optimizers(tmp_path: Path) -> None:
    """A module with no configure_optimizers trains with the --optimizer given, and no warning."""
    import warnings

    from interlock.lightning.cli import LightningCLI

    args = [
        "fit",
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.max_epochs=1",
        "--optimizer=SGD",
        "--seed_everything=0",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        cli = LightningCLI(
            NoOptimizers, Data, args=[*args, "--optimizer.lr=0.2", "--trainer.enable_progress_bar=false"]
        )
    assert cli.trainer.global_step == 4
    assert type(_optimizer_of(cli.model)).__name__ == "SGD" and _optimizer_of(cli.model).param_groups[0]["lr"] == 0.2
    assert "optimizer:" in (Path(cli.trainer.log_dir) / "config.yaml").read_text()  # saved with the rest


def test_lightning_cli_refuses_a_scheduler_without_an_optimizer(tmp_path: Path) -> None:
    """--lr_scheduler alone is an error naming --optimizer (Lightning ignores the scheduler without a word)."""
    from interlock.lightning.cli import LightningCLI

    with pytest.raises(ValueError, match=r"--lr_scheduler StepLR was given without --optimizer.*--optimizer=SGD"):
        LightningCLI(
            Regression, Data, args=_cli_args(tmp_path, "fit", "--lr_scheduler=StepLR", "--lr_scheduler.step_size=1")
        )


def test_the_default_predict_step_passes_the_whole_batch_as_lightnings(tmp_path: Path) -> None:
    """No predict_step: forward gets the whole batch (any loader count); a forward refusing a pair names the fix."""

    def predictor(base: Any) -> Any:
        class Pairs(base):  # type: ignore[misc,valid-type]
            def __init__(self) -> None:
                super().__init__()
                torch.manual_seed(0)
                self.net = torch.nn.Linear(3, 2)

            def forward(self, batch: Any) -> torch.Tensor:
                x = batch[0] if isinstance(batch, list | tuple) else batch
                return self.net(x) * (2 if isinstance(batch, list | tuple) else 1)  # tells what forward got

        return Pairs

    pairs = Data().val_dataloader()
    plain = DataLoader(torch.randn(6, 3, generator=torch.Generator().manual_seed(1)), batch_size=4)
    flags = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    outputs = []
    for trainer_cls, base in ((pl.Trainer, pl.LightningModule), (il.Trainer, il.LightningModule)):
        trainer = trainer_cls(default_root_dir=str(tmp_path), **flags)
        module = predictor(base)()
        outputs.append((trainer.predict(module, pairs), trainer.predict(module, [plain, pairs])))
    (lit_one, lit_two), (one, two) = outputs
    assert all(torch.equal(a, b) for a, b in zip(one, lit_one, strict=True))
    assert [len(x) for x in two] == [len(x) for x in lit_two] == [2, 2]
    for mine, lit in zip(two, lit_two, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine, lit, strict=True))

    class TakesInputs(il.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)  # type: ignore[no-any-return]

    with pytest.raises(TypeError) as info:
        il.Trainer(default_root_dir=str(tmp_path), **flags).predict(TakesInputs(), pairs)
    assert any("define predict_step(self, batch, batch_idx)" in note for note in info.value.__notes__)


def test_trainer_datamodule_is_the_last_one_given_as_lightnings(tmp_path: Path) -> None:
    """trainer.datamodule: None before, the fit's datamodule after, kept by a call with loaders, replaced by another."""
    flags = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "max_epochs": 1}
    seen = []
    for trainer_cls, module_cls, data_cls in ((pl.Trainer, LitRegression, LitData), (il.Trainer, Regression, Data)):
        trainer = trainer_cls(default_root_dir=str(tmp_path), enable_checkpointing=False, **flags)
        first, second = data_cls(), data_cls()
        before = trainer.datamodule
        trainer.fit(module_cls(), datamodule=first)
        after_fit = trainer.datamodule
        trainer.validate(trainer.model, first.val_dataloader(), verbose=False)
        after_loaders = trainer.datamodule
        trainer.validate(trainer.model, datamodule=second, verbose=False)
        seen.append((before, after_fit is first, after_loaders is first, trainer.datamodule is second))
    assert seen[0] == seen[1] == (None, True, True, True)


class _Staged(Regression):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    test_step = Regression.validation_step

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])


class _LitStaged(LitRegression):
    forward = _Staged.forward
    test_step = Regression.validation_step
    predict_step = _Staged.predict_step


def test_run_figures_read_after_each_call_are_lightnings(tmp_path: Path) -> None:
    """num_*_batches, estimated_stepping_batches and the like, read after fit/validate/test/predict, are Lightning's."""
    seen = []
    for trainer_cls, module_cls in ((pl.Trainer, _LitStaged), (il.Trainer, _Staged)):
        trainer = trainer_cls(
            max_epochs=1,
            accumulate_grad_batches=3,
            limit_val_batches=1,
            default_root_dir=str(tmp_path / trainer_cls.__module__.split(".")[0]),
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        model, data = module_cls(), Data(n=20)
        trainer.fit(model, data.train_dataloader(), data.val_dataloader())
        fit = (
            trainer.num_training_batches,
            trainer.estimated_stepping_batches,
            trainer.num_val_batches,
            trainer.num_sanity_val_batches,
            trainer.val_check_batch,
            trainer.is_last_batch,
        )
        trainer.validate(model, data.val_dataloader(), verbose=False)
        validate = (trainer.num_val_batches, trainer.num_training_batches)
        trainer.test(model, data.val_dataloader(), verbose=False)
        test = (trainer.num_test_batches, trainer.num_val_batches)
        trainer.predict(model, data.val_dataloader())
        seen.append((fit, validate, test, trainer.num_predict_batches))
    assert seen[0] == seen[1]
    assert seen[1][0][:2] == (5, 2)  # 5 batches, ceil(5 / 3) optimizer steps


def _lightning_state(trainer: Any) -> tuple[Any, ...]:
    """What Lightning code reads of ``trainer.state`` and the stage flags, as plain values."""
    state = trainer.state
    stage = state.stage
    return (
        getattr(state.fn, "value", state.fn),
        getattr(stage, "value", stage),
        state.status.value,
        state.finished,
        state.stopped,
        None if stage is None else (stage.evaluating, stage.dataloader_prefix),
        state.fn == "FIT",  # Lightning's enums compare with strings, ignoring case
        (trainer.sanity_checking, trainer.training, trainer.validating, trainer.testing, trainer.predicting),
    )


def _state_recorder(base: type) -> Any:
    class Recorder(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.seen: list[tuple[str, tuple[Any, ...]]] = []

        def on_fit_start(self, trainer: Any, module: Any) -> None:
            self.seen.append(("fit_start", _lightning_state(trainer)))

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            self.seen.append(("train_batch_start", _lightning_state(trainer)))

        def on_validation_batch_start(self, trainer: Any, module: Any, batch: Any, idx: int, dl: int = 0) -> None:
            self.seen.append(("validation_batch_start", _lightning_state(trainer)))

        def on_test_start(self, trainer: Any, module: Any) -> None:
            self.seen.append(("test_start", _lightning_state(trainer)))

        def on_predict_batch_start(self, trainer: Any, module: Any, batch: Any, idx: int, dl: int = 0) -> None:
            self.seen.append(("predict_batch_start", _lightning_state(trainer)))

    return Recorder()


class _Failing(Regression):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        raise ValueError("the step failed")


class _LitFailing(LitRegression):
    training_step = _Failing.training_step


def test_trainer_state_reads_as_lightnings_in_callbacks_and_after_each_call(tmp_path: Path) -> None:
    """trainer.state.fn/.stage/.status (Lightning's enums) and the stage flags match Lightning's, failure included."""
    from pytorch_lightning.trainer.states import RunningStage as LitStage
    from pytorch_lightning.trainer.states import TrainerFn as LitFn

    from interlock.lightning.trainer.states import RunningStage, TrainerFn

    seen = []
    for trainer_cls, module_cls, failing_cls, callback in (
        (pl.Trainer, _LitStaged, _LitFailing, pl.Callback),
        (il.Trainer, _Staged, _Failing, il.Callback),
    ):
        flags: dict[str, Any] = {
            "max_epochs": 1,
            "limit_train_batches": 2,
            "limit_val_batches": 1,
            "default_root_dir": str(tmp_path / trainer_cls.__module__.split(".")[0]),
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        }
        recorder = _state_recorder(callback)
        trainer = trainer_cls(callbacks=[recorder], **flags)
        model, data = module_cls(), Data(n=8)
        after = [_lightning_state(trainer)]
        trainer.fit(model, data.train_dataloader(), data.val_dataloader())
        after.append(_lightning_state(trainer))
        for call in ("validate", "test"):
            getattr(trainer, call)(model, data.val_dataloader(), verbose=False)
            after.append(_lightning_state(trainer))
        trainer.predict(model, data.val_dataloader())
        after.append(_lightning_state(trainer))
        failing = trainer_cls(**flags)
        with pytest.raises(ValueError, match="the step failed"):
            failing.fit(failing_cls(), data.train_dataloader())
        after.append((*_lightning_state(failing), failing.interrupted))
        seen.append((recorder.seen, after))
    assert seen[0] == seen[1]
    stages = [state[1] for _, state in seen[1][0]]
    assert {"sanity_check", "train", "validate", "test", "predict"} <= set(stages)
    assert [a[2] for a in seen[1][1]] == ["initializing", *["finished"] * 4, "interrupted"]
    assert [m.value for m in RunningStage] == [m.value for m in LitStage]
    assert [m.value for m in TrainerFn] == [m.value for m in LitFn]
    assert TrainerFn.FITTING == LitFn.FITTING and hash(TrainerFn.FITTING) == hash(LitFn.FITTING)


def test_trainer_state_is_read_only_and_reads_through_to_interlocks_state(tmp_path: Path) -> None:
    """Setting trainer.state.stage raises naming the way; interlock's fields read through, .frozen is the state."""
    trainer = il.Trainer(
        max_epochs=1,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = Data(n=8)
    trainer.fit(Regression(), data.train_dataloader())
    state = trainer.state
    assert isinstance(state.frozen, interlock.TrainerState)
    assert state.global_step == state.frozen.global_step == 2
    assert state.frozen.stage == "fit" and state.stage is None
    with pytest.raises(AttributeError, match="read-only"):
        state.stage = "train"  # type: ignore[misc]
    assert "fn='fit'" in repr(state) and "status='finished'" in repr(state)


def _checkpoint_files(pl_module: Any, trainer_cls: Any, callback_cls: Any, folder: Path, **flags: Any) -> Any:
    """Two fits into one dirpath; per fit: the files, best/last/kth paths (names) and kth_value, as Lightning shows."""
    seen = []
    for _ in range(2):
        callback = callback_cls(dirpath=folder, **flags)
        callback.CHECKPOINT_NAME_LAST = "last-{epoch}"
        trainer = trainer_cls(
            max_epochs=3,
            callbacks=[callback],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            default_root_dir=str(folder.parent),
        )
        data = Data(n=16)
        torch.manual_seed(0)
        trainer.fit(pl_module(), data.train_dataloader(), data.val_dataloader())
        seen.append(
            (
                sorted(p.name for p in folder.iterdir()),
                [Path(p).name for p in (callback.best_model_path, callback.last_model_path)],
                Path(callback.kth_best_model_path).name,
                round(float(callback.kth_value), 6),
                {Path(k).name: round(float(v), 6) for k, v in callback.best_k_models.items()},
            )
        )
    return seen


@pytest.mark.parametrize(
    "flags",
    [
        {"monitor": "val_loss", "save_top_k": 2, "save_last": True},
        {"monitor": "val_loss", "filename": "{epoch}", "save_last": True},
        {"save_top_k": -1, "save_last": True},
        {"monitor": "val_loss", "mode": "max", "save_top_k": 2},
    ],
)
def test_model_checkpoint_files_and_kth_over_two_runs_into_one_dirpath_are_lightnings(
    flags: dict[str, Any], tmp_path: Path
) -> None:
    """A second fit into the same dirpath versions its files (-v1) as Lightning's; a last template; kth_value."""
    theirs = _checkpoint_files(LitRegression, pl.Trainer, pl.callbacks.ModelCheckpoint, tmp_path / "pl" / "ck", **flags)
    mine = _checkpoint_files(Regression, il.Trainer, il.callbacks.ModelCheckpoint, tmp_path / "il" / "ck", **flags)
    assert mine == theirs
    assert any("-v1" in name for name in theirs[1][0])


def test_on_save_checkpoint_sees_lightnings_keys(tmp_path: Path) -> None:
    """A module's on_save_checkpoint finds the weights under checkpoint['state_dict'], as in Lightning."""
    found: list[tuple[list[str], bool]] = []

    def hook(self: Any, checkpoint: dict[str, Any]) -> None:
        keys = ["state_dict", "optimizer_states", "lr_schedulers", "hyper_parameters"]
        same = all(torch.equal(checkpoint["state_dict"][k], v) for k, v in self.state_dict().items())
        found.append(([k for k in keys if k in checkpoint], same))

    for trainer_cls, module_cls in ((pl.Trainer, LitRegression), (il.Trainer, Regression)):
        model = type("Saving", (module_cls,), {"on_save_checkpoint": hook})()
        trainer = trainer_cls(
            max_epochs=1,
            default_root_dir=str(tmp_path / trainer_cls.__module__.split(".")[0]),
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(model, Data().train_dataloader())
    assert found[0] == found[-1] == (["state_dict", "optimizer_states", "lr_schedulers", "hyper_parameters"], True)


def _dips(self: Any, batch: Any, batch_idx: int) -> None:
    """A validation loss that is best at epoch 1, so the best checkpoint is not the last weights."""
    loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
    self.log("val_loss", loss - (5.0 if self.current_epoch == 1 else 0.0))


def test_a_call_without_a_module_evaluates_the_fits_best_checkpoint_as_lightnings(tmp_path: Path) -> None:
    """After fit, test() and validate() without a module run the best checkpoint's weights (with a warning)."""
    seen = []
    import interlock.lightning.callbacks as mine_cb

    for trainer_cls, module_cls, cb in ((pl.Trainer, _LitStaged, pl.callbacks), (il.Trainer, _Staged, mine_cb)):
        torch.manual_seed(0)
        model = type("Dips", (module_cls,), {"validation_step": _dips})(lr=0.3)
        trainer = trainer_cls(
            max_epochs=4,
            callbacks=[cb.ModelCheckpoint(monitor="val_loss")],
            default_root_dir=str(tmp_path / trainer_cls.__module__.split(".")[0]),
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        data = Data()
        trainer.fit(model, data.train_dataloader(), data.val_dataloader())
        last = trainer.test(model, data.val_dataloader(), verbose=False)  # a module given: its weights as they are
        with pytest.warns(UserWarning, match="best"):
            best = trainer.test(dataloaders=data.val_dataloader(), verbose=False)
        seen.append((last, best, harness.weights(model)))
    (lit_last, lit_best, lit_weights), (last, best, weights) = seen
    assert (last, best) == (lit_last, lit_best) and best != last
    assert harness.differences(weights, lit_weights) == []  # the best weights are loaded into the module, as there


class _Logs(Regression):
    """Logs on step and epoch, on epoch only, in an epoch-end hook, in validation and test."""

    def __init__(self, manual: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = not manual

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("half", loss / 2, on_step=False, on_epoch=True)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return None

    def on_train_epoch_end(self) -> None:
        self.log("at_end", float(self.current_epoch))

    test_step = Regression.validation_step


class _LitLogs(LitRegression):
    def __init__(self, manual: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = not manual

    training_step = _Logs.training_step
    on_train_epoch_end = _Logs.on_train_epoch_end
    test_step = Regression.validation_step


def _log_stages(
    trainer_cls: Any, module_cls: Any, logger: Any, root: Path, flags: dict[str, Any], manual: bool
) -> None:
    """fit, validate and test a module that logs, with ``logger``, as the logger tests run both trainers."""
    trainer = trainer_cls(
        max_epochs=2,
        logger=logger,
        default_root_dir=str(root),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **flags,
    )
    torch.manual_seed(0)
    model, data = module_cls(manual=manual), Data(n=28)
    trainer.fit(model, data.train_dataloader(), data.val_dataloader())
    trainer.validate(model, data.val_dataloader(), verbose=False)
    trainer.test(model, data.val_dataloader(), verbose=False)


@pytest.mark.parametrize(
    "flags",
    [
        {"log_every_n_steps": 2, "accumulate_grad_batches": 2},
        {"log_every_n_steps": 3, "manual": True},
        {"log_every_n_steps": 1, "val_check_interval": 0.5},
        {"log_every_n_steps": 4, "prefix": "p"},
    ],
    ids=["accumulation", "manual", "interval", "prefix"],
)
def test_csv_logger_writes_lightnings_metrics_csv(tmp_path: Path, flags: dict[str, Any]) -> None:
    """CSVLogger's metrics.csv (step, epoch, validate and test rows; the header) equals Lightning's, byte for byte."""
    from interlock.lightning.loggers import CSVLogger

    flags = dict(flags)
    manual, prefix = flags.pop("manual", False), flags.pop("prefix", "")
    texts = []
    for trainer_cls, module_cls, logger_cls in (
        (pl.Trainer, _LitLogs, pl.loggers.CSVLogger),
        (il.Trainer, _Logs, CSVLogger),
    ):
        root = tmp_path / trainer_cls.__module__.split(".")[0]
        logger = logger_cls(str(root), name="exp", prefix=prefix)
        _log_stages(trainer_cls, module_cls, logger, root, flags, manual)
        folder = Path(logger.log_dir)
        texts.append(((folder / "metrics.csv").read_text(), (folder / "hparams.yaml").read_text()))
    assert texts[0] == texts[1]
    assert "train_loss_step" in texts[1][0].splitlines()[0]


def test_a_csv_logger_that_cannot_write_fails_the_run_naming_the_file(tmp_path: Path) -> None:
    """metrics.csv that cannot be written (a file where its folder goes) fails the fit with an error naming it."""
    from interlock.core.errors import OutputError
    from interlock.lightning.loggers import CSVLogger

    (tmp_path / "exp").write_text("a file where the logger's folder goes")
    logger = CSVLogger(str(tmp_path), name="exp")
    trainer = il.Trainer(max_epochs=1, logger=logger, enable_progress_bar=False, default_root_dir=str(tmp_path))
    with pytest.raises(OutputError, match=r"exp/version_0/metrics\.csv"):
        trainer.fit(Regression(), datamodule=Data())


def _scalars(folder: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(folder)
    events.Reload()
    # each stage writes an event file; the order files are read in is not the order written: sort by step
    return {tag: sorted((e.step, e.value) for e in events.Scalars(tag)) for tag in sorted(events.Tags()["scalars"])}


@pytest.mark.parametrize(
    "flags",
    [
        {"log_every_n_steps": 2, "accumulate_grad_batches": 2},
        {"log_every_n_steps": 3, "manual": True, "default_hp_metric": False},
        {"log_every_n_steps": 4, "prefix": "p"},
    ],
    ids=["accumulation", "manual-no-hp-metric", "prefix"],
)
def test_tensorboard_logger_writes_lightnings_scalars(tmp_path: Path, flags: dict[str, Any]) -> None:
    """TensorBoardLogger's scalars (tag, step, value), hp_metric and hparams.yaml are Lightning's, fit to test."""
    from interlock.lightning.loggers import TensorBoardLogger

    flags = dict(flags)
    manual = flags.pop("manual", False)
    options = {"prefix": flags.pop("prefix", ""), "default_hp_metric": flags.pop("default_hp_metric", True)}
    seen = []
    for trainer_cls, module_cls, logger_cls in (
        (pl.Trainer, _LitLogs, pl.loggers.TensorBoardLogger),
        (il.Trainer, _Logs, TensorBoardLogger),
    ):
        root = tmp_path / trainer_cls.__module__.split(".")[0]
        logger = logger_cls(str(root), name="tb", **options)
        _log_stages(trainer_cls, module_cls, logger, root, flags, manual)
        seen.append((_scalars(logger.log_dir), (Path(logger.log_dir) / "hparams.yaml").read_text()))
    assert seen[0] == seen[1]
    assert any(tag.endswith("train_loss_step") for tag in seen[1][0])


class _StepOnly(Regression):
    """Logs the loss on step only (training_step's default) and returns it with an extra scalar nobody logs."""

    def __init__(self, manual: bool = False) -> None:
        super().__init__()

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss)
        return {"loss": loss, "extra": loss.detach() * 2}

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("val_loss", loss)
        return {"val_extra": loss * 3}

    test_step = Regression.validation_step


class _LitStepOnly(LitRegression):
    def __init__(self, manual: bool = False) -> None:
        super().__init__()

    training_step = _StepOnly.training_step
    validation_step = _StepOnly.validation_step
    test_step = Regression.validation_step


def test_lightning_loggers_write_no_epoch_row_for_values_logged_on_step_or_only_returned(tmp_path: Path) -> None:
    """A name logged on step only, or a scalar a step returns, makes no epoch row in metrics.csv, as in Lightning."""
    from interlock.lightning.loggers import CSVLogger

    texts = []
    for trainer_cls, module_cls, logger_cls in (
        (pl.Trainer, _LitStepOnly, pl.loggers.CSVLogger),
        (il.Trainer, _StepOnly, CSVLogger),
    ):
        root = tmp_path / trainer_cls.__module__.split(".")[0]
        logger = logger_cls(str(root), name="exp")
        _log_stages(trainer_cls, module_cls, logger, root, {"log_every_n_steps": 2}, False)
        texts.append((Path(logger.log_dir) / "metrics.csv").read_text())
    assert texts[0] == texts[1]
    assert "extra" not in texts[1]


class _Scheduled(_StepOnly):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {
            "optimizer": opt,
            "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 2, 0.5), "interval": "step"},
        }


class _LitScheduled(_LitStepOnly):
    configure_optimizers = _Scheduled.configure_optimizers


@pytest.mark.parametrize(("interval", "accumulate"), [("step", 1), (None, 2), ("epoch", 1)])
def test_learning_rate_monitor_rows_in_metrics_csv_are_lightnings(
    tmp_path: Path, interval: str | None, accumulate: int
) -> None:
    """LearningRateMonitor's lr-* rows in CSVLogger's metrics.csv (moments, steps, values) equal Lightning's."""
    import interlock.lightning.callbacks as mine_cb
    from interlock.lightning.loggers import CSVLogger

    texts = []
    for trainer_cls, module_cls, logger_cls, cb in (
        (pl.Trainer, _LitScheduled, pl.loggers.CSVLogger, pl.callbacks),
        (il.Trainer, _Scheduled, CSVLogger, mine_cb),
    ):
        root = tmp_path / trainer_cls.__module__.split(".")[0]
        logger = logger_cls(str(root), name="exp")
        flags = {
            "log_every_n_steps": 2,
            "accumulate_grad_batches": accumulate,
            "callbacks": [cb.LearningRateMonitor(logging_interval=interval)],
        }
        _log_stages(trainer_cls, module_cls, logger, root, flags, False)
        texts.append((Path(logger.log_dir) / "metrics.csv").read_text())
    assert texts[0] == texts[1]
    assert "lr-SGD" in texts[1].splitlines()[0]


def _logger_calls(lib: Any, logger: Any, root: Path) -> dict[str, Any]:
    """A module that calls its logger directly (Lightning's Logger API); what the trainer and logger report."""

    class Calls(lib.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Linear(3, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def on_train_epoch_end(self) -> None:
            self.logger.log_metrics({"manual": torch.tensor(1.5), "other": 2}, step=self.global_step)
            self.logger.log_hyperparams({"extra": 3})

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = lib.Trainer(
        max_epochs=2, logger=logger, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False
    )
    trainer.fit(Calls(), Data(n=16).train_dataloader())
    logger.save()
    return {
        "log_dir": os.path.relpath(trainer.log_dir, root),
        "save_dir": os.path.relpath(logger.save_dir, root),
        "hparams": (Path(logger.log_dir) / "hparams.yaml").read_text(),
    }


@pytest.mark.parametrize("kind", ["CSVLogger", "TensorBoardLogger"])
def test_a_modules_own_logger_calls_write_what_lightnings_do(kind: str, tmp_path: Path) -> None:
    """self.logger.log_metrics / log_hyperparams / save, trainer.log_dir and logger.save_dir, as in Lightning."""
    seen = []
    for lib in (pl, il):
        root = tmp_path / lib.__name__
        logger = getattr(lib.loggers, kind)(str(root / "logs"), name="x", version=0)
        out = _logger_calls(lib, logger, root)
        if kind == "CSVLogger":
            out["rows"] = (Path(logger.log_dir) / "metrics.csv").read_text()
        else:
            from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

            events = EventAccumulator(logger.log_dir)
            events.Reload()
            out["rows"] = {t: [(e.step, e.value) for e in events.Scalars(t)] for t in events.Tags()["scalars"]}
        seen.append(out)
    assert seen[0] == seen[1]
    assert seen[1]["log_dir"] == os.path.join("logs", "x", "version_0") and seen[1]["save_dir"] == "logs"
    assert "manual" in str(seen[1]["rows"])
    assert ("extra: 3" in seen[1]["hparams"]) if kind == "CSVLogger" else ("hp_metric" in str(seen[1]["rows"]))


def test_the_trainers_callback_attributes_are_the_callbacks_given_as_lightnings(tmp_path: Path) -> None:
    """checkpoint_callback(s), early_stopping_callback(s), progress_bar_callback: the objects given, as Lightning's."""
    seen = []
    for lib in (pl, il):
        ckpt = lib.callbacks.ModelCheckpoint(monitor="val_loss", dirpath=tmp_path / lib.__name__)
        stop = lib.callbacks.EarlyStopping("val_loss")
        trainer = lib.Trainer(
            max_epochs=1, callbacks=[ckpt, stop], logger=False, enable_progress_bar=False, enable_model_summary=False
        )
        data = Data(n=8)
        trainer.fit((LitRegression if lib is pl else Regression)(), data.train_dataloader(), data.val_dataloader())
        seen.append(
            (
                trainer.checkpoint_callback is ckpt,
                trainer.checkpoint_callbacks == [ckpt],
                isinstance(trainer.checkpoint_callback, lib.callbacks.ModelCheckpoint),
                trainer.early_stopping_callback is stop,
                trainer.early_stopping_callbacks == [stop],
                trainer.progress_bar_callback,
            )
        )
    assert seen[0] == seen[1] == (True, True, True, True, True, None)


def _lengths(loaders: Any) -> Any:
    return None if loaders is None else [len(x) for x in loaders] if isinstance(loaders, list) else len(loaders)


def test_the_trainers_loaders_and_strategy_read_as_lightnings(tmp_path: Path) -> None:
    """trainer.train_dataloader, val_/test_/predict_dataloaders (in hooks, after each call), trainer.strategy."""
    seen = []
    for lib, module_cls in ((pl, _LitStaged), (il, _Staged)):

        class Reads(lib.Callback):  # type: ignore[misc,name-defined]
            def __init__(self) -> None:
                self.seen: list[Any] = []

            def on_train_start(self, trainer: Any, pl_module: Any) -> None:
                strategy = trainer.strategy
                strategy.barrier()
                self.seen += [_lengths(trainer.train_dataloader), _lengths(trainer.val_dataloaders)]
                self.seen += [strategy.is_global_zero, strategy.world_size, strategy.broadcast(5)]

            def on_test_start(self, trainer: Any, pl_module: Any) -> None:
                self.seen.append(_lengths(trainer.test_dataloaders))

        reads = Reads()
        trainer = lib.Trainer(
            max_epochs=1,
            callbacks=[reads],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=str(tmp_path),
        )
        model, data = module_cls(), Data(n=20)
        names = ("train_dataloader", "val_dataloaders", "test_dataloaders", "predict_dataloaders")
        after = [[_lengths(getattr(trainer, n)) for n in names]]
        trainer.fit(model, data.train_dataloader(), data.val_dataloader())
        after.append([_lengths(getattr(trainer, n)) for n in names])
        for call in ("validate", "test"):
            getattr(trainer, call)(model, data.val_dataloader(), verbose=False)
            after.append([_lengths(getattr(trainer, n)) for n in names])
        trainer.predict(model, data.train_dataloader())
        after.append([_lengths(getattr(trainer, n)) for n in names])
        seen.append((reads.seen, after))
    assert seen[0] == seen[1]
    assert seen[1][1][1][:2] == [5, 3] and seen[1][1][-1] == [None, None, None, 5]
    with pytest.raises(AttributeError, match="statechart"):
        il.Trainer().fit_loop  # noqa: B018


def _stopping_fit(lib: Any, module_cls: type, root: Path, **flags: Any) -> tuple[Any, ...]:
    """A callback asks to stop in the sanity check (a LambdaCallback records the hooks that ran)."""
    seen: list[Any] = []

    def ask(trainer: Any, pl_module: Any) -> None:
        seen.append(("validation_end", trainer.sanity_checking, trainer.current_epoch))
        if trainer.sanity_checking:
            trainer.should_stop = True

    def recorder(name: str) -> Any:
        return lambda trainer, *_: seen.append((name, trainer.global_step))

    hooks = ("on_train_start", "on_train_epoch_start", "on_train_end", "on_fit_end")
    record = {hook: recorder(hook) for hook in hooks}
    trainer = lib.Trainer(
        max_epochs=2,
        limit_train_batches=2,
        callbacks=[lib.callbacks.LambdaCallback(on_validation_end=ask, **record)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
        **flags,
    )
    data = Data(n=16)
    trainer.fit(module_cls(), data.train_dataloader(), data.val_dataloader())
    return tuple(seen), trainer.current_epoch, trainer.global_step, trainer.should_stop


@pytest.mark.parametrize("flags", [{}, {"min_epochs": 1}, {"min_steps": 3}])
def test_a_stop_asked_in_the_sanity_check_trains_nothing_as_lightning(flags: dict[str, Any], tmp_path: Path) -> None:
    """trainer.should_stop = True in the sanity check: no training and no training hooks, unless min_* say otherwise."""
    theirs = _stopping_fit(pl, LitRegression, tmp_path / "pl", **flags)
    mine = _stopping_fit(il, Regression, tmp_path / "il", **flags)
    assert mine == theirs
    trained = any(name == "on_train_start" for name, *_ in theirs[0])
    assert trained == bool(flags) and theirs[2] == (0 if not flags else theirs[2])


def test_lambda_callback_takes_hooks_by_name_and_refuses_a_misspelt_one() -> None:
    """LambdaCallback(on_x=fn) runs fn as the hook; an unknown hook name is a TypeError naming the hooks."""
    with pytest.raises(TypeError, match="on_train_epoc_end.*not a callback hook.*on_train_epoch_end"):
        il.callbacks.LambdaCallback(on_train_epoc_end=print)
    with pytest.raises(TypeError, match="must be a function"):
        il.callbacks.LambdaCallback(on_train_end=3)


def _written(lib: Any, module_cls: type, interval: str, loaders: int) -> list[Any]:
    """What a BasePredictionWriter subclass is handed: predictions, their dataset indices, batch and loader numbers."""
    got: list[Any] = []

    class Writer(lib.callbacks.BasePredictionWriter):  # type: ignore[misc,name-defined]
        def write_on_batch_end(self, trainer: Any, pl_module: Any, prediction: Any, *where: Any) -> None:
            indices, _, batch_idx, dataloader_idx = where
            got.append(("batch", prediction.tolist(), list(indices), batch_idx, dataloader_idx))

        def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
            flat = [p.tolist() if isinstance(p, torch.Tensor) else [q.tolist() for q in p] for p in predictions]
            got.append(("epoch", flat, batch_indices))

    trainer = lib.Trainer(
        callbacks=[Writer(interval)], logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    g = torch.Generator().manual_seed(5)
    data = TensorDataset(torch.randn(20, 3, generator=g), torch.randn(20, 1, generator=g))
    shuffled = DataLoader(data, batch_size=8, shuffle=True)
    torch.manual_seed(3)
    returned = trainer.predict(module_cls(), shuffled if loaders == 1 else [shuffled, DataLoader(data, batch_size=6)],
                               return_predictions=False)  # fmt: skip
    return [got, returned]


class _Predicts(Regression):
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self.net(batch[0]).round(decimals=3)


class _LitPredicts(LitRegression):
    predict_step = _Predicts.predict_step


@pytest.mark.parametrize("loaders", [1, 2])
@pytest.mark.parametrize("interval", ["batch", "epoch", "batch_and_epoch"])
def test_a_prediction_writer_gets_lightnings_predictions_and_batch_indices(interval: str, loaders: int) -> None:
    """BasePredictionWriter: each batch's prediction with its dataset indices (shuffled), or all at the end."""
    theirs = _written(pl, _LitPredicts, interval, loaders)
    mine = _written(il, _Predicts, interval, loaders)
    assert mine == theirs
    assert theirs[0] and theirs[1] is None
    with pytest.raises(ValueError, match="write_interval='step'"):
        il.callbacks.BasePredictionWriter("step")
