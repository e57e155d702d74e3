"""Strategies: how a run is spread over processes. Plugins, so they work on every accelerator.

A strategy is told the device and the collective backend by the layer above;
it never asks which hardware it runs on. The fit/evaluation loops use what
:meth:`Strategy.setup` returns: step callables (through a DDP/FSDP wrapper
when there is one), a metric reducer, a flag agreement, and data sharding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

__all__ = ["Distributed", "SingleDevice", "Strategy"]


@attrs.define
class Distributed:
    """What the loops need from a strategy: all plain callables and numbers."""

    world_size: int = 1
    rank: int = 0
    steps: dict[str, Callable[..., Any]] = attrs.field(factory=dict)
    reduce_metrics: Callable[[dict[str, float]], dict[str, float]] | None = None
    agree: Callable[[bool], bool] | None = None
    #: non-blocking per-batch vote on ``(stop, preempt)``: returns the previous batch's agreed flags
    vote: Any = None

    @property
    def is_global_zero(self) -> bool:
        return self.rank == 0


class Strategy:
    """Base: one process, one device.

    The state-dict hooks let a strategy that shards the module (FSDP) gather full
    state dicts for checkpoints and scatter them back on resume; by default they
    are the plain ``state_dict``/``load_state_dict`` calls.
    """

    name = "single_device"
    #: Write checkpoints as sharded directories through ``torch.distributed.checkpoint`` (``"fsdp_sharded"``).
    sharded_checkpoint = False
    #: The module's parameters are sharded: a forward pass needs every process (no rank-0-only pass).
    shards_module = False

    def __init__(self) -> None:
        self.world_size = 1
        self.global_rank = 0
        self.local_rank = 0
        self._sharded_io: Any = None

    def sharded_io(self) -> Any:
        """The :class:`~interlock.plugins.sharded_writer.ShardedCheckpointIO` of this strategy's sharded saves.

        Made at the first sharded save (it owns the background writer and its process group).
        """
        if self._sharded_io is None:
            from interlock.plugins.sharded_writer import ShardedCheckpointIO

            self._sharded_io = ShardedCheckpointIO(background=True)
        return self._sharded_io

    def wait_for_checkpoints(self) -> None:
        """Block until every sharded save of this strategy is in place; raise the first that failed."""
        if self._sharded_io is not None:
            self._sharded_io.wait()

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def launches_processes(self) -> bool:
        """Whether :meth:`launch` runs ``fn`` in new processes (so the caller's objects do not train)."""
        return False

    def describe(self) -> str:
        """The strategy as one short phrase for the start-up line."""
        return self.name

    def launch(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` in every process of the job (this one, for in-process strategies); return rank 0's result."""
        return fn(*args)

    def model_state_dict(self, module: torch.nn.Module) -> dict[str, Any]:
        """The module's full (unsharded) state dict; may be empty on ranks other than 0."""
        return module.state_dict()

    def optimizer_state_dict(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's full state dict in ``torch.optim`` form (integer parameter ids)."""
        return optimizer.state_dict()

    def load_model_state_dict(self, module: torch.nn.Module, state: Mapping[str, Any], strict: bool = True) -> None:
        """Load a full state dict (as :meth:`model_state_dict` returns) into ``module`` (``strict``: torch's)."""
        module.load_state_dict(state, strict=strict)

    def load_optimizer_state_dict(
        self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
    ) -> None:
        """Load a full optimizer state dict (as :meth:`optimizer_state_dict` returns)."""
        optimizer.load_state_dict(dict(state))

    def sharded_state(self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> dict[str, Any]:
        """Model and optimizer state as this rank holds it (DTensor shards under FSDP), keyed by parameter name.

        What a sharded checkpoint saves, and the template it is loaded into (DCP loads in place).
        """
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        return {
            "model": get_model_state_dict(module),
            "optimizers": [get_optimizer_state_dict(module, o) for o in optimizers],
        }

    def load_sharded(self, path: str, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Load a sharded checkpoint directory's model (and optimizer) state, resharded to this run's ranks."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

        from interlock.plugins.sharded_io import load_tensors

        state = self.sharded_state(module, optimizers)
        if not optimizers:  # validate/test/predict: the weights only (an empty list is not what a fit saved)
            del state["optimizers"]
        load_tensors(path, state)
        set_model_state_dict(module, state["model"])
        for optimizer, saved in zip(optimizers, state.get("optimizers", []), strict=True):
            set_optimizer_state_dict(module, optimizer, saved)

    def setup_environment(self, device: torch.device, backend: str) -> None:
        """Join the process group (no-op for one process)."""

    def setup_module(self, module: torch.nn.Module, device: torch.device) -> Distributed:
        """Wrap ``module`` as the strategy needs; return the loops' view of the strategy."""
        return Distributed(self.world_size, self.global_rank)

    def barrier(self) -> None:
        """Wait for every process (no-op for one process)."""

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """``obj`` as process ``src`` has it (Lightning's ``Strategy.broadcast``); itself in one process."""
        return obj

    def teardown(self) -> None:
        """Release what :meth:`setup_module` made (wrappers); a process group stays for the next stage."""

    def release(self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Move ``module`` and its optimizers' state back to the CPU at the end of a stage (Lightning's teardown).

        The device's memory is free again, and the module you hold runs on CPU tensors after ``fit``.
        """
        cpu = torch.device("cpu")
        module.to(cpu)
        for optimizer in optimizers:
            for state in optimizer.state.values():
                for key, value in state.items():
                    if key != "step" and isinstance(value, torch.Tensor):  # as Lightning: a fused step stays
                        state[key] = value.to(cpu)


class SingleDevice(Strategy):
    """The default: everything in this process."""
