"""Writing sharded checkpoint directories, in the background: the loop waits only for a copy.

:class:`ShardedCheckpointIO` saves a sharded checkpoint (:mod:`interlock.plugins.sharded_io`
describes the directory) in two parts:

1. **in the caller** (the loop waits for this): every tensor of this rank's shards is copied
   to CPU memory the loop does not touch (the buffers of the last finished save are reused,
   so a steady run does not allocate), and the plain-data parts are deep-copied, so training
   may change the parameters at once;
2. **in one worker thread per process**: every rank writes its shards with ``dcp.save`` and
   its RNG file, rank 0 writes the trainer state; then rank 0 hashes every file, writes the
   manifest last and swaps the directory into place (:func:`~interlock.plugins.sharded_io.seal`).

The worker's collectives (DCP's planning, the barriers, the error exchange) run on a process
group of their own (gloo), made at the first save, so they never interleave with the
training loop's collectives. Saves run in the order they were made, on every rank;
at most ``max_pending`` are in flight, and the one beyond waits for the oldest (each holds a
copy of this rank's shards, never of the whole model). A failure on any rank fails the save
on every rank; it is raised by the next :meth:`~ShardedCheckpointIO.save`, by
:meth:`~ShardedCheckpointIO.wait` (the chart's ``checkpoint.wait`` at teardown) or by a
removal that waits for it, and the previous checkpoint of that name stays in place.
"""

from __future__ import annotations

import copy
import secrets
import shutil
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.tensor import DTensor

from interlock.core.errors import CheckpointError
from interlock.plugins.checkpoint_io import MAX_PENDING, TorchCheckpointIO, settle
from interlock.plugins.sharded_io import META, remove_sharded, seal, sweep

__all__ = ["ShardedCheckpointIO", "save_sharded"]


