"""Every transition taken by real runs is in the chart, and every chart transition is taken by some run."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import IterableDataset

import interlock
from conftest import TinyModule, loader, only
from interlock.core.chart import Transition

CHART = interlock.load_chart()
ALL = set(CHART.transitions())
STAGE_OF = {
    "fit": "fit",
    "validate": "validate",
    "test": "test",
    "predict": "predict",
    "setup": "fit",
    "teardown": "fit",
}


def record(trainer: interlock.Trainer) -> list[tuple[str, str, str]]:
    """Every transition the trainer takes, as ``(source, trigger, dest)``, through an observer."""
    trace: list[tuple[str, str, str]] = []
    trainer.observe(lambda name, trigger, source, *_: trace.append((source, trigger, name)))
    return trace


class Stream(IterableDataset):  # type: ignore[type-arg]
    """An iterable dataset without a length: the loop learns the epoch ended at fetch."""

    def __iter__(self) -> Iterator[Any]:
        data = loader(16, 1).dataset
        for i in range(len(data)):  # type: ignore[arg-type]
            yield data[i]


def run(
    setup: Callable[[interlock.Trainer], None], stage: str = "fit", tmp: Any = None, **flags: Any
) -> set[Transition]:
    """Run one scenario with the runtime's trace on; return the transitions it took."""
    flags = {"max_epochs": 1, "listeners": [], "default_root_dir": tmp, "num_sanity_val_steps": 1, **flags}
    train = flags.pop("_train", None)
    other = flags.pop("_other", None)
    given = flags.pop("_module", TinyModule)
    module = given() if isinstance(given, type) else given
    trainer = interlock.Trainer(**flags)
    trace = record(trainer)
    setup(trainer)
    try:
        if stage == "fit":
            trainer.fit(module, loader(32, 8) if train is None else train, loader(16, 8) if other is None else other)
        elif stage == "predict":
            trainer.predict(module, loader(16, 8) if other is None else other)
        else:
            getattr(trainer, stage)(module, loader(16, 8) if other is None else other)
    except (RuntimeError, KeyboardInterrupt, interlock.Preempted):
        pass
    taken = {Transition(*t) for t in trace}
    assert taken <= ALL, taken - ALL
    return taken


class ManualTiny(TinyModule):
    """TinyModule stepping its optimizer itself (automatic_optimization = False)."""

    automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.manual_backward(loss)
        opt = self.optimizers()
        opt.step()
        opt.zero_grad()
        return loss


class Indexed(TinyModule):
    """Steps that take the dataloader_idx several loaders pass."""

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> dict[str, torch.Tensor]:
        return super().validation_step(batch, batch_idx)

    test_step = validation_step

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return super().predict_step(batch, batch_idx)


