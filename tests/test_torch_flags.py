"""Trainer(deterministic=..., benchmark=...) set torch's global flags as Lightning's Trainer does."""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
import interlock.lightning as il

pl = pytest.importorskip("pytorch_lightning")


def _flags() -> tuple[bool, bool, bool, str | None]:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before = _flags()
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cudnn.benchmark = before[2]
    if before[3] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = before[3]


def _start(deterministic: bool, benchmark: bool) -> None:
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.benchmark = benchmark
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


CASES = list(itertools.product([None, True, False, "warn"], [None, True, False], [False, True], [False, True]))


def test_flags_after_construction_equal_lightnings(tmp_path: Path) -> None:
    """Every deterministic x benchmark value, from every starting state, leaves torch as pl.Trainer leaves it."""
    for deterministic, benchmark, was_deterministic, was_benchmark in CASES:
        kwargs: dict[str, Any] = {"deterministic": deterministic, "benchmark": benchmark}
        quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
        seen = []
        for make in (pl.Trainer, il.Trainer):
            _start(was_deterministic, was_benchmark)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                make(**kwargs, **quiet, default_root_dir=tmp_path)
            warned = any("benchmark=True" in str(w.message) for w in caught)
            seen.append((_flags(), warned))
        assert seen[0] == seen[1], (kwargs, was_deterministic, was_benchmark)


def test_native_trainer_takes_the_same_flags(tmp_path: Path) -> None:
    """interlock.Trainer's deterministic/benchmark mean what the Lightning Trainer's do."""
    _start(False, True)
    interlock.Trainer(deterministic=True, default_root_dir=tmp_path)
    assert _flags() == (True, False, False, ":4096:8")
    interlock.Trainer(deterministic=False, benchmark=True, default_root_dir=tmp_path)
    assert _flags()[:3] == (False, False, True)
    interlock.Trainer(default_root_dir=tmp_path)  # None, None: untouched
    assert _flags()[:3] == (False, False, True)


def test_an_exported_cublas_workspace_is_kept(tmp_path: Path) -> None:
    """A CUBLAS_WORKSPACE_CONFIG the user exported is not overwritten (Lightning overwrites it: documented)."""
    _start(False, False)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    interlock.Trainer(deterministic=True, default_root_dir=tmp_path)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"deterministic": "yes"}, r"deterministic='yes'.*'warn'"),
        ({"deterministic": 1}, r"deterministic=1.*'warn'"),
        ({"benchmark": "on"}, r"benchmark='on'.*True, False or None"),
    ],
)
def test_bad_values_are_refused_naming_the_choices(kwargs: dict[str, Any], message: str, tmp_path: Path) -> None:
    """A value that is not one of the flag's choices is a ValueError at construction that lists them."""
    with pytest.raises(ValueError, match=message):
        interlock.Trainer(**kwargs, default_root_dir=tmp_path)
