"""Hook order and fidelity against pytorch-lightning 2.6.6: checkpoint loading, failures, metrics per stage."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from _twins import twins
from conftest import loader
from interlock.listeners import ModelCheckpoint

pl = pytest.importorskip("pytorch_lightning")
for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
    logging.getLogger(_name).setLevel(logging.ERROR)

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


class _Linear:
    """A seeded linear classifier with a ``seen`` record, mixed into the Lightning and interlock twins."""

    seen: list[Any]
    net: torch.nn.Module

    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.seen = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])


class Records(_Linear):
    """Mixed into both modules: the order of setup, on_load_checkpoint and configure_optimizers."""

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        return None

    def setup(self, stage: str) -> None:
        self.seen.append(f"setup:{getattr(stage, 'value', stage)}")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.seen.append("on_load_checkpoint")

    def configure_optimizers(self) -> Any:
        self.seen.append("configure_optimizers")
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


class Lit(Records, pl.LightningModule):  # type: ignore[misc,name-defined]
    def __init__(self) -> None:
        super().__init__()
        self._build()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1]))


class Port(Records, interlock.Module):
    def __init__(self) -> None:
        super().__init__()
        self._build()

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])}


def _lit(tmp: Path, **kw: Any) -> Any:
    return pl.Trainer(**{"default_root_dir": tmp, "max_epochs": 1, "num_sanity_val_steps": 0, **QUIET, **kw})


def _ours(tmp: Path, **kw: Any) -> interlock.Trainer:
    return interlock.Trainer(**{"default_root_dir": tmp, "max_epochs": 1, "num_sanity_val_steps": 0, **QUIET, **kw})


def test_resumed_fit_loads_the_checkpoint_before_configure_optimizers_as_lightning(tmp_path: Path) -> None:
    """A resumed fit calls setup, on_load_checkpoint, then configure_optimizers, in Lightning's order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = _lit(tmp_path / "pl", callbacks=[pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "pl" / "c")])
        first.fit(Lit(), loader(32, 16))
        lit = Lit()
        _lit(tmp_path / "pl", max_epochs=2, enable_checkpointing=False).fit(
            lit, loader(32, 16), ckpt_path=next((tmp_path / "pl" / "c").glob("*.ckpt"))
        )
    ours = _ours(tmp_path / "il")
    ours.fit(Port(), loader(32, 16))
    port = Port()
    _ours(tmp_path / "il", max_epochs=2).fit(port, loader(32, 16), ckpt_path="last")
    assert lit.seen == ["setup:fit", "on_load_checkpoint", "configure_optimizers"]
    assert port.seen == lit.seen


