"""A LightningModule's ``self.trainer``: the trainer view, read and written as under Lightning, hook by hook."""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
import interlock.lightning as il
from _twins import twins
from conftest import loader

pl = pytest.importorskip("pytorch_lightning")
for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
    logging.getLogger(_name).setLevel(logging.ERROR)

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}

#: What modules read from self.trainer (Lightning 2.6.6's names)
READ = (
    "current_epoch", "global_step", "sanity_checking", "training", "validating", "testing", "predicting",
    "max_epochs", "should_stop", "is_global_zero", "world_size", "is_last_batch", "num_sanity_val_batches",
)  # fmt: skip


class Reads:
    """Records what self.trainer answers in the steps and the hooks of a fit, a test and a predict."""

    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.seen: list[tuple[str, Any]] = []

    def _read(self, when: str) -> None:
        t = self.trainer  # type: ignore[attr-defined]
        row = {name: getattr(t, name) for name in READ}
        row["state"] = (str(t.state.fn), str(t.state.stage))
        row["metrics"] = sorted(t.callback_metrics)
        self.seen.append((when, row))

    def setup(self, stage: str) -> None:
        self._read(f"setup {stage}")

    def configure_optimizers(self) -> Any:
        self._read("configure_optimizers")
        # Lightning loads the training data to count: the estimate is the same before any other read
        self.seen.append(("estimate", self.trainer.estimated_stepping_batches))  # type: ignore[attr-defined]
        return torch.optim.SGD(self.trainer.model.parameters(), lr=0.1)  # type: ignore[attr-defined]

    def on_fit_start(self) -> None:
        self._read("on_fit_start")

    def on_train_start(self) -> None:
        self._read("on_train_start")

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._read(f"training_step {batch_idx}")
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.log("loss", loss)  # type: ignore[attr-defined]
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._read(f"on_train_batch_end {batch_idx}")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._read(f"validation_step {batch_idx}")
        self.log("v", torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1]))  # type: ignore[attr-defined]

    def on_validation_epoch_end(self) -> None:
        self._read("on_validation_epoch_end")

    def on_train_epoch_end(self) -> None:
        self._read("on_train_epoch_end")

    def on_train_end(self) -> None:
        self._read("on_train_end")

    def on_fit_end(self) -> None:
        self._read("on_fit_end")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._read(f"test_step {batch_idx}")

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        self._read(f"predict_step {batch_idx}")
        return self.net(batch[0])

    def teardown(self, stage: str) -> None:
        self._read(f"teardown {stage}")


#: What a test or predict after the fit reads as Lightning's does (Lightning's trainer also still shows the fit's
#: metrics and batch counts there; interlock's view shows the running call's)
LATER = (
    "current_epoch", "global_step", "sanity_checking", "training", "validating", "testing", "predicting", "max_epochs",
    "should_stop", "is_global_zero", "world_size", "state",
)  # fmt: skip

#: The moments before Lightning loads a fit's validation data (its loaders are loaded on first use)
EARLY = ("setup TrainerFn.FITTING", "configure_optimizers", "on_fit_start")  # Lightning passes a TrainerFn


def test_a_module_reads_self_trainer_as_lightnings_in_every_step_and_hook(tmp_path: Path) -> None:
    """Counters, the running stage (sanity check, validation inside a fit, the epoch-end hook after validation),
    is_last_batch, callback_metrics, the estimate and the flags read through self.trainer equal Lightning's."""
    Lit, Ours = twins(Reads)
    flags = {"max_epochs": 2, "limit_train_batches": 3, "val_check_interval": 2, "num_sanity_val_steps": 1, **QUIET}
    seen = []
    for trainer_cls, module in ((pl.Trainer, Lit()), (il.Trainer, Ours())):
        with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
            _ = module.trainer
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = trainer_cls(default_root_dir=tmp_path, **flags)
            trainer.fit(module, loader(32, 8), loader(16, 8))
            trainer.test(module, loader(16, 8), verbose=False)
            trainer.predict(module, loader(8, 8))
        seen.append(module.seen)
    lightning, ours = seen
    assert [w for w, _ in ours] == [w for w, _ in lightning]
    for (when, mine), (_, theirs) in zip(ours, lightning, strict=True):
        if "FITTING" not in when and ("test" in when.lower() or "predict" in when.lower()):  # a later call
            mine, theirs = ({k: v for k, v in row.items() if k in LATER} for row in (mine, theirs))
        if when in EARLY:  # Lightning has not loaded the validation data yet: [] (documented: interlock counts)
            assert (theirs["num_sanity_val_batches"], mine["num_sanity_val_batches"]) == ([], [1]), when
            mine, theirs = {**mine, "num_sanity_val_batches": []}, {**theirs, "num_sanity_val_batches": []}
        assert mine == theirs, (when, mine, theirs)


