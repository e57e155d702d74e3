"""Lightning's ``utilities`` helpers that Lightning code commonly imports."""

from __future__ import annotations

from interlock.core.module import AttributeDict
from interlock.lightning._refuse import missing
from interlock.lightning.utilities.grads import grad_norm
from interlock.lightning.utilities.rank_zero import rank_zero_debug, rank_zero_info, rank_zero_only, rank_zero_warn
from interlock.lightning.utilities.seed import isolate_rng, seed_everything

__all__ = [
    "AttributeDict",
    "grad_norm",
    "isolate_rng",
    "rank_zero_debug",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "seed_everything",
]

__getattr__ = missing(
    "interlock.lightning.utilities",
    {
        "CombinedLoader": "pass a list of loaders (validation/test), or zip the training loaders in one Dataset",
        "model_summary": "print(model) or torchinfo; interlock prints no model summary",
        "find_shared_parameters": "compare parameter ids yourself: {id(p) for p in model.parameters()}",
        "set_shared_parameters": "tie them in the module's __init__",
        "measure_flops": "use torch.utils.flop_counter.FlopCounterMode",
    },
)
