"""Sharded checkpoint directories: their layout, their seal, and reading them through ``torch.distributed.checkpoint``.

:mod:`interlock.plugins.sharded_writer` writes them (DCP, in the background).

A sharded checkpoint is a directory (named like a checkpoint file, e.g. ``last.ckpt``)::

    .metadata          DCP's index of the shards (written by rank 0 once every rank has written)
    __<r>_0.distcp     rank r's shards of the model and optimizer tensors
    meta.ckpt          trainer state, chart state, data position, schedulers, precision (rank 0)
    rank<r>.ckpt       rank r's RNG states
    interlock.json     the manifest: format, world size, SHA-256 and size of every file above

Complete or absent: the directory is built under a temporary name next to the target,
the manifest is the last file written (after every rank's shards and DCP's metadata),
and only then is it put in place: swapped with a previous checkpoint of the same name in one
atomic ``renameat2(RENAME_EXCHANGE)`` on Linux (elsewhere the previous one is moved aside
first), then the previous one is deleted. A SIGKILL of any rank at any moment leaves the
previous checkpoint whole under its name. The next save of that name removes the temporary
directories a killed save left. A directory without a manifest is refused at load.

Loading never executes code from the checkpoint: every file is hash-checked against the
manifest first; DCP's pickled ``.metadata`` is read with an unpickler that builds only
DCP's own metadata classes; tensors are read with ``weights_only`` (DCP's default); any
non-tensor value DCP stored is read with ``weights_only=True`` too (DCP's default planner
would read it with ``weights_only=False``); the ``.ckpt`` files are interlock checkpoint
files (:mod:`interlock.plugins.checkpoint_io`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import json
import os
import pickle
import re
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import ReadItem

from interlock.core.errors import CheckpointError
from interlock.plugins.checkpoint_io import SHARDED_MANIFEST, is_sharded

__all__ = [
    "MANIFEST",
    "META",
    "SHARDED_FORMAT",
    "SafeLoadPlanner",
    "SafeReader",
    "is_sharded",
    "load_all",
    "load_tensors",
    "rank_file",
    "read_manifest",
    "remove_sharded",
    "seal",
    "sweep",
    "tensor_specs",
]

SHARDED_FORMAT = "interlock-sharded"
SHARDED_VERSION = 1
MANIFEST = SHARDED_MANIFEST
META = "meta.ckpt"
_CHUNK = 8 << 20

# What DCP's .metadata may contain: its own dataclasses, torch.Size/dtype/memory formats, plain containers.
_ALLOWED = {
    ("torch.distributed.checkpoint.metadata", name)
    for name in (
        "Metadata",
        "MetadataIndex",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.distributed.checkpoint.filesystem", "_StoragePrefix"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Builds only DCP metadata classes and torch dtypes; any other global is refused (no code runs)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise CheckpointError(
            f"DCP metadata refers to {module}.{name}, which is not checkpoint metadata; refusing to load it"
        )


class SafeReader(FileSystemReader):
    """DCP's file reader with a metadata unpickler that cannot run code."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = Path(self.path) / ".metadata"
        try:
            with open(path, "rb") as f:
                metadata = _MetadataUnpickler(f).load()
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(f"cannot read DCP metadata {path}: {exc}") from None
        if not isinstance(metadata, Metadata):
            raise CheckpointError(f"{path} holds a {type(metadata).__name__}, not DCP metadata")
        storage_meta = metadata.storage_meta if metadata.storage_meta is not None else StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner, but non-tensor values are read with ``weights_only=True``."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise CheckpointError(
                f"sharded checkpoint value {read_item.dest_index.fqn!r} is not plain data "
                f"(weights_only loading refused it: {str(exc).splitlines()[0]})"
            ) from None
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._nested_dict import set_element

            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seal(tmp: Path, target: Path, world_size: int) -> None:
    """Hash every file of the finished directory ``tmp``, write the manifest last, and put it in place at ``target``."""
    entries = {p.name: {"sha256": _sha256(p), "bytes": p.stat().st_size} for p in sorted(tmp.iterdir()) if p.is_file()}
    manifest = {"format": SHARDED_FORMAT, "version": SHARDED_VERSION, "world_size": world_size, "files": entries}
    with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    _fsync(tmp)
    if not target.exists():
        os.replace(tmp, target)
    elif _exchange(tmp, target):  # one atomic step: the target is never absent
        shutil.rmtree(tmp, ignore_errors=True)  # now the previous checkpoint
    else:  # no renameat2: a crash between these renames leaves the previous one under its .old name
        old = target.parent / f".{target.name[:180]}.{secrets.token_hex(6)}.old"
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    _fsync(target.parent)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where that is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(ctypes.get_errno(), f"cannot swap {a} into {b}: {os.strerror(ctypes.get_errno())}")


