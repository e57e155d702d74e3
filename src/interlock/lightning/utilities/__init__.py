"""Lightning's ``utilities`` helpers that Lightning code commonly imports."""

from __future__ import annotations

import pickle
from typing import Any

from interlock.connectors.lightning_state import LightningEnum
from interlock.core.combined import CombinedLoader
from interlock.core.module import AttributeDict
from interlock.lightning._refuse import missing
from interlock.lightning.utilities.data import move_data_to_device, suggested_max_num_workers
from interlock.lightning.utilities.grads import grad_norm
from interlock.lightning.utilities.rank_zero import (
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)
from interlock.lightning.utilities.seed import isolate_rng, seed_everything

__all__ = [
    "AttributeDict",
    "CombinedLoader",
    "GradClipAlgorithmType",
    "LightningEnum",
    "MisconfigurationException",
    "grad_norm",
    "is_overridden",
    "is_picklable",
    "isolate_rng",
    "move_data_to_device",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "seed_everything",
    "suggested_max_num_workers",
]


class GradClipAlgorithmType(LightningEnum):
    """``Trainer(gradient_clip_algorithm=...)``: ``"norm"`` or ``"value"``."""

    NORM = "norm"
    VALUE = "value"


class MisconfigurationException(Exception):
    """Lightning's exception for a wrong setting, for code that raises or catches its own.

    interlock's own checks raise ``ValueError`` or ``TypeError`` naming the value and the fix (docs/porting.md).
    """


def is_overridden(method_name: str, instance: object | None = None, parent: type[object] | None = None) -> bool:
    """Whether ``instance``'s class overrides ``parent``'s ``method_name`` (Lightning's helper).

    ``parent`` defaults to ``LightningModule``, ``LightningDataModule`` or ``Callback``, whichever
    ``instance`` is; ``None`` as the instance is never overridden.
    """
    if instance is None:
        return False
    if parent is None:
        from interlock.lightning.callback import Callback
        from interlock.lightning.core import LightningDataModule, LightningModule

        parent = next((p for p in (LightningModule, LightningDataModule, Callback) if isinstance(instance, p)), None)
        if parent is None:
            raise ValueError(
                f"is_overridden({method_name!r}, {type(instance).__name__}): pass parent=, the class that defines "
                "the default (it is not a LightningModule, LightningDataModule or Callback)"
            )
    mine = getattr(instance, method_name, None)
    if mine is None:
        return False
    default = getattr(parent, method_name, None)
    if default is None:
        raise ValueError(f"is_overridden: {parent.__name__} has no {method_name!r} to override")
    return _code(mine) is not _code(default)


def _code(fn: Any) -> Any:
    """The code object behind a method, function or wrapper (``functools.wraps``)."""
    fn = getattr(fn, "__func__", fn)
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return getattr(fn, "__code__", fn)


def is_picklable(obj: object) -> bool:
    """Whether ``pickle.dumps(obj)`` works."""
    try:
        pickle.dumps(obj)
    except (pickle.PickleError, AttributeError, RecursionError, TypeError):
        return False
    return True


__getattr__ = missing(
    "interlock.lightning.utilities",
    {
        "find_shared_parameters": "compare parameter ids yourself: {id(p) for p in model.parameters()}",
        "set_shared_parameters": "tie them in the module's __init__",
        "measure_flops": "use torch.utils.flop_counter.FlopCounterMode",
        "is_shared_filesystem": "interlock writes checkpoints from rank 0 (or sharded, from each rank)",
        "disable_possible_user_warnings": "filter warnings with the warnings module; interlock emits no "
        "PossibleUserWarning",
    },
)
