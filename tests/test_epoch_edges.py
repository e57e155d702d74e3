"""Lightning's epoch edges, against pytorch-lightning: ``on_train_batch_start`` returning -1 skips the rest of the
epoch, epoch-interval LR schedulers step at the epoch's last batch (not after ``on_train_epoch_end``), and the
unfinished accumulation window at the end of a loader without a length steps."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

pl = pytest.importorskip("pytorch_lightning")

BUILTIN = Path(__file__).resolve().parents[1] / "statecharts" / "trainer.yaml"


def _data(n: int = 16, seed: int = 0) -> DataLoader[Any]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=4)


class Recording:
    """Records each hook with the epoch, the batch and the learning rate it sees."""

    def _build(self: Any) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.rec: list[tuple[Any, ...]] = []

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def _lr(self: Any) -> float:
        opt = self.optimizers()
        return float(getattr(opt, "optimizer", opt).param_groups[0]["lr"])

    def training_step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        self.rec.append(("training_step", self.current_epoch, batch_idx, self._lr()))
        loss = torch.nn.functional.cross_entropy(self(batch[0]), batch[1])
        self.log("loss", loss)
        return loss  # type: ignore[no-any-return]

    def validation_step(self: Any, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self(batch[0]), batch[1]))

    def on_train_batch_end(self: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.rec.append(("on_train_batch_end", self.current_epoch, batch_idx, self._lr()))

    def on_validation_epoch_end(self: Any) -> None:
        self.rec.append(("on_validation_epoch_end", self.current_epoch, self._lr()))

    def on_train_epoch_end(self: Any) -> None:
        self.rec.append(("on_train_epoch_end", self.current_epoch, self._lr()))


class EpochScheduler(Recording):
    def configure_optimizers(self: Any) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)]


class StepScheduler(Recording):
    def configure_optimizers(self: Any) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 2}}


class Plateau(Recording):
    def configure_optimizers(self: Any) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5, threshold=10)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}


class SkipsRest(EpochScheduler):
    def on_train_batch_start(self: Any, batch: Any, batch_idx: int) -> int | None:
        self.rec.append(("on_train_batch_start", self.current_epoch, batch_idx))
        if batch_idx == 2 and self.current_epoch == 0:
            self.log("skipped_at", float(batch_idx), on_step=False, on_epoch=True)
            return -1
        return None


class SkipsEveryEpoch(StepScheduler):
    def on_train_batch_start(self: Any, batch: Any, batch_idx: int) -> int | None:
        return -1 if batch_idx == 1 else None


class SkipsAnEpoch(EpochScheduler):
    def on_train_batch_start(self: Any, batch: Any, batch_idx: int) -> int | None:
        return -1 if batch_idx == 0 and self.current_epoch == 1 else None


def _fit(make: Any, cls: Any, root: Path, **flags: Any) -> tuple[Any, ...]:
    module = cls()
    trainer = make(
        max_epochs=3, logger=False, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
        accelerator="cpu", num_sanity_val_steps=0, default_root_dir=root, **flags,
    )  # fmt: skip
    trainer.fit(module, _data(), _data(8, 1))
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    state = {k: v for k, v in scheduler.state_dict().items() if k in ("last_epoch", "_last_lr", "num_bad_epochs")}
    return module.rec, trainer.global_step, trainer.current_epoch, metrics, state, list(module.parameters())


def _same_as_lightning(tmp_path: Path, mixin: type, **flags: Any) -> None:
    import interlock.lightning as il
    from _twins import twins

    warnings.filterwarnings("ignore", module="pytorch_lightning")
    lit, ours = twins(mixin)
    theirs = _fit(pl.Trainer, lit, tmp_path / "pl", **flags)
    mine = _fit(il.Trainer, ours, tmp_path / "il", **flags)
    assert mine[:5] == theirs[:5]
    assert all(torch.equal(a, b) for a, b in zip(mine[5], theirs[5], strict=True))


@pytest.mark.parametrize(
    ("mixin", "flags"),
    [
        (SkipsRest, {}),
        (SkipsRest, {"val_check_interval": 2}),
        (SkipsRest, {"accumulate_grad_batches": 3}),
        (SkipsEveryEpoch, {}),
        (SkipsAnEpoch, {"accumulate_grad_batches": 3}),
    ],
)
def test_minus_one_skips_the_rest_of_the_epoch_as_in_lightning(tmp_path: Path, mixin: type, flags: Any) -> None:
    """-1 from on_train_batch_start: the same hooks, learning rates, metrics, scheduler state and weights."""
    _same_as_lightning(tmp_path, mixin, **flags)


@pytest.mark.parametrize(
    ("mixin", "flags"),
    [
        (EpochScheduler, {}),
        (EpochScheduler, {"val_check_interval": 2}),
        (EpochScheduler, {"max_steps": 6}),
        (StepScheduler, {"accumulate_grad_batches": 3}),
        (Plateau, {}),
    ],
)
def test_schedulers_step_where_lightning_steps_them(tmp_path: Path, mixin: type, flags: Any) -> None:
    """An epoch scheduler steps at the last batch (its hooks, the validation and on_train_epoch_end see the new
    rate), a plateau one after on_train_epoch_end, none in an epoch max_steps cut short."""
    _same_as_lightning(tmp_path, mixin, **flags)


def test_a_skip_resumes_exactly(tmp_path: Path) -> None:
    """A run saved at the end of a skipped epoch resumes to the weights and rate of a run that was not stopped."""
    import interlock.lightning as il
    from _twins import twins

    ours = twins(SkipsRest)[1]
    flags = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "accelerator": "cpu"}
    whole = ours()
    il.Trainer(max_epochs=3, default_root_dir=tmp_path / "whole", **flags).fit(whole, _data(), _data(8, 1))
    first = ours()
    trainer = il.Trainer(max_epochs=1, default_root_dir=tmp_path / "cut", **flags)
    trainer.fit(first, _data(), _data(8, 1))
    resumed = ours()
    last = tmp_path / "cut" / "runs" / "version_0" / "checkpoints" / "last.ckpt"
    il.Trainer(max_epochs=3, default_root_dir=tmp_path / "cut", **flags).fit(
        resumed, _data(), _data(8, 1), ckpt_path=str(last)
    )
    assert [r for r in resumed.rec if r[1] > 0] == [r for r in whole.rec if r[1] > 0]
    assert all(torch.equal(a, b) for a, b in zip(resumed.parameters(), whole.parameters(), strict=True))


def test_a_chart_without_the_skip_transition_names_it(tmp_path: Path) -> None:
    """-1 under a chart copy with no `skip_epoch` transition fails with an error naming the event and the fix."""
    import interlock.lightning as il
    from _twins import twins

    text = BUILTIN.read_text().replace("on: {skip_epoch: ^skipped}", "")
    text = re.sub(r"\n          skipped:\n(            .*\n|              .*\n)+", "\n", text)
    assert "skip_epoch:" not in text and "skipped:" not in text
    chart = tmp_path / "noskip.yaml"
    chart.write_text(text)
    trainer = il.Trainer(
        max_epochs=1, logger=False, enable_progress_bar=False, enable_checkpointing=False,
        enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path, chart=str(chart),
    )  # fmt: skip
    with pytest.raises(RuntimeError, match=r"returned -1.*no 'skip_epoch' transition.*on: \{skip_epoch:"):
        trainer.fit(twins(SkipsRest)[1](), _data(), _data(8, 1))


class Stream(IterableDataset):  # type: ignore[type-arg]
    """Ten batches of four samples, with no length: the last batch is known only when the data runs out."""

    def __iter__(self) -> Any:
        g = torch.Generator().manual_seed(0)
        for _ in range(10):
            x = torch.randn(4, 4, generator=g)
            yield x, (x[:, 0] > 0).long()


@pytest.mark.parametrize("accumulate", [1, 3, 4])
def test_a_loader_without_a_length_steps_its_last_window_as_lightning(tmp_path: Path, accumulate: int) -> None:
    """Over an IterableDataset the epoch's unfinished accumulation window steps: the same steps, scheduler state and
    weights as Lightning (which steps it at the last batch; interlock when the data runs out, a documented difference
    in what that batch's hooks see)."""
    import interlock.lightning as il
    from _twins import twins

    warnings.filterwarnings("ignore", module="pytorch_lightning")
    ends = []
    for make, cls, root in zip((pl.Trainer, il.Trainer), twins(EpochScheduler), ("pl", "il"), strict=True):
        module = cls()
        trainer = make(
            max_epochs=2, accumulate_grad_batches=accumulate, logger=False, enable_progress_bar=False,
            enable_checkpointing=False, enable_model_summary=False, accelerator="cpu", num_sanity_val_steps=0,
            default_root_dir=tmp_path / root,
        )  # fmt: skip
        trainer.fit(module, DataLoader(Stream(), batch_size=None), _data(8, 1))
        scheduler = trainer.lr_scheduler_configs[0].scheduler
        ends.append((trainer.global_step, scheduler.state_dict()["last_epoch"], list(module.parameters())))
    (steps, last_epoch, weights), (my_steps, my_last_epoch, mine) = ends
    assert (my_steps, my_last_epoch) == (steps, last_epoch) == (2 * -(-10 // accumulate), 2)
    assert all(torch.equal(a, b) for a, b in zip(mine, weights, strict=True))


def test_configure_optimizers_returning_none_is_an_error_naming_the_alternatives(tmp_path: Path) -> None:
    """None from configure_optimizers (Lightning: a warning and no training) fails at set-up, naming what to do."""
    import interlock.lightning as il
    from _twins import twins

    class NoOptimizer(Recording):
        def configure_optimizers(self: Any) -> None:
            return None

    trainer = il.Trainer(
        max_epochs=1, logger=False, enable_progress_bar=False, enable_checkpointing=False,
        enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path,
    )  # fmt: skip
    module = twins(NoOptimizer)[1]()
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(TypeError, match=r"returned None.*SGD\(self.parameters\(\), lr=0.0\).*validate\(\)"):
        trainer.fit(module, _data())
    assert module.rec == [] and all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


def test_an_extension_action_sends_a_chart_event(tmp_path: Path) -> None:
    """An action of a chart copy raising ChartEvent skips the state's other entry actions and takes its `on`
    transition, with the updates it carried applied."""
    import interlock
    from conftest import TinyModule, loader, only

    text = BUILTIN.read_text().replace(
        "entry: [data.reload, data.start_epoch, module.on_train_epoch_start]",
        "entry: [data.reload, data.start_epoch, demo.shortcut, module.on_train_epoch_start]\n"
        "            on: {shortcut: epoch_end}",
    )
    chart = tmp_path / "shortcut.yaml"
    chart.write_text(text)
    epochs_started: list[int] = []

    class Counting(TinyModule):
        def on_train_epoch_start(self) -> None:
            epochs_started.append(self.current_epoch)

    calls: list[int] = []

    def shortcut(run: Any) -> None:
        calls.append(1)
        if len(calls) == 1:  # the first epoch only: straight to its end, nothing trained
            raise interlock.ChartEvent("shortcut", "demo", [interlock.LogMetrics({"shortcut": 1.0})])

    trainer = interlock.Trainer(
        max_epochs=2, **only(), default_root_dir=tmp_path, chart=str(chart), actions={"demo.shortcut": shortcut}
    )
    trace: list[str] = []
    trainer.observe(lambda name, *_: trace.append(name))
    trainer.fit(Counting(), loader(32, 8))
    assert epochs_started == [1] and trainer.state.metrics["shortcut"] == 1.0
    assert trace.index("fit.train.epoch_end") == trace.index("fit.train.epoch_start") + 1
    assert trainer.state.global_step == 4  # one epoch of four batches trained
