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
