"""The ``hardware`` slot: the accelerator, precision and strategy plugins a trainer chose.

The trainer builds it (``resolve_hardware``) and every run starts with it filled, so the
actions that declare ``reads=("hardware",)`` are bound at once.
"""

from __future__ import annotations

import attrs
import torch

from interlock.accelerators.base import Accelerator
from interlock.plugins.precision import Precision
from interlock.plugins.strategy import Strategy

__all__ = ["HardwareSlot"]


@attrs.define
class HardwareSlot:
    """The chosen plugins (owner: ``hardware``): the trainer builds it and each run starts with it filled.

    ``describe()`` states the setup once at start.
    """

    accelerator: Accelerator
    devices: list[int]
    precision: Precision
    strategy: Strategy

    @property
    def device(self) -> torch.device:
        """The device of this process: the selected device at its local rank."""
        return self.accelerator.device(self.devices[self.strategy.local_rank])

    def describe(self) -> str:
        return (
            f"interlock: accelerator={self.accelerator.name} devices={self.devices} "
            f"strategy={self.strategy.describe()} precision={self.precision.flag}"
        )
