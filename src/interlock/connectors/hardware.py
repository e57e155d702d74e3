"""Resolve ``accelerator``, ``devices``, ``strategy`` and ``precision`` flags into plugins."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch

from interlock.accelerators.registry import select_accelerator
from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.optim import accumulation
from interlock.core.module import Module, overrides
from interlock.core.registry import Action, Registry
from interlock.core.run import Run
from interlock.core.slots import DeviceSlot, DistSlot, Fill, OptimSlot
from interlock.core.updates import SetRunInfo
from interlock.plugins.ddp import DDPSpawnStrategy, DDPStrategy
from interlock.plugins.environments import ClusterEnvironment, LocalEnvironment, detect_environment
from interlock.plugins.precision import precision_plugin
from interlock.plugins.strategy import SingleDevice, Strategy

__all__ = ["STRATEGIES", "HardwareSlot", "register", "resolve_hardware"]

STRATEGIES = ("auto", "single_device", "ddp", "ddp_sharded", "ddp_spawn", "fsdp", "fsdp_sharded")


def resolve_hardware(
    accelerator: Any, devices: Any, strategy: str, precision: Any, environ: Mapping[str, str] | None = None
) -> HardwareSlot:
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
    if strategy in ("fsdp", "fsdp_sharded") and prec.flag in _fsdp().unsupported_precision:
        raise ValueError(
            f"Trainer(strategy='fsdp', precision={prec.flag!r}) is not supported: "
            f"{_fsdp().unsupported_precision[prec.flag]}; use precision='bf16-mixed', '32-true' or a '*-true' flag"
        )
    if strategy == "ddp_spawn" and launched:
        raise ValueError(
            f"Trainer(strategy='ddp_spawn') starts its own processes, but {env.name} already started "
            f"{env.world_size()}; use strategy='ddp' under an external launcher"
        )
    external = env.creates_processes_externally
    if strategy in ("ddp", "ddp_sharded", "fsdp", "fsdp_sharded") and external and env.local_rank() >= len(indices):
        raise ValueError(
            f"Trainer(devices={devices!r}) selects {len(indices)} device(s), but {env.name} started this process "
            f"as local rank {env.local_rank()}; pass devices= the number of processes per node"
        )
    prec.setup(acc.device(indices[0]).type)
    return HardwareSlot(acc, indices, prec, build_strategy(strategy, len(indices), env))


def build_strategy(name: str, num_devices: int, environment: ClusterEnvironment | None = None) -> Strategy:
    """The strategy plugin for a resolved ``strategy`` flag; ``environment`` says who starts the processes."""
    if name == "single_device":
        return SingleDevice()
    if name in ("ddp", "ddp_sharded"):
        return DDPStrategy(num_devices, environment, sharded_checkpoint=name == "ddp_sharded")
    if name == "ddp_spawn":
        return DDPSpawnStrategy(num_devices)
    if name in ("fsdp", "fsdp_sharded"):
        strategy: Strategy = _fsdp()(num_devices, environment, sharded_checkpoint=name == "fsdp_sharded")
        return strategy
    raise ValueError(f"Trainer(strategy={name!r}) is invalid: choose one of {', '.join(repr(s) for s in STRATEGIES)}")


def _fsdp() -> Any:
    """The FSDP strategy class, imported on demand (torch.distributed.checkpoint is slow to import)."""
    from interlock.plugins.fsdp import FSDPStrategy

    return FSDPStrategy


_DATAHOOK_BASES = ("LightningDataModule", "DataHooks", "DataModule")
_TRANSFER = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def transfer_hooks(module: Any, datamodule: Any) -> tuple[Callable[..., Any], ...] | None:
    """Lightning's three batch-transfer hooks, each the data module's when it defines it, else the module's.

    ``None`` when neither overrides any of them (batches then take the plain path).
    """
    chosen: list[Callable[..., Any]] = []
    for name in _TRANSFER:
        own = getattr(type(datamodule), name, None)
        if callable(own) and getattr(own, "__qualname__", "").split(".")[0] not in _DATAHOOK_BASES:
            chosen.append(getattr(datamodule, name))
        elif overrides(module, name):
            chosen.append(getattr(module, name))
        else:
            chosen.append(getattr(Module, name).__get__(module))
    if all(getattr(fn, "__func__", None) is getattr(Module, name) for fn, name in zip(chosen, _TRANSFER, strict=True)):
        return None
    return tuple(chosen)


def _with_hooks(
    hooks: tuple[Callable[..., Any], ...], device: torch.device, convert: Callable[[Any], Any] | None
) -> Callable[..., Any]:
    before, transfer, after = hooks

    def prepare(batch: Any, dataloader_idx: int = 0) -> Any:
        batch = after(transfer(before(batch, dataloader_idx), device, dataloader_idx), dataloader_idx)
        return batch if convert is None else convert(batch)

    return prepare


def register(reg: Registry) -> None:
    """The plugins' actions, dispatched by the chart: ``accelerator.*``, ``strategy.*``, ``precision.*``."""
    reg.slot("hardware", HardwareSlot, owner=__name__)

    @reg.action("accelerator.setup", writes=("device",), reads=("hardware",))
    def accelerator_setup(run: Run, params: Mapping[str, Any]) -> Action:
        """Select this process's device; batches are moved to it when it is not the CPU (fills ``device``)."""

        def act() -> Fill:
            hw: HardwareSlot = run.slot(HardwareSlot)
            device = hw.device
            hw.accelerator.setup_device(device)
            move = None if device.type == "cpu" else (lambda batch: hw.accelerator.move_to_device(batch, device))
            convert = hw.precision.input_converter()
            custom = transfer_hooks(run.module, run.plan.datamodule)
            prepare: Callable[..., Any] | None
            if custom is not None:  # Lightning's batch hooks: before transfer -> transfer -> after transfer
                prepare = _with_hooks(custom, device, convert)
            elif move is not None and convert is not None:
                prepare = lambda batch, dataloader_idx=0: convert(move(batch))  # noqa: E731
            else:
                plain = move or convert
                prepare = None if plain is None else (lambda batch, dataloader_idx=0: plain(batch))
            return Fill(DeviceSlot(device, prepare))

        return act

    @reg.action("strategy.setup_environment", reads=("hardware",))
    def setup_environment(run: Run, params: Mapping[str, Any]) -> Action:
        """Join the process group (DDP/FSDP) on the accelerator's backend."""

        def act() -> SetRunInfo:
            hw: HardwareSlot = run.slot(HardwareSlot)
            hw.strategy.setup_environment(run.device, hw.accelerator.default_backend())
            return SetRunInfo(global_rank=hw.strategy.global_rank, world_size=hw.strategy.world_size)

        return act

    @reg.action("precision.convert_module", reads=("hardware",))
    def convert_module(run: Run, params: Mapping[str, Any]) -> Action:
        """Move the module to the device and cast it to the precision's parameter dtype."""

        def act() -> None:
            run.module = run.slot(HardwareSlot).precision.convert_module(run.module.to(run.device))

        return act

    @reg.action("strategy.setup_module", writes=("dist",), reads=("hardware",))
    def setup_module(run: Run, params: Mapping[str, Any]) -> Action:
        """Wrap the module as the strategy needs (DDP, FSDP), filling ``dist``; say which hardware runs the stage."""

        def act() -> Fill:
            hw: HardwareSlot = run.slot(HardwareSlot)
            dist = hw.strategy.setup_module(run.module, run.device)
            if run.stage == "fit" and hw.strategy.is_global_zero:
                print(hw.describe(), file=sys.stderr)
            return Fill(DistSlot(dist, dict(dist.steps)))

        return act

    @reg.action("precision.backward", reads=("hardware",))
    def backward(run: Run, params: Mapping[str, Any]) -> Action:
        """Backpropagate the step's loss (scaled for 16-mixed, divided by accumulate_grad_batches).

        Through the module's ``backward(loss)`` when it overrides it (Lightning's hook).
        """
        module: Any = run.module  # a Lightning-style module: its backward(loss) hook
        own: Callable[..., None] | None = module.backward if overrides(module, "backward") else None
        scheduled = accumulation(run)
        every = run.config.accumulate_grad_batches if scheduled is None else scheduled
        return run.slot(HardwareSlot).precision.backward_action(run.step, every, own)

    @reg.action("strategy.release", reads=("hardware",))  # and the optimizers, when the stage has any
    def release(run: Run, params: Mapping[str, Any]) -> Action:
        """Move the module and its optimizers' state back to the CPU (Lightning's teardown; FSDP keeps its shards)."""

        def act() -> None:
            if run.device.type != "cpu":
                optim = run.slots.get(OptimSlot)
                run.slot(HardwareSlot).strategy.release(run.module, optim.optimizers if optim else ())

        return act

    @reg.action("strategy.teardown", writes=("dist",), reads=("hardware",))
    def strategy_teardown(run: Run, params: Mapping[str, Any]) -> Action:
        """Release the strategy's wrappers now, not at interpreter exit (the process group stays for the next stage)."""

        def act() -> Fill:
            run.steps.clear()  # the DDP/FSDP wrapper and its reducer die here, while the process group is alive
            run.slot(HardwareSlot).strategy.teardown()
            return Fill(DistSlot())

        return act

    @reg.action("accelerator.teardown", reads=("hardware",))
    def accelerator_teardown(run: Run, params: Mapping[str, Any]) -> Action:
        """Release what the accelerator holds."""
        return run.slot(HardwareSlot).accelerator.teardown
