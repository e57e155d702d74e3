"""``rank_zero_only`` and the ``rank_zero_*`` messages: run or print on the process of global rank 0 only."""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "global_rank",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
]

T = TypeVar("T")
log = logging.getLogger("interlock")

#: Where launchers put the global rank (torchrun, SLURM, interlock's own launcher), first match wins.
_RANK_VARS = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def _rank() -> int:
    for name in _RANK_VARS:
        value = os.environ.get(name)
        if value is not None:
            return int(value)
    return 0


def global_rank() -> int:
    """The global rank of this process as ``rank_zero_only`` reads it (its ``rank`` when set, else the environment)."""
    return rank_zero_only.rank if rank_zero_only.rank is not None else _rank()


class _RankZeroOnly:
    """Decorator: call the function on global rank 0 only (elsewhere it returns ``default``, else ``None``).

    The rank is read from the environment at each call, unless set: ``rank_zero_only.rank = 1``.
    """

    rank: int | None = None

    def __call__(self, fn: Callable[..., T], default: Any = None) -> Callable[..., T | None]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> T | None:
            rank = self.rank if self.rank is not None else _rank()
            return fn(*args, **kwargs) if rank == 0 else default

        return wrapped


rank_zero_only = _RankZeroOnly()


def rank_zero_info(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    """``logging.info`` on rank 0."""
    rank_zero_only(log.info)(*args, stacklevel=stacklevel, **kwargs)


def rank_zero_debug(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    """``logging.debug`` on rank 0."""
    rank_zero_only(log.debug)(*args, stacklevel=stacklevel, **kwargs)


def rank_zero_warn(message: str | Warning, stacklevel: int = 4, **kwargs: Any) -> None:
    """``warnings.warn`` on rank 0."""
    rank_zero_only(warnings.warn)(message, stacklevel=stacklevel, **kwargs)


def rank_zero_deprecation(message: str | Warning, stacklevel: int = 5, **kwargs: Any) -> None:
    """A ``DeprecationWarning`` on rank 0."""
    kwargs.setdefault("category", DeprecationWarning)
    rank_zero_warn(message, stacklevel=stacklevel, **kwargs)
