"""configure_optimizers: every form Lightning accepts, and clear errors for the rest."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from interlock.connectors.optim import Scheduler, configure_optimizers, step_schedulers


def params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(2))]


def sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD(params(), lr=0.1)


def test_single_optimizer_and_lists() -> None:
    """An optimizer, a list of them, and ([optimizers], [schedulers]) all normalise."""
    a, b = sgd(), sgd()
    assert configure_optimizers(a) == ([a], [])
    assert configure_optimizers([a, b]) == ([a, b], [])
    sched = torch.optim.lr_scheduler.StepLR(a, 1)
    opts, scheds = configure_optimizers(([a], [sched]))
    assert opts == [a] and [s.scheduler for s in scheds] == [sched] and scheds[0].interval == "epoch"


def test_dict_form_with_scheduler_config() -> None:
    """{'optimizer', 'lr_scheduler': {...}} keeps interval, frequency and monitor."""
    a = sgd()
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(a)
    opts, scheds = configure_optimizers(
        {
            "optimizer": a,
            "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 2, "monitor": "val_loss"},
        }
    )
    assert opts == [a]
    assert scheds == [Scheduler(sched, "step", 2, "val_loss")]


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (None, "configure_optimizers\\(\\) returned None"),
        ("adam", "returned 'adam'"),
        ({"optimizer": "x"}, "returned"),
        ({"optimizer": None, "lr_scheduler": None}, "returned"),
    ],
)
def test_bad_returns_are_clear_type_errors(result: Any, message: str) -> None:
    """Anything else raises TypeError saying what to return."""
    with pytest.raises(TypeError, match=message):
        configure_optimizers(result)


def test_bad_scheduler_configs_are_rejected() -> None:
    """Unknown interval, zero frequency and unknown keys name the bad value."""
    a = sgd()
    sched = torch.optim.lr_scheduler.StepLR(a, 1)
    with pytest.raises(ValueError, match="interval='batch'"):
        configure_optimizers({"optimizer": a, "lr_scheduler": {"scheduler": sched, "interval": "batch"}})
    with pytest.raises(ValueError, match="frequency=0"):
        configure_optimizers({"optimizer": a, "lr_scheduler": {"scheduler": sched, "frequency": 0}})
    with pytest.raises(ValueError, match="unknown keys"):
        configure_optimizers({"optimizer": a, "lr_scheduler": sched, "extra": 1})


def test_monitored_scheduler_needs_its_metric() -> None:
    """A scheduler monitoring a missing metric raises KeyError listing the metrics there are."""
    a = sgd()
    s = Scheduler(torch.optim.lr_scheduler.ReduceLROnPlateau(a), monitor="val_loss")
    with pytest.raises(KeyError, match="val_loss.*train_loss"):
        step_schedulers([s], "epoch", 1, {"train_loss": 1.0})
    step_schedulers([s], "epoch", 1, {"val_loss": 1.0})


def test_frequency_steps_every_nth_call() -> None:
    """frequency=2 steps the scheduler on counts 2, 4, ... only."""
    a = sgd()
    s = Scheduler(torch.optim.lr_scheduler.StepLR(a, 1, gamma=0.5), interval="step", frequency=2)
    for count in range(1, 5):
        a.step()
        step_schedulers([s], "step", count, {})
    assert a.param_groups[0]["lr"] == pytest.approx(0.025)
