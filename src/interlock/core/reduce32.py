"""Epoch reductions in Lightning's arithmetic: float32 unless the values are float64.

Lightning's ``ResultCollection`` keeps a mean as a float32 tensor sum of ``value * batch_size``
and divides it by the summed batch sizes at the epoch end (float64 only for float64 values,
as under ``precision="64-true"``). These do the same operations, one IEEE rounding each, on
Python floats that hold the float32 results exactly, so running sums stay plain numbers in
the state and resume bitwise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["add", "cast", "div", "mul"]


def cast(value: float, f64: bool = False) -> float:
    """A logged number as Lightning holds it: a float32 tensor (unless float64)."""
    return value if f64 else float(np.float32(value))


def mul(value: float, weight: float, f64: bool = False) -> float:
    """``value * weight`` rounded as Lightning's accumulator dtype does."""
    return value * weight if f64 else float(np.float32(value) * np.float32(weight))


def add(a: float, b: float, f64: bool = False) -> float:
    """``a + b`` in the accumulator dtype."""
    return a + b if f64 else float(np.float32(a) + np.float32(b))


def div(total: float, count: float, f64: bool = False) -> float:
    """The mean ``total / count`` in the accumulator dtype (0.0 for no weight)."""
    if not count:
        return 0.0
    return total / count if f64 else float(np.float32(total) / np.float32(count))
