"""Lightning's ``utilities`` helpers that Lightning code commonly imports."""

from __future__ import annotations

import pickle
from enum import Enum

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


class LightningEnum(str, Enum):
    """A string enum that compares case-insensitively with strings (Lightning's base of its enums)."""

    @classmethod
    def from_str(cls, value: str, source: str = "key") -> LightningEnum:
        for member in cls:
            if (member.name if source == "key" else member.value).lower() == value.lower():
                return member
        raise ValueError(f"{cls.__name__}.from_str({value!r}): expected one of {[m.value for m in cls]}")

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return isinstance(other, str) and self.value.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())


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
