"""Several validation/test loaders and the return values of validate/test: interlock beside Lightning 2.6.6."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from _lightning_twin import LitTwin, Twin, interlock_trainer, lightning_trainer, loader, pl
from interlock.listeners import ModelCheckpoint


class Indexed(Twin):
    """Records the arguments each evaluation step gets."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    def validation_step(self, batch: Any, batch_idx: int, *rest: int) -> torch.Tensor:
        self.calls.append((batch_idx, *rest))
        return super().validation_step(batch, batch_idx)

    def predict_step(self, batch: Any, batch_idx: int, *rest: int) -> Any:
        return (batch_idx, *rest)


def two_loaders() -> list[Any]:
    return [loader(4, seed=1, batch_size=2), loader(6, seed=2, batch_size=2)]


@pytest.mark.parametrize("stage", ["validate", "test"])
@pytest.mark.parametrize("several", [False, True])
def test_validate_and_test_return_one_dict_per_loader_as_lightning(tmp_path: Path, stage: str, several: bool) -> None:
    """Same keys (with /dataloader_idx_N for several loaders) and the same values as Lightning's list[dict]."""
    data = two_loaders() if several else loader(4, seed=1, batch_size=2)
    expected = getattr(lightning_trainer(tmp_path / "pl"), stage)(LitTwin(), data, verbose=False)
    got = getattr(interlock_trainer(tmp_path / "il"), stage)(Twin(), data)
    assert isinstance(got, list) and [set(d) for d in got] == [set(d) for d in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-6)
    name = "val_loss" if stage == "validate" else "test_loss"
    assert (name in got[0]) is (not several)


def test_dataloader_idx_is_passed_only_with_several_loaders_and_limits_apply_per_loader(tmp_path: Path) -> None:
    """Lightning's calls: (batch_idx, dataloader_idx) per loader up to limit_val_batches; none with one loader."""
    lit = LitTwin()
    lightning_trainer(tmp_path / "pl", limit_val_batches=2).validate(lit, two_loaders(), verbose=False)
    module = Indexed()
    interlock_trainer(tmp_path / "il", limit_val_batches=2).validate(module, two_loaders())
    assert module.calls == [(i, d) for _, _, i, d in lit.calls] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    one = Indexed()
    interlock_trainer(tmp_path / "one").validate(one, [loader(4, seed=1, batch_size=2)])
    assert one.calls == [(0,), (1,)]


def test_fit_with_several_val_loaders_logs_suffixed_metrics_and_sanity_checks_each(tmp_path: Path) -> None:
    """In fit, each loader is validated (sanity: num_sanity_val_steps of each) and logged with its suffix."""
    lit = LitTwin()
    pl_trainer = lightning_trainer(tmp_path / "pl", max_epochs=1, num_sanity_val_steps=1)
    pl_trainer.fit(lit, loader(10), two_loaders())
    module = Indexed()
    trainer = interlock_trainer(tmp_path / "il", max_epochs=1, num_sanity_val_steps=1)
    trainer.fit(module, loader(10), two_loaders())
    assert module.calls == [(i, d) for _, _, i, d in lit.calls]
    lit_metrics = {k: float(v) for k, v in pl_trainer.callback_metrics.items() if k.startswith("val")}
    metrics = {k: v for k, v in trainer.state.metrics.items() if k.startswith("val")}
    assert metrics == pytest.approx(lit_metrics, rel=1e-5)
    assert set(metrics) == {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"}


def test_predict_with_several_loaders_returns_a_list_per_loader(tmp_path: Path) -> None:
    """predict over two loaders gives one list of predictions per loader, each step told its dataloader_idx."""
    preds = interlock_trainer(tmp_path).predict(Indexed(), two_loaders())
    assert preds == [[(0, 0), (1, 0)], [(0, 1), (1, 1), (2, 1)]]


def test_a_step_without_dataloader_idx_is_refused_with_several_loaders(tmp_path: Path) -> None:
    """validation_step(batch, batch_idx) with two loaders names the step and the signature to use."""

    class NoIndex(Twin):
        def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:  # type: ignore[override]
            return super().validation_step(batch, batch_idx)

    with pytest.raises(TypeError, match=r"NoIndex.validation_step\(\) gets 2 loaders .*dataloader_idx=0"):
        interlock_trainer(tmp_path).validate(NoIndex(), two_loaders())


def test_a_list_of_batches_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    """A list is several loaders (as in Lightning): a list of batches names the item and the fix."""
    batches = list(loader(4, batch_size=2))
    with pytest.raises(TypeError, match=r"item 0 is a list, which looks like a batch: .*wrap a list of batches"):
        interlock_trainer(tmp_path).validate(Twin(), batches)
    assert interlock_trainer(tmp_path).validate(Twin(), [batches])[0]["val_loss"] > 0


def test_a_dict_of_evaluation_loaders_runs_them_in_order_as_lightning(tmp_path: Path) -> None:
    """A dict is Lightning's sequential CombinedLoader: its loaders in order, numbered 0, 1 as a list's."""
    named = {"b": loader(4, seed=1, batch_size=2), "a": loader(6, seed=2, batch_size=2)}
    expected = lightning_trainer(tmp_path / "pl").validate(LitTwin(), named, verbose=False)
    module = Indexed()
    got = interlock_trainer(tmp_path / "il").validate(module, named)
    assert [set(d) for d in got] == [set(d) for d in expected] and len(got) == 2
    for mine, theirs in zip(got, expected, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-6)
    assert module.calls == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1)]
    assert interlock_trainer(tmp_path / "p").predict(Indexed(), named) == [[(0, 0), (1, 0)], [(0, 1), (1, 1), (2, 1)]]


