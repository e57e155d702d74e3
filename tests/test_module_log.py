"""self.log / self.log_dict: Lightning's options and defaults, epoch means, resume, and the errors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import interlock
from conftest import TinyModule, loader, make_data, only
from interlock import SaveCheckpoint
from interlock.core.logging import AddLogged, epoch_values, take
from interlock.core.module import Module
from interlock.core.state import TrainerState


class Logging(TinyModule):
    """TinyModule that logs with self.log in its steps and an epoch hook."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss, on_epoch=True, prog_bar=True)
        self.log("peak", loss, on_step=False, on_epoch=True, reduce_fx="max")
        self.log("seen", float(len(batch[0])), on_step=False, on_epoch=True, reduce_fx="sum")
        self.log("quiet", loss, on_epoch=True, on_step=False, logger=False)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        out = self(x)
        self.log_dict({"vloss": torch.nn.functional.cross_entropy(out, y), "vacc": (out.argmax(1) == y).float().mean()})

    def on_train_epoch_end(self) -> None:
        self.log("epoch_hook", float(self.current_epoch))


def _fit(root: Path, module: Module, **kw: Any) -> interlock.Trainer:
    trainer = interlock.Trainer(max_epochs=2, **only(), num_sanity_val_steps=0, default_root_dir=root, **kw)
    trainer.fit(module, loader(10, 4), loader(10, 4))
    return trainer


def _rows(trainer: interlock.Trainer, stage: str) -> list[dict[str, Any]]:
    return [dict(r) for r in trainer.state.history if r["stage"] == stage]


