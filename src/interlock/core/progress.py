"""Loop counters, changed only by chart transitions.

A transition's ``count:`` names the counter operations it implies (entering a
training ``batch.end`` by ``stepped`` is ``[step, batch]``: one optimizer step and
one finished batch). They act on a small mutable object on the hot path, frozen
into :class:`Progress` whenever the state is read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from interlock.core.state import Progress

__all__ = ["COUNTER_OPS", "Counters", "FrozenCounters", "compose"]


class FrozenCounters(NamedTuple):
    """The counters at one moment, as the guards read them (``Facts.progress``): :class:`Progress`'s fields.

    A named tuple rather than a :class:`Progress` because the facts are rebuilt after every counter
    operation, on the per-batch path: building it is one call, where a frozen attrs class takes six.
    """

    epoch: int = 0
    global_step: int = 0
    batch_idx: int = 0
    eval_batch_idx: int = 0
    train_batches: int = 0
    eval_loader: int = 0


class Counters:
    """Mutable twin of :class:`Progress`, owned by the runtime."""

    __slots__ = ("batch_idx", "epoch", "eval_batch_idx", "eval_loader", "global_step", "train_batches")

    def __init__(self) -> None:
        self.epoch = self.global_step = self.batch_idx = self.eval_batch_idx = self.train_batches = 0
        self.eval_loader = 0

    @classmethod
    def from_progress(cls, progress: Progress) -> Counters:
        c = cls()
        c.load(progress)
        return c

    def load(self, progress: Progress) -> None:
        """Take every counter from ``progress`` (in place)."""
        self.epoch, self.global_step, self.batch_idx = progress.epoch, progress.global_step, progress.batch_idx
        self.eval_batch_idx, self.train_batches = progress.eval_batch_idx, progress.train_batches
        self.eval_loader = progress.eval_loader

    def freeze(self) -> Progress:
        """The counters as a :class:`Progress` (they are ints >= 0 by construction: built without validating)."""
        p = _new(Progress)
        _set(p, "epoch", self.epoch)
        _set(p, "global_step", self.global_step)
        _set(p, "batch_idx", self.batch_idx)
        _set(p, "eval_batch_idx", self.eval_batch_idx)
        _set(p, "train_batches", self.train_batches)
        _set(p, "eval_loader", self.eval_loader)
        return p

    def view(self) -> FrozenCounters:
        """The counters as a :class:`FrozenCounters` (what the facts carry)."""
        return _tuple(
            FrozenCounters,
            (self.epoch, self.global_step, self.batch_idx, self.eval_batch_idx, self.train_batches, self.eval_loader),
        )


_new, _set, _tuple = object.__new__, object.__setattr__, tuple.__new__


def _epoch(c: Counters) -> None:
    c.epoch += 1
    c.batch_idx = 0


def _batch(c: Counters) -> None:
    c.batch_idx += 1
    c.train_batches += 1


def _step(c: Counters) -> None:
    c.global_step += 1


def _step_batch(c: Counters) -> None:
    c.global_step += 1
    c.batch_idx += 1
    c.train_batches += 1


def _eval_reset(c: Counters) -> None:
    c.eval_batch_idx = c.eval_loader = 0


def _eval_loader(c: Counters) -> None:
    c.eval_loader += 1
    c.eval_batch_idx = 0


def _eval_batch(c: Counters) -> None:
    c.eval_batch_idx += 1


#: The built-in counter operations a chart may name in ``count:`` (``manual``, which reads the optimizer
#: steps a manual training_step recorded, is registered by ``interlock.connectors.optim``; an
#: :class:`~interlock.Extension` adds its own).
COUNTER_OPS: dict[str, Callable[[Counters], None]] = {
    "epoch": _epoch,
    "batch": _batch,
    "step": _step,
    "eval_reset": _eval_reset,
    "eval_batch": _eval_batch,
    "eval_loader": _eval_loader,
}


def compose(
    names: Sequence[str], table: Mapping[str, Callable[[Counters], None]] | None = None
) -> Callable[[Counters], None] | None:
    """One function applying the named operations of ``table`` (the built-in ones by default) in order.

    ``None`` for none.
    """
    if not names:
        return None
    table = COUNTER_OPS if table is None else table
    if tuple(names) in (("step", "batch"), ("batch", "step")) and table["step"] is _step and table["batch"] is _batch:
        return _step_batch
    if len(names) == 1:
        return table[names[0]]
    ops = [table[n] for n in names]

    def run(c: Counters) -> None:
        for op in ops:
            op(c)

    return run
