"""The bit-for-bit comparison behind every exact-resume check."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from interlock.core.bitwise import differences, relocate


@given(st.floats(allow_nan=True), st.floats(allow_nan=True))
def test_floats_compare_by_their_bits(a: float, b: float) -> None:
    """Two floats are equal exactly when their bit patterns are (nan == same nan, 0.0 != -0.0)."""
    assert (differences(a, b) == []) == (a.hex() == b.hex())


def test_tensors_must_match_dtype_shape_and_bytes() -> None:
    """A tensor differs from one with another dtype, shape, value or sign of zero."""
    t = torch.tensor([0.0, 1.5])
    assert differences(t, t.clone()) == []
    assert differences(t, t.double())[0].startswith(": torch.float32")
    assert differences(t, t.reshape(2, 1))
    assert "tensors differ" in differences(t, torch.tensor([-0.0, 1.5]))[0]
    assert differences(t, [0.0, 1.5]) == [": Tensor vs list"]


def test_nested_paths_are_named() -> None:
    """A difference deep in dicts and lists names its path; key order and lengths matter."""
    a = {"model": {"w": [1, 2.0]}, "step": 3}
    assert differences(a, {"model": {"w": [1, 2.5]}, "step": 3}) == ["/model/w[1]: 2.0 vs 2.5"]
    assert differences(a, {"step": 3, "model": {"w": [1, 2.0]}})[0].startswith(": keys")
    assert differences([1], [1, 2]) == [": length 1 vs 2"]
    assert differences(1, 1.0) == [": 1 vs 1.0"]


def test_relocate_replaces_the_run_directory_everywhere() -> None:
    """Strings, keys and nested lists lose the run directory; other values are untouched."""
    value = {"/r/a/x.ckpt": ["/r/a/y", 3, 1.5], "k": "/r/a"}
    assert relocate(value, "/r/a") == {"<run>/x.ckpt": ["<run>/y", 3, 1.5], "k": "<run>"}