def test_test_with_the_best_checkpoint_calls_on_load_checkpoint_as_lightning(tmp_path: Path) -> None:
    """test(ckpt_path="best") calls the module's on_load_checkpoint after setup, as Lightning does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit = Lit()
        trainer = _lit(tmp_path / "pl", callbacks=[pl.callbacks.ModelCheckpoint(monitor="val_loss")])
        trainer.fit(lit, loader(32, 16), loader(16, 16, seed=1))
        lit.seen.clear()
        trainer.test(lit, loader(16, 16, seed=2), ckpt_path="best", verbose=False)
    port = Port()
    ours = _ours(tmp_path / "il", listeners=[ModelCheckpoint(monitor="val_loss")])
    ours.fit(port, loader(32, 16), loader(16, 16, seed=1))
    port.seen.clear()
    ours.test(port, loader(16, 16, seed=2), ckpt_path="best")
    assert lit.seen == ["setup:test", "on_load_checkpoint"]
    assert port.seen == lit.seen


def test_a_fraction_interval_counted_across_epochs_is_refused_as_lightning() -> None:
    """val_check_interval=0.5 with check_val_every_n_epoch=None raises at construction, naming the fix."""
    with pytest.raises(pl.utilities.exceptions.MisconfigurationException, match="val_check_interval"):
        pl.Trainer(val_check_interval=0.5, check_val_every_n_epoch=None)
    with pytest.raises(ValueError, match=r"val_check_interval=0\.5.*must be an int.*check_val_every_n_epoch=1"):
        interlock.Trainer(val_check_interval=0.5, check_val_every_n_epoch=None)


class _Fails:
    """Raises in the third training step; records the hooks a failure runs."""

    seen: list[str]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 2:
            raise ValueError("boom")
        return super().training_step(batch, batch_idx)  # type: ignore[misc,no-any-return]

    def on_fit_end(self) -> None:
        self.seen.append("on_fit_end")

    def on_train_end(self) -> None:
        self.seen.append("on_train_end")

    def teardown(self, stage: str) -> None:
        self.seen.append("teardown")


class LitFails(_Fails, Lit):
    pass


class PortFails(_Fails, Port):
    pass


def _datamodule(base: type, seen: list[str]) -> Any:
    class Data(base):  # type: ignore[misc,valid-type]
        def train_dataloader(self) -> Any:
            return loader(64, 16)

        def teardown(self, stage: str) -> None:
            seen.append("data.teardown")

        def on_exception(self, exception: BaseException) -> None:
            seen.append(f"data.on_exception:{exception}")

    return Data()


def test_a_failed_fit_runs_no_teardown_hooks_and_tells_the_datamodule_as_lightning(tmp_path: Path) -> None:
    """A fit failing in training_step calls the data module's on_exception, not teardown or on_fit_end."""
    lit, port = LitFails(), PortFails()
    with warnings.catch_warnings(), pytest.raises(ValueError, match="boom"):
        warnings.simplefilter("ignore")
        lit_trainer = _lit(tmp_path / "pl", enable_checkpointing=False)
        lit_trainer.fit(lit, datamodule=_datamodule(pl.LightningDataModule, lit.seen))
    with pytest.raises(ValueError, match="boom"):
        _ours(tmp_path / "il").fit(port, datamodule=_datamodule(interlock.DataModule, port.seen))
    assert lit.seen == ["setup:fit", "configure_optimizers", "data.on_exception:boom"]
    assert [s for s in port.seen if s != "configure_optimizers"] == ["setup:fit", "data.on_exception:boom"]


def test_a_fit_that_ends_well_tears_down_module_and_data(tmp_path: Path) -> None:
    """After a fit that ends well teardown runs, on the module and on the data module, as in Lightning."""
    port = Port()
    seen = port.seen
    _ours(tmp_path).fit(port, datamodule=_datamodule(interlock.DataModule, seen))
    lit = Lit()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit_trainer = _lit(tmp_path / "pl", enable_checkpointing=False)
        lit_trainer.fit(lit, datamodule=_datamodule(pl.LightningDataModule, lit.seen))
    assert seen[-1:] == lit.seen[-1:] == ["data.teardown"]


class _EpochEndFails(Port):
    def on_train_epoch_end(self) -> None:
        raise ValueError("epoch end")


class _Where(interlock.Listener):
    key = "Where"

    def __init__(self) -> None:
        self.where: list[Any] = []

    @interlock.listen("teardown")
    def seen(self, event: Any, state: Any) -> None:
        self.where.append(event.payload["where"])


def test_a_failure_on_a_transition_is_reported_on_that_transition(tmp_path: Path) -> None:
    """A hook raising on an edge's do: is named with that edge in the note and the teardown payload's where."""
    where = _Where()
    trainer = interlock.Trainer(default_root_dir=tmp_path, max_epochs=1, enable_progress_bar=False, listeners=[where])
    with pytest.raises(ValueError, match="epoch end") as info:
        trainer.fit(_EpochEndFails(), loader(32, 16))
    edge = "fit.train.batch.end -> fit.train.epoch_end [epoch_end] do module.on_train_epoch_end"
    assert f"the run failed in transition {edge!r}" in "".join(info.value.__notes__)
    assert where.where == [edge]


