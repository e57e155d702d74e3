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
"""

from __future__ import annotations

import functools
import gc
import importlib
import sys
import time
import weakref

import torch.distributed as dist
import torch.distributed.nn.functional  # noqa: F401  (see the module docstring)

__all__ = ["destroy_group_at_exit"]

_LRU = type(functools.lru_cache(None)(lambda: None))
_PACKAGE = "torch.distributed.tensor"


#: Seconds the GIL is left free after destroying a group that something still holds.
GRACE_S = 0.1


def destroy_group_at_exit() -> None:
    """Free what holds the default group, destroy it, and collect it (joining its threads).

    When something still holds it (a module the script keeps, sharded by FSDP, holds its mesh),
    its threads live on: the GIL is then left free for :data:`GRACE_S`, so a thread still
    releasing a finished collective can finish before the interpreter finalizes.
    """
    world = dist.group.WORLD
    if world is None or not dist.is_initialized():
        return
    clear_dtensor_caches()
    gc.collect()
    held = weakref.ref(world)
    del world
    dist.destroy_process_group()
    gc.collect()
    if held() is not None:
        time.sleep(GRACE_S)


def clear_dtensor_caches() -> None:
    """Empty the caches of ``torch.distributed.tensor``: their keys and values hold device meshes.

    The caches are private and move between torch releases (some are made inside
    functions), so they are found, not named: every live ``functools`` cache whose
    function comes from that package, plus the sharding-propagation caches the debug
    module clears (Python and C++) and the redistribution planner cache.
    """
    for obj in gc.get_objects():
        if isinstance(obj, _LRU) and str(getattr(obj, "__module__", "")).startswith(_PACKAGE):
            obj.cache_clear()
    if f"{_PACKAGE}._api" not in sys.modules:  # no DTensor was made: nothing cached
        return
    named = (("debug", "_clear_sharding_prop_cache"), ("_redistribute", "clear_redistribute_planner_cache"))
    for module, name in named:
        clear = getattr(importlib.import_module(f"{_PACKAGE}.{module}"), name, None)
        if clear is not None:
            clear()
