"""``RUN/trainer.json``: the trainer a fit ran with, recorded so that a replay needs only module and data.

Written by ``rundir.claim`` at the start of every fit (rank 0; atomically; a later fit of the run
replaces it): the loop flags (:class:`~interlock.core.config.TrainerConfig`), the seed, the hardware
(accelerator, devices, strategy, precision, world size), whether torch's deterministic algorithms
were on, and the class names of the listeners and callbacks (a replay cannot rebuild them; it names
them when it diverges). The chart is ``RUN/chart.yaml``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import attrs
import torch

from interlock.connectors.hardware_slot import HardwareSlot
from interlock.core.config import TrainerConfig
from interlock.core.run import Run

__all__ = ["RECIPE_FILE", "read_recipe", "record_recipe", "trainer_kwargs"]

RECIPE_FILE = "trainer.json"
FORMAT = "interlock.trainer/1"


def recipe_of(run: Run) -> dict[str, Any]:
    """What ``RUN/trainer.json`` holds for ``run`` (plain JSON data)."""
    hw = run.slot(HardwareSlot)
    return {
        "format": FORMAT,
        "config": attrs.asdict(run.plan.config),
        "seed": run.plan.seed,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "accelerator": hw.accelerator.name,
        "devices": len(hw.devices),
        "strategy": hw.strategy.name,
        "precision": hw.precision.flag,
        "world_size": hw.strategy.world_size,
        "listeners": [type(x).__qualname__ for x in run.listeners],
        "callbacks": [type(x).__qualname__ for x in run.callbacks],
    }


def record_recipe(run_dir: Path, run: Run) -> None:
    """Write ``run_dir/trainer.json`` for ``run`` (atomically)."""
    text = json.dumps(recipe_of(run), indent=1, default=repr)
    fd, tmp = tempfile.mkstemp(prefix=".trainer-", suffix=".tmp", dir=run_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, run_dir / RECIPE_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_recipe(run_dir: Path) -> dict[str, Any]:
    """The recorded trainer of ``run_dir``; ``FileNotFoundError`` naming what to do when there is none."""
    file = run_dir / RECIPE_FILE
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{file} does not exist: the run was made by an interlock that did not record its trainer, or it is "
            "not a fit's run directory; pass the run directory of a fit (RUN, holding events.jsonl and trainer.json)"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{file} is not a trainer record of this interlock (format {FORMAT!r})")
    return data


def trainer_kwargs(recipe: dict[str, Any]) -> dict[str, Any]:
    """The :class:`~interlock.Trainer` flags of a recorded run (the loop flags, seed and precision)."""
    config = {k: v for k, v in recipe["config"].items() if k in attrs.fields_dict(TrainerConfig)}
    return {**config, "seed": recipe.get("seed"), "precision": recipe.get("precision", "32-true")}
