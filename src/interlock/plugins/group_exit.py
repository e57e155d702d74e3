"""Destroy the process group at exit while the interpreter is whole, so its threads are joined first.

A gloo group that is still alive when the interpreter finalizes keeps its worker
threads. One that then drops the last reference to a finished collective's tensor
needs the GIL; a finalizing interpreter ends the thread instead, and the rank dies
with SIGABRT ("terminate called without an active exception") after its work is done.
Destroying the group is not enough while anything still refers to it, so before
destroying it this frees what did in practice:

* DDP's wrapper, in a reference cycle (a collection frees it);
* ``torch.distributed.nn.functional``, which binds ``group=group.WORLD`` as default
  arguments when first imported (DDP imports it): imported here, before any group;
* DTensor's caches (sharding propagation, redistribution plans, mesh topology),
  which hold FSDP's device mesh and through it the group: emptied.

(Each stage's ``data.teardown`` drops the last loss, whose graph held FSDP's modules.) What
the script itself still holds at exit, such as a global module sharded by FSDP, keeps the
group alive; then :func:`wait_idle` lets its threads finish before the interpreter finalizes.
"""

from __future__ import annotations

import functools
import gc
import importlib
import sys
import time
import weakref
from pathlib import Path

import torch.distributed as dist
import torch.distributed.nn.functional  # noqa: F401  (see the module docstring)

__all__ = ["destroy_group_at_exit"]

_LRU = type(functools.lru_cache(None)(lambda: None))
_PACKAGE = "torch.distributed.tensor"


#: Longest wait, in seconds, for a group that something still holds to have no runnable thread.
IDLE_WAIT_S = 2.0
_TASKS = Path("/proc/self/task")


def destroy_group_at_exit() -> None:
    """Free what holds the default group, destroy it, and collect it (joining its threads).

    When something still holds it (a module the script keeps, sharded by FSDP, holds its mesh),
    its threads live on: the GIL is then left free until none of them is runnable
    (:func:`wait_idle`), so one still releasing a finished collective finishes first.
    """
    if not dist.is_initialized():
        return
    world = dist.group.WORLD
    if world is None:
        return
    clear_dtensor_caches()
    gc.collect()
    held = weakref.ref(world)
    del world
    dist.destroy_process_group()
    gc.collect()
    if held() is not None:
        wait_idle()


def wait_idle(tasks: Path = _TASKS, deadline_s: float = IDLE_WAIT_S, poll_s: float = 0.01) -> bool:
    """Sleep (the GIL free) until no gloo thread is runnable at two polls in a row; False at the deadline.

    A gloo worker preempted before it dropped its last collective is runnable; one waiting for
    the GIL becomes runnable when this thread sleeps. Without ``/proc`` it sleeps ``poll_s * 10``.
    """
    if not tasks.is_dir():
        time.sleep(poll_s * 10)
        return True
    end, quiet = time.monotonic() + deadline_s, 0
    while quiet < 2:
        if time.monotonic() >= end:
            return False
        time.sleep(poll_s)
        quiet = 0 if runnable_gloo_threads(tasks) else quiet + 1
    return True


def runnable_gloo_threads(tasks: Path = _TASKS) -> list[str]:
    """The ids of this process's gloo threads (by name) whose state is R (running or runnable)."""
    found = []
    for task in tasks.iterdir():
        try:
            if "gloo" not in (task / "comm").read_text():
                continue
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]  # "pid (comm) S ..."
        except (OSError, IndexError):  # the thread ended meanwhile
            continue
        if state == "R":
            found.append(task.name)
    return found


def clear_dtensor_caches() -> None:
    """Empty the caches of ``torch.distributed.tensor``: their keys and values hold device meshes.

    The caches are private and move between torch releases (some are made inside
    functions), so they are found, not named: every live ``functools`` cache whose
    function comes from that package, plus the sharding-propagation caches the debug
    module clears (Python and C++) and the redistribution planner cache.
    """
    for obj in gc.get_objects():
        if type(obj) is _LRU and str(getattr(obj, "__module__", "")).startswith(_PACKAGE):  # type(): no proxy asked
            obj.cache_clear()
    if f"{_PACKAGE}._api" not in sys.modules:  # no DTensor was made: nothing cached
        return
    named = (("debug", "_clear_sharding_prop_cache"), ("_redistribute", "clear_redistribute_planner_cache"))
    for module, name in named:
        clear = getattr(importlib.import_module(f"{_PACKAGE}.{module}"), name, None)
        if clear is not None:
            clear()
