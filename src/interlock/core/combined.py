"""Several loaders as one: Lightning's ``CombinedLoader`` (its modes, lengths and batches).

A dict, list or tuple of loaders given as training data is cycled together, as Lightning does
(``max_size_cycle``: the epoch is the longest loader; shorter ones start again when they run out);
each batch is the same collection of their batches (``{"a": batch_a, "b": batch_b}``). A
``CombinedLoader(iterables, mode)`` picks another mode. The trainer iterates it through
:class:`~interlock.connectors.combined.CombinedData`, which keeps each loader's position so a
resume continues every one of them exactly; iterating a ``CombinedLoader`` yourself yields
``(batch, batch_idx, dataloader_idx)`` as Lightning's does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

__all__ = ["MODES", "CombinedLoader", "combined_length", "flatten", "rebuild"]

#: Lightning's modes: which loader ends the epoch, and what the others do meanwhile
MODES = ("min_size", "max_size_cycle", "max_size", "sequential")


def flatten(iterables: Any) -> tuple[list[Any], Any]:
    """The loaders of a dict, list or tuple of them, in order, and what :func:`rebuild` needs: ``(loaders, spec)``."""
    spec: tuple[str, list[Any] | None]
    if isinstance(iterables, Mapping):
        items, spec = list(iterables.values()), ("dict", list(iterables))
    elif isinstance(iterables, list | tuple):
        items, spec = list(iterables), (type(iterables).__name__, None)
    else:
        return [iterables], ("one", None)
    for i, item in enumerate(items):
        if isinstance(item, Mapping | list | tuple):
            keys = spec[1]
            where = repr(keys[i]) if keys is not None else str(i)
            raise TypeError(
                f"CombinedLoader: item {where} is a {type(item).__name__} of loaders; interlock combines one level of "
                "loaders (a dict, list or tuple of them): flatten the collection"
            )
    return items, spec


def rebuild(items: Sequence[Any], spec: Any) -> Any:
    """The collection :func:`flatten` took apart, holding ``items`` instead."""
    kind, keys = spec
    if kind == "dict":
        return dict(zip(keys, items, strict=True))
    if kind == "tuple":
        return tuple(items)
    if kind == "list":
        return list(items)
    return items[0]


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def combined_length(mode: str, lengths: Sequence[int | None]) -> int | None:
    """How many batches ``mode`` makes of loaders of ``lengths`` (``None``: unknown, a loader has no length)."""
    if not lengths:
        return 0
    if any(n is None for n in lengths):
        if mode == "min_size" and any(n is not None for n in lengths):
            return min(n for n in lengths if n is not None)
        return None
    known = [n for n in lengths if n is not None]
    if mode == "min_size":
        return min(known)
    if mode == "sequential":
        return sum(known)
    return max(known)


class CombinedLoader(Iterable[Any]):
    """Several loaders iterated together (Lightning's ``CombinedLoader``).

    ``iterables``: a dict, list or tuple of loaders. ``mode`` (Lightning's default ``"min_size"``):

    - ``"min_size"``: the epoch ends with the shortest loader;
    - ``"max_size_cycle"``: it ends with the longest, the others starting again as they run out
      (what a dict or list of training loaders gets);
    - ``"max_size"``: it ends with the longest, the others giving ``None`` once they ran out;
    - ``"sequential"``: each loader in turn (evaluation loops' ``dataloader_idx`` 0, 1, ...).

    Iterated yourself it yields ``(batch, batch_idx, dataloader_idx)``; the trainer gives
    ``training_step`` the batch alone (the collection of the loaders' batches).
    """

    def __init__(self, iterables: Any, mode: str = "min_size") -> None:
        if mode not in MODES:
            raise ValueError(f"Unsupported mode {mode!r}, please select one of: {list(MODES)}.")
        self._iterables = iterables
        self._flattened, self._spec = flatten(iterables)
        self._mode = mode

    @property
    def iterables(self) -> Any:
        """The collection of loaders, as given."""
        return self._iterables

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def flattened(self) -> list[Any]:
        """The loaders, in order."""
        return list(self._flattened)

    @property
    def sampler(self) -> Any:
        """Each loader's ``sampler``, in the collection's shape."""
        return rebuild([getattr(x, "sampler", None) for x in self._flattened], self._spec)

    @property
    def batch_sampler(self) -> Any:
        """Each loader's ``batch_sampler``, in the collection's shape."""
        return rebuild([getattr(x, "batch_sampler", None) for x in self._flattened], self._spec)

    def with_loaders(self, loaders: Sequence[Any]) -> CombinedLoader:
        """The same combination (shape and mode) of other loaders (this process's share of them)."""
        return CombinedLoader(rebuild(loaders, self._spec), self._mode)

    def batch_of(self, batches: Sequence[Any]) -> Any:
        """One batch of every loader, in the collection's shape."""
        return rebuild(batches, self._spec)

    def __len__(self) -> int:
        n = combined_length(self._mode, [_length(x) for x in self._flattened])
        if n is None:
            raise TypeError(f"a CombinedLoader ({self._mode}) of a loader with no length has no length")
        return n

    def __iter__(self) -> Iterator[Any]:
        """``(batch, batch_idx, dataloader_idx)`` in this mode, as Lightning's yields them."""
        loaders = self._flattened
        if self._mode == "sequential":
            for i, loader in enumerate(loaders):
                for j, batch in enumerate(loader):
                    yield batch, j, i
            return
        its = [iter(x) for x in loaders]
        consumed = [False] * len(its)
        index = 0
        while True:
            out: list[Any] = [None] * len(its)
            if self._mode == "min_size":
                try:
                    out = [next(it) for it in its]
                except StopIteration:
                    return
            elif self._mode == "max_size":
                left = False
                for i, it in enumerate(its):
                    with contextlib.suppress(StopIteration):
                        out[i] = next(it)
                        left = True
                if not left:
                    return
            else:
                for i in range(len(its)):
                    try:
                        out[i] = next(its[i])
                    except StopIteration:
                        consumed[i] = True
                        if all(consumed):
                            return
                        its[i] = iter(loaders[i])
                        try:
                            out[i] = next(its[i])
                        except StopIteration:  # an empty loader: the epoch ends, as Lightning's
                            return
            yield self.batch_of(out), index, 0
            index += 1

    def __repr__(self) -> str:
        return f"CombinedLoader({self._iterables!r}, mode={self._mode!r})"
