"""What the view reads from a root of runs: which runs there are, and each run's files, safely.

A run is a directory holding ``events.jsonl``, ``metrics.csv`` or ``checkpoints/``. Runs
are named by their path relative to the root (``version_3``, ``.`` for the root itself).
Every path a request names is checked by :func:`safe_path`: no absolute paths, no ``..``,
nothing that resolves (symlinks followed) outside the root.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from interlock.core.errors import InterlockError
from interlock.core.traceformat import Decoder, TraceFormatError
from interlock.plugins.checkpoint_io import SHARDED_MANIFEST, is_sharded

__all__ = [
    "MARKERS",
    "ForbiddenPath",
    "find_runs",
    "read_events",
    "read_metrics",
    "run_dir",
    "safe_path",
]

MARKERS = ("events.jsonl", "metrics.csv", "checkpoints")
_MAX_DEPTH = 4  # how deep below the root runs are looked for


class ForbiddenPath(InterlockError, PermissionError):
    """A request named a path outside the root, or one that is not a run's."""


def safe_path(root: Path, rel: str) -> Path:
    """``root / rel`` resolved, or :class:`ForbiddenPath` when ``rel`` could leave ``root``."""
    if not isinstance(rel, str) or "\x00" in rel or "\\" in rel:
        raise ForbiddenPath(f"bad path {rel!r}")
    pure = PurePosixPath(rel)
    if pure.is_absolute() or rel.startswith("/") or ".." in pure.parts or (len(rel) > 1 and rel[1] == ":"):
        raise ForbiddenPath(f"path {rel!r} is absolute or climbs out of the root")
    base = root.resolve()
    target = (base / pure).resolve()
    if target != base and base not in target.parents:
        raise ForbiddenPath(f"path {rel!r} leads outside the root (through a symlink?)")
    return target


def _is_run(path: Path) -> bool:
    return any((path / name).exists() for name in MARKERS)


def find_runs(root: Path) -> list[str]:
    """The runs under ``root`` (relative posix paths; ``.`` when the root is itself a run), newest first."""
    base = root.resolve()
    if not base.is_dir():
        return []
    found: list[tuple[float, str]] = []

    def walk(path: Path, depth: int) -> None:
        if _is_run(path):
            rel = path.relative_to(base).as_posix() if path != base else "."
            found.append((path.stat().st_mtime, rel))
            return
        if depth >= _MAX_DEPTH:
            return
        try:
            children = sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            return
        for child in children:
            walk(child, depth + 1)

    walk(base, 0)
    return [rel for _, rel in sorted(found, key=lambda t: (-t[0], t[1]))]


def run_dir(root: Path, run: str) -> Path:
    """The directory of run ``run`` under ``root``; :class:`ForbiddenPath` if it is not a run there."""
    path = safe_path(root, run)
    if not path.is_dir() or not _is_run(path):
        raise ForbiddenPath(f"{run!r} is not a run under the root")
    return path


def read_events(path: Path, offset: int = 0, decoder: Decoder | None = None) -> tuple[list[dict[str, Any]], int]:
    """The records of the complete lines of ``path`` from byte ``offset``, and the offset after the last one.

    Both trace formats are read (:mod:`interlock.core.traceformat`); a compact ``repeat`` line is
    one record with ``cycle`` and ``times``. Reading a file in pieces, pass the same ``decoder``
    each time (it holds the keys the earlier lines defined).
    """
    decoder = decoder if decoder is not None else Decoder()
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1  # a partial last line waits for the next read
    records: list[dict[str, Any]] = []
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        try:
            records.extend(decoder.feed(json.loads(line)))
        except (json.JSONDecodeError, TraceFormatError):
            continue
    return records, offset + end


def _number(text: str) -> float | int | str | None:
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.csv`` (numbers parsed, empty cells left out); [] if there is none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    rows: list[dict[str, Any]] = []
    for row in csv.DictReader(io.StringIO(text)):
        clean = {k: _number(v) for k, v in row.items() if k is not None and isinstance(v, str)}
        rows.append({k: v for k, v in clean.items() if v is not None})
    return rows


def files(run: Path) -> Iterator[tuple[str, os.stat_result]]:
    """The checkpoints of a run (name, stat), symlinks left out; a sharded directory by its manifest's stat."""
    folder = run / "checkpoints"
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.ckpt")):
        if path.is_symlink():
            continue
        if path.is_file():
            yield path.name, path.stat()
        elif is_sharded(path):  # by its manifest, written anew by every save of the directory
            yield path.name, (path / SHARDED_MANIFEST).stat()