def test_resume_inside_the_second_val_loader_is_exact(tmp_path: Path) -> None:
    """A fit saved in the second loader's validation resumes there and ends bitwise as the uninterrupted run."""
    whole = interlock_trainer(tmp_path / "whole", max_epochs=2, num_sanity_val_steps=0)
    saved = str(tmp_path / "mid.ckpt")

    def save(event: Any, state: Any) -> Any:
        if state.epoch == 0 and state.progress.eval_loader == 1 and state.progress.eval_batch_idx == 1:
            return interlock.SaveCheckpoint(saved)
        return None

    whole.on("fit.train.val.batch.end", save)
    reference = Twin()
    whole.fit(reference, loader(10), two_loaders())
    resumed = interlock_trainer(tmp_path / "split", max_epochs=2, num_sanity_val_steps=0)
    steps: list[tuple[int, int]] = []
    resumed.on(
        "fit.train.val.batch.step", lambda e, s: steps.append((s.progress.eval_loader, s.progress.eval_batch_idx))
    )
    module = Twin()
    resumed.fit(module, loader(10), two_loaders(), ckpt_path=saved)
    assert steps[:2] == [(1, 1), (1, 2)]  # the rest of the second loader first
    assert dict(resumed.state.metrics) == dict(whole.state.metrics)
    assert list(resumed.state.history) == list(whole.state.history)
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), reference.parameters(), strict=True))


def test_ckpt_path_best_tests_the_best_checkpoint_of_this_trainers_fit(tmp_path: Path) -> None:
    """test(ckpt_path="best") loads ModelCheckpoint's best file; without one it is a clear CheckpointError."""
    mc = ModelCheckpoint(monitor="val_loss", save_top_k=1, filename="{epoch}", save_last=True)
    trainer = interlock_trainer(tmp_path, max_epochs=3, listeners=[mc])
    module = Twin()
    trainer.fit(module, loader(10), loader(4, seed=1))
    best = mc.best_model_path(trainer.state)
    assert best
    expected = interlock_trainer(tmp_path / "ref").test(Twin(), loader(4, seed=1), ckpt_path=best)
    assert trainer.test(module, loader(4, seed=1), ckpt_path="best") == expected
    assert trainer.validate(module, loader(4, seed=1), ckpt_path="last")[0]["val_loss"] > 0
    with pytest.raises(interlock.CheckpointError, match=r'ckpt_path="best"\) needs a ModelCheckpoint'):
        interlock_trainer(tmp_path / "none").test(Twin(), loader(4), ckpt_path="best")
    fresh = interlock_trainer(tmp_path / "fresh", listeners=[ModelCheckpoint(monitor="val_loss")])
    with pytest.raises(interlock.CheckpointError, match="has saved no checkpoint yet"):
        fresh.predict(Twin(), loader(4), ckpt_path="best")


