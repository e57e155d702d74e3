"""Data-parallel strategies: ``"ddp"`` (processes started by a launcher) and ``"ddp_spawn"`` (started here).

Where the processes come from:

* ``"ddp"`` under torchrun, SLURM ``srun`` or plain ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``
  variables: every process runs the script; ranks come from :func:`detect_environment`.
* ``"ddp"`` with ``devices > 1`` and no such launcher: interlock forks the processes itself, exactly as
  ``"ddp_spawn"`` does, and says so on stderr (Lightning would re-run the script instead; forking keeps
  the caller's objects and works in notebooks).
* ``"ddp"`` with one device and no launcher: a process group of one.
* ``"ddp_sharded"``: ``"ddp"`` whose checkpoints are sharded directories
  (:mod:`interlock.plugins.sharded_writer`): each rank writes a part, in the background.
* ``"ddp_spawn"``: always forks ``devices`` processes (:class:`~interlock.plugins.launcher.ForkLauncher`);
  the caller gets rank 0's result.

The group is joined with ``init_method="env://"`` using the address the cluster
environment gives, on the backend the layer above chooses, and kept for later
stages in the same process. Training steps run through
:class:`~torch.nn.parallel.DistributedDataParallel` so gradients are averaged;
evaluation steps call the module directly (no gradients to sync, and no
per-batch buffer broadcast that would deadlock on uneven evaluation data).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from interlock.plugins.environments import ClusterEnvironment, LocalEnvironment
from interlock.plugins.group_exit import destroy_group_at_exit
from interlock.plugins.launcher import ForkLauncher
from interlock.plugins.strategy import Distributed, Strategy

__all__ = ["STEP_NAMES", "DDPSpawnStrategy", "DDPStrategy", "StepModule", "collectives"]

STEP_NAMES = ("training_step", "validation_step", "test_step", "predict_step")


class StepModule(torch.nn.Module):
    """Routes a wrapper's ``forward`` to a module's step: ``StepModule(m)("training_step", batch, idx)``.

    DDP and FSDP act on ``forward``; wrapping the steps this way puts them
    through the wrapper's hooks without asking the module to call ``self(...)``.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, step: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.module, step)(*args, **kwargs)


def collectives(
    world_size: int, device: torch.device
) -> tuple[Callable[[dict[str, float]], dict[str, float]], Callable[[bool], bool]]:
    """``reduce_metrics`` (mean over ranks, one all-reduce) and ``agree`` (true if any rank says so)."""

    def reduce_metrics(metrics: dict[str, float]) -> dict[str, float]:
        keys = sorted(metrics)
        if world_size == 1 or not keys:
            return dict(metrics)
        values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64, device=device)
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return dict(zip(keys, (values / world_size).tolist(), strict=True))

    def agree(flag: bool) -> bool:
        if world_size == 1:
            return flag
        value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    return reduce_metrics, agree


class AsyncVote:
    """A non-blocking vote across ranks on ``(stop, preempt)``, one small collective every few batches.

    At a vote batch each rank starts an all-reduce (MAX) of its flags and of its mean
    batch time since the previous vote; at the next batch end it reads the agreed
    result, which has had a whole training step to arrive. Every rank gets the same
    answer at the same batch, so all stop together, and no rank blocks on a collective.

    The first vote is ``every`` batches in. After each vote all ranks take the same
    next interval from the agreed (slowest) batch time: about ``latency`` seconds of
    batches, at least 1 and at most ``max_every``. A request therefore acts within
    about ``latency`` seconds plus one batch, and fast steps pay for one all-reduce
    every ``max_every`` batches.
    """

    def __init__(self, device: torch.device, every: int = 8, latency: float = 0.5, max_every: int = 256) -> None:
        if every < 1 or max_every < every or latency <= 0:
            raise ValueError(
                f"AsyncVote(every={every}, max_every={max_every}, latency={latency}): "
                "need 1 <= every <= max_every and latency > 0 seconds"
            )
        self.device, self.every, self.latency, self.max_every = device, every, latency, max_every
        self._next: int | None = None  # the batch of the next vote
        self._last: tuple[int, float] | None = None  # batch and clock of the latest vote
        self._pending: tuple[Any, torch.Tensor, int] | None = None

    def __call__(self, batch: int, stop: bool, preempt: bool) -> tuple[bool, bool]:
        agreed = self.drain()
        if self._next is None:
            self._next = batch + self.every
        if batch >= self._next:
            now = time.perf_counter()
            per_batch_us = 0
            if self._last is not None:
                per_batch_us = int((now - self._last[1]) / max(batch - self._last[0], 1) * 1e6)
            self._last = (batch, now)
            flags = torch.tensor([int(stop), int(preempt), per_batch_us], dtype=torch.int64, device=self.device)
            self._pending = (dist.all_reduce(flags, op=dist.ReduceOp.MAX, async_op=True), flags, batch)
            self._next = batch + self.max_every  # replaced by the agreed interval when the vote is read
        return agreed

    def interval(self, per_batch_us: int) -> int:
        """Batches between votes for a (slowest-rank) batch time; 0 means not measured yet."""
        if per_batch_us <= 0:
            return self.every
        return max(1, min(self.max_every, int(self.latency * 1e6 / per_batch_us)))

    def drain(self) -> tuple[bool, bool]:
        """Wait for the vote in flight (if any) and return its result."""
        if self._pending is None:
            return False, False
        work, flags, started = self._pending
        self._pending = None
        work.wait()
        stop, preempt, per_batch_us = flags.tolist()
        self._next = started + self.interval(per_batch_us)
        return bool(stop), bool(preempt)


