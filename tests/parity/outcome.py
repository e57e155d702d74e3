"""What a run produced, in a form both frameworks fill in, and the one comparison."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import torch

# metrics are compared to this relative tolerance: Lightning accumulates epoch means in float32
REL_TOL = 1e-5


@dataclass
class Outcome:
    """Everything compared; ``None`` where the case does not produce it."""

    error: str | None = None
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    epoch_metrics: list[dict[str, float]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # after fit
    last_metrics: dict[str, float] = field(default_factory=dict)  # after the last call (callback_metrics)
    checkpoints: tuple[str, ...] = ()
    best_model_path: str = ""
    last_step: int | None = None  # the global step last.ckpt holds, when there is one
    stopped_epoch: int | None = None
    hooks: tuple[str, ...] = ()
    #: a recording callback's rows ("hook e<epoch> s<step> b<batch_idx>"), every hook Lightning calls on a callback
    callback_hooks: tuple[str, ...] = ()
    fetches: tuple[str, ...] = ()  # "fetch i" / "step i" in the order they happened (DataSpec.log_fetches)
    validate: Any = None
    test: Any = None
    predict: torch.Tensor | None = None
    current_epoch: int | None = None
    global_step: int | None = None
    resumed_exactly: bool | None = None


FIELDS = tuple(f.name for f in fields(Outcome))


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-7) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def _weights_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _short(value: Any) -> str:
    if isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
        return f"<{len(value)} tensors>"
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "..."


def compare(lit: Outcome, port: Outcome, ignore: frozenset[str] = frozenset()) -> dict[str, str]:
    """The fields that differ, each with both values; weights bitwise, metrics to ``REL_TOL``.

    When either side raised, only ``error`` (raised or not) and ``calls`` are compared.
    """
    diff: dict[str, str] = {}
    raised = lit.error is not None or port.error is not None
    for name in FIELDS:
        if name in ignore or (raised and name not in ("error", "calls")):
            continue
        a, b = getattr(lit, name), getattr(port, name)
        if name == "error":
            same = (a is None) == (b is None)
        elif name == "weights":
            same = _weights_equal(a, b)
        elif name == "predict":
            same = (a is None) == (b is None) and (a is None or (a.shape == b.shape and torch.equal(a, b)))
        else:
            same = _close(a, b)
        if not same:
            diff[name] = f"lightning {_short(a)} | interlock {_short(b)}"
    return diff