class Skipper(TinyModule):
    """Skips the rest of every epoch at its second batch (Lightning's -1 from on_train_batch_start)."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        return -1 if batch_idx == 1 else None


def raiser(exc: BaseException) -> Callable[[Any], None]:
    def handler(event: Any) -> None:
        raise exc

    return handler


def sigterm(event: Any) -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def test_every_chart_transition_is_exercised(tmp_path: Any) -> None:
    """Normal runs, unsized data, empty loops, and failures/interrupts raised in every stage state cover the chart."""
    taken: set[Transition] = set()
    taken |= run(lambda t: None, tmp=tmp_path, accumulate_grad_batches=2, max_epochs=2)
    taken |= run(lambda t: None, tmp=tmp_path, _module=ManualTiny())  # the manual-optimization branch
    for stage in ("validate", "test", "predict"):
        taken |= run(lambda t: None, stage, tmp=tmp_path)
        taken |= run(
            lambda t: None, stage, tmp=tmp_path, limit_val_batches=0, limit_test_batches=0, limit_predict_batches=0
        )
    stream = torch.utils.data.DataLoader(Stream(), batch_size=4)
    empty = loader(0, 8)
    taken |= run(lambda t: None, tmp=tmp_path, _other=empty)  # sanity and val: start -> end directly
    taken |= run(lambda t: None, tmp=tmp_path, _other=stream, num_sanity_val_steps=-1)  # ends at fetch
    taken |= run(lambda t: None, tmp=tmp_path, num_sanity_val_steps=0, val_check_interval=2)  # val mid-epoch
    taken |= run(lambda t: None, tmp=tmp_path, limit_val_batches=0)  # no validation: batch end -> epoch end
    for stage in ("validate", "test", "predict"):
        taken |= run(lambda t: None, stage, tmp=tmp_path, _other=stream)
    taken |= run(lambda t: None, tmp=tmp_path, _train=stream)  # exhausted at fetch -> validate
    taken |= run(lambda t: None, tmp=tmp_path, _module=Skipper)  # -1: the rest of the epoch skipped
    # the data ran out inside an accumulation window (4 batches, 3 a window): its step when the data runs out
    taken |= run(lambda t: None, tmp=tmp_path, _train=stream, accumulate_grad_batches=3)
    taken |= run(lambda t: None, tmp=tmp_path, _train=stream, check_val_every_n_epoch=None, val_check_interval=100)
    # several loaders: the next one starts when one reaches its limit (batch end) or runs out (fetch)
    two = [loader(16, 8), loader(16, 8)]
    limits: dict[str, Any] = {"limit_val_batches": 1, "limit_test_batches": 1, "limit_predict_batches": 1}
    taken |= run(lambda t: None, tmp=tmp_path, _other=two, _module=Indexed, **limits)
    taken |= run(lambda t: None, tmp=tmp_path, _other=[stream, loader(16, 8)], _module=Indexed, num_sanity_val_steps=-1)
    for stage in ("validate", "test", "predict"):
        taken |= run(lambda t: None, stage, tmp=tmp_path, _other=two, _module=Indexed, **limits)
        taken |= run(lambda t: None, stage, tmp=tmp_path, _other=[stream, loader(16, 8)], _module=Indexed)
    taken |= run(lambda t: None, tmp=tmp_path, max_epochs=0)  # sanity check, then no training
    taken |= run(lambda t: None, tmp=tmp_path, max_epochs=0, num_sanity_val_steps=0)  # nothing at all
    # a preemption signal at a training batch end, a validation batch and an epoch end saves and stops there
    for when in ("fit.train.batch.end", "fit.train.val.batch.step", "fit.train.epoch_end"):
        taken |= run(lambda t, when=when: t.on(when, sigterm, once=True), tmp=tmp_path)
    for leaf in CHART.leaves:
        top = leaf.split(".")[0]
        if top not in STAGE_OF:
            continue
        stage = STAGE_OF[top]
        where: dict[str, Any] = {
            "fit.train.skipped": {"_module": Skipper},
            "fit.train.batch.window_step": {"_train": stream, "accumulate_grad_batches": 3},
        }.get(leaf, {})
        for exc in (RuntimeError("boom"), KeyboardInterrupt()):
            taken |= run(lambda t, leaf=leaf, exc=exc: t.on(leaf, raiser(exc), once=True), stage, tmp=tmp_path, **where)
    # rerunning a trainer after each final state leaves it through `setup`
    for end in ("finished", "failed", "interrupted"):
        trainer = interlock.Trainer(**only(), default_root_dir=tmp_path)
        trace = record(trainer)
        if end != "finished":
            trainer.on("validate.start", raiser(RuntimeError() if end == "failed" else KeyboardInterrupt()), once=True)
        for _ in range(2):
            try:
                trainer.validate(TinyModule(), loader(16, 8))
            except (RuntimeError, KeyboardInterrupt):
                pass
        taken |= {Transition(*t) for t in trace}
    missing = sorted(ALL - taken, key=lambda t: (t.source, t.trigger))
    assert not missing, "\n".join(f"{t.source} -{t.trigger}-> {t.dest}" for t in missing)


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_evaluation_stages_take_only_chart_transitions(tmp_path: Any, stage: str) -> None:
    """validate/test/predict runs take only transitions that the chart declares."""
    assert run(lambda t: None, stage, tmp=tmp_path)
