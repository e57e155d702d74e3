"""Read an offline W&B run file (``run-<id>.wandb``): its config, summary and history, with no server.

wandb 0.31 writes no ``wandb-summary.json`` offline; the ``.wandb`` file is a log of protobuf
``Record`` messages in 32 KiB blocks (7-byte file header ``:W&B`` + magic + version, then records of
a 7-byte header: crc32c, length, kind 1 full / 2 first / 3 middle / 4 last). The messages are
parsed with wandb's own protobuf classes.
"""

from __future__ import annotations

import json
import struct
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
        chunk = data[pos + _HEADER : pos + _HEADER + n]
        pos += _HEADER + n
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record
            buf = b""


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_run(folder: Path) -> dict[str, Any]:
    """``{"id", "config", "summary", "history"}`` of the offline run in ``folder`` (``offline-run-*``)."""
    (path,) = folder.glob("run-*.wandb")
    out: dict[str, Any] = {"id": path.stem.removeprefix("run-"), "config": {}, "summary": {}, "history": []}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "config":
            for item in record.config.update:
                out["config"][_key(item)] = json.loads(item.value_json)
        elif kind == "summary":
            for item in record.summary.update:
                out["summary"][_key(item)] = json.loads(item.value_json)
        elif kind == "history":
            out["history"].append({_key(i): json.loads(i.value_json) for i in record.history.item})
    return out
