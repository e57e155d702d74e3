"""An opt-in fast fetch for in-memory ``TensorDataset`` loaders: whole batches by one index per tensor.

``fast_fetch(DataLoader(TensorDataset(x, y), batch_size=B, shuffle=...))`` returns a
:class:`FastTensorLoader`: the same loader (dataset, sampler, batch size, ``drop_last``,
generator), whose iterator takes each batch as ``[x[idx], y[idx]]`` for the batch's
indices instead of ``B`` calls of ``dataset[i]`` and a ``default_collate`` stack.

It is bitwise the DataLoader's path, by construction:

- the indices come from the loader's own batch sampler, iterated as the DataLoader does,
  so the order, the shuffling and every draw from the global RNG or the loader's
  ``generator`` are the same (a shuffled epoch draws its seed at the first batch);
- making the iterator draws the DataLoader's ``base_seed`` from the same RNG, as
  ``DataLoader.__iter__`` does (the global RNG after it is the same);
- ``x[idx]`` holds the same values as ``torch.stack([x[i] for i in idx])``, contiguous, and
  a batch is a ``list`` as ``default_collate`` makes of a ``TensorDataset``'s tuples.

Anything else is refused when wrapped, naming what does not fit: another dataset class,
a ``collate_fn``, worker processes, ``pin_memory``, a ``timeout``, no automatic batching.
The trainer keeps the class when it swaps in its resumable sampler, so resume stays exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data._utils.collate import default_collate

__all__ = ["FastTensorLoader", "fast_fetch", "why_not_fast"]


def why_not_fast(loader: DataLoader[Any]) -> str:
    """Why ``loader`` cannot take the fast path (``""``: it can)."""
    if type(loader.dataset) is not TensorDataset:
        return f"its dataset is a {type(loader.dataset).__name__}, not a torch.utils.data.TensorDataset"
    if loader.batch_sampler is None:
        return "it has no automatic batching (batch_size=None)"
    if loader.collate_fn is not default_collate:
        return f"it has its own collate_fn ({getattr(loader.collate_fn, '__name__', loader.collate_fn)!r})"
    if loader.num_workers:
        return f"it loads in worker processes (num_workers={loader.num_workers})"
    if loader.pin_memory:
        return "it pins memory (pin_memory=True)"
    if loader.timeout:
        return f"it has a timeout ({loader.timeout})"
    return ""


class FastTensorLoader(DataLoader):
    """A ``DataLoader`` over a ``TensorDataset`` whose batches are taken by indexing whole tensors."""

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        why = why_not_fast(self)
        if why:  # changed after it was made (a subclass, a new collate_fn): the DataLoader's own path
            return super().__iter__()
        return _Batches(self)


class _Batches:
    """The iterator of a :class:`FastTensorLoader` (what ``_SingleProcessDataLoaderIter`` does, by whole tensors)."""

    def __init__(self, loader: FastTensorLoader) -> None:
        self._indices = iter(loader.batch_sampler)  # type: ignore[arg-type]
        self._tensors = loader.dataset.tensors  # type: ignore[attr-defined]
        self._length = len(loader)
        # DataLoader's iterator draws its base seed here, from the loader's generator or the global RNG
        torch.empty((), dtype=torch.int64).random_(generator=loader.generator)

    def __iter__(self) -> _Batches:
        return self

    def __len__(self) -> int:
        return self._length

    def __next__(self) -> list[torch.Tensor]:
        index = torch.as_tensor(next(self._indices), dtype=torch.int64)
        return [_contiguous(t[index]) for t in self._tensors]


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


def fast_fetch(loader: DataLoader[Any]) -> FastTensorLoader:
    """``loader`` with the fast fetch path: its batches are bitwise the same, in the same order.

    Raises ``ValueError`` naming what does not fit when ``loader`` is not a single-process
    ``DataLoader`` over a ``TensorDataset`` with the default collate.
    """
    if not isinstance(loader, DataLoader):
        raise ValueError(f"fast_fetch() takes a torch DataLoader over a TensorDataset, not a {type(loader).__name__}")
    if isinstance(loader, FastTensorLoader):
        return loader
    why = why_not_fast(loader)
    if why:
        raise ValueError(
            f"fast_fetch() cannot take this DataLoader: {why}. It slices whole batches out of a TensorDataset's "
            "tensors in the main process; pass the DataLoader itself to the trainer instead"
        )
    batching: dict[str, Any] = (
        {"batch_size": loader.batch_size, "drop_last": loader.drop_last, "sampler": loader.sampler}
        if loader.batch_size is not None
        else {"batch_sampler": loader.batch_sampler}
    )
    return FastTensorLoader(loader.dataset, generator=loader.generator, **batching)
