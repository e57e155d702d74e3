"""Checkpoint file format and atomic writer.

A checkpoint file is the payload, the bytes of ``torch.save(checkpoint)`` (a zip archive, so
``torch.load(path)`` reads the file as it is), then a trailer of :data:`TRAILER_BYTES`: ``MAGIC``
and one JSON header line, padded. The header records the format version, the payload's byte
length and its SHA-256, so truncation and corruption are detected before anything is unpickled.
Files of format version 1 put ``MAGIC`` and the header first and the payload after them; they
are read as before.
The payload is always read with ``torch.load(..., weights_only=True)``: the hash catches
accidents, not attackers, and ``weights_only`` is what keeps a hostile file from running code.

Only regular files are read: a FIFO, directory or device is refused before it is opened
for reading, so a load never waits on one. After unpickling, the loaded object is walked
once (:func:`check_bounded`) with a depth limit (:data:`MAX_DEPTH`) and a node budget
(:data:`MAX_NODES`) that counts every reference to a shared value, so a "pickle bomb" (a
small file whose shared references expand exponentially), a reference cycle or deeply nested
containers are refused before any code walks them as a tree (``interlock inspect``, the
trainer state on resume). Saves are checked against the same limits, so what interlock
saves it can load.

A save writes a temporary file next to the target, fsyncs it, renames it over the target and
fsyncs the directory, so the target always holds a whole checkpoint. With ``background=True``
the caller waits only for ``torch.save`` to hand the bytes to the file; one worker thread then
hashes, fsyncs and renames them into place, in the order the saves were made. At most
``max_pending`` saves are in flight; a further save waits for the oldest.

A temporary file is named ``.<target name>.<12 hex digits>.tmp`` and, on POSIX, is held
under an exclusive ``flock`` by its writer until it is renamed into place. The first save a
:class:`TorchCheckpointIO` makes into a directory removes the temporary files there that no
live writer holds (left by a killed process): only files with that name pattern whose
content starts like a checkpoint, never a file a writer of this process has open.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import errno
import hashlib
import io
import json
import mmap
import os
import pickle
import re
import secrets
import stat
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from pathlib import Path
from typing import Any

import torch

from interlock.core.errors import CheckpointError

if os.name == "posix":
    import fcntl

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_PENDING",
    "SHARDED_MANIFEST",
    "TRAILER_BYTES",
    "TorchCheckpointIO",
    "check_bounded",
    "check_serializable",
    "frame",
    "is_lightning_checkpoint",
    "is_sharded",
    "settle",
]

FORMAT_VERSION: int = 2
FORMAT_NAME: str = "interlock-checkpoint"
MAGIC: bytes = b"INTERLOCK-CKPT\n"

MAX_DEPTH: int = 100
"""Most containers (dicts, lists, tuples, sets) a checkpoint may nest in one another.