class Stops:
    """Asks the fit to stop through self.trainer from one step or hook (``where``)."""

    where = ""

    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.ran: list[tuple[str, int, int]] = []

    def _stop(self, here: str, when: bool) -> None:
        if here == self.where and when:
            self.trainer.should_stop = True  # type: ignore[attr-defined]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.ran.append(("train", self.current_epoch, batch_idx))  # type: ignore[attr-defined]
        self._stop("training_step", self.global_step == 2)  # type: ignore[attr-defined]
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._stop("on_train_batch_start", self.global_step == 2)  # type: ignore[attr-defined]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._stop("on_train_batch_end", self.global_step == 2)  # type: ignore[attr-defined]

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.ran.append(("val", self.current_epoch, batch_idx))  # type: ignore[attr-defined]
        real = not self.trainer.sanity_checking  # type: ignore[attr-defined]
        self._stop("validation_step", real and self.current_epoch == 1)  # type: ignore[attr-defined]

    def on_validation_epoch_end(self) -> None:
        real = not self.trainer.sanity_checking  # type: ignore[attr-defined]
        self._stop("on_validation_epoch_end", real and self.current_epoch == 0)  # type: ignore[attr-defined]

    def on_train_epoch_end(self) -> None:
        self._stop("on_train_epoch_end", self.current_epoch == 1)  # type: ignore[attr-defined]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


@pytest.mark.parametrize(
    "where",
    ["training_step", "on_train_batch_start", "on_train_batch_end", "validation_step", "on_validation_epoch_end",
     "on_train_epoch_end"],
)  # fmt: skip
def test_self_trainer_should_stop_from_a_step_or_hook_stops_where_lightnings_does(where: str, tmp_path: Path) -> None:
    """self.trainer.should_stop = True in a module's step or hook ends the fit at Lightning's batch: the same
    batches trained and validated, the same step and epoch, the same weights."""
    Lit, Ours = twins(type("Stops", (Stops,), {"where": where}))
    flags = {"max_epochs": 4, "limit_train_batches": 4, "limit_val_batches": 2, "val_check_interval": 2, **QUIET}
    runs = []
    for trainer_cls, module in ((pl.Trainer, Lit()), (il.Trainer, Ours())):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = trainer_cls(default_root_dir=tmp_path, num_sanity_val_steps=1, **flags)
            trainer.fit(module, loader(32, 8), loader(16, 8))
        runs.append((module.ran, trainer.global_step, trainer.current_epoch, [p.tolist() for p in module.parameters()]))
    assert runs[1] == runs[0]
    assert runs[1][1] < 16, "the stop ended the fit early"


class Plain(il.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def test_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


def test_the_native_module_has_no_trainer_and_the_lightning_one_cannot_be_given_one() -> None:
    """interlock.Module keeps its AttributeError naming the way; a LightningModule's trainer is attached, not set."""
    with pytest.raises(AttributeError, match=r"no \.trainer"):
        _ = interlock.Module().trainer
    module = Plain()
    assert module._trainer is None
    with pytest.raises(AttributeError, match="cannot be set"):
        module.trainer = object()


def test_a_write_where_nothing_would_take_it_is_an_error_naming_where_writes_work(tmp_path: Path) -> None:
    """self.trainer.should_stop = True in configure_optimizers (no hook takes it) fails the fit before training,
    naming the steps and hooks; no checkpoint is written."""

    class Early(Plain):
        def configure_optimizers(self) -> Any:
            self.trainer.should_stop = True
            return super().configure_optimizers()

    trainer = il.Trainer(max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False)
    with pytest.raises(RuntimeError, match=r"would not be applied.*training_step, validation_step"):
        trainer.fit(Early(), loader(32, 8))
    assert not list(tmp_path.rglob("*.ckpt"))


def test_after_a_fit_the_view_reads_how_it_ended_and_refuses_writes(tmp_path: Path) -> None:
    """After fit, self.trainer shows the finished run (Lightning's trainer stays attached); a write raises."""
    module = Plain()
    trainer = il.Trainer(max_epochs=2, limit_train_batches=2, default_root_dir=tmp_path, **QUIET)
    trainer.fit(module, loader(32, 8))
    assert (module.trainer.current_epoch, module.trainer.global_step) == (2, 4)
    assert not module.trainer.training and not math.isinf(module.trainer.num_training_batches)
    trainer.test(module, loader(16, 8), verbose=False)
    assert not module.trainer.testing and module.trainer.state.fn == "test"
    with pytest.raises(RuntimeError, match="would not be applied"):
        module.trainer.should_stop = True


def test_self_trainer_save_checkpoint_in_training_step_writes_at_the_batch_end(tmp_path: Path) -> None:
    """self.trainer.save_checkpoint(path) in training_step writes the checkpoint of that batch's end."""
    path = tmp_path / "mid.ckpt"

    class Saves(Plain):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.global_step == 1:
                self.trainer.save_checkpoint(path)
            return super().training_step(batch, batch_idx)

    trainer = il.Trainer(max_epochs=1, limit_train_batches=3, default_root_dir=tmp_path, **QUIET)
    trainer.fit(Saves(), loader(32, 8))
    assert torch.load(path, weights_only=False)["global_step"] == 2
