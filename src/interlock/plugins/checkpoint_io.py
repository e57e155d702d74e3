"""Checkpoint file format and atomic writer.

A checkpoint file is ``MAGIC``, one JSON header line, then the payload: the bytes of
``torch.save(checkpoint)``. The header records the format version, the payload's byte length
and its SHA-256, so truncation and corruption are detected before anything is unpickled.
The payload is always read with ``torch.load(..., weights_only=True)``: the hash catches
accidents, not attackers, and ``weights_only`` is what keeps a hostile file from running code.

A save writes a temporary file next to the target, fsyncs it, renames it over the target and
fsyncs the directory, so the target always holds a whole checkpoint. With ``background=True``
the caller waits only for ``torch.save`` to hand the bytes to the file; one worker thread then
hashes, fsyncs and renames them into place, in the order the saves were made.
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
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from interlock.core.errors import CheckpointError

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "MAGIC", "TorchCheckpointIO", "check_serializable"]

FORMAT_VERSION: int = 1
FORMAT_NAME: str = "interlock-checkpoint"
MAGIC: bytes = b"INTERLOCK-CKPT\n"

_MAX_HEADER_BYTES = 64 * 1024
_HEADER_SLOT = 512  # bytes reserved for the header line, newline included
_HASH_STEP = 4 << 20  # the hash worker is handed the file in ranges of at least this many bytes
_SMALL_WRITE = 256 << 10  # writes smaller than this are combined before they reach the file
_SCALARS = (type(None), bool, int, float, complex, str, bytes, bytearray)
_LEAVES = (*_SCALARS, torch.dtype, torch.device, torch.Size, torch.Tensor, torch.nn.Parameter)
_MAPPINGS = (dict, collections.OrderedDict)
_SEQUENCES = (list, tuple)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_REFUSAL = re.compile(r"((?:Trying to load unsupported|Unsupported) .*?)(?: was not an allowed|\.?$)", re.MULTILINE)


def check_serializable(obj: Any, where: str = "checkpoint") -> None:
    """Raise CheckpointError naming the key path of the first value ``weights_only`` loading would refuse.

    Allowed: dict/OrderedDict, list, tuple, set, None, bool, int, float, complex, str, bytes,
    torch.Tensor (and nn.Parameter), torch.dtype, torch.device, torch.Size.
    """
    _check(obj, where, set())


def _check(obj: Any, path: str, active: set[int]) -> None:
    kind = type(obj)
    if kind in _LEAVES:
        if kind is bytes and not obj:
            raise CheckpointError(f"{path} is b'', which torch's weights_only loader refuses; store None instead")
        return
    if kind in _MAPPINGS or kind in _SEQUENCES or kind is set:
        if id(obj) in active:
            raise CheckpointError(
                f"{path} contains itself (a reference cycle); checkpoints must be trees of plain data"
            )
        active.add(id(obj))
        if kind in _MAPPINGS:
            for key, value in obj.items():
                if type(key) not in _SCALARS and type(key) is not tuple:
                    raise CheckpointError(
                        f"{path} has a key {key!r} of type {type(key).__qualname__}; use str or int keys"
                    )
                _check(key, f"{path} key {key!r}", active)
                _check(value, f"{path}[{key!r}]", active)
        elif kind is set:
            for item in obj:
                _check(item, f"{path} (set element {item!r})", active)
        else:
            for i, item in enumerate(obj):
                _check(item, f"{path}[{i}]", active)
        active.discard(id(obj))
        return
    raise CheckpointError(f"{path} is a {kind.__module__}.{kind.__qualname__}, which is not plain data; {_hint(obj)}")


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
    """

    def __init__(self, background: bool = False) -> None:
        self.background = background
        self._worker: ThreadPoolExecutor | None = None
        self._pending: list[tuple[Path, Future[None]]] = []

    def __getstate__(self) -> dict[str, Any]:
        self.wait()
        return {"background": self.background}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike[str]) -> None:
        """Atomically write ``checkpoint`` to ``path``; on any failure the old file (if any) is untouched.

        In background mode a failure of an earlier save is raised here (or by :meth:`wait`).
        """
        target = _as_path(path)
        if type(checkpoint) not in _MAPPINGS:
            raise CheckpointError(
                f"cannot save {type(checkpoint).__qualname__} to {target}: a checkpoint must be a dict"
            )
        if target.is_dir():
            raise CheckpointError(f"cannot save checkpoint to {target}: it is a directory; pass a file path")
        check_serializable(checkpoint)
        self._raise_failed()
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
        self._pending.append((target, worker.submit(_finish, sink, tmp, fd, target)))

    def wait(self) -> None:
        """Block until every background save is in place; raise :class:`CheckpointError` for the first that failed."""
        pending, self._pending = self._pending, []
        first: BaseException | None = None
        for _, job in pending:
            try:
                job.result()
            except BaseException as exc:
                first = first or exc
        if first is not None:
            raise first

    def _raise_failed(self) -> None:
        """Raise the error of a finished background save that failed (the rest stay pending)."""
        if any(job.done() and job.exception() is not None for _, job in self._pending):
            self.wait()
        self._pending = [(t, job) for t, job in self._pending if not job.done()]

    def _pool(self) -> ThreadPoolExecutor:
        """The one worker thread: hash ranges, then finishing and removals, in submission order."""
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="interlock-ckpt")
        return self._worker

    def load_checkpoint(self, path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
        """Verify and load the checkpoint at ``path`` with ``weights_only=True``."""
        target = _as_path(path)
        self.wait()
        with _open_for_read(target) as f:
            header = _read_header(f, target)
            _check_length(target, header, f)
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
        checkpoint: dict[str, Any] = result  # a dict or OrderedDict, just checked
        return checkpoint

    def read_header(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Return the validated header (format, version, sha256, payload_bytes, created) without unpickling."""
        target = _as_path(path)
        self.wait()
        with _open_for_read(target) as f:
            header = _read_header(f, target)
            _check_length(target, header, f)
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
        saves = [job for t, job in self._pending if t == after]
        if self._pending:
            self._pending.append((target, self._pool().submit(_remove_after, target, after, saves)))
        else:
            _remove_after(target, after, saves)


def _remove(target: Path) -> None:
    if not target.exists():
        return
    with _open_for_read(target) as f:
        head = f.read(len(MAGIC))
    if head != MAGIC:
        raise CheckpointError(f"refusing to remove {target}: {_not_ours(head)}")
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
    """Write MAGIC, a header placeholder and the payload to ``fd``; the worker hashes it as it goes."""
    _write_all(fd, MAGIC + b" " * (_HEADER_SLOT - 1) + b"\n")
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
    """Fill in the header, fsync, close, rename over ``target``, fsync the directory; on failure remove ``tmp``."""
    try:
        header = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "sha256": sink.hexdigest(),
            "payload_bytes": sink.nbytes,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
        }
        line = json.dumps(header, sort_keys=True).encode("ascii")
        if len(line) >= _HEADER_SLOT:  # cannot happen with the fields above; guards future edits
            raise CheckpointError(
                f"checkpoint header for {target} is {len(line)} bytes, over the {_HEADER_SLOT} reserved"
            )
        # Padded with spaces (JSON whitespace) to the reserved slot, so the payload never moves.
        os.pwrite(fd, line.ljust(_HEADER_SLOT - 1) + b"\n", len(MAGIC))
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
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
    """Close ``fd`` (unless -1) and delete the temporary file."""
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> int:
    """Write all of ``data`` (os.write may write less than asked) and return its length."""
    with memoryview(data) as view:
        done = 0
        while done < view.nbytes:
            done += os.write(fd, view[done:])
    return done


def _open_temp(target: Path) -> tuple[Path, int]:
    """Create a fresh temporary file next to ``target``; return its path and descriptor."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot create directory {target.parent} for checkpoint: {exc.strerror}") from exc
    tmp = target.parent / f".{target.name[:180]}.{secrets.token_hex(6)}.tmp"
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    try:
        return tmp, os.open(tmp, flags, 0o666)
    except OSError as exc:
        raise CheckpointError(f"cannot write checkpoint {target}: {exc.strerror}") from exc


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
    if target.is_dir():
        raise CheckpointError(f"{target} is a directory, not a checkpoint file; pass the path of a checkpoint file")
    try:
        return open(target, "rb")
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {target}: the file does not exist; check the path") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {target}: {exc.strerror}") from exc