def sweep(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary directories that saves of ``target`` left when their process was killed."""
    target = Path(target)
    pattern = re.compile(re.escape(f".{target.name[:180]}.") + r"[0-9a-f]{12}\.(tmp|old)")
    removed = []
    with contextlib.suppress(OSError):
        for entry in target.parent.iterdir():
            if pattern.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def remove_sharded(path: str | os.PathLike[str]) -> None:
    """Delete a sharded checkpoint directory (moved aside first, so it is never seen half-deleted)."""
    path = Path(path)
    if not path.exists():
        return
    if not is_sharded(path):
        raise CheckpointError(f"refusing to remove {path}: it is not a sharded interlock checkpoint (no {MANIFEST})")
    aside = path.parent / f".{path.name[:180]}.{secrets.token_hex(6)}.old"
    os.replace(path, aside)
    shutil.rmtree(aside, ignore_errors=True)


def read_manifest(path: str | os.PathLike[str], verify: bool = True) -> dict[str, Any]:
    """The manifest of the sharded checkpoint at ``path``; with ``verify``, every file is hash-checked first."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} is not a complete sharded checkpoint: it has no {MANIFEST} (the save did not finish); "
            "use another checkpoint"
        ) from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the manifest of {path}: {exc}") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if manifest.get("format") != SHARDED_FORMAT or not isinstance(files, dict):
        raise CheckpointError(f"{path}/{MANIFEST} is not an interlock sharded checkpoint manifest")
    if manifest.get("version", 0) > SHARDED_VERSION:
        raise CheckpointError(f"{path} was written by a newer interlock; upgrade interlock to load it")
    for name in (".metadata", META):
        if name not in files:
            raise CheckpointError(f"sharded checkpoint {path} lists no {name}; the checkpoint is damaged")
    if verify:
        for name, entry in files.items():
            file = path / name
            if Path(name).name != name or not file.is_file():
                raise CheckpointError(f"sharded checkpoint {path} is missing {name!r}; the checkpoint is damaged")
            if file.stat().st_size != entry.get("bytes") or _sha256(file) != entry.get("sha256"):
                raise CheckpointError(
                    f"sharded checkpoint {path}: {name} does not match its SHA-256 in {MANIFEST}; the file is "
                    "corrupted or was altered, use another checkpoint"
                )
    checked: dict[str, Any] = manifest
    return checked


def tensor_specs(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Every tensor DCP's metadata lists, by flattened key, as an empty (meta-device) tensor of its full shape."""
    metadata = SafeReader(Path(path)).read_metadata()
    return {
        key: torch.empty(tuple(md.size), dtype=md.properties.dtype, device="meta")
        for key, md in metadata.state_dict_metadata.items()
        if isinstance(md, TensorStorageMetadata)
    }


class _SafeEmptyPlanner(_EmptyStateDictLoadPlanner):
    """Loads everything the checkpoint holds (no template), non-tensor values with ``weights_only=True``."""

    load_bytes = SafeLoadPlanner.load_bytes


def load_all(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Every value of the checkpoint's DCP part as full tensors in this process (for conversion to one file)."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    try:  # what dcp.format_utils.dcp_to_torch_save does, with the safe reader and planner
        _load_state_dict(state, storage_reader=SafeReader(Path(path)), planner=_SafeEmptyPlanner(), no_dist=True)
    except CheckpointException as exc:
        _reraise(path, exc)
    return state


def load_tensors(path: str | os.PathLike[str], state_dict: dict[str, Any]) -> None:
    """Load the checkpoint's tensors in place into ``state_dict`` (sharded as its tensors are), safely."""
    _load(path, state_dict, SafeLoadPlanner())


def _load(path: str | os.PathLike[str], state_dict: dict[str, Any], planner: DefaultLoadPlanner) -> None:
    try:
        dcp.load(state_dict, storage_reader=SafeReader(Path(path)), planner=planner)
    except CheckpointException as exc:
        _reraise(path, exc)


def _reraise(path: str | os.PathLike[str], exc: CheckpointException) -> NoReturn:
    """DCP collects every rank's failure in one exception; ours are raised as they are."""
    for failure in exc.failures.values():
        if isinstance(failure, CheckpointError):
            raise failure from None
    raise CheckpointError(f"cannot load sharded checkpoint {path}: {exc}") from None


def rank_file(path: str | os.PathLike[str], rank: int, saved_world_size: int) -> Path:
    """The per-rank file this rank restores from: its own, or rank ``rank % saved`` when there were fewer ranks."""
    return Path(path) / f"rank{rank % max(saved_world_size, 1)}.ckpt"