def test_a_failure_in_a_state_names_the_state(tmp_path: Path) -> None:
    """An entry action raising (training_step) is reported in its state, in the note and the payload."""
    where = _Where()
    trainer = interlock.Trainer(default_root_dir=tmp_path, max_epochs=1, enable_progress_bar=False, listeners=[where])
    with pytest.raises(ValueError, match="boom") as info:
        trainer.fit(PortFails(), loader(64, 16))
    assert "the run failed in state 'fit.train.batch.step'" in "".join(info.value.__notes__)
    assert where.where == ["fit.train.batch.step"]


class _BatchEnd:
    """on_train_batch_end counts its calls and shrinks the weights (so a lost or repeated call shows)."""

    net: torch.nn.Module
    batch_ends = 0

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batch_ends += 1
        with torch.no_grad():
            self.net.weight.mul_(0.9)


class LitBatchEnd(_BatchEnd, Lit):
    pass


class PortBatchEnd(_BatchEnd, Port):
    pass


def test_resuming_after_a_batch_does_not_run_its_batch_end_hook_again(tmp_path: Path) -> None:
    """A fit resumed from a mid-epoch save runs on_train_batch_end as often as Lightning, and trains exactly."""
    every3 = {"every_n_train_steps": 3, "save_top_k": -1}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mc = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "pl", **every3)
        _lit(tmp_path / "pl", max_steps=3, callbacks=[mc]).fit(LitBatchEnd(), loader(64, 16))
        lit = LitBatchEnd()
        _lit(tmp_path / "pl", max_epochs=2, enable_checkpointing=False).fit(
            lit, loader(64, 16), ckpt_path=next((tmp_path / "pl").glob("*.ckpt"))
        )
    _ours(tmp_path / "il", max_steps=3, listeners=[ModelCheckpoint(**every3)]).fit(PortBatchEnd(), loader(64, 16))
    port, whole = PortBatchEnd(), PortBatchEnd()
    saved = next((tmp_path / "il").glob("**/checkpoints/*step=3*.ckpt"))
    _ours(tmp_path / "il", max_epochs=2).fit(port, loader(64, 16), ckpt_path=saved)
    _ours(tmp_path / "whole", max_epochs=2).fit(whole, loader(64, 16))
    assert lit.batch_ends == 5  # batch 3 of epoch 0, then the 4 of epoch 1
    assert port.batch_ends == lit.batch_ends
    assert all(torch.equal(a, b) for a, b in zip(port.state_dict().values(), whole.state_dict().values(), strict=True))


@pytest.mark.parametrize("case_id", ["log-on-epoch-uneven", "epochs-2-uneven-batches", "log-dict"])
def test_epoch_means_equal_lightnings_bitwise(case_id: str, tmp_path: Path) -> None:
    """Epoch means (logged and returned, uneven batches) equal Lightning's float32 means exactly, not to a tolerance."""
    from parity.matrix import CASES
    from parity.run import run_interlock, run_lightning

    case = next(c for c in CASES if c.id == case_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit, port = run_lightning(case, tmp_path), run_interlock(case, tmp_path)
    assert lit.epoch_metrics and port.epoch_metrics == lit.epoch_metrics
    assert port.metrics == lit.metrics


@pytest.mark.parametrize("full", [False, True], ids=["compact", "full"])
def test_the_trace_and_the_chart_name_the_transition_that_failed(tmp_path: Path, full: bool) -> None:
    """The trace keeps the failing transition (both formats); read_trace and the drawn chart's caption name it."""
    from interlock.listeners import EventTrace
    from interlock.viz.render import to_mermaid
    from interlock.viz.trace import read_trace

    trainer = interlock.Trainer(
        default_root_dir=tmp_path, max_epochs=1, enable_progress_bar=False, listeners=[EventTrace(full=full)]
    )
    with pytest.raises(ValueError, match="epoch end"):
        trainer.fit(_EpochEndFails(), loader(32, 16))
    edge = "fit.train.batch.end -> fit.train.epoch_end [epoch_end] do module.on_train_epoch_end"
    summary = read_trace(trainer.run_dir)
    assert summary.failed_where == edge
    assert summary.failed_in == "fit.train.batch.end"
    assert f"failed in {edge}: ValueError" in to_mermaid(trainer.statechart, summary)


class ManualSteps:
    """Mixed into both modules: two optimizers stepped by hand; ``global_step`` read around each step."""

    seen: list[tuple[int, str, int]]

    def _build(self) -> None:
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
        self.automatic_optimization = False
        self.seen = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        first, second = self.optimizers()  # type: ignore[attr-defined]
        self.seen.append((batch_idx, "start", self.global_step))  # type: ignore[attr-defined]
        for name, opt, net in (("a", first, self.a), ("b", second, self.b)):
            opt.zero_grad()
            self.manual_backward(torch.nn.functional.cross_entropy(net(x), y))  # type: ignore[attr-defined]
            opt.step()
            self.seen.append((batch_idx, f"after {name}", self.global_step))  # type: ignore[attr-defined]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append((batch_idx, "batch end", self.global_step))  # type: ignore[attr-defined]

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.SGD(self.b.parameters(), lr=0.1)]


