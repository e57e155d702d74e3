"""Read an offline W&B run file (``run-<id>.wandb``): its config, summary and history, with no server.

wandb 0.31 writes no ``wandb-summary.json`` offline; the ``.wandb`` file is a log of protobuf
``Record`` messages in 32 KiB blocks (7-byte file header ``:W&B`` + magic + version, then records of
a 7-byte header: crc32c, length, kind 1 full / 2 first / 3 middle / 4 last). The messages are
parsed with wandb's own protobuf classes. ``run.finish()`` returns before W&B's service process has
written the last records, so :func:`read_run` waits (bounded) for the run's ``exit`` record.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_BLOCK, _HEADER = 32768, 7


def records(path: Path) -> Iterator[Any]:
    """Every ``Record`` in the file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file (header {data[:7]!r})")
    pos, buf = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if kind == 0 and n == 0:
            pos += left
            continue
        if pos + _HEADER + n > len(data):
            return  # a record still being written
        chunk = data[pos + _HEADER : pos + _HEADER + n]
        pos += _HEADER + n
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record
            buf = b""


def _put(into: dict[str, Any], item: Any) -> None:
    """Set ``item``'s value at its key; a nested key (``["samples", "width"]``) fills nested dicts."""
    path = [item.key] if item.key else list(item.nested_key)
    for name in path[:-1]:
        into = into.setdefault(name, {})
    into[path[-1]] = json.loads(item.value_json)


def read_run(folder: Path, timeout: float = 60.0) -> dict[str, Any]:
    """``{"id", "config", "summary", "history"}`` of the finished offline run in ``folder`` (``offline-run-*``).

    Waits up to ``timeout`` seconds for the file to hold the run's ``exit`` record (all of it written).
    """
    (path,) = folder.glob("run-*.wandb")
    deadline = time.monotonic() + timeout
    while not any(r.WhichOneof("record_type") == "exit" for r in records(path)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} has no exit record after {timeout} s: the run did not finish")
        time.sleep(0.1)
    out: dict[str, Any] = {"id": path.stem.removeprefix("run-"), "config": {}, "summary": {}, "history": []}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "config":
            for item in record.config.update:
                _put(out["config"], item)
        elif kind == "summary":
            for item in record.summary.update:
                _put(out["summary"], item)
        elif kind == "history":
            row: dict[str, Any] = {}
            for item in record.history.item:
                _put(row, item)
            out["history"].append(row)
    return out