def _read_header(f: io.BufferedReader, target: Path) -> dict[str, Any]:
    head = f.read(len(MAGIC))
    if head != MAGIC:
        raise CheckpointError(f"{target} is {_not_ours(head)}")
    line = f.readline(_MAX_HEADER_BYTES)
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
    size, digest = header.get("payload_bytes"), header.get("sha256")
    if type(size) is not int or size < 0 or not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise CheckpointError(
            f"checkpoint {target} has a header with a bad payload_bytes {size!r} or sha256 {digest!r}; "
            "the file is corrupted"
        )
    if not isinstance(header.get("created"), str):
        raise CheckpointError(f"checkpoint {target} has a header without a 'created' time; the file is corrupted")
    return header


def _check_length(target: Path, header: dict[str, Any], f: io.BufferedReader) -> None:
    """Compare the bytes left in ``f`` with the header's payload length, before reading any of them."""
    want = header["payload_bytes"]
    got = os.fstat(f.fileno()).st_size - f.tell()
    if got < want:
        raise CheckpointError(
            f"checkpoint {target} is truncated: its payload has {got} of {want} bytes; use another checkpoint"
        )
    if got > want:
        raise CheckpointError(
            f"checkpoint {target} was altered or corrupted: it has {got - want} bytes after its {want}-byte payload"
        )


def _not_ours(head: bytes) -> str:
    """Describe what a file that lacks MAGIC looks like."""
    if not head:
        return "an empty file, not an interlock checkpoint"
    if MAGIC.startswith(head):
        return "truncated: it ends inside the interlock checkpoint marker"
    base = "not an interlock checkpoint"
    if head.startswith(b"PK\x03\x04"):
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