def test_global_step_counts_a_manual_step_as_soon_as_it_is_taken_as_lightning(tmp_path: Path) -> None:
    """Manual optimization: `self.global_step` read right after `opt.step()` in training_step includes that step."""

    class Lit(ManualSteps, pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self._build()

    class Ours(ManualSteps, interlock.Module):
        def __init__(self) -> None:
            super().__init__()
            self._build()

    lit, ours = Lit(), Ours()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _lit(tmp_path / "pl", enable_checkpointing=False, max_epochs=2).fit(lit, loader(24, 8))
    _ours(tmp_path / "il", enable_checkpointing=False, max_epochs=2).fit(ours, loader(24, 8))
    assert ours.seen == lit.seen
    assert ours.seen[-1] == (2, "batch end", 12)


class BarLogs:
    """Mixed into both modules: every kind of ``self.log`` the progress bar treats differently, and what a callback
    reads from ``trainer.progress_bar_metrics`` (names and values) at the ends of batches, validations and epochs."""

    seen: list[tuple[str, dict[str, float]]]

    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.seen = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.log("step_only", loss, prog_bar=True)  # type: ignore[attr-defined]
        self.log("both", loss * 2, prog_bar=True, on_epoch=True)  # type: ignore[attr-defined]
        self.log("hidden", loss * 3, on_epoch=True)  # type: ignore[attr-defined]
        self.log("unlogged", loss * 5, logger=False)  # type: ignore[attr-defined]
        self.log("epoch_only", loss * 4, prog_bar=True, on_step=False, on_epoch=True)  # type: ignore[attr-defined]
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.log("val_shown", loss, prog_bar=True)  # type: ignore[attr-defined]
        self.log("val_hidden", loss * 2)  # type: ignore[attr-defined]
        self.log("val_step", loss * 3, prog_bar=True, on_step=True, on_epoch=True)  # type: ignore[attr-defined]

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("from_hook", float(batch_idx + 1), prog_bar=True, on_step=True, on_epoch=False)  # type: ignore[attr-defined]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


def _bar_reader(base: type) -> Any:
    class Reader(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.seen: list[tuple[str, dict[str, float]]] = []

        def _read(self, when: str, trainer: Any) -> None:
            self.seen.append((f"bar, {when}", {k: round(float(v), 5) for k, v in trainer.progress_bar_metrics.items()}))
            callback = {k: round(float(v), 5) for k, v in trainer.callback_metrics.items()}
            callback.pop("train_loss", None)  # a documented difference (docs/porting.md): returned scalars are metrics
            self.seen.append((f"callback, {when}", callback))
            self.seen.append((f"logged, {when}", {k: round(float(v), 5) for k, v in trainer.logged_metrics.items()}))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self._read(f"batch {batch_idx}", trainer)

        def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self._read("validation end", trainer)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self._read("epoch end", trainer)

    return Reader()


@pytest.mark.parametrize("val_loaders", [1, 2])
def test_a_callback_reads_the_metrics_lightnings_would_at_every_moment(val_loaders: int, tmp_path: Path) -> None:
    """`progress_bar_metrics` / `logged_metrics` hold the prog_bar=True / logger=True metrics under Lightning's
    names, and in epoch-end hooks they and `callback_metrics` already hold the epoch's values, as in Lightning."""
    import interlock.lightning as il

    Lit, Ours = twins(BarLogs)

    flags = {"max_epochs": 2, "num_sanity_val_steps": 0, "enable_checkpointing": False, **QUIET}
    theirs, mine = _bar_reader(pl.Callback), _bar_reader(il.Callback)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit_trainer = pl.Trainer(default_root_dir=tmp_path / "pl", callbacks=[theirs], **flags)
        lit_trainer.fit(Lit(), loader(24, 8), [loader(16, 8, seed=i) for i in range(val_loaders)])
    our_trainer = il.Trainer(default_root_dir=tmp_path / "il", callbacks=[mine], **flags)
    our_trainer.fit(Ours(), loader(24, 8), [loader(16, 8, seed=i) for i in range(val_loaders)])
    assert mine.seen == theirs.seen
    tail = "/dataloader_idx_1" if val_loaders == 2 else ""
    covered = {"step_only", "both_step", "both_epoch", "epoch_only", f"val_shown{tail}", f"val_step_epoch{tail}"}
    bar, logged = (next(d for w, d in reversed(theirs.seen) if w == f"{k}, epoch end") for k in ("bar", "logged"))
    assert covered | {f"from_hook{tail}", f"val_step_step{tail}"} <= set(bar)  # every kind of name is covered
    assert "hidden_epoch" in logged and "unlogged" not in logged and "unlogged" in mine.seen[-2][1]
    for name in ("progress_bar_metrics", "logged_metrics"):  # and what the trainer holds after the fit
        final = {k: round(float(v), 5) for k, v in getattr(our_trainer, name).items()}
        assert final == {k: round(float(v), 5) for k, v in getattr(lit_trainer, name).items()}, name


class _LoaderIndex(_Linear):
    """Several validation loaders from ``val_dataloader()``; the batch hooks record the dataloader_idx they get."""

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1]))  # type: ignore[attr-defined]

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = -1) -> None:
        self.seen.append(("start", batch_idx, dataloader_idx))

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = -1) -> None:
        self.seen.append(("end", batch_idx, dataloader_idx))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


def _index_data(base: type) -> Any:
    class Data(base):  # type: ignore[misc,valid-type]
        def train_dataloader(self) -> Any:
            return loader(16, 8)

        def val_dataloader(self) -> Any:
            return [loader(16, 8, seed=1), loader(8, 8, seed=2)]

    return Data()


@pytest.mark.parametrize("sanity", [0, 2])
def test_batch_hooks_get_the_dataloader_idx_of_a_data_modules_loaders_as_lightning(sanity: int, tmp_path: Path) -> None:
    """Several val loaders from a data module: on_validation_batch_start/end get dataloader_idx, as in Lightning."""
    import interlock.lightning as il

    Lit, Ours = twins(_LoaderIndex)
    lit, ours = Lit(), Ours()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _lit(tmp_path / "pl", num_sanity_val_steps=sanity, enable_checkpointing=False).fit(
            lit, datamodule=_index_data(pl.LightningDataModule)
        )
    il.Trainer(default_root_dir=tmp_path / "il", max_epochs=1, num_sanity_val_steps=sanity, **QUIET).fit(
        ours, datamodule=_index_data(il.LightningDataModule)
    )
    assert ours.seen == lit.seen
    assert {idx for _, _, idx in lit.seen} == {0, 1}
