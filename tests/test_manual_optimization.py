"""Manual optimization: the GAN example trains with two optimizers, counts steps as Lightning, resumes exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from conftest import TinyModule, loader, only
from interlock import SaveCheckpoint
from interlock.examples.gan import GAN, ring_data


def _fit(root: Path, save_at: str | None = None, ckpt: Path | None = None, **kw: Any) -> tuple[Any, GAN]:
    torch.manual_seed(0)
    module = GAN()
    trainer = interlock.Trainer(max_epochs=2, seed=3, **only(), default_root_dir=root, **kw)
    if save_at is not None:
        trainer.on(save_at, lambda e, s: SaveCheckpoint(str(root / "x.ckpt")), once=5)

        def stop(event: Any, state: Any) -> None:
            if (root / "x.ckpt").exists() and event.name.endswith("batch.fetch"):
                raise KeyboardInterrupt

        trainer.on("fit.train.*", stop)
    try:
        trainer.fit(module, ring_data(96, batch_size=16), ckpt_path=ckpt)
    except KeyboardInterrupt:
        pass
    return trainer, module


def test_gan_trains_two_optimizers_and_counts_each_step(tmp_path: Path) -> None:
    """Each opt.step() is one global step (2 per batch); both networks change; losses are logged per epoch."""
    torch.manual_seed(0)
    before = {k: v.clone() for k, v in GAN().state_dict().items()}
    trainer, module = _fit(tmp_path)
    assert trainer.state.global_step == 2 * 6 * 2
    assert trainer.state.progress.train_batches == 12
    after = module.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before)
    rows = [r for r in trainer.state.history if r["stage"] == "train"]
    assert len(rows) == 2 and {"d_loss_epoch", "g_loss_epoch"} <= set(rows[0])
    assert trainer.state.counts["fit.train.batch.backward"] == 0  # the manual branch skips the automatic states


def test_gan_resumes_mid_epoch_bitwise(tmp_path: Path) -> None:
    """Saved after its 5th batch and resumed, the GAN ends with the uninterrupted run's weights and metrics."""
    whole, a = _fit(tmp_path / "a")
    _fit(tmp_path / "b", save_at="fit.train.batch.end")
    resumed, b = _fit(tmp_path / "c", ckpt=tmp_path / "b" / "x.ckpt")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert resumed.state.history == whole.state.history
    assert resumed.state.global_step == whole.state.global_step


def test_max_steps_counts_manual_optimizer_steps(tmp_path: Path) -> None:
    """max_steps=6 stops after three batches of a two-optimizer module, as in Lightning."""
    trainer, _ = _fit(tmp_path, max_steps=6)
    assert trainer.state.global_step == 6 and trainer.state.progress.train_batches == 3


def test_manual_optimization_rejects_automatic_only_flags(tmp_path: Path) -> None:
    """accumulate_grad_batches or gradient_clip_val with manual optimization: an early error naming what was set."""
    with pytest.raises(ValueError, match=r"manual optimization.*Trainer\(accumulate_grad_batches=2\) does not") as info:
        _fit(tmp_path, accumulate_grad_batches=2)
    assert "gradient_clip_val" not in str(info.value)
    with pytest.raises(ValueError, match=r"Trainer\(gradient_clip_val=0.5\) does not apply.*clip_gradients"):
        _fit(tmp_path, gradient_clip_val=0.5)


def test_several_optimizers_need_manual_optimization_as_in_lightning(tmp_path: Path) -> None:
    """Two optimizers, automatic optimization: a RuntimeError at fit start naming manual optimization, as Lightning."""
    pl = pytest.importorskip("pytorch_lightning")

    class LitTwo(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = TinyModule().net

        training_step = TinyModule.training_step
        forward = TinyModule.forward

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.net[0].parameters(), lr=0.1), torch.optim.SGD(self.net[3].parameters(), lr=0.1)

    class Two(TinyModule):
        configure_optimizers = LitTwo.configure_optimizers

    flags = {"max_epochs": 1, "logger": False, "enable_progress_bar": False}
    with pytest.raises(RuntimeError, match="manual optimization"):
        pl.Trainer(enable_checkpointing=False, default_root_dir=tmp_path / "pl", **flags).fit(LitTwo(), loader())
    trainer = interlock.Trainer(default_root_dir=tmp_path / "il", **flags)
    with pytest.raises(RuntimeError, match=r"returned 2 optimizers.*automatic_optimization = False"):
        trainer.fit(Two(), loader())
    assert trainer.state.global_step == 0 and not list((tmp_path / "il").rglob("*.ckpt"))


def test_single_manual_optimizer_and_scheduler_are_returned_bare(tmp_path: Path) -> None:
    """optimizers() and lr_schedulers() return the single object (Lightning's), and the scheduler is the user's."""
    seen: list[Any] = []

    class Manual(TinyModule):
        automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            opt, sched = self.optimizers(), self.lr_schedulers()
            loss = super().training_step(batch, batch_idx)
            self.manual_backward(loss)
            opt.step()
            opt.zero_grad()
            seen.append((type(opt).__name__, type(sched).__name__, opt.param_groups[0]["lr"]))
            return loss

    torch.manual_seed(0)
    trainer = interlock.Trainer(max_epochs=2, **only(), default_root_dir=tmp_path)
    trainer.fit(Manual(scheduler=True), loader(8, 4))
    assert seen[0][:2] == ("ManualOptimizer", "StepLR")
    assert {lr for *_, lr in seen} == {0.1}  # epoch schedulers are the module's to step under manual optimization
    assert trainer.state.global_step == 4


def test_a_fitted_module_pickles_and_copies_without_the_run(tmp_path: Path) -> None:
    """After fit the module still reads global_step, and its pickle / deep copy carry weights, not the run's view."""
    import copy
    import pickle

    _, module = _fit(tmp_path, max_steps=4)
    assert module.global_step == 4
    for clone in (copy.deepcopy(module), pickle.loads(pickle.dumps(module))):
        assert "_interlock_view" not in clone.__dict__ and clone.global_step == 0
        assert all(
            torch.equal(a, b) for a, b in zip(module.state_dict().values(), clone.state_dict().values(), strict=True)
        )


def test_gan_logs_its_sample_grid_through_logger_experiment(tmp_path: Path) -> None:
    """The GAN's epoch-end image reaches TensorBoard through self.logger.experiment: one an epoch, its grid."""
    pytest.importorskip("tensorboard")
    import io

    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from interlock.listeners import TensorBoardLogger

    torch.manual_seed(0)
    module = GAN()
    logger = TensorBoardLogger(save_dir=tmp_path / "tb")
    trainer = interlock.Trainer(max_epochs=2, seed=3, **only(logger), default_root_dir=tmp_path)
    trainer.fit(module, ring_data(64, batch_size=16))
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"images": 0})
    events.Reload()
    images = events.Images("samples")
    assert [i.step for i in images] == [8, 16]  # global_step: 2 optimizer steps per batch, 4 batches an epoch
    last = Image.open(io.BytesIO(images[-1].encoded_image_string))
    assert last.size == (64, 64)
    decoded = torch.tensor(list(last.convert("L").getdata()), dtype=torch.float32).reshape(1, 64, 64) / 255
    assert torch.allclose(decoded, module.sample_grid(), atol=1 / 255)
    assert decoded.max() == 1.0 and (decoded > 0).sum() > 10  # the points are spread, not one blob
