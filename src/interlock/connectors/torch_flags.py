"""``Trainer(deterministic=..., benchmark=...)``: torch's global flags, set as Lightning sets them.

- ``deterministic=True``: ``torch.use_deterministic_algorithms(True)``, cuDNN's autotuner off
  (unless ``benchmark=True`` says otherwise, with a warning) and ``CUBLAS_WORKSPACE_CONFIG=:4096:8``,
  without which CUDA refuses every cuBLAS matrix product under deterministic algorithms
  (https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility). A value you exported
  yourself is kept.
- ``deterministic="warn"``: the same, but torch warns instead of raising on a kernel that has no
  deterministic version.
- ``deterministic=False``: ``torch.use_deterministic_algorithms(False)``; ``None`` (the default) leaves
  torch's setting alone.
- ``benchmark``: ``torch.backends.cudnn.benchmark``; ``None`` leaves it alone (``False`` when deterministic).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Literal

__all__ = ["CUBLAS_DETERMINISTIC", "check_deterministic", "set_torch_flags"]

#: cuBLAS's workspace setting that makes its kernels reproducible (Lightning sets the same)
CUBLAS_DETERMINISTIC = ":4096:8"


def check_deterministic(value: Any) -> bool | Literal["warn"] | None:
    """``value`` if it is one of ``True``, ``False``, ``"warn"``, ``None``; else a ValueError naming them."""
    if value is None or isinstance(value, bool) or value == "warn":
        return value  # type: ignore[no-any-return]
    raise ValueError(
        f"Trainer(deterministic={value!r}) is invalid: expected True (ask torch for deterministic algorithms), "
        "'warn' (warn where a kernel has none), False (turn them off) or None (leave torch's setting)"
    )


def set_torch_flags(deterministic: bool | Literal["warn"] | None, benchmark: bool | None = None) -> None:
    """Set torch's global determinism and cuDNN autotuner flags as Lightning's Trainer does."""
    import torch

    if benchmark is not None and not isinstance(benchmark, bool):
        raise ValueError(f"Trainer(benchmark={benchmark!r}) is invalid: expected True, False or None")
    if deterministic and benchmark:
        warnings.warn(
            "Trainer(deterministic=True, benchmark=True): torch ignores cuDNN's deterministic setting while its "
            "autotuner is on, so convolutions may differ between runs; pass benchmark=False or leave it out",
            UserWarning,
            stacklevel=3,
        )
    if deterministic and benchmark is None:
        benchmark = False
    if benchmark is not None:
        torch.backends.cudnn.benchmark = benchmark
    if deterministic is not None:
        torch.use_deterministic_algorithms(bool(deterministic), warn_only=deterministic == "warn")
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
