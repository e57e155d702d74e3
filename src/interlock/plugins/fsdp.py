"""Fully sharded data parallel (``"fsdp"``): FSDP2 ``fully_shard`` over every rank of the group.

Processes come from the same places as for ``"ddp"`` (see :mod:`interlock.plugins.ddp`).
The module's steps are wrapped in one root :class:`~interlock.plugins.ddp.StepModule`
that is sharded (after any submodules ``shard`` selects), so parameters are
gathered around every step whether or not the step calls ``self(...)``.

With ``strategy="fsdp_sharded"`` checkpoints are sharded directories instead
(:mod:`interlock.plugins.sharded_io`): each rank writes its own shards, nothing is gathered.

Otherwise checkpoints hold *full* state dicts, gathered to rank 0 on the CPU, with the
optimizer state keyed by integer ids as ``torch.optim`` writes it: an FSDP
checkpoint is an ordinary interlock checkpoint that loads into a single-device
run, and the other way round.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from interlock.plugins.ddp import STEP_NAMES, AsyncVote, DDPStrategy, StepModule, collectives
from interlock.plugins.environments import ClusterEnvironment
from interlock.plugins.strategy import Distributed

__all__ = ["FSDPStrategy"]

_GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)
_SCATTER = StateDictOptions(full_state_dict=True)


class FSDPStrategy(DDPStrategy):
    """Parameters, gradients and optimizer state sharded across ranks.

    ``shard(submodule)`` picks submodules to shard as their own units (each
    gathered only while it runs); by default the whole module is one unit.
    """

    name = "fsdp"
    shards_module = True

    #: Precision flags FSDP cannot honour, with the reason (checked when the flags are resolved).
    unsupported_precision = {
        "16-mixed": "the gradient scaler would see only this rank's shard of the gradients, "
        "so ranks could disagree on skipping a step",
    }

    def release(self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Nothing: sharded parameters stay where they are (Lightning's FSDP teardown keeps them too)."""

    def __init__(
        self,
        num_devices: int = 1,
        environment: ClusterEnvironment | None = None,
        shard: Callable[[torch.nn.Module], bool] | None = None,
        sharded_checkpoint: bool = False,
    ) -> None:
        super().__init__(num_devices, environment, sharded_checkpoint)
        self.shard = shard
        self._root: StepModule | None = None

    def setup_module(self, module: torch.nn.Module, device: torch.device) -> Distributed:
        """Shard ``module`` (once: a module sharded by an earlier stage is reused) with rank 0's weights."""
        root = self._root
        if root is None or root.module is not module:
            root = self._root = self._shard(module, device)
        steps: dict[str, Callable[..., Any]] = {name: functools.partial(root, name) for name in STEP_NAMES}
        reduce_metrics, agree = collectives(self.world_size, device)
        vote = AsyncVote(device) if self.world_size > 1 else None
        return Distributed(self.world_size, self.global_rank, steps, reduce_metrics, agree, vote)

    def _shard(self, module: torch.nn.Module, device: torch.device) -> StepModule:
        if any(isinstance(p, DTensor) for p in module.parameters()):
            raise ValueError(
                f"{type(module).__name__} is already sharded by another FSDP setup; pass a fresh module or reuse "
                "the trainer that sharded it"
            )
        if self.world_size > 1:
            for tensor in module.state_dict().values():
                dist.broadcast(tensor, src=0)
        mesh = init_device_mesh(device.type, (self.world_size,))
        if self.shard is not None:
            for sub in reversed(list(module.modules())):
                if sub is not module and self.shard(sub):
                    fully_shard(sub, mesh=mesh)
        root = StepModule(module)
        fully_shard(root, mesh=mesh)
        return root

    # -- full state dicts -----------------------------------------------------------
    def model_state_dict(self, module: torch.nn.Module) -> dict[str, Any]:
        return get_model_state_dict(module, options=_GATHER)

    def optimizer_state_dict(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        # torch types the value as one union for both keys; "state" holds a dict, "param_groups" a list
        state: dict[str, Any] = get_optimizer_state_dict(module, optimizer, options=_GATHER)
        if not state:
            return state
        ids = {name: i for i, name in enumerate(n for group in state["param_groups"] for n in group["params"])}
        return {
            "state": {ids[name]: value for name, value in state["state"].items()},
            "param_groups": [{**g, "params": [ids[n] for n in g["params"]]} for g in state["param_groups"]],
        }

    def load_model_state_dict(self, module: torch.nn.Module, state: Mapping[str, Any], strict: bool = True) -> None:
        options = _SCATTER if strict else StateDictOptions(full_state_dict=True, strict=False)
        set_model_state_dict(module, dict(state), options=options)

    def load_optimizer_state_dict(
        self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
    ) -> None:
        if not any(isinstance(v, torch.Tensor) and v.dim() > 0 for s in state["state"].values() for v in s.values()):
            optimizer.load_state_dict(dict(state))  # no tensors to shard (e.g. SGD without momentum)
            return
        names = {id(p): name for name, p in module.named_parameters()}
        order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
        by_name: dict[str, Any] = {
            "state": {order[int(i)]: value for i, value in state["state"].items()},
            "param_groups": [{**g, "params": [order[int(i)] for i in g["params"]]} for g in state["param_groups"]],
        }
        set_optimizer_state_dict(module, optimizer, by_name, options=_SCATTER)