class _Peers:
    """The collectives a save needs, on ``group`` (``None``: the default group), or none without a process group."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.on = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(group) if self.on else 0
        self.world_size = dist.get_world_size(group) if self.on else 1
        self.src = dist.get_global_rank(group, 0) if self.on and group is not None else 0

    def broadcast(self, obj: Any) -> Any:
        if not self.on:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=self.src, group=self.group)
        return box[0]

    def gather_all(self, obj: Any) -> list[Any]:
        if not self.on:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out


class _Stager:
    """Copies a state dict's tensors to CPU buffers; the buffers of a save that finished are reused by the next."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[torch.Tensor] = []

    def stage(self, state: Any) -> tuple[Any, list[torch.Tensor]]:
        """A copy of ``state`` whose tensors the caller may change at once, and the buffers it holds."""
        with self._lock:
            pool: dict[tuple[Any, ...], list[torch.Tensor]] = {}
            for buf in self._free:
                pool.setdefault((buf.shape, buf.dtype), []).append(buf)
            self._free = []
        used: list[torch.Tensor] = []

        def copy_of(tensor: torch.Tensor) -> torch.Tensor:
            free = pool.get((tensor.shape, tensor.dtype))
            buf = free.pop() if free else torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
            buf.copy_(tensor.detach())
            used.append(buf)
            return buf

        def walk(value: Any) -> Any:
            if isinstance(value, DTensor):
                if value.to_local().device.type != "cpu":
                    return value.to("cpu")  # as DCP's own stager does (a fresh host copy)
                local = copy_of(value.to_local())
                mesh, placements = value.device_mesh, value.placements
                return DTensor.from_local(local, mesh, placements, run_check=False, shape=value.shape,
                                          stride=value.stride())  # fmt: skip
            if isinstance(value, torch.Tensor):
                return copy_of(value)
            if isinstance(value, dict):
                return {k: walk(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(walk(v) for v in value)
            return copy.deepcopy(value)

        return walk(state), used

    def release(self, buffers: list[torch.Tensor]) -> None:
        """``buffers`` were written: the next save may fill them."""
        with self._lock:
            self._free = buffers


def _first(errors: list[str | None]) -> str | None:
    return next((e for e in errors if e is not None), None)


def _write(
    target: Path, staged: dict[str, Any], meta: dict[str, Any], rank_meta: dict[str, Any], peers: _Peers
) -> None:
    """Every rank: write this save's directory and put it in place (a collective on ``peers``)."""
    rank = peers.rank
    tmp: Path | None = None
    problem: str | None = None
    if rank == 0:
        tmp = target.parent / f".{target.name[:180]}.{secrets.token_hex(6)}.tmp"
        try:
            sweep(target)  # what killed saves of this checkpoint left (one trainer writes a checkpoint path)
            tmp.mkdir(parents=True)
        except OSError as exc:
            problem = f"cannot create {tmp}: {exc.strerror or exc}"
    tmp, problem = peers.broadcast((tmp, problem))
    if problem is not None:
        raise CheckpointError(f"sharded checkpoint {target} not saved: {problem}; the previous one is kept")
    assert tmp is not None
    try:
        with warnings.catch_warnings():  # one process on purpose: DCP's "assuming ... a single process" is noise
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            writer = FileSystemWriter(tmp, sync_files=True)
            dcp.save(staged, storage_writer=writer, process_group=peers.group, no_dist=not peers.on)
        mine: str | None = None
        try:
            files = TorchCheckpointIO()
            files.save_checkpoint(rank_meta, tmp / f"rank{rank}.ckpt")
            if rank == 0:
                files.save_checkpoint(meta, tmp / META)
        except (OSError, CheckpointError) as exc:
            mine = f"rank {rank}: {exc}"
        problem = _first(peers.gather_all(mine))  # every rank's files are durable, or all learn why not
        if problem is None and rank == 0:
            try:
                seal(tmp, target, peers.world_size)
            except OSError as exc:
                problem = f"cannot put it in place: {exc.strerror or exc}"
        problem = peers.broadcast(problem)
    except BaseException:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if problem is not None:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"sharded checkpoint {target} not saved: {problem}; the previous one is kept")


class ShardedCheckpointIO:
    """Saves sharded checkpoint directories; a collective: every rank makes the same calls in the same order.

    Args:
        background: return from :meth:`save` once this rank's shards are copied, and write
            them in a worker thread; otherwise :meth:`save` returns when the checkpoint is in place.
        max_pending: the most saves in flight in background mode (each holds a copy of this
            rank's shards). Default :data:`~interlock.plugins.checkpoint_io.MAX_PENDING` (2).
    """

    def __init__(self, background: bool = True, max_pending: int = MAX_PENDING) -> None:
        if type(max_pending) is not int or max_pending < 1:
            raise ValueError(f"ShardedCheckpointIO(max_pending={max_pending!r}) must be an int of at least 1")
        self.background = background
        self.max_pending = max_pending
        self._stager = _Stager()
        self._worker: ThreadPoolExecutor | None = None
        self._peers: _Peers | None = None
        self._pending: list[tuple[Path, Future[None]]] = []  # saves and removals, in submission order

    def save(
        self, target: str | Path, tensors: dict[str, Any], meta: dict[str, Any], rank_meta: dict[str, Any]
    ) -> None:
        """Save ``tensors`` (this rank's: DTensor shards or whole tensors) and the plain parts as directory ``target``.

        ``meta`` is written by rank 0 (``meta.ckpt``), ``rank_meta`` by every rank (``rank<r>.ckpt``).
        Raises the error of an earlier background save that failed.
        """
        self._raise_failed()
        while len(self._pending) >= self.max_pending:  # the oldest first: a slow disk slows training, never the order
            futures_wait([self._pending[0][1]])
            self._raise_failed()
        peers = self._peers_now()
        if not self.background:
            _write(Path(target), tensors, meta, rank_meta, peers)
            return
        staged, buffers = self._stager.stage(tensors)  # CPU copies: the loop may now change the parameters
        self._submit(Path(target), _write, Path(target), staged, copy.deepcopy(meta), copy.deepcopy(rank_meta), peers)
        self._pending[-1][1].add_done_callback(lambda _: self._stager.release(buffers))

    def remove(self, path: str | Path, replaced_by: str | Path | None = None) -> None:
        """Delete the sharded checkpoint ``path`` (one rank calls it); with ``replaced_by``, once that is in place."""
        path = Path(path)
        after = Path(replaced_by) if replaced_by is not None else None
        saves = [job for t, job in self._pending if t == after]
        if not self._pending:
            remove_sharded(path)
            return

        def remove_after() -> None:
            if all(job.exception() is None for job in saves) and (after is None or after.exists()):
                remove_sharded(path)

        self._submit(path, remove_after)

    def wait(self) -> None:
        """Block until every save is in place; raise :class:`CheckpointError` for the first that failed."""
        pending, self._pending = self._pending, []
        settle(job for _, job in pending)

    def _raise_failed(self) -> None:
        if any(job.done() and job.exception() is not None for _, job in self._pending):
            self.wait()
        self._pending = [entry for entry in self._pending if not entry[1].done()]

    def _submit(self, path: Path, fn: Callable[..., None], *args: Any) -> None:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="interlock-dcp")
        self._pending.append((path, self._worker.submit(fn, *args)))

    def _peers_now(self) -> _Peers:
        """The worker's process group: its own gloo group in background mode, made once (a collective)."""
        on = dist.is_available() and dist.is_initialized()
        if self._peers is None or self._peers.on != on:
            self._peers = _Peers(dist.new_group(backend="gloo") if on and self.background else None)
        return self._peers


def save_sharded(
    target: str | Path, tensors: dict[str, Any], meta: dict[str, Any], rank_meta: dict[str, Any] | None = None
) -> None:
    """Write a sharded checkpoint directory at ``target`` now (a collective under torch.distributed)."""
    ShardedCheckpointIO(background=False).save(target, tensors, meta, rank_meta or {})
