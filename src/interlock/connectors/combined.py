"""Several training loaders iterated as one epoch, each from a position a checkpoint keeps.

:class:`CombinedData` is :class:`~interlock.connectors.data.EpochData`'s counterpart for a
:class:`~interlock.core.combined.CombinedLoader`: every loader is an ``EpochData`` of its own
(resumable, sharded across ranks), and the epoch's iterator follows Lightning's mode exactly,
including when a shorter loader starts again (a new pass draws its order from the RNG at that
batch, as ``iter(loader)`` does in Lightning). What a checkpoint keeps (:meth:`CombinedData.data_state`)
is, per loader, the pass it is in, the batches that pass has given, the pass's seed, and whether it
has run out, so a resume opens each loader where it was, drawing nothing the run did not draw.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader

from interlock.core.combined import CombinedLoader
from interlock.core.state import thaw

if TYPE_CHECKING:
    from interlock.connectors.data import EpochData

__all__ = ["CombinedData"]


class CombinedData:
    """The loaders of a ``CombinedLoader``, each an ``EpochData``, iterated in the loader's mode."""

    sampler = None
    dataset = None
    seed = None
    generator = None
    generator_epoch = None

    def __init__(self, combined: CombinedLoader, parts: Sequence[EpochData], world_size: int = 1) -> None:
        if combined.mode == "sequential":
            raise ValueError(
                "the training data is a CombinedLoader in mode 'sequential', which Lightning's fit loop refuses too "
                "(each batch would come from one loader): use 'max_size_cycle', 'max_size' or 'min_size'"
            )
        self.combined, self.parts, self.world_size = combined, list(parts), world_size
        #: the loaders as this process iterates them, in the given collection's shape and mode
        self.loader = combined.with_loaders([p.loader for p in self.parts])
        self._it: _Epoch | None = None

    def set_epoch(self, epoch: int) -> None:
        for part in self.parts:
            part.set_epoch(epoch)

    def keep_indices(self) -> bool:
        return False

    def batch_indices(self, batch_idx: int) -> list[int]:
        return []

    def restore_generator(self, data: Mapping[str, Any]) -> None:
        """Put each loader's own generator back as a checkpoint kept it (``data["dataset"]``: :meth:`data_state`)."""
        saved = data.get("dataset")
        parts = saved.get("parts") if isinstance(saved, Mapping) else None
        if not isinstance(parts, Sequence) or len(parts) != len(self.parts):
            return  # another collection: the resume refuses it when it opens the epoch
        for part, kept in zip(self.parts, parts, strict=True):
            part.restore_generator(kept)

    def dataloaders(self) -> list[Any]:
        """The loaders a new epoch opens (each draws its iterator's base seed, in order)."""
        return [p.loader for p in self.parts if isinstance(p.loader, DataLoader)]

    def iterate(
        self, start: int = 0, seed: int | None = None, state: Any = None, skip: int = 0, epoch_state: str | None = None
    ) -> Iterator[Any]:
        """The epoch's iterator: from its first batch, or (``state``: what :meth:`data_state` kept) where it was."""
        if start and state is None:
            raise RuntimeError(
                f"this checkpoint resumes batch {start} of an epoch of several training loaders but holds no position "
                "for them (saved by another version, or with other training data): resume at an epoch's end "
                "(last.ckpt of a run saved there), or pass the training data it was saved with"
            )
        self._it = _Epoch(self, state)
        return self._it

    def data_state(self) -> dict[str, Any] | None:
        """Each loader's position now (``None`` before the epoch opened)."""
        return None if self._it is None else self._it.state()


class _Epoch(Iterator[Any]):
    """One epoch of the combined loaders: Lightning's mode, each loader's pass and position counted."""

    def __init__(self, data: CombinedData, state: Any) -> None:
        self.data, self.mode = data, data.combined.mode
        n = len(data.parts)
        self.passes, self.offsets, self.consumed, self.ended = [0] * n, [0] * n, [False] * n, [False] * n
        if state is None:
            self.its = [p.iterate(0) for p in data.parts]
            return
        state = thaw(state)  # a checkpoint's position is frozen data (mappings and tuples)
        parts = state.get("parts") if isinstance(state, dict) else None
        if not isinstance(parts, list) or len(parts) != n or state.get("mode") != self.mode:
            saved = f"{len(parts)} loader(s), mode {state.get('mode')!r}" if isinstance(parts, list) else repr(state)
            raise RuntimeError(
                f"this checkpoint's training data was {saved}; this run's is {n} loader(s), mode {self.mode!r}: "
                "resume with the training data it was saved with"
            )
        if state.get("world_size", 1) != data.world_size:
            raise RuntimeError(
                f"this checkpoint was saved by {state.get('world_size')} process(es) iterating several training "
                f"loaders, and this run has {data.world_size}: their positions are per process, so resume on "
                f"{state.get('world_size')} process(es) (or from an epoch's end)"
            )
        self.its = [
            part.iterate(saved["offset"], saved.get("seed"), saved.get("state"), 0, saved.get("epoch_state"))
            for part, saved in zip(data.parts, parts, strict=True)
        ]
        self.passes = [int(s["pass"]) for s in parts]
        self.offsets = [int(s["offset"]) for s in parts]
        self.consumed = [bool(s["consumed"]) for s in parts]
        self.ended = [bool(s.get("ended", False)) for s in parts]

    def state(self) -> dict[str, Any]:
        from interlock.connectors.data import generator_state

        parts = []
        for i, part in enumerate(self.data.parts):
            own = part.generator
            parts.append(
                {
                    "pass": self.passes[i],
                    "offset": self.offsets[i],
                    "seed": part.seed,
                    "epoch_state": part.generator_epoch,
                    "generator": generator_state(own) if own is not None else None,
                    "state": part.data_state(),
                    "consumed": self.consumed[i],
                    "ended": self.ended[i],
                }
            )
        return {"mode": self.mode, "world_size": self.data.world_size, "parts": parts}

    def _next(self, i: int) -> Any:
        batch = next(self.its[i])
        self.offsets[i] += 1
        return batch

    def _restart(self, i: int) -> None:
        """Loader ``i`` ran out: a new pass over it (drawing its order now, as ``iter(loader)`` does)."""
        self.its[i] = self.data.parts[i].iterate(0)
        self.passes[i] += 1
        self.offsets[i] = 0

    def __next__(self) -> Any:
        n = len(self.its)
        out: list[Any] = [None] * n
        if self.mode == "min_size":
            for i in range(n):
                out[i] = self._next(i)
        elif self.mode == "max_size":
            left = False
            for i in range(n):
                if self.ended[i]:
                    continue
                try:
                    out[i] = self._next(i)
                    left = True
                except StopIteration:
                    self.ended[i] = True
            if not left:
                raise StopIteration
        else:  # max_size_cycle
            for i in range(n):
                try:
                    out[i] = self._next(i)
                except StopIteration:
                    self.consumed[i] = True
                    if all(self.consumed):
                        raise
                    self._restart(i)
                    out[i] = self._next(i)
        return self.data.combined.batch_of(out)
