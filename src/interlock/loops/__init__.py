"""The chart's work, grouped by owner: every action, guard, effect and payload key the built-in chart names.

There is no hand-written loop: ``statecharts/trainer.yaml`` sequences the work
and the runtime interprets it. This package assembles the registry of the
loops' own functions (``module.*``, ``eval.*``, ``schedule.*``, ``limits.*``,
``stage.*``, ``run.*``) and of the connectors and plugins below them.
"""

from __future__ import annotations

from interlock.connectors import checkpoint, data, hardware, metrics, optim, reload, rng, rundir, signals
from interlock.core.registry import Registry
from interlock.loops import evaluation, hooks, model, schedule, stage, train

__all__ = ["default_registry"]

#: Every module that registers part of the built-in chart's vocabulary, in registration order.
OWNERS = (
    stage,
    train,
    evaluation,
    hooks,
    model,
    schedule,
    data,
    reload,
    optim,
    metrics,
    checkpoint,
    rundir,
    signals,
    rng,
    hardware,
)


def default_registry() -> Registry:
    """A new registry with everything the built-in chart refers to (add your own to it freely)."""
    reg = Registry()
    for owner in OWNERS:
        owner.register(reg)
    return reg