class DDPStrategy(Strategy):
    """One process per device; gradients all-reduced by ``DistributedDataParallel``."""

    name = "ddp"
    #: Fork the processes even for one device (``"ddp_spawn"``); otherwise only without an external launcher.
    always_spawns = False

    def __init__(
        self,
        num_devices: int = 1,
        environment: ClusterEnvironment | None = None,
        sharded_checkpoint: bool = False,
        **ddp_kwargs: Any,
    ) -> None:
        super().__init__()
        if sharded_checkpoint:  # "ddp_sharded": every rank writes a part of each checkpoint through DCP
            self.sharded_checkpoint = True
            self.name = f"{self.name}_sharded"
        self.num_devices = num_devices
        self.environment: ClusterEnvironment = environment if environment is not None else LocalEnvironment()
        self.ddp_kwargs = ddp_kwargs
        self._launcher: ForkLauncher | None = None
        self._forked = False
        self._device = torch.device("cpu")
        if self.environment.creates_processes_externally:
            env = self.environment
            self.world_size, self.global_rank, self.local_rank = env.world_size(), env.global_rank(), env.local_rank()
        else:
            self.world_size = num_devices
            if num_devices > 1 or self.always_spawns:
                self._launcher = ForkLauncher(num_devices, self._local_environment())

    def _local_environment(self) -> LocalEnvironment:
        env = self.environment
        return env if isinstance(env, LocalEnvironment) else LocalEnvironment()

    @property
    def launches_processes(self) -> bool:
        return self._launcher is not None

    def describe(self) -> str:
        source = "fork" if self._launcher is not None or self._forked else self.environment.name
        return f"{self.name}(world_size={self.world_size}, processes={source})"

    # -- processes ------------------------------------------------------------------
    def launch(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` here (external launcher, or one process) or in forked processes; rank 0's result."""
        if self._launcher is None:
            return fn(*args)
        if not self.always_spawns:
            print(
                f"interlock: strategy={self.name!r} with devices={self.num_devices} and no torchrun/SLURM launcher: "
                f"starting {self.num_devices} processes by fork (as 'ddp_spawn' does)",
                file=sys.stderr,
            )
        return self._launcher.launch(lambda rank: self._run_as(rank, fn, *args))

    def _run_as(self, rank: int, fn: Callable[..., Any], *args: Any) -> Any:
        """In a forked process: take rank ``rank``, then run ``fn``."""
        env = self._local_environment()
        env.set_ranks(self.num_devices, rank)
        self.environment, self._launcher, self._forked = env, None, True
        self.global_rank = self.local_rank = rank
        return fn(*args)

    def setup_environment(self, device: torch.device, backend: str) -> None:
        """Join the process group (``env://``) unless this process is in one already; align torch RNGs."""
        self._device = device
        if not dist.is_initialized():
            env = self.environment
            os.environ["MASTER_ADDR"] = env.main_address()
            os.environ["MASTER_PORT"] = str(env.main_port())
            dist.init_process_group(backend, init_method="env://", world_size=self.world_size, rank=self.global_rank)
            atexit.register(destroy_group_at_exit)
        elif dist.get_world_size() != self.world_size:
            raise RuntimeError(
                f"this process is already in a process group of {dist.get_world_size()} but strategy={self.name!r} "
                f"expects {self.world_size}; one process group per process"
            )
        self._sync_rng(device)

    def _sync_rng(self, device: torch.device) -> None:
        """Give every rank rank 0's torch RNG, so unseeded shuffles agree (a no-op when seeds already match)."""
        if self.world_size == 1:
            return
        state = torch.get_rng_state().to(device)
        dist.broadcast(state, src=0)
        torch.set_rng_state(state.cpu())

    def setup_module(self, module: torch.nn.Module, device: torch.device) -> Distributed:
        """Wrap the steps in DDP (parameters broadcast from rank 0); training steps go through it."""
        ddp = DistributedDataParallel(StepModule(module), **self.ddp_kwargs)
        steps: dict[str, Callable[..., Any]] = {name: getattr(module, name) for name in STEP_NAMES}
        steps["training_step"] = lambda *args, **kwargs: ddp("training_step", *args, **kwargs)
        reduce_metrics, agree = collectives(self.world_size, device)
        vote = AsyncVote(device) if self.world_size > 1 else None
        return Distributed(self.world_size, self.global_rank, steps, reduce_metrics, agree, vote)

    def barrier(self) -> None:
        if dist.is_initialized() and self.world_size > 1:
            dist.barrier()

    def teardown(self) -> None:
        """Free the stage's wrapper now, while the process group is alive.

        DDP's hooks keep its wrapper in reference cycles, so dropping the references is not
        enough: left to interpreter exit, the wrapper was destroyed after the group and a
        rank could die with SIGABRT ("terminate called without an active exception").
        The layer above has dropped its references; one collection frees it here.
        """
        gc.collect()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not dist.is_initialized() or self.world_size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src, device=self._device)
        return box[0]


class DDPSpawnStrategy(DDPStrategy):
    """``"ddp"`` whose processes interlock always forks itself, one per device."""

    name = "ddp_spawn"

    def __init__(self, num_devices: int = 1, **ddp_kwargs: Any) -> None:
        super().__init__(num_devices, LocalEnvironment(), **ddp_kwargs)

    always_spawns = True
