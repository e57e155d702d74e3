"""The metric history in the run directory: ``RUN/history.jsonl``, and its fingerprint in checkpoints.

A checkpoint does not carry ``state.history`` (it would grow with the run, and every
epoch's save would rewrite all of it). Before each save the rows not yet on disk are
appended to ``RUN/history.jsonl`` (one JSON object a line, exactly the row), and the
checkpoint keeps a fingerprint of the file's first rows: their number, their bytes and
the SHA-256 of those bytes. Appending and fingerprinting cost O(new rows): the hash is a
running one.

Resume reads the first ``bytes`` of the file back, checks the hash, and restores
``state.history`` from those lines exactly. A missing, cut or edited file is a
:class:`~interlock.core.errors.CheckpointError` naming the file and what to do. Rows the
file holds past the fingerprint (written after that checkpoint) are cut off at the
first save of the resumed run, as the resumed run writes its own rows there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from interlock.core.errors import CheckpointError, OutputError
from interlock.core.state import thaw

__all__ = ["HISTORY_FILE", "HistoryLog", "fingerprint_of", "read_history"]

HISTORY_FILE = "history.jsonl"
_FIELDS = ("file", "rows", "bytes", "sha256")


def _reject(value: Any) -> Any:
    raise TypeError(f"a history row holds {value!r:.80} ({type(value).__name__}); rows hold numbers and strings")


def encode(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """The lines of ``rows`` (compact JSON, floats exact: ``repr``; NaN and infinities as JSON5 literals)."""
    return "".join(json.dumps(thaw(row), separators=(",", ":"), default=_reject) + "\n" for row in rows).encode("utf-8")


class HistoryLog:
    """Keeps ``RUN/history.jsonl`` equal to the history's rows, appending only the new ones.

    One per session: the first sync of a process rewrites the file from the history
    (O(rows) once), or, after :meth:`adopt` on resume, cuts it back to the checkpoint's
    rows; every later sync appends the rows added since.
    """

    def __init__(self) -> None:
        self.path: Path | None = None
        self.rows = 0
        self.bytes = 0
        self._hash = hashlib.sha256()
        self._cut = False  # the file may hold rows past self.bytes (adopted on resume): cut before appending

    def adopt(self, path: Path, rows: int, data: bytes) -> None:
        """Continue ``path``, whose first ``rows`` rows are ``data`` (read and checked on resume)."""
        self.path, self.rows, self.bytes = path, rows, len(data)
        self._hash = hashlib.sha256(data)
        self._cut = True

    def sync(self, history: Sequence[Mapping[str, Any]], run_dir: str) -> dict[str, Any]:
        """Write the rows not on disk yet into ``run_dir``; the fingerprint of all ``len(history)`` rows."""
        path = Path(run_dir) / HISTORY_FILE
        n = len(history)
        try:
            if path != self.path or n < self.rows:
                self._rewrite(path, encode(history))
            elif n > self.rows or self._cut:
                self._append(path, encode(history[self.rows : n]))
        except OSError as exc:
            raise OutputError(
                f"cannot write checkpoint: its metric history {path} could not be written ({exc.strerror or exc}); "
                "the previous checkpoint is unchanged; free space or fix the permissions of the run directory",
                errno=exc.errno,
            ) from exc
        self.rows = n
        fingerprint = {"file": HISTORY_FILE, "rows": n, "bytes": self.bytes, "sha256": self._hash.hexdigest()}
        return {**fingerprint, "written_to": str(path.absolute())}

    def _rewrite(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self.path, self.bytes, self._hash, self._cut = path, len(data), hashlib.sha256(data), False

    def _append(self, path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
        try:
            if self._cut:
                os.ftruncate(fd, self.bytes)  # rows written after the resumed checkpoint: this run rewrites them
                self._cut = False
            os.lseek(fd, self.bytes, os.SEEK_SET)
            try:
                with memoryview(data) as view:
                    done = 0
                    while done < len(view):
                        done += os.write(fd, view[done:])
                os.fsync(fd)  # on disk before the checkpoint that names these rows
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self.bytes)
                raise
        finally:
            os.close(fd)
        self.bytes += len(data)
        self._hash.update(data)


def fingerprint_of(ckpt: Mapping[str, Any], source: str) -> dict[str, Any] | None:
    """The checkpoint's history fingerprint (None: an older checkpoint carrying its history inline)."""
    fp = ckpt.get("history")
    if fp is None:
        return None
    ok = (
        isinstance(fp, Mapping)
        and all(k in fp for k in _FIELDS)
        and fp["file"] == HISTORY_FILE
        and all(isinstance(fp[k], int) and not isinstance(fp[k], bool) and fp[k] >= 0 for k in ("rows", "bytes"))
        and isinstance(fp["sha256"], str)
    )
    if not ok:
        raise CheckpointError(
            f"{source}: its 'history' entry is {fp!r:.200}, not a history fingerprint "
            f"({{'file': {HISTORY_FILE!r}, 'rows': int, 'bytes': int, 'sha256': str}})"
        )
    return dict(fp)


def _candidates(source: Path, run_dir: Path | None, written_to: Any) -> list[Path]:
    """Where the history of checkpoint ``source`` is looked for, in order.

    Its run directory, beside the file, and the file it was written to (a checkpoint saved
    outside its run); the hash decides which one fits.
    """
    out = [run_dir / HISTORY_FILE] if run_dir is not None else []
    for place in (source.absolute().parent / HISTORY_FILE, Path(written_to) if isinstance(written_to, str) else None):
        if place is not None and place not in out:
            out.append(place)
    return out


def read_history(fp: Mapping[str, Any], source: Path, run_dir: Path | None) -> tuple[Path, bytes, list[Any]]:
    """The file, bytes and rows the fingerprint ``fp`` of checkpoint ``source`` names; ``CheckpointError`` if none.

    Looks in ``run_dir`` (the run the checkpoint belongs to), beside the checkpoint file, and
    where the file was written (``written_to``): the first whose bytes match the hash is read.
    """
    rows_n, size, digest = int(fp["rows"]), int(fp["bytes"]), str(fp["sha256"])
    places = _candidates(source, run_dir, fp.get("written_to"))
    if rows_n == 0 and size == 0:
        return (places[0], b"", [])
    problems = []
    for path in places:
        try:
            with open(path, "rb") as fh:
                data = fh.read(size)
        except FileNotFoundError:
            problems.append(f"{path} does not exist")
            continue
        except OSError as exc:
            problems.append(f"{path} cannot be read ({exc.strerror or exc})")
            continue
        if len(data) < size:
            problems.append(f"{path} holds {len(data)} bytes, fewer than the {size} the checkpoint's rows take")
            continue
        if hashlib.sha256(data).hexdigest() != digest:
            problems.append(
                f"{path} differs from what the checkpoint was saved with (SHA-256 of its first {size} bytes)"
            )
            continue
        lines = data.splitlines()
        if len(lines) != rows_n:
            problems.append(f"{path} holds {len(lines)} rows in its first {size} bytes, the checkpoint says {rows_n}")
            continue
        return path, data, [json.loads(line, parse_constant=_constant) for line in lines]
    raise CheckpointError(
        f"{source} keeps its metric history ({rows_n} rows) in the run directory, not in the checkpoint, and it "
        f"cannot be restored: {'; '.join(problems)}. Resume from the checkpoint inside the run that wrote it "
        f"(RUN/checkpoints/), or copy that run's {HISTORY_FILE} beside the checkpoint file, unchanged"
    )


def _constant(name: str) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]