A trainer checkpoint nests about 6 deep (``state -> listeners -> key -> value``); the
walkers that follow a load (the trainer state's freeze/thaw, ``interlock inspect``) recurse
once per level, so a limit well below Python's recursion limit keeps them safe.
"""
MAX_NODES: int = 5_000_000
"""Most values a checkpoint may hold, counting every reference to a shared value each time.

Each dict key, dict value, list/tuple/set element and the top-level dict count as one; a
tensor is one value however large. A trainer checkpoint of a large model holds some
thousands (its tensors, optimizer state, history rows); 5 million is far above that and
takes a few seconds to walk. A file that expands beyond it (a "pickle bomb") is refused
after about as many steps as it has distinct containers.
"""
MAX_PENDING: int = 2
"""Most background saves of one :class:`TorchCheckpointIO` in flight (temporary files pending)."""
_DEPTH_CEILING = 400  # above this the recursive walkers after a load would exceed Python's recursion limit

_MAX_HEADER_BYTES = 64 * 1024
_HEADER_SLOT = 512  # bytes reserved for the header line, newline included
TRAILER_BYTES: int = len(MAGIC) + _HEADER_SLOT
"""The size of the trailer after the payload: ``MAGIC`` and the header line, padded with spaces."""
_ZIP_START = b"PK\x03\x04"  # how a torch.save (zip) payload begins
_ZIP_END = b"PK\x05\x06"  # the end-of-central-directory record that closes a zip archive
_HASH_STEP = 4 << 20  # the hash worker is handed the file in ranges of at least this many bytes
_SMALL_WRITE = 256 << 10  # writes smaller than this are combined before they reach the file
_SCALARS = (type(None), bool, int, float, complex, str, bytes, bytearray)
_LEAVES = (*_SCALARS, torch.dtype, torch.device, torch.Size, torch.Tensor, torch.nn.Parameter)
_MAPPINGS = (dict, collections.OrderedDict)
_SEQUENCES = (list, tuple)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{12}\.tmp", re.DOTALL)  # what _open_temp creates
_LIVE_TEMPS: set[tuple[int, int]] = set()  # (st_dev, st_ino) of the temporary files this process writes
_LIVE_LOCK = threading.Lock()
_REFUSAL = re.compile(r"((?:Trying to load unsupported|Unsupported) .*?)(?: was not an allowed|\.?$)", re.MULTILINE)


def check_serializable(
    obj: Any, where: str = "checkpoint", max_nodes: int | None = None, max_depth: int | None = None
) -> None:
    """Raise CheckpointError naming the key path of the first value ``weights_only`` loading would refuse.

    Allowed: dict/OrderedDict, list, tuple, set, None, bool, int, float, complex, str, bytes,
    torch.Tensor (and nn.Parameter), torch.dtype, torch.device, torch.Size. The value must also
    be within the limits a load enforces (:func:`check_bounded`), so whatever passes can be loaded.
    """
    _Walk(where, where, max_nodes, max_depth, strict=True).run(obj)


def check_bounded(
    obj: Any, where: str = "checkpoint", max_nodes: int | None = None, max_depth: int | None = None
) -> int:
    """Raise CheckpointError unless ``obj`` is a tree of at most ``max_nodes`` values nested at most ``max_depth`` deep.

    Walks ``obj`` once: each distinct container is visited once (by ``id``), and a container
    reached again through a shared reference adds the size it has as a tree, so the count is
    what a recursive walk would visit, found in time proportional to the distinct containers.
    A reference cycle is refused. The error names ``where`` (e.g. ``"checkpoint runs/x.ckpt"``),
    the limit and the key path where it was exceeded. ``max_nodes`` and ``max_depth`` default to :data:`MAX_NODES` and
    :data:`MAX_DEPTH` (read at call time). Returns the number of values counted.
    """
    return _Walk(where, "", max_nodes, max_depth, strict=False).run(obj)


# A key path: (parent path or None, how it is reached, key or index): built cheaply on each step,
# formatted only for an error. How: _ROOT (the key is the root's name), _INDEX, _ITEM, _KEY, _ELEMENT.
_Path = tuple[Any, int, Any]
_ROOT, _INDEX, _ITEM, _KEY, _ELEMENT = range(5)
_FAST_VALUES = frozenset(_LEAVES) - {bytes}  # leaves that need no further check (b'' does)
_FAST_KEYS = frozenset({str, int})
_PLAIN_CONTAINERS = frozenset({*_MAPPINGS, *_SEQUENCES, set})


class _Walk:
    """One bounded walk of a checkpoint; ``strict`` also refuses what ``weights_only`` loading would."""

    def __init__(self, subject: str, root: str, max_nodes: int | None, max_depth: int | None, strict: bool) -> None:
        self.subject, self.root, self.strict = subject, root, strict
        self.max_nodes = MAX_NODES if max_nodes is None else max_nodes
        self.max_depth = MAX_DEPTH if max_depth is None else max_depth
        _limit(f"max_nodes={self.max_nodes!r}", self.max_nodes, None)
        _limit(f"max_depth={self.max_depth!r}", self.max_depth, _DEPTH_CEILING)
        self.count = 0
        self.known: dict[int, tuple[int, int]] = {}  # id of a walked container -> (values in it, nesting height)
        self.active: set[int] = set()  # ids of the containers on the current path

    def run(self, obj: Any) -> int:
        self._visit(obj, (None, _ROOT, self.root), 0)
        return self.count

    def _visit(self, obj: Any, path: _Path, level: int) -> int:
        """Count ``obj`` (``level`` containers enclose it); return how many containers nest in it, itself included."""
        kind = type(obj)
        if kind in _PLAIN_CONTAINERS:
            return self._container(obj, path, level, kind in _MAPPINGS)
        if kind in _LEAVES or not (isinstance(obj, Mapping | list | tuple | set | frozenset) or self.strict):
            if self.strict and kind is bytes and not obj:
                raise CheckpointError(
                    f"{_show(path)} is b'', which torch's weights_only loader refuses; store None instead"
                )
            self.count += 1
            if self.count > self.max_nodes:
                self._too_many(path)
            return 0
        if self.strict and kind not in _MAPPINGS and kind not in _SEQUENCES and kind is not set:
            raise CheckpointError(
                f"{_show(path)} is a {kind.__module__}.{kind.__qualname__}, which is not plain data; {_hint(obj)}"
            )
        return self._container(obj, path, level, isinstance(obj, Mapping))

    def _container(self, obj: Any, path: _Path, level: int, mapping: bool) -> int:
        key = id(obj)
        seen = self.known.get(key)
        if seen is not None:  # a shared container: counted again as the tree it is, not walked again
            size, height = seen
            if level + height > self.max_depth:
                self._too_deep(path, level + height)
            self.count += size
            if self.count > self.max_nodes:
                self._too_many(path)
            return height
        if key in self.active:
            if self.strict:
                raise CheckpointError(
                    f"{_show(path)} contains itself (a reference cycle); checkpoints must be trees of plain data"
                )
            raise CheckpointError(
                f"{self.subject} contains a reference cycle: {_at(path)} contains itself; "
                "checkpoints must be trees of plain data"
            )
        if level >= self.max_depth:
            self._too_deep(path, level + 1)
        self.active.add(key)
        start = self.count
        self.count += 1
        height = 0
        inner = level + 1
        # Leaves of the common types are counted inline: this loop runs for every value of every save.
        if mapping:
            for k, value in obj.items():
                if type(k) in _FAST_KEYS:
                    self.count += 1
                else:
                    if self.strict and type(k) not in _SCALARS and type(k) is not tuple:
                        raise CheckpointError(
                            f"{_show(path)} has a key {k!r} of type {type(k).__qualname__}; use str or int keys"
                        )
                    height = max(height, self._visit(k, (path, _KEY, k), inner))
                if type(value) in _FAST_VALUES:
                    self.count += 1
                else:
                    height = max(height, self._visit(value, (path, _ITEM, k), inner))
                if self.count > self.max_nodes:
                    self._too_many((path, _ITEM, k))
        else:
            how = _ELEMENT if isinstance(obj, set | frozenset) else _INDEX
            for i, item in enumerate(obj):
                if type(item) in _FAST_VALUES:
                    self.count += 1
                    if self.count > self.max_nodes:
                        self._too_many((path, how, item if how == _ELEMENT else i))
                else:
                    height = max(height, self._visit(item, (path, how, item if how == _ELEMENT else i), inner))
        self.active.discard(key)
        self.known[key] = (self.count - start, height + 1)
        return height + 1

    def _too_many(self, path: _Path) -> None:
        raise CheckpointError(
            f"{self.subject} holds more than {self.max_nodes:,} values, the limit max_nodes (MAX_NODES, "
            f"which counts every reference to a shared value); exceeded at {_at(path)}. Nested shared "
            "references that expand like this are a 'pickle bomb'; if the file is genuine, pass a larger "
            "TorchCheckpointIO(max_nodes=...)"
        )

    def _too_deep(self, path: _Path, depth: int) -> None:
        raise CheckpointError(
            f"{self.subject} nests containers {depth} deep at {_at(path)}, over the limit max_depth "
            f"{self.max_depth} (MAX_DEPTH); if it is genuine, flatten that value or pass a larger "
            f"TorchCheckpointIO(max_depth=...) (at most {_DEPTH_CEILING})"
        )


def _limit(what: str, value: Any, ceiling: int | None) -> None:
    """Raise ValueError (the message starts with ``what``) unless ``value`` is an int in ``1..ceiling``."""
    if type(value) is not int or value < 1 or (ceiling is not None and value > ceiling):
        most = f" and at most {ceiling} (deeper nesting would overflow Python's recursion limit)" if ceiling else ""
        raise ValueError(f"{what} must be an int of at least 1{most}")


def _short(value: Any) -> str:
    """A bounded repr for a key path: scalars shown (cut at 40 characters), containers by type only."""
    if type(value) in _SCALARS:
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return f"<{type(value).__qualname__}>"


def _at(path: _Path) -> str:
    return _show(path) or "the top level"


_STEP = {
    _ROOT: "{}",
    _INDEX: "[{}]",
    _ITEM: "[{}]",
    _KEY: " key {}",
    _ELEMENT: " (set element {})",
}


def _show(path: _Path) -> str:
    """The key path ``path`` as text; a long one keeps its first 9 and last 8 steps."""
    steps: list[str] = []
    node: Any = path
    while node is not None:
        node, how, key = node
        steps.append(_STEP[how].format(key if how in (_ROOT, _INDEX) else _short(key)))
    steps.reverse()
    if len(steps) > 17:
        steps = [*steps[:9], f"...({len(steps) - 17} levels)...", *steps[-8:]]
    return "".join(steps)


def _hint(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return "store a plain tensor instead, e.g. value.as_subclass(torch.Tensor)"
    if type(obj).__module__ == "numpy":
        return "convert it with torch.from_numpy(value) or value.tolist()"
    if isinstance(obj, os.PathLike):
        return "store str(value) instead"
    if hasattr(obj, "state_dict"):
        return "store value.state_dict() instead of the object"
    for base in (dict, list, tuple, set, int, float, str, bytes):
        if isinstance(obj, base):
            return f"convert it to the plain {base.__name__} it subclasses"
    return "convert it to dicts, lists, numbers, strings or tensors"


class TorchCheckpointIO:
    """Reads and writes interlock checkpoint files; saves are atomic and loads never execute code.

    Args:
        background: return from :meth:`save_checkpoint` once the payload is written to the
            temporary file, and make it durable (hash, fsync, rename, directory fsync) in a
            worker thread. The target keeps its previous contents until then; :meth:`wait`
            blocks until every save is in place. Loads, removals and the next save's error
            check wait too, so this object never reads a checkpoint it is still writing.
        max_pending: in background mode, the most saves in flight (each one a temporary file
            not yet renamed into place). A save beyond that first waits until the oldest is in
            place, so a slow disk slows training down instead of letting the newest durable
            checkpoint fall ever further behind. Default :data:`MAX_PENDING` (2).
        max_nodes: the most values a loaded checkpoint may hold, every reference to a shared
            value counted (see :func:`check_bounded`). Default :data:`MAX_NODES`.
        max_depth: the deepest nesting of containers a loaded checkpoint may have, at most
            400. Default :data:`MAX_DEPTH`.

    Saves are checked against ``max_nodes`` and ``max_depth`` too. The first save into a
    directory removes the temporary files a killed writer left there (see the module doc).
    """

    def __init__(
        self,
        background: bool = False,
        max_pending: int = MAX_PENDING,
        max_nodes: int | None = None,
        max_depth: int | None = None,
    ) -> None:
        if type(max_pending) is not int or max_pending < 1:
            raise ValueError(f"TorchCheckpointIO(max_pending={max_pending!r}) must be an int of at least 1")
        for name, value, ceiling in (("max_nodes", max_nodes, None), ("max_depth", max_depth, _DEPTH_CEILING)):
            if value is not None:
                _limit(f"TorchCheckpointIO({name}={value!r})", value, ceiling)
        self.background = background
        self.max_pending = max_pending
        self.max_nodes = max_nodes
        self.max_depth = max_depth
        self._worker: ThreadPoolExecutor | None = None
        self._pending: list[tuple[Path, Future[None], bool]] = []  # (path, job, is a save), in submission order
        self._swept: set[Path] = set()  # directories whose leftover temporary files were removed

    def __getstate__(self) -> dict[str, Any]:
        self.wait()
        return {
            "background": self.background,
            "max_pending": self.max_pending,
            "max_nodes": self.max_nodes,
            "max_depth": self.max_depth,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike[str]) -> None:
        """Atomically write ``checkpoint`` to ``path``; on any failure the old file (if any) is untouched.

        In background mode a failure of an earlier save is raised here (or by :meth:`wait`), and
        when ``max_pending`` saves are already in flight this first waits for the oldest of them.
        The first save into a directory removes the temporary files a killed writer left there.
        """
        target = _as_path(path)
        if type(checkpoint) not in _MAPPINGS:
            raise CheckpointError(
                f"cannot save {type(checkpoint).__qualname__} to {target}: a checkpoint must be a dict"
            )
        if target.is_dir():
            raise CheckpointError(f"cannot save checkpoint to {target}: it is a directory; pass a file path")
        check_serializable(checkpoint, max_nodes=self.max_nodes, max_depth=self.max_depth)
        self._raise_failed()
        self._make_room()
        directory = target.parent.absolute()
        if directory not in self._swept:
            _sweep(directory)
            self._swept.add(directory)
        worker = self._pool()
        tmp, fd = _open_temp(target)
        try:
            sink = _write_payload(checkpoint, fd, target, worker)
        except BaseException as exc:
            _discard(tmp, fd)
            if isinstance(exc, OSError):
                raise _write_error(target, exc) from exc
            raise
        if not self.background:
            _finish(sink, tmp, fd, target)
            return
        self._pending.append((target, worker.submit(_finish, sink, tmp, fd, target), True))

    def wait(self) -> None:
        """Block until every background save is in place; raise :class:`CheckpointError` for the first that failed."""
        pending, self._pending = self._pending, []
        settle(job for _, job, _ in pending)

    def _raise_failed(self) -> None:
        """Raise the error of a finished background save that failed (the rest stay pending)."""
        if any(job.done() and job.exception() is not None for _, job, _ in self._pending):
            self.wait()
        self._pending = [entry for entry in self._pending if not entry[1].done()]

    def _make_room(self) -> None:
        """Wait until fewer than ``max_pending`` saves are in flight, the oldest first; raise one that failed."""
        while True:
            flying = [job for _, job, is_save in self._pending if is_save and not job.done()]
            if len(flying) < self.max_pending:
                return
            futures_wait([flying[0]])
            self._raise_failed()

    def _pool(self) -> ThreadPoolExecutor:
        """The one worker thread: hash ranges, then finishing and removals, in submission order."""
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="interlock-ckpt")
        return self._worker

    def load_checkpoint(self, path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
        """Verify and load the checkpoint at ``path`` with ``weights_only=True``.

        Raises :class:`CheckpointError` naming the file for anything but a regular file holding a
        whole, unaltered checkpoint that is a dict of plain data within ``max_nodes`` and ``max_depth``.
        """
        target = _as_path(path)
        self.wait()
        with _open_for_read(target) as f:
            header, offset = _locate(f, target)
            f.seek(offset)
            payload = f.read(header["payload_bytes"])
        if len(payload) != header["payload_bytes"]:
            raise CheckpointError(f"checkpoint {target} changed while it was being read; load it again")
        if hashlib.sha256(payload).hexdigest() != header["sha256"]:
            raise CheckpointError(
                f"checkpoint {target} was altered or corrupted: its payload does not match the SHA-256 in its "
                "header; restore it from a backup or use an earlier checkpoint"
            )
        try:
            result = torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise CheckpointError(
                f"checkpoint {target} contains objects that are not plain data ({_refusal_reason(exc)}); "
                "it was refused and nothing in it was executed. Do not load it unless you trust its source"
            ) from None
        except Exception as exc:
            raise CheckpointError(f"checkpoint {target} has a payload torch.load cannot read: {exc}") from exc
        if type(result) not in _MAPPINGS:
            raise CheckpointError(f"checkpoint {target} holds a {type(result).__qualname__}, not a dict")
        # torch.load shares repeated references, so loading was cheap; whatever walks the result as a tree
        # next (the trainer state, ``interlock inspect``) is safe only once its size as a tree is bounded.
        check_bounded(result, f"checkpoint {target}", self.max_nodes, self.max_depth)
        checkpoint: dict[str, Any] = result  # a dict or OrderedDict, just checked
        return checkpoint

    def read_header(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Return the validated header (format, version, sha256, payload_bytes, created) without unpickling.

        A path that is not a regular file (a FIFO, directory, device) is refused at once.
        """
        target = _as_path(path)
        self.wait()
        with _open_for_read(target) as f:
            header, _ = _locate(f, target)
        return header

    def remove_checkpoint(
        self, path: str | os.PathLike[str], replaced_by: str | os.PathLike[str] | None = None
    ) -> None:
        """Delete the checkpoint at ``path``; a missing file is fine, a file that is not a checkpoint is refused.

        With ``replaced_by``, delete it only once that checkpoint is saved: in background mode
        the removal waits in the worker behind the pending saves, and is skipped when the save
        of ``replaced_by`` failed or its file is not there.
        """
        target = _as_path(path)
        if replaced_by is None:
            self.wait()
            _remove(target)
            return
        after = _as_path(replaced_by)
        saves = [job for t, job, is_save in self._pending if is_save and t == after]
        if self._pending:
            self._pending.append((target, self._pool().submit(_remove_after, target, after, saves), False))
        else:
            _remove_after(target, after, saves)


#: The file that marks a sharded checkpoint directory (:mod:`interlock.plugins.sharded_io`); it is written last.
SHARDED_MANIFEST = "interlock.json"


def is_sharded(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a sharded checkpoint directory (it has a manifest)."""
    return (Path(path) / SHARDED_MANIFEST).is_file()


def settle(jobs: Iterable[Future[Any]]) -> None:
    """Wait for every job; then raise the first one's error, if any failed."""
    first: BaseException | None = None
    for job in jobs:
        try:
            job.result()
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first


def _remove(target: Path) -> None:
    if not target.exists():
        return
    with _open_for_read(target) as f:  # ours by its marker (a damaged checkpoint of ours is still replaced)
        size = os.fstat(f.fileno()).st_size
        head = f.read(len(MAGIC))
        f.seek(max(size - TRAILER_BYTES, 0))
        if head != MAGIC and f.read(len(MAGIC)) != MAGIC:
            raise CheckpointError(f"refusing to remove {target}: it is {_not_ours(head, f, size, target)}")
    try:
        target.unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CheckpointError(f"cannot remove checkpoint {target}: {exc.strerror}") from exc
    _fsync_dir(target.parent)


def _remove_after(target: Path, after: Path, saves: list[Future[None]]) -> None:
    """In the worker: remove ``target`` if the saves of ``after`` (done by now: they were queued first) worked."""
    if all(job.exception() is None for job in saves) and after.exists():
        _remove(target)


def _as_path(path: str | os.PathLike[str]) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise CheckpointError(f"checkpoint path must be a non-empty str or os.PathLike, got {path!r}")
    return Path(path)


class _HashingSink:
    """File-like ``torch.save`` target that writes to ``fd`` while a worker thread hashes the written bytes.

    The worker reads what is already in the file through mmap (the page cache), so no copy is made, hashing
    overlaps serialization, and the hash covers exactly what the file holds. Small writes are combined.
    """

    def __init__(self, fd: int, pool: ThreadPoolExecutor) -> None:
        self.fd, self.pool = fd, pool
        self._written = self._hashed = os.lseek(fd, 0, os.SEEK_CUR)
        self.nbytes = 0
        self.error: OSError | None = None
        self._small = bytearray()
        self._sha = hashlib.sha256()
        self._jobs: list[Future[None]] = []

    def write(self, data: bytes | memoryview) -> int:
        with memoryview(data) as whole, whole.cast("B") as view:
            size = view.nbytes
            if size < _SMALL_WRITE:
                self._small += view
                if len(self._small) >= _SMALL_WRITE:
                    self.flush()
            else:
                self.flush()
                self._write(view)
        self.nbytes += size
        return size

    def flush(self) -> None:
        if self._small:
            self._write(self._small)
            self._small.clear()

    def hexdigest(self) -> str:
        """The SHA-256 of everything written; everything must have been handed over already."""
        if self._small or self._written > self._hashed:
            raise RuntimeError("hexdigest() before the last bytes were handed to the hash worker")
        for job in self._jobs:
            job.result()
        return self._sha.hexdigest()

    def settle(self) -> None:
        """Wait until the worker no longer reads the file (after a failed write)."""
        for job in self._jobs:
            with contextlib.suppress(BaseException):
                job.result()

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self._written += _write_all(self.fd, data)
        except OSError as exc:
            self.error = exc
            raise
        if self._written - self._hashed >= _HASH_STEP:
            self.hand_over()

    def hand_over(self) -> None:
        """Queue the bytes written since the last hand-over for hashing."""
        if self._written > self._hashed:
            self._jobs.append(self.pool.submit(self._hash_range, self._hashed, self._written))
            self._hashed = self._written

    def _hash_range(self, start: int, end: int) -> None:
        base = start - start % mmap.ALLOCATIONGRANULARITY
        try:
            mapped = mmap.mmap(self.fd, end - base, access=mmap.ACCESS_READ, offset=base)
        except (OSError, ValueError):  # a filesystem without mmap: read the range back instead
            for at in range(start, end, _HASH_STEP):
                self._sha.update(os.pread(self.fd, min(_HASH_STEP, end - at), at))
            return
        with mapped, memoryview(mapped) as whole, whole[start - base :] as part:
            self._sha.update(part)


def _write_payload(checkpoint: dict[str, Any], fd: int, target: Path, worker: ThreadPoolExecutor) -> _HashingSink:
    """Write the payload to ``fd``; the worker hashes it as it goes (the trailer follows it in :func:`_finish`)."""
    sink = _HashingSink(fd, worker)
    try:
        torch.save(checkpoint, sink)  # type: ignore[arg-type]  # torch.save only needs write(); typed as IO[bytes]
        sink.flush()
        sink.hand_over()
    except Exception as exc:
        sink.settle()  # the worker must be done with fd before the caller closes it
        if sink.error is not None:  # torch reports a failed write as an unrelated RuntimeError
            raise sink.error from None
        if isinstance(exc, OSError):
            raise
        raise CheckpointError(f"cannot serialize checkpoint for {target}: {exc}") from exc
    return sink


def _finish(sink: _HashingSink, tmp: Path, fd: int, target: Path) -> None:
    """Append the trailer, fsync, close, rename over ``target``, fsync the directory; on failure remove ``tmp``."""
    try:
        header = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "sha256": sink.hexdigest(),
            "payload_bytes": sink.nbytes,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
        }
        _write_all(fd, _trailer(header, target))
        os.fsync(fd)
        if os.name == "posix":  # rename while the lock is held: a sweep never finds this file unheld as a temp
            os.replace(tmp, target)
            _close_temp(fd)
        else:  # Windows cannot rename an open file (and has no flock, so nothing is swept there)
            _close_temp(fd)
            fd = -1
            os.replace(tmp, target)
        fd = -1
    except BaseException as exc:
        _discard(tmp, fd)
        if isinstance(exc, OSError):
            raise _write_error(target, exc) from exc
        raise
    _fsync_dir(target.parent)


def _write_error(target: Path, exc: OSError) -> CheckpointError:
    return CheckpointError(
        f"cannot write checkpoint {target}: {exc.strerror or exc}; any previous file there is unchanged"
    )


def _discard(tmp: Path, fd: int) -> None:
    """Delete the temporary file and close ``fd`` (unless -1); on POSIX it is deleted while still locked."""
    if fd >= 0 and os.name != "posix":
        _close_temp(fd)
        fd = -1
    with contextlib.suppress(OSError):
        tmp.unlink()
    if fd >= 0:
        _close_temp(fd)


def _close_temp(fd: int) -> None:
    """Close a temporary file's descriptor (releasing its lock) and forget it as a live one."""
    with contextlib.suppress(OSError):
        st = os.fstat(fd)
        with _LIVE_LOCK:
            _LIVE_TEMPS.discard((st.st_dev, st.st_ino))
    with contextlib.suppress(OSError):
        os.close(fd)


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> int:
    """Write all of ``data`` (os.write may write less than asked) and return its length."""
    with memoryview(data) as view:
        done = 0
        while done < view.nbytes:
            done += os.write(fd, view[done:])
    return done


def _open_temp(target: Path) -> tuple[Path, int]:
    """Create a fresh temporary file next to ``target``, held by this process; return its path and descriptor.

    The file is registered as live (a sweep in this process never removes it) and, on POSIX,
    locked with ``flock`` until it is renamed or removed (a sweep in another process skips it).
    If a sweep removed it between its creation and the lock, another name is tried.
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot create directory {target.parent} for checkpoint: {exc.strerror}") from exc
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = target.parent / f".{target.name[:180]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
        except OSError as exc:
            raise CheckpointError(f"cannot write checkpoint {target}: {exc.strerror}") from exc
        try:
            st = os.fstat(fd)
            with _LIVE_LOCK:
                _LIVE_TEMPS.add((st.st_dev, st.st_ino))
            if os.name == "posix":
                with contextlib.suppress(OSError):  # no flock on this filesystem: sweeps cannot lock it either
                    fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a sweep that is removing it holds it
            if os.fstat(fd).st_nlink > 0:
                return tmp, fd
        except BaseException:
            _discard(tmp, fd)
            raise
        _close_temp(fd)  # a sweep removed it before we held it
    raise CheckpointError(f"cannot write checkpoint {target}: no temporary file could be created and held")


def _sweep(directory: Path) -> list[Path]:
    """Remove the temporary files of dead writers in ``directory``; return the paths removed.

    A file is removed only if its name is one :func:`_open_temp` makes, it is a regular file
    (not a link) whose first bytes are (a prefix of) a zip archive's or :data:`MAGIC`, no writer of this process
    has it open, and no writer anywhere holds its ``flock`` (a live writer holds it until the
    file is renamed into place). Skipped where there is no ``flock`` (not POSIX). Errors are
    ignored: a file that cannot be checked is left alone.
    """
    if os.name != "posix":
        return []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        if _TEMP_NAME.fullmatch(name) and _remove_abandoned(directory / name):
            removed.append(directory / name)
    return removed


def _remove_abandoned(path: Path) -> bool:
    """Remove ``path`` if it is an interlock temporary file that no live writer holds."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by a live writer (or no flock here: then nothing can be told apart)
            return False
        head = os.pread(fd, len(MAGIC), 0)
        if not (MAGIC.startswith(head) or _ZIP_START.startswith(head[:4])):
            return False
        with _LIVE_LOCK:  # a writer of this process registers before it locks, under this lock
            if (st.st_dev, st.st_ino) in _LIVE_TEMPS:
                return False
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                return False
            path.unlink()
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable; skipped where directories cannot be fsynced."""
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise CheckpointError(f"cannot fsync directory {directory} after writing to it: {exc.strerror}") from exc


def _open_for_read(target: Path) -> io.BufferedReader:
    """Open ``target`` for reading if it is a regular file; anything else is refused without waiting on it.

    The path is checked before it is opened (a FIFO's open would block until a writer comes),
    opened without blocking, and checked again through the descriptor, so a file swapped in
    between is refused too.
    """
    try:
        _require_regular(target, os.stat(target).st_mode)
        fd = os.open(
            target,
            os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0),
        )
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {target}: the file does not exist; check the path") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {target}: {exc.strerror}") from exc
    try:
        _require_regular(target, os.fstat(fd).st_mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _require_regular(target: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
    raise CheckpointError(
        f"{target} is {kind}, not a checkpoint file: a checkpoint must be a regular file; pass the path of a .ckpt file"
    )


def frame(payload: bytes, header: Mapping[str, Any]) -> bytes:
    """A whole checkpoint file: ``payload`` then the trailer holding ``header`` (nothing is checked).

    For tools and tests that build files by hand (a payload with a matching hash, an altered one);
    :meth:`TorchCheckpointIO.save_checkpoint` writes the same layout.
    """
    return payload + _trailer(header, Path("<frame>"))


def _trailer(header: Mapping[str, Any], target: Path) -> bytes:
    line = json.dumps(dict(header), sort_keys=True).encode("ascii")
    if len(line) >= _HEADER_SLOT:  # cannot happen with the writer's fields; guards future edits
        raise CheckpointError(f"checkpoint header for {target} is {len(line)} bytes, over the {_HEADER_SLOT} reserved")
    return MAGIC + line.ljust(_HEADER_SLOT - 1) + b"\n"  # padded with spaces (JSON whitespace) to a fixed size


def _locate(f: io.BufferedReader, target: Path) -> tuple[dict[str, Any], int]:
    """The validated header of the checkpoint open in ``f`` and where its payload starts; nothing is unpickled.

    Version 2 (the trailer) and version 1 (the header first) are both read; the payload's length
    is checked against the file before any of it is read.
    """
    size = os.fstat(f.fileno()).st_size
    head = f.read(len(MAGIC))
    if head == MAGIC:  # format version 1: MAGIC and the header line, then the payload
        header = _parse_header(f.readline(_MAX_HEADER_BYTES), target, last=1)
        _check_length(target, header, size - f.tell())
        return header, f.tell()
    tail = b""
    if size >= TRAILER_BYTES:
        f.seek(size - TRAILER_BYTES)
        tail = f.read(TRAILER_BYTES)
    if not tail.startswith(MAGIC):
        raise CheckpointError(f"{target} is {_not_ours(head, f, size, target)}")
    header = _parse_header(tail[len(MAGIC) :], target, first=2)
    _check_length(target, header, size - TRAILER_BYTES)
    return header, 0


def _parse_header(line: bytes, target: Path, first: int = 1, last: int = FORMAT_VERSION) -> dict[str, Any]:
    """The header line, checked: a format version in ``first..last`` (the file's layout), its length and hash."""
    if not line.endswith(b"\n"):
        what = (
            "is truncated inside its header" if len(line) < _MAX_HEADER_BYTES else "has a header line that is too long"
        )
        raise CheckpointError(f"checkpoint {target} {what}; the file is damaged, use another checkpoint")
    try:
        header = json.loads(line)
    except ValueError:
        raise CheckpointError(
            f"checkpoint {target} has a header that is not valid JSON ({line[:80]!r}); the file is corrupted"
        ) from None
    if not isinstance(header, dict):
        raise CheckpointError(f"checkpoint {target} has a header that is not a JSON object: {line[:80]!r}")
    if header.get("format") != FORMAT_NAME:
        raise CheckpointError(f"checkpoint {target} names format {header.get('format')!r}, expected {FORMAT_NAME!r}")
    version = header.get("version")
    if type(version) is not int or version < 1:
        raise CheckpointError(f"checkpoint {target} has an invalid format version {version!r}; the file is corrupted")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {target} was written by a newer interlock (format {version} > {FORMAT_VERSION}); "
            "upgrade interlock to load it"
        )
    if not first <= version <= last:
        raise CheckpointError(
            f"checkpoint {target} names format version {version}, which does not match where its header is "
            "(version 1 puts it first, later versions last); the file is corrupted"
        )
    size, digest = header.get("payload_bytes"), header.get("sha256")
    if type(size) is not int or size < 0 or not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise CheckpointError(
            f"checkpoint {target} has a header with a bad payload_bytes {size!r} or sha256 {digest!r}; "
            "the file is corrupted"
        )
    if not isinstance(header.get("created"), str):
        raise CheckpointError(f"checkpoint {target} has a header without a 'created' time; the file is corrupted")
    return header


def _check_length(target: Path, header: dict[str, Any], got: int) -> None:
    """Compare the bytes the file holds for its payload (``got``) with the header's length, before reading any."""
    want = header["payload_bytes"]
    if got < want:
        raise CheckpointError(
            f"checkpoint {target} is truncated: its payload has {got} of {want} bytes; use another checkpoint"
        )
    if got > want:
        raise CheckpointError(
            f"checkpoint {target} was altered or corrupted: it has {got - want} bytes more than its {want}-byte payload"
        )


_LIGHTNING_KEY = b"pytorch-lightning_version"
_LIGHTNING_SCAN = 1 << 20  # Lightning writes the key among the first entries of its dict


def is_lightning_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a torch zip file whose pickle names ``pytorch-lightning_version`` (a Lightning ``.ckpt``).

    Only the first MiB of the archive's ``data.pkl`` is scanned as bytes: nothing is unpickled.
    """
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if name is None:
                return False
            with archive.open(name) as pkl:
                return _LIGHTNING_KEY in pkl.read(_LIGHTNING_SCAN)
    except (OSError, zipfile.BadZipFile, RuntimeError, ValueError):
        return False


def _damage(f: io.BufferedReader, size: int) -> str | None:
    """How a file that begins as a zip but has no trailer was damaged; ``None``: it is a whole zip (not ours)."""
    window = min(size, _MAX_HEADER_BYTES + TRAILER_BYTES)
    f.seek(size - window)
    tail = f.read(window)
    if tail[-22:-18] == _ZIP_END and tail.endswith(b"\x00\x00"):  # ends as a whole zip archive without a comment
        return None
    found = tail.rfind(MAGIC)
    if found >= 0 and window - found < TRAILER_BYTES:
        return "truncated inside its trailer (the header after the payload); use another checkpoint"
    if found >= 0:
        return f"altered or corrupted: it has {window - found - TRAILER_BYTES} bytes after its interlock trailer"
    return (
        "truncated: it begins as a checkpoint's payload (a zip archive) but ends before the trailer that closes an "
        "interlock checkpoint; the file was cut short, use another checkpoint"
    )


def _not_ours(head: bytes, f: io.BufferedReader, size: int, target: Path) -> str:
    """Describe what a file without an interlock header or trailer looks like (``head``: its first bytes)."""
    if not head:
        return "an empty file, not an interlock checkpoint"
    if MAGIC.startswith(head):
        return "truncated: it ends inside the interlock checkpoint marker"
    base = "not an interlock checkpoint"
    if head.startswith(_ZIP_START):
        if is_lightning_checkpoint(target):
            return (
                "a PyTorch Lightning checkpoint, not an interlock one: its training state (optimizer, epoch, step, "
                "RNG) cannot continue an interlock run. Load its weights only, without running code in it: "
                "interlock.load_lightning_weights(module, path) (or YourModule.load_from_checkpoint(path)), then "
                "fit without ckpt_path"
            )
        damage = _damage(f, size)
        if damage is not None:
            return damage
        return (
            f"{base} (it looks like a plain torch.save file, a zip archive); load it with "
            "torch.load(path, weights_only=True) and re-save it with TorchCheckpointIO.save_checkpoint"
        )
    if head[:1] == b"\x80":
        return (
            f"{base} (it looks like a raw pickle, e.g. a legacy torch.save file); load it with "
            "torch.load(path, weights_only=True) and re-save it with TorchCheckpointIO.save_checkpoint"
        )
    if head[8:10] == b'{"':
        return f"{base} (it looks like a safetensors file); load it with safetensors.torch.load_file"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return f"{base} (an unknown binary file starting with {head[:8].hex()})"
    return f"{base} (it looks like a text file starting with {text!r})"


def _refusal_reason(exc: pickle.UnpicklingError) -> str:
    found = _REFUSAL.search(str(exc))
    return found.group(1) if found else "weights_only loading refused it"
