"""The exit handler's wait for a still-held group's threads, on a fake ``/proc/self/task`` tree."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from interlock.plugins.group_exit import runnable_gloo_threads, wait_idle


def task(root: Path, tid: int, comm: str, state: str) -> Path:
    path = root / str(tid)
    path.mkdir(parents=True, exist_ok=True)
    (path / "comm").write_text(comm + "\n")
    (path / "stat").write_text(f"{tid} ({comm}) {state} 1 1 1 0 -1 4194560 0 0 0 0\n")
    return path


def test_only_runnable_gloo_threads_are_listed(tmp_path: Path) -> None:
    """A gloo thread in state R is listed; a sleeping one, a runnable non-gloo one and a vanished one are not."""
    task(tmp_path, 1, "python", "R")
    task(tmp_path, 2, "pt_gloo_runloop", "R")
    task(tmp_path, 3, "pt_gloo_runloop", "S")
    task(tmp_path, 4, "gloo_tcp_loop", "S")
    task(tmp_path, 5, "odd) gloo R (", "S")  # a name with brackets: the state is after the last ")"
    (task(tmp_path, 6, "pt_gloo_runloop", "R") / "stat").unlink()  # ended while being read
    assert runnable_gloo_threads(tmp_path) == ["2"]


def test_wait_idle_returns_once_no_gloo_thread_is_runnable(tmp_path: Path) -> None:
    """With every gloo thread asleep the wait ends after two quiet polls, well before its deadline."""
    task(tmp_path, 2, "pt_gloo_runloop", "S")
    task(tmp_path, 3, "python", "R")
    start = time.monotonic()
    assert wait_idle(tmp_path, deadline_s=5.0, poll_s=0.01) is True
    assert time.monotonic() - start < 2.5


def test_wait_idle_waits_for_a_runnable_thread_and_gives_up_at_the_deadline(tmp_path: Path) -> None:
    """A gloo thread stuck runnable holds the wait to its deadline (False); one that goes to sleep ends it (True)."""
    stuck = task(tmp_path / "stuck", 2, "pt_gloo_runloop", "R")
    start = time.monotonic()
    assert wait_idle(stuck.parent, deadline_s=0.2, poll_s=0.01) is False
    assert time.monotonic() - start >= 0.2

    busy = task(tmp_path / "busy", 2, "pt_gloo_runloop", "R")
    timer = threading.Timer(0.15, lambda: task(busy.parent, 2, "pt_gloo_runloop", "S"))
    timer.start()
    start = time.monotonic()
    try:
        assert wait_idle(busy.parent, deadline_s=5.0, poll_s=0.01) is True
    finally:
        timer.join()
    assert time.monotonic() - start >= 0.15


def test_without_proc_the_wait_is_a_short_sleep(tmp_path: Path) -> None:
    """Where there is no task directory to read, the wait is a fixed sleep of ten polls and reports idle."""
    start = time.monotonic()
    assert wait_idle(tmp_path / "absent", deadline_s=5.0, poll_s=0.01) is True
    assert 0.1 <= time.monotonic() - start < 2.5
