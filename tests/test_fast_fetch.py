"""fast_fetch: a TensorDataset loader's batches by whole-tensor indexing, bitwise the DataLoader's, resume exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

import interlock
from conftest import TinyModule, only
from interlock.connectors.data import prepare_loader
from interlock.connectors.fastfetch import FastTensorLoader


def _data(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long(), torch.arange(n, dtype=torch.float64).view(n, 1, 1))


def _epochs(loader: Any, epochs: int, seed: int) -> tuple[list[list[torch.Tensor]], torch.Tensor]:
    torch.manual_seed(seed)
    batches = [b for _ in range(epochs) for b in loader]
    return batches, torch.rand(3)  # where the global RNG is after the epochs


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    batch=st.integers(1, 9),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    own_generator=st.booleans(),
    prepared=st.booleans(),
)
def test_batches_and_rng_are_bitwise_the_dataloaders(
    n: int, batch: int, shuffle: bool, drop_last: bool, own_generator: bool, prepared: bool
) -> None:
    """Any size, batch, shuffle, drop_last, generator, with or without the trainer's sampler: same batches and RNG."""

    def make(fast: bool) -> Any:
        gen = torch.Generator().manual_seed(7) if own_generator else None
        loader: Any = DataLoader(_data(n), batch_size=batch, shuffle=shuffle, drop_last=drop_last, generator=gen)
        if fast:
            loader = interlock.fast_fetch(loader)
        return prepare_loader(loader) if prepared else loader

    slow, fast = make(False), make(True)
    assert isinstance(fast, FastTensorLoader)
    (a, rng_a), (b, rng_b) = _epochs(slow, 3, 0), _epochs(fast, 3, 0)
    assert len(a) == len(b) == 3 * len(slow)
    for x, y in zip(a, b, strict=True):
        assert type(x) is type(y) is list
        for u, v in zip(x, y, strict=True):
            assert u.dtype == v.dtype and u.shape == v.shape and u.stride() == v.stride() and torch.equal(u, v)
    assert torch.equal(rng_a, rng_b)


def _fit(root: Path, fast: bool, epochs: int = 3, ckpt: Any = None, stop_at: int | None = None) -> Any:
    torch.manual_seed(0)
    module = TinyModule(dropout=0.3)
    loader: Any = DataLoader(_data(50), batch_size=8, shuffle=True)
    if fast:
        loader = interlock.fast_fetch(loader)
    trainer = interlock.Trainer(
        max_epochs=epochs, default_root_dir=root, accelerator="cpu", seed=1, **only(), num_sanity_val_steps=0
    )
    if stop_at is not None:  # save a checkpoint mid-epoch, then stop as a crash would
        mid = str(root / "mid.ckpt")

        def save(event: interlock.Event) -> Any:
            return interlock.SaveCheckpoint(mid) if event.global_step == stop_at else None

        def stop(event: interlock.Event) -> None:
            if event.global_step == stop_at + 1:
                raise KeyboardInterrupt

        trainer.on("fit.train.batch.end", save)
        trainer.on("fit.train.batch.end", stop)
    batches: list[torch.Tensor] = []
    original = module.training_step

    def step(batch: Any, batch_idx: int) -> Any:
        batches.append(batch[0].clone())
        return original(batch[:2], batch_idx)

    module.training_step = step  # type: ignore[method-assign]
    try:
        trainer.fit(module, loader, ckpt_path=ckpt)
    except KeyboardInterrupt:
        pass
    return trainer, module, batches


def test_a_fit_with_fast_fetch_trains_bitwise_as_with_the_dataloader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shuffled, with dropout: the same batches in the same order and bitwise the same weights after 3 epochs."""
    _, slow, seen_slow = _fit(tmp_path / "slow", fast=False)

    def per_sample(self: TensorDataset, index: int) -> Any:
        raise AssertionError("the fast path indexed one sample")

    monkeypatch.setattr(TensorDataset, "__getitem__", per_sample)  # the fast path takes whole batches
    _, fast, seen_fast = _fit(tmp_path / "fast", fast=True)
    assert len(seen_slow) == len(seen_fast) == 21
    assert all(torch.equal(a, b) for a, b in zip(seen_slow, seen_fast, strict=True))
    for (name, a), (_, b) in zip(slow.state_dict().items(), fast.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_a_fit_with_fast_fetch_resumes_bitwise_mid_epoch(tmp_path: Path) -> None:
    """Saved mid-epoch, crashed, resumed with fast_fetch in a new trainer: the uninterrupted run's weights."""
    _, whole, _ = _fit(tmp_path / "whole", fast=True)
    _fit(tmp_path / "parts", fast=True, stop_at=11)
    _, resumed, seen = _fit(tmp_path / "parts", fast=True, ckpt=tmp_path / "parts" / "mid.ckpt")
    assert len(seen) == 21 - 11
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    ("loader", "phrase"),
    [
        (DataLoader(list(range(8)), batch_size=2), "not a torch.utils.data.TensorDataset"),
        (DataLoader(_data(8), batch_size=2, collate_fn=lambda b: b), "its own collate_fn"),
        (DataLoader(_data(8), batch_size=2, num_workers=1), "worker processes"),
        (DataLoader(_data(8), batch_size=None), "no automatic batching"),
        ([1, 2], "not a list"),
    ],
)
def test_fast_fetch_refuses_what_it_cannot_make_identical(loader: Any, phrase: str) -> None:
    """Another dataset, a collate_fn, workers, no batching, not a DataLoader: a ValueError naming which."""
    with pytest.raises(ValueError, match=phrase):
        interlock.fast_fetch(loader)
