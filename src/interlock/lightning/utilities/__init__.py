"""Lightning's ``utilities`` helpers that Lightning code commonly imports."""

from __future__ import annotations

import pickle

from interlock.connectors.lightning_state import LightningEnum
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
    "GradClipAlgorithmType",
    "LightningEnum",
    "grad_norm",
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
        "CombinedLoader": "pass a list of loaders (validation/test), or zip the training loaders in one Dataset",
        "find_shared_parameters": "compare parameter ids yourself: {id(p) for p in model.parameters()}",
        "set_shared_parameters": "tie them in the module's __init__",
        "measure_flops": "use torch.utils.flop_counter.FlopCounterMode",
        "is_shared_filesystem": "interlock writes checkpoints from rank 0 (or sharded, from each rank)",
        "disable_possible_user_warnings": "filter warnings with the warnings module; interlock emits no "
        "PossibleUserWarning",
    },
)
