"""Resolve ``accelerator``, ``devices``, ``strategy`` and ``precision`` flags into plugins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch

from interlock.accelerators.base import Accelerator
from interlock.accelerators.registry import select_accelerator
from interlock.plugins.ddp import DDPSpawnStrategy, DDPStrategy
from interlock.plugins.environments import ClusterEnvironment, LocalEnvironment, detect_environment
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
        """The device of this process: the selected device at its local rank."""
        return self.accelerator.device(self.devices[self.strategy.local_rank])

    def describe(self) -> str:
        return (
            f"interlock: accelerator={self.accelerator.name} devices={self.devices} "
            f"strategy={self.strategy.describe()} precision={self.precision.flag}"
        )


def resolve_hardware(
    accelerator: Any, devices: Any, strategy: str, precision: Any, environ: Mapping[str, str] | None = None
) -> Hardware:
    """Validate the combination; raise ``ValueError`` naming the flag and the fix.

    ``environ`` (default ``os.environ``) tells whether a launcher such as torchrun or
    SLURM started this process; ``strategy='auto'`` then picks ``'ddp'``.
    """
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
    env = detect_environment(environ) if strategy != "single_device" else LocalEnvironment(environ)
    launched = env.creates_processes_externally and env.world_size() > 1
    if strategy == "auto":
        strategy = "ddp" if len(indices) > 1 or launched else "single_device"
    if strategy == "single_device" and len(indices) > 1:
        raise ValueError(
            f"Trainer(strategy='single_device') runs on one device but devices={devices!r} selects {len(indices)}; "
            "use strategy='ddp' or devices=1"
        )
    if strategy == "fsdp" and prec.flag in _fsdp().unsupported_precision:
        raise ValueError(
            f"Trainer(strategy='fsdp', precision={prec.flag!r}) is not supported: "
            f"{_fsdp().unsupported_precision[prec.flag]}; use precision='bf16-mixed', '32-true' or a '*-true' flag"
        )
    if strategy == "ddp_spawn" and launched:
        raise ValueError(
            f"Trainer(strategy='ddp_spawn') starts its own processes, but {env.name} already started "
            f"{env.world_size()}; use strategy='ddp' under an external launcher"
        )
    if strategy in ("ddp", "fsdp") and env.creates_processes_externally and env.local_rank() >= len(indices):
        raise ValueError(
            f"Trainer(devices={devices!r}) selects {len(indices)} device(s), but {env.name} started this process "
            f"as local rank {env.local_rank()}; pass devices= the number of processes per node"
        )
    prec.setup(acc.device(indices[0]).type)
    return Hardware(acc, indices, prec, build_strategy(strategy, len(indices), env))


def build_strategy(name: str, num_devices: int, environment: ClusterEnvironment | None = None) -> Strategy:
    """The strategy plugin for a resolved ``strategy`` flag; ``environment`` says who starts the processes."""
    if name == "single_device":
        return SingleDevice()
    if name == "ddp":
        return DDPStrategy(num_devices, environment)
    if name == "ddp_spawn":
        return DDPSpawnStrategy(num_devices)
    if name == "fsdp":
        return _fsdp()(num_devices, environment)
    raise ValueError(f"Trainer(strategy={name!r}) is invalid: choose one of {', '.join(repr(s) for s in STRATEGIES)}")


def _fsdp() -> Any:
    """The FSDP strategy class, imported on demand (torch.distributed.checkpoint is slow to import)."""
    from interlock.plugins.fsdp import FSDPStrategy

    return FSDPStrategy
