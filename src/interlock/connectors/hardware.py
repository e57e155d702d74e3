"""Resolve ``accelerator``, ``devices``, ``strategy`` and ``precision`` flags into plugins."""

from __future__ import annotations

from typing import Any

import attrs
import torch

from interlock.accelerators.base import Accelerator
from interlock.accelerators.registry import select_accelerator
from interlock.plugins.precision import Precision, precision_plugin
from interlock.plugins.strategy import SingleDevice, Strategy

__all__ = ["STRATEGIES", "Hardware", "resolve_hardware"]

STRATEGIES = ("auto", "single_device", "ddp", "ddp_spawn", "fsdp")


@attrs.define
class Hardware:
    """The chosen setup; ``describe()`` states it once at start."""

    accelerator: Accelerator
    devices: list[int]
    precision: Precision
    strategy: Strategy

    @property
    def device(self) -> torch.device:
        return self.accelerator.device(self.devices[0])

    def describe(self) -> str:
        return (
            f"interlock: accelerator={self.accelerator.name} devices={self.devices} "
            f"strategy={self.strategy.name} precision={self.precision.flag}"
        )


def resolve_hardware(accelerator: Any, devices: Any, strategy: str, precision: Any) -> Hardware:
    """Validate the combination; raise ``ValueError`` naming the flag and the fix."""
    acc = select_accelerator(accelerator)
    indices = acc.parse_devices(devices)
    prec = precision_plugin(precision)
    if strategy not in STRATEGIES:
        raise ValueError(
            f"Trainer(strategy={strategy!r}) is invalid: choose one of {', '.join(repr(s) for s in STRATEGIES)}"
        )
    for dtype in {prec.param_dtype, prec.compute_dtype} - {None}:
        if not acc.supports_dtype(dtype):  # type: ignore[arg-type]
            raise ValueError(
                f"Trainer(precision={prec.flag!r}) needs {dtype}, which accelerator={acc.name!r} does not support; "
                "choose another precision (e.g. '32-true') or accelerator"
            )
    if strategy == "auto":
        strategy = "ddp" if len(indices) > 1 else "single_device"
    if strategy == "single_device" and len(indices) > 1:
        raise ValueError(
            f"Trainer(strategy='single_device') runs on one device but devices={devices!r} selects {len(indices)}; "
            "use strategy='ddp' or devices=1"
        )
    prec.setup(acc.device(indices[0]).type)
    return Hardware(acc, indices, prec, build_strategy(strategy, len(indices)))


def build_strategy(name: str, num_devices: int) -> Strategy:
    """The strategy plugin for a resolved ``strategy`` flag."""
    if name == "single_device":
        return SingleDevice()
    raise ValueError(f"Trainer(strategy={name!r}) is not available yet; use strategy='single_device'")
