"""LearningRateMonitor in real fits: the learning rates the loop reports."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import TinyModule, loader, only
from interlock.listeners import LearningRateMonitor


@pytest.mark.parametrize("interval", ["epoch", "step"])
def test_monitor_reports_the_scheduled_learning_rate(trainer_factory: Any, interval: str) -> None:
    """With StepLR(gamma=0.5) per epoch the logged rate halves each epoch; per step it is the rate just used."""
    trainer = trainer_factory(max_epochs=3, **only(LearningRateMonitor(logging_interval=interval)))
    seen: list[float] = []
    # updates of one event apply after all its handlers: read the value at a later event
    event = "fit.train.epoch_end" if interval == "epoch" else "fit.train.batch.end"
    trainer.on(event, lambda e, s: seen.append(s.metrics["lr-SGD"]) if "lr-SGD" in s.metrics else None)
    trainer.fit(TinyModule(scheduler=True), loader(32, 16))
    if interval == "epoch":
        assert seen == [0.1, 0.05, 0.025]
    else:
        assert seen == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]


def test_learning_rates_are_built_only_when_listened(trainer_factory: Any, monkeypatch: Any) -> None:
    """Unless a handler reads the payload, the loop never reads the learning rates (even if events are listened)."""
    from interlock.loops import train

    calls: list[int] = []
    original = train.learning_rates
    monkeypatch.setattr(train, "learning_rates", lambda run: calls.append(1) or original(run))
    trainer_factory(max_epochs=1).fit(TinyModule(), loader(32, 16))
    assert calls == []
    listened = trainer_factory(max_epochs=1)
    names: list[str] = []
    listened.on("*", lambda e: names.append(e.name))  # every event delivered, no payload read
    listened.fit(TinyModule(), loader(32, 16))
    assert "fit.train.batch.optimizer_step" in names and calls == []
    trainer = trainer_factory(max_epochs=1, **only(LearningRateMonitor(logging_interval="step")))
    trainer.fit(TinyModule(), loader(32, 16))
    assert len(calls) == 2


class Several:
    """Three optimizers (two SGD, one Adam with two named param groups), two schedulers (one named), manual steps."""

    def _build(self) -> None:
        import torch

        torch.manual_seed(0)
        self.a, self.b, self.c, self.d = (torch.nn.Linear(4, 2) for _ in range(4))
        self.automatic_optimization = False
        self.seen: list[dict[str, float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        import torch

        for opt in self.optimizers():  # type: ignore[attr-defined]
            opt.zero_grad()
        x, y = batch
        loss = sum(torch.nn.functional.cross_entropy(m(x), y) for m in (self.a, self.b, self.c, self.d))
        self.manual_backward(loss)  # type: ignore[attr-defined]
        for opt in self.optimizers():  # type: ignore[attr-defined]
            opt.step()

    def on_train_epoch_end(self) -> None:
        for sched in self.lr_schedulers():  # type: ignore[attr-defined]
            sched.step()
        metrics = self.trainer.callback_metrics  # type: ignore[attr-defined]
        self.seen.append({k: round(float(v), 8) for k, v in sorted(metrics.items())})

    def configure_optimizers(self) -> Any:
        import torch

        first = torch.optim.SGD(self.a.parameters(), lr=0.1)
        second = torch.optim.SGD(self.b.parameters(), lr=0.2)
        groups = [{"params": self.c.parameters(), "name": "head"}, {"params": self.d.parameters(), "lr": 0.03}]
        third = torch.optim.Adam(groups, lr=0.01)
        named = {"scheduler": torch.optim.lr_scheduler.StepLR(second, 1, 0.5), "name": "warm"}
        return [first, second, third], [torch.optim.lr_scheduler.StepLR(third, 1, 0.1), named]


@pytest.mark.parametrize("interval", [None, "epoch"])
def test_learning_rates_are_named_and_logged_as_lightnings(interval: str | None, tmp_path: Any) -> None:
    """A scheduler's name, param group names (and /pg<i>), repeated optimizer classes and optimizers without a
    scheduler give Lightning's metric names and values at every epoch."""
    import warnings

    pl = pytest.importorskip("pytorch_lightning")
    import interlock.lightning as il
    from _twins import twins

    Lit, Ours = twins(Several)
    seen = []
    for lib, module in ((pl, Lit()), (il, Ours())):
        monitor = lib.callbacks.LearningRateMonitor(logging_interval=interval)
        flags = {"logger": lib.loggers.CSVLogger(tmp_path / lib.__name__), "enable_progress_bar": False}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = lib.Trainer(max_epochs=2, callbacks=[monitor], enable_checkpointing=False, **flags)
            trainer.fit(module, loader(16, 8))
        seen.append(module.seen)
    assert seen[1] == seen[0]
    assert {"warm", "lr-SGD", "lr-Adam/head", "lr-Adam/pg2"} <= set(seen[1][0])
