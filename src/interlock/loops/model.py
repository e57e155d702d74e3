"""What events carry about the module itself, and the effect that sets its weights.

``summary``: its layer table (the model summary); ``parameters``: its parameters, copied when a
handler reads them (``StochasticWeightAveraging``); ``device``: where it runs (``DeviceStatsMonitor``);
the ``SetParameters`` effect copies values back into them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from interlock.connectors.hardware_slot import HardwareSlot
from interlock.core.registry import Registry
from interlock.core.run import Run
from interlock.core.summary import describe
from interlock.core.updates import SetParameters

__all__ = ["register"]


def register(reg: Registry) -> None:
    """The ``summary``, ``parameters`` and ``device`` payload keys and the ``SetParameters`` effect."""

    @reg.payload_key("summary", lazy=True)
    def summary(run: Run) -> Any:
        """The module's layers, parameter counts, modes and FLOPs (a ``ModuleSummary``, built when first read).

        With an ``example_input_array`` it runs through the module once, as Lightning's summary does,
        unless the strategy shards the module (a forward pass would need every process).
        """

        def read() -> Any:
            hardware, prepare, device = run.slot(HardwareSlot), run.prepare_batch, run.device
            return describe(
                run.module,
                hardware.precision.flag,
                example=not hardware.strategy.shards_module,
                prepare=None if prepare is None else lambda batch: prepare(batch, 0),
                context=lambda: hardware.precision.autocast(device.type),
            )

        return read

    @reg.payload_key("parameters", lazy=True)
    def parameters(run: Run) -> Any:
        """The module's parameters in ``parameters()`` order (the handler gets copies)."""
        return lambda: tuple(run.module.parameters())

    @reg.payload_key("device", lazy=True)
    def device(run: Run) -> Any:
        """The device the module runs on (a ``torch.device``)."""
        return lambda: run.device

    @reg.effect(SetParameters)
    def set_parameters(run: Run) -> Callable[[Any], None]:
        """Copy values into the module's parameters (each moved to its parameter's device)."""

        def apply(update: SetParameters) -> None:
            params = list(run.module.parameters())
            if len(params) != len(update.values):
                raise ValueError(
                    f"SetParameters has {len(update.values)} values for the module's {len(params)} parameters; "
                    "give one per parameter, in module.parameters() order"
                )
            with torch.no_grad():
                for param, value in zip(params, update.values, strict=True):
                    param.detach().copy_(value.to(param.device))

        return apply
