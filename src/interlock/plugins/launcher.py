"""Start the processes of a job on this machine, run a function in each, and bring rank 0's result back.

Processes are started with the ``fork`` start method, so the function may be any
closure (a trainer's bound call included): nothing is pickled on the way in.
Rank 0's return value comes back through a file written with ``torch.save``,
its tensors moved to the CPU first, so a parent that never touched an
accelerator does not have to start one to read it. A failure in any process
stops the others and is raised in the caller with that process's traceback.

Fork is why the parent must not have initialized CUDA (or a process group)
before launching, the same rule as for Lightning's ``ddp_fork``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from interlock.plugins.environments import LocalEnvironment
from interlock.plugins.precision import apply_to_tensors

__all__ = ["ForkLauncher"]


class ForkLauncher:
    """Runs ``fn(rank)`` in ``num_processes`` forked processes that rendezvous on ``environment``'s address."""

    start_method = "fork"

    def __init__(self, num_processes: int, environment: LocalEnvironment | None = None) -> None:
        if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
            raise ValueError(f"num_processes={num_processes!r} must be an int >= 1")
        self.num_processes = num_processes
        self.environment = environment if environment is not None else LocalEnvironment()

    def launch(self, fn: Callable[[int], Any]) -> Any:
        """Run ``fn(rank)`` in every process; return what rank 0 returned."""
        if self.start_method not in mp.get_all_start_methods():
            raise RuntimeError(
                f"launching processes needs the {self.start_method!r} start method, which this platform lacks; "
                "start the processes with torchrun and use strategy='ddp'"
            )
        address, port = self.environment.main_address(), self.environment.main_port()
        threads = max(1, (os.cpu_count() or 1) // self.num_processes)
        with tempfile.TemporaryDirectory(prefix="interlock-launch-") as tmp:
            out = Path(tmp) / "rank0.pt"
            mp.start_processes(
                _run_child,
                args=(fn, self.num_processes, address, port, threads, str(out)),
                nprocs=self.num_processes,
                join=True,
                start_method=self.start_method,
            )
            return torch.load(out, map_location="cpu", weights_only=False)


def _run_child(
    rank: int, fn: Callable[[int], Any], world_size: int, address: str, port: int, threads: int, out: str
) -> None:
    """Body of one launched process: its rendezvous variables, then ``fn``; rank 0 writes the result."""
    os.environ.update(
        MASTER_ADDR=address,
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world_size),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    torch.set_num_threads(threads)
    result = fn(rank)
    if rank == 0:
        torch.save(apply_to_tensors(result, lambda t: t.detach().cpu()), out)
