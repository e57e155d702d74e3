"""Optimizers and LR schedulers from ``configure_optimizers``, as in Lightning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

__all__ = ["Scheduler", "configure_optimizers", "step_schedulers"]


@attrs.define
class Scheduler:
    """An LR scheduler with how often it steps."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None


def _scheduler(spec: Any) -> Scheduler:
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"scheduler", "interval", "frequency", "monitor", "name", "strict"}
        if "scheduler" not in spec or unknown:
            raise ValueError(
                f"lr_scheduler dict {dict(spec)!r} must have 'scheduler' and only "
                "'interval', 'frequency', 'monitor', 'name', 'strict'"
            )
        interval = spec.get("interval", "epoch")
        if interval not in ("epoch", "step"):
            raise ValueError(f"lr_scheduler interval={interval!r}; choose 'epoch' or 'step'")
        frequency = spec.get("frequency", 1)
        if not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"lr_scheduler frequency={frequency!r}; must be an int >= 1")
        return Scheduler(spec["scheduler"], interval, frequency, spec.get("monitor"))
    if not hasattr(spec, "step") or not hasattr(spec, "state_dict"):
        raise TypeError(f"lr_scheduler {spec!r} is not an LR scheduler (it needs step() and state_dict())")
    return Scheduler(spec)


def configure_optimizers(result: Any) -> tuple[list[torch.optim.Optimizer], list[Scheduler]]:
    """Normalise what ``configure_optimizers`` returned.

    Accepts an optimizer; a list/tuple of optimizers; a pair ``([optimizers], [schedulers])``;
    or a dict (or list of dicts) with ``optimizer`` and optional ``lr_scheduler``.
    """
    if isinstance(result, torch.optim.Optimizer):
        return [result], []
    if isinstance(result, Mapping):
        result = [result]
    if isinstance(result, Sequence) and len(result) == 2 and all(isinstance(x, Sequence) for x in result):
        opts, scheds = configure_optimizers(list(result[0]))[0], [_scheduler(s) for s in result[1]]
        return opts, scheds
    if isinstance(result, Sequence) and result:
        optimizers: list[torch.optim.Optimizer] = []
        schedulers: list[Scheduler] = []
        for item in result:
            if isinstance(item, torch.optim.Optimizer):
                optimizers.append(item)
            elif isinstance(item, Mapping) and isinstance(item.get("optimizer"), torch.optim.Optimizer):
                unknown = set(item) - {"optimizer", "lr_scheduler", "monitor"}
                if unknown:
                    raise ValueError(f"configure_optimizers dict has unknown keys {sorted(unknown)}")
                optimizers.append(item["optimizer"])
                if item.get("lr_scheduler") is not None:
                    sched = item["lr_scheduler"]
                    if item.get("monitor") and not isinstance(sched, Mapping):
                        sched = {"scheduler": sched, "monitor": item["monitor"]}
                    schedulers.append(_scheduler(sched))
            else:
                break
        else:
            return optimizers, schedulers
    raise TypeError(
        f"configure_optimizers() returned {result!r}; return an optimizer, a list of optimizers, "
        "or a dict {'optimizer': opt, 'lr_scheduler': scheduler_or_dict}"
    )


def step_schedulers(schedulers: list[Scheduler], interval: str, count: int, metrics: Mapping[str, float]) -> None:
    """Step the schedulers of ``interval`` that are due at ``count`` (1-based)."""
    for s in schedulers:
        if s.interval != interval or count % s.frequency:
            continue
        if s.monitor is not None:
            if s.monitor not in metrics:
                raise KeyError(
                    f"LR scheduler monitors {s.monitor!r}, which is not among the metrics {sorted(metrics)}; "
                    "return it from a step or fix 'monitor'"
                )
            s.scheduler.step(metrics[s.monitor])
        else:
            s.scheduler.step()
