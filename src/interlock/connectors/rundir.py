"""Run directories: claimed atomically, written by one process at a time.

A new run claims ``root/runs/version_N`` with an exclusive ``os.mkdir``: two trainers
starting together on one root get different directories. A stage holds an exclusive
lock (``fcntl.flock`` on ``RUN/.interlock.lock``) on the run directory it writes from
set-up to teardown; the lock file names the holder's pid and host. A second process
that would write the same run (two resumes of one checkpoint) is refused at set-up.
The operating system releases the lock when its process dies, so a killed run never
leaves its directory locked; a process forked meanwhile (a DataLoader worker) closes its
inherited copy at once, so it cannot keep the lock alive after its parent is gone. Before
each checkpoint save, :func:`check_run_dir` checks that the held lock file is still the one
in the directory: a run directory deleted or replaced meanwhile fails the run (``OutputError``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.recipe import record_recipe
from interlock.core.chart import Chart
from interlock.core.errors import OutputError, RunDirectoryInUse
from interlock.core.registry import Action, Registry
from interlock.core.run import Run
from interlock.core.slots import CheckpointSlot
from interlock.core.updates import SetRunInfo

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: directories are still claimed atomically, but not locked
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CHART_FILE",
    "LOCK_FILE",
    "RunLock",
    "check_run_dir",
    "claim_run_dir",
    "continued_run_dir",
    "next_run_dir",
    "record_chart",
    "register",
    "release_run_dir",
]

#: The lock file in every run directory a stage writes (it stays; the lock is what counts).
LOCK_FILE = ".interlock.lock"
#: The chart the run's last stage ran, as YAML (what ``interlock view`` draws the run on).
CHART_FILE = "chart.yaml"
_VERSION = re.compile(r"version_([0-9]+)")


def _versions(runs: Path) -> list[int]:
    try:
        names = [entry.name for entry in os.scandir(runs)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [int(m.group(1)) for m in map(_VERSION.fullmatch, names) if m is not None]


def next_run_dir(root: Path) -> Path:
    """The directory a new run under ``root`` would claim now (nothing is created)."""
    runs = root / "runs"
    return runs / f"version_{max(_versions(runs), default=-1) + 1}"


def claim_run_dir(root: Path, attempts: int = 10_000) -> Path:
    """Create and return a new ``root/runs/version_N`` (N above every existing one), atomically.

    ``os.mkdir`` fails when the directory exists, so of two processes that pick the same N
    one gets it and the other moves on to N + 1.
    """
    runs = root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    n = max(_versions(runs), default=-1) + 1
    for _ in range(attempts):
        path = runs / f"version_{n}"
        try:
            os.mkdir(path)
        except FileExistsError:
            n += 1
            continue
        return path
    raise RuntimeError(f"could not claim a run directory under {runs} after {attempts} attempts")


def continued_run_dir(ckpt_path: Path) -> Path | None:
    """The run a checkpoint file belongs to: ``RUN`` for ``RUN/checkpoints/x.ckpt``, else ``None``.

    Where the file lives decides, never what it holds: a copied run continues in the copy.
    """
    parent = ckpt_path.absolute().parent
    return parent.parent if parent.name == "checkpoints" else None


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 256, 0).decode("utf-8", "replace").split()
    except OSError:
        return "another process"
    if not text:
        return "another process"
    host = f" on {text[1]}" if len(text) > 1 else ""
    return f"process {text[0]}{host}"


#: Locks this process holds: a forked child closes its copies of their descriptors.
_HELD: weakref.WeakSet[RunLock] = weakref.WeakSet()


def _forget_in_child() -> None:
    """In a forked child: close the inherited lock descriptors (the parent's lock stays; it is the parent's)."""
    for lock in list(_HELD):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class RunLock:
    """An exclusive lock on one run directory, held by this process until :meth:`release` (or its death)."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._fd = fd
        if fd is not None:
            _HELD.add(self)

    @classmethod
    def acquire(cls, run_dir: Path, resumed_from: str = "") -> RunLock:
        """Lock ``run_dir``; :class:`RunDirectoryInUse` when another process holds it."""
        file = run_dir / LOCK_FILE
        if fcntl is None:  # pragma: no cover - no advisory locks on this platform
            return cls(file, None)
        fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunDirectoryInUse(_in_use(run_dir, holder, resumed_from)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        return cls(file, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def check(self) -> None:
        """Raise :class:`OutputError` when the locked directory was deleted or replaced since it was locked.

        The held lock file must still be the one at :attr:`path` (same device and inode): a deleted
        run directory takes its lock file with it, and writing on would silently recreate a partial
        run that no lock protects.
        """
        if self._fd is None:
            return
        try:
            held, there = os.fstat(self._fd), os.stat(self.path)
            intact = (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)
        except OSError:
            intact = False
        if not intact:
            raise OutputError(
                f"run directory {self.path.parent} was deleted or replaced while this run was writing it "
                f"(its lock file {self.path} is gone); nothing more is written there. Resume the last "
                "checkpoint you still have in a new root, or restore the directory and resume from it",
                errno.ENOENT,
            )

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        fd, self._fd = self._fd, None
        _HELD.discard(self)
        if fd is None:
            return
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _in_use(run_dir: Path, holder: str, resumed_from: str) -> str:
    if resumed_from:
        name = Path(resumed_from).name
        fork = (
            f"To fork the run instead, copy the checkpoint into a new root and resume from the copy: "
            f"cp {resumed_from} NEW_ROOT/ and fit(..., ckpt_path='NEW_ROOT/{name}') with "
            "Trainer(default_root_dir='NEW_ROOT'); a checkpoint outside a run's checkpoints/ folder starts a new run"
        )
    else:
        fork = "To run beside it, use a Trainer of its own, or another default_root_dir"
    return (
        f"run directory {run_dir} is in use: {holder} is writing it (it holds {run_dir / LOCK_FILE}). "
        f"Two processes must not write one run. Wait for that process to end. {fork}."
    )


def check_run_dir(run: Run) -> None:
    """Raise :class:`OutputError` if the run directory this stage locked was deleted or replaced meanwhile."""
    slot = run.slots.get(CheckpointSlot)
    if slot is not None and slot.lock is not None:
        slot.lock.check()


_CHART_TEXT: weakref.WeakKeyDictionary[Chart, str] = weakref.WeakKeyDictionary()


def record_chart(run_dir: Path, chart: Chart) -> None:
    """Write ``chart`` to ``run_dir/chart.yaml`` (atomically; left alone when it already holds that chart)."""
    import yaml

    text = _CHART_TEXT.get(chart)
    if text is None:
        text = _CHART_TEXT[chart] = yaml.safe_dump(_plain(chart.data), sort_keys=False)
    target = run_dir / CHART_FILE
    with contextlib.suppress(OSError):
        if target.read_text(encoding="utf-8") == text:
            return
    fd, tmp = tempfile.mkstemp(prefix=".chart-", suffix=".tmp", dir=run_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _plain(value: Any) -> Any:
    """Mappings and sequences of a loaded chart as plain dicts and lists (what ``yaml.safe_dump`` writes)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def release_run_dir(run: Run) -> None:
    """Release the run directory lock this stage holds, if any (teardown, and after a failed teardown)."""
    slot = run.slots.get(CheckpointSlot)
    if slot is not None and slot.lock is not None:
        lock, slot.lock = slot.lock, None
        lock.release()


def register(reg: Registry) -> None:
    """``rundir.claim`` (recording the chart and a fit's trainer too) and ``rundir.release``.

    The chart goes to ``chart.yaml`` (:func:`record_chart`), the trainer of a fit to ``trainer.json``
    (:func:`~interlock.connectors.recipe.record_recipe`).
    """

    @reg.action("rundir.claim", reads=("hardware",))
    def claim(run: Run, params: Mapping[str, Any]) -> Action:
        """Claim the run directory (continued, or a new runs/version_N) and lock it against a second writer."""

        def act() -> SetRunInfo:
            strategy = run.slot(HardwareSlot).strategy
            current = run.state.run_dir  # a checkpoint's run (checkpoint.load) or this trainer's own
            root = Path(run.plan.root)
            error: BaseException | None = None
            if strategy.is_global_zero:
                path = Path(current) if current else next_run_dir(root)
                try:
                    if current:
                        path.mkdir(parents=True, exist_ok=True)
                    else:
                        path = claim_run_dir(root)
                    run.checkpoint.lock = RunLock.acquire(path, run.checkpoint.resumed)
                    if run.chart is not None:
                        record_chart(path, run.chart)
                    if run.stage == "fit":  # what a replay of the run needs besides module and data
                        record_recipe(path, run)
                except Exception as exc:  # every rank must hear of it: the others wait in the broadcast
                    error = exc
                outcome: tuple[str, str | None] = (str(path), None if error is None else f"{error}")
            else:
                outcome = (current or str(next_run_dir(root)), None)
            where, message = strategy.broadcast(outcome)
            if error is not None:
                raise error
            if message is not None:
                raise RuntimeError(f"rank 0 could not claim the run directory: {message}")
            return SetRunInfo(run_dir=where)

        return act

    @reg.action("rundir.release")
    def release(run: Run, params: Mapping[str, Any]) -> Action:
        """Release the run directory's lock: another process may continue the run now."""
        return lambda: release_run_dir(run)