class _EpochLogs:
    """Logs at a loop's start, in each step, and at its end (a mean over every loader's batches)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(3, 1)
        self.losses: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self(batch[0]), batch[1])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)  # type: ignore[attr-defined]

    def on_validation_epoch_start(self) -> None:
        self.log("start", 2.0)  # type: ignore[attr-defined]

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        loss = torch.nn.functional.mse_loss(self(batch[0]), batch[1])
        self.losses.append(loss)
        self.log("vl", loss)  # type: ignore[attr-defined]

    def on_validation_epoch_end(self) -> None:
        self.log("mean", torch.stack(self.losses).mean(), prog_bar=True)  # type: ignore[attr-defined]
        self.losses.clear()

    on_test_epoch_start, test_step, on_test_epoch_end = (
        on_validation_epoch_start,
        validation_step,
        on_validation_epoch_end,
    )


def _epoch_logs_run(trainer: Any, module: Any) -> list[Any]:
    """fit with two validation loaders, then validate and test with two: what each call returned and the metrics."""
    trainer.fit(module, loader(8, batch_size=4), two_loaders())
    metrics = trainer.callback_metrics if isinstance(trainer, pl.Trainer) else trainer.state.metrics
    out: list[Any] = [{k: float(v) for k, v in metrics.items()}]
    out.append(trainer.validate(module, two_loaders(), verbose=False))
    out.append(trainer.test(module, two_loaders(), verbose=False))
    return out


def test_what_a_loops_epoch_hooks_log_belongs_to_every_loader_as_lightning(tmp_path: Path) -> None:
    """Logged at a loop's start or end with several loaders: no /dataloader_idx_N, in every loader's results."""
    lit = type("LitEpochLogs", (_EpochLogs, pl.LightningModule), {})()
    port = type("EpochLogs", (_EpochLogs, interlock.Module), {})()
    flags = {"max_epochs": 2, "num_sanity_val_steps": 0}
    expected = _epoch_logs_run(lightning_trainer(tmp_path / "pl", **flags), lit)
    got = _epoch_logs_run(interlock_trainer(tmp_path / "il", **flags), port)
    assert [set(d) for d in got[1] + got[2]] == [set(d) for d in expected[1] + expected[2]]
    assert all("start" in d and "mean" in d for d in got[1] + got[2])
    for mine, theirs in zip(got[1] + got[2], expected[1] + expected[2], strict=True):
        assert mine == pytest.approx(theirs, rel=1e-6)
    fit_metrics = {k: v for k, v in got[0].items() if k in expected[0]}
    assert set(fit_metrics) == set(expected[0]) and fit_metrics == pytest.approx(expected[0], rel=1e-6)


def test_lightning_loggers_get_one_row_per_evaluation_of_several_loaders(tmp_path: Path) -> None:
    """Lightning's CSVLogger file with two validation loaders: one row per evaluation, byte for byte Lightning's."""
    from interlock.lightning.loggers import CSVLogger

    texts = []
    for side, make_logger, body in (
        ("pl", pl.loggers.CSVLogger, pl.LightningModule),
        ("il", CSVLogger, interlock.Module),
    ):
        logger = make_logger(str(tmp_path / side), name="exp")
        flags = {"max_epochs": 2, "num_sanity_val_steps": 0, "enable_progress_bar": False, "logger": logger}
        common = {"accelerator": "cpu", "default_root_dir": str(tmp_path / side), "enable_checkpointing": False}
        trainer: Any = pl.Trainer(**flags, **common) if side == "pl" else interlock.Trainer(**flags, **common)
        _epoch_logs_run(trainer, type(f"{side}EpochLogs", (_EpochLogs, body), {})())
        texts.append((Path(logger.log_dir) / "metrics.csv").read_text())
    assert texts[0] == texts[1]
    assert "vl/dataloader_idx_1" in texts[1].splitlines()[0]