def test_epoch_values_are_batch_size_weighted_and_reduced_as_asked(tmp_path: Path) -> None:
    """on_epoch values are the batch-size-weighted mean (uneven last batch), the max and the sum over the epoch."""
    torch.manual_seed(0)
    module = Logging()
    steps: list[tuple[float, int]] = []
    original = TinyModule.training_step

    def spy(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = original(self, batch, batch_idx)
        steps.append((float(loss.detach()), len(batch[0])))
        return loss

    TinyModule.training_step = spy  # type: ignore[method-assign]
    try:
        trainer = _fit(tmp_path, module)
    finally:
        TinyModule.training_step = original  # type: ignore[method-assign]
    first = steps[:3]
    assert [n for _, n in first] == [4, 4, 2]
    row = _rows(trainer, "train")[0]
    assert row["loss_epoch"] == pytest.approx(sum(v * n for v, n in first) / 10, rel=1e-6)
    assert row["peak"] == pytest.approx(max(v for v, _ in first), rel=1e-6)
    assert row["seen"] == 10.0
    assert row["epoch_hook"] == 0.0
    assert "loss_step" not in row and "quiet" not in row  # step values go to metrics; logger=False stays out of rows
    assert trainer.state.metrics["loss_step"] == pytest.approx(steps[-1][0], rel=1e-6)
    assert "quiet" in trainer.state.metrics
    assert row["train_loss"] == pytest.approx(first[-1][0], rel=1e-6)  # returned scalars keep working


def test_evaluation_steps_log_epoch_means_under_the_given_name(tmp_path: Path) -> None:
    """validation_step logs default to on_epoch: one mean per validation, named as given; validate returns them."""
    torch.manual_seed(0)
    module = Logging()
    trainer = _fit(tmp_path, module)
    val = _rows(trainer, "val")
    assert len(val) == 2 and {"vloss", "vacc"} <= set(val[0]) and "val_loss" not in val[0]
    x, y = make_data(10, 0).tensors
    out = module(x)
    expected = torch.nn.functional.cross_entropy(out, y).item()  # the mean of per-batch means weighted by size
    result = trainer.validate(module, loader(10, 4))
    got = result[0]["vloss"] if isinstance(result, list) else result["vloss"]
    assert got == pytest.approx(expected, rel=1e-5)


def test_both_on_step_and_on_epoch_name_step_and_epoch_metrics(tmp_path: Path) -> None:
    """Logging with on_step and on_epoch gives <name>_step each step and <name>_epoch at the epoch end."""
    seen: list[set[str]] = []
    torch.manual_seed(0)
    trainer = interlock.Trainer(max_epochs=1, **only(), num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.on("fit.train.batch.end", lambda e, s: seen.append(set(s.metrics)))
    trainer.fit(Logging(), loader(10, 4), loader(10, 4))
    assert "loss_step" in seen[0] and "loss_epoch" not in seen[0]
    assert "loss_epoch" in trainer.state.metrics


def test_logged_metric_can_be_monitored_by_model_checkpoint(tmp_path: Path) -> None:
    """A name logged in validation_step is a metric ModelCheckpoint can monitor."""
    from interlock.listeners.checkpoint import ModelCheckpoint

    torch.manual_seed(0)
    ckpt = ModelCheckpoint(monitor="vloss", save_top_k=1)
    trainer = interlock.Trainer(max_epochs=2, **only(ckpt), num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(Logging(), loader(10, 4), loader(10, 4))
    assert list(Path(trainer.state.run_dir).rglob("*.ckpt"))
    assert trainer.state.best_metrics["vloss"] == min(r["vloss"] for r in _rows(trainer, "val"))


def _fit_resumable(root: Path, save_at: str | None = None, ckpt: Path | None = None) -> tuple[Any, Any]:
    torch.manual_seed(0)
    module = Logging()
    trainer = interlock.Trainer(max_epochs=2, num_sanity_val_steps=0, seed=1, **only(), default_root_dir=root)
    if save_at is not None:
        trainer.on(save_at, lambda e: SaveCheckpoint(str(root / "x.ckpt")), once=3)

        def stop(event: Any) -> None:
            if (root / "x.ckpt").exists() and event.name.endswith("batch.fetch"):
                raise KeyboardInterrupt

        trainer.on("fit.train.*", stop)
    try:
        trainer.fit(module, DataLoader(make_data(20, 0), batch_size=3, shuffle=True), loader(10, 4), ckpt_path=ckpt)
    except KeyboardInterrupt:
        pass
    return trainer, module


@pytest.mark.parametrize("save_at", ["fit.train.batch.end", "fit.train.val.batch.end"])
def test_mid_epoch_resume_keeps_the_logged_epoch_values_exact(tmp_path: Path, save_at: str) -> None:
    """A run saved mid-epoch and resumed logs the same epoch values, bitwise, as the uninterrupted run."""
    whole, _ = _fit_resumable(tmp_path / "a")
    _fit_resumable(tmp_path / "b", save_at=save_at)
    resumed, _ = _fit_resumable(tmp_path / "c", ckpt=tmp_path / "b" / "x.ckpt")
    assert resumed.state.history == whole.state.history
    assert dict(resumed.state.metrics) == dict(whole.state.metrics)


def test_a_module_that_never_logs_keeps_no_logged_state(tmp_path: Path) -> None:
    """Without self.log nothing is buffered and state.logged stays empty."""
    torch.manual_seed(0)
    module = TinyModule()
    trainer = _fit(tmp_path, module)
    assert not trainer.state.logged
    assert "_interlock_logs" not in module.__dict__


@pytest.mark.parametrize(
    ("call", "phrase"),
    [
        (lambda m: m.log("x", torch.ones(3)), "shape (3,)"),
        (lambda m: m.log("x", "high"), "must be a number"),
        (lambda m: m.log("x", 1.0, reduce_fx="median"), "only 'mean', 'sum'"),
        (lambda m: m.log("x", 1.0, batch_size=0), "batch_size=0"),
        (lambda m: m.log("x", 1.0, enable_graph=True), "keep the tensor yourself"),
        (lambda m: m.log("x", 1.0, metric_attribute="net"), "names the module attribute holding"),
        (lambda m: m.log("x", {"a": 1.0}), "self.log_dict"),
    ],
)
def test_bad_log_calls_fail_at_once_naming_the_value(call: Any, phrase: str) -> None:
    """Bad self.log input is an early error naming the value and the fix."""
    with pytest.raises((TypeError, ValueError)) as info:
        call(TinyModule())
    assert phrase in str(info.value)


def test_logging_where_lightning_forbids_it_is_an_error(tmp_path: Path) -> None:
    """self.log in on_fit_start fails like Lightning; on_step=True in an epoch hook too."""

    class InFitStart(TinyModule):
        def on_fit_start(self) -> None:
            self.log("x", 1.0)

    class StepInEpochHook(TinyModule):
        def on_train_epoch_end(self) -> None:
            self.log("x", 1.0, on_step=True)

    with pytest.raises(RuntimeError, match="inside on_fit_start is not supported"):
        _fit(tmp_path / "a", InFitStart())
    with pytest.raises(ValueError, match="on_step=True\\) is not allowed in on_train_epoch_end"):
        _fit(tmp_path / "b", StepInEpochHook())


def test_torch_reductions_are_accepted_as_reduce_fx() -> None:
    """reduce_fx=torch.max is 'max', as in Lightning."""
    m = TinyModule()
    m.log("x", 1.0, reduce_fx=torch.max)
    assert m.__dict__["_interlock_logs"][0].reduce == "max"


batches = st.lists(st.tuples(st.floats(-1e3, 1e3), st.integers(1, 64)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(batches=batches, how=st.sampled_from(["mean", "sum", "max", "min"]))
def test_epoch_reduction_matches_the_definition(batches: list[tuple[float, int]], how: str) -> None:
    """Folding logged values step by step gives the weighted mean / sum / max / min, to float32 (Lightning's)."""
    state = TrainerState()
    m = TinyModule()
    for value, n in batches:
        m.log("x", value, on_epoch=True, reduce_fx=how)
        for update in take(m.__dict__["_interlock_logs"], "training_step", "train", lambda n=n: n):
            if isinstance(update, AddLogged):
                state = state.replace(**update.changes(state))
    values = epoch_values(state, "train").values
    got = values["x_epoch"]
    xs = [v for v, _ in batches]
    expected = {
        "mean": sum(v * n for v, n in batches) / sum(n for _, n in batches),
        "sum": sum(xs),
        "max": max(xs),
        "min": min(xs),
    }[how]
    scale = max(1.0, sum(abs(v) * n for v, n in batches))  # float32 sums round relative to their terms
    assert math.isclose(got, expected, rel_tol=1e-6, abs_tol=2e-6 * scale)
    cleared = state.replace(**AddLogged(clear="train").changes(state))
    assert not cleared.logged


def test_epoch_mean_matches_lightning(tmp_path: Path) -> None:
    """The on_epoch training mean and the validation mean equal Lightning 2.6.6's for the same module and data."""
    pl = pytest.importorskip("pytorch_lightning")

    def body(base: type) -> type:
        class M(base):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                super().__init__()
                self.net = torch.nn.Linear(4, 2)

            def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
                x, y = batch
                loss = torch.nn.functional.cross_entropy(self.net(x), y)
                self.log("loss", loss, on_epoch=True)
                return loss

            def validation_step(self, batch: Any, batch_idx: int) -> None:
                x, y = batch
                self.log("vloss", torch.nn.functional.cross_entropy(self.net(x), y))

            def configure_optimizers(self) -> Any:
                return torch.optim.SGD(self.parameters(), lr=0.1)

        return M

    torch.manual_seed(0)
    ours = body(interlock.Module)()
    theirs = body(pl.LightningModule)()
    theirs.load_state_dict(ours.state_dict())
    trainer = interlock.Trainer(max_epochs=1, **only(), num_sanity_val_steps=0, default_root_dir=tmp_path / "i")
    trainer.fit(ours, loader(10, 4), loader(10, 4))
    lt = pl.Trainer(
        max_epochs=1, default_root_dir=tmp_path / "l", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    lt.fit(theirs, loader(10, 4), loader(10, 4))
    for name in ("loss_epoch", "loss_step", "vloss"):
        assert trainer.state.metrics[name] == pytest.approx(float(lt.callback_metrics[name]), rel=1e-6), name
