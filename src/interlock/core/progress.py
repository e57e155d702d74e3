"""Loop counters, derived from chart transitions.

Counters are not set by the loops: each transition implies its own counter
changes (entering a training ``batch.end`` finishes a batch, leaving
``optimizer_step`` by ``stepped`` is a global step, ...). They are kept in a
small mutable object on the hot path and frozen into :class:`Progress` whenever
the state is read.
"""

from __future__ import annotations

from collections.abc import Callable

from interlock.core.chart import Chart
from interlock.core.state import Progress

__all__ = ["EVAL_LOOPS", "Counters", "compile_counter_ops"]

#: The chart paths of the evaluation / prediction loops.
EVAL_LOOPS = ("fit.sanity", "fit.train.val", "validate", "test", "predict")


class Counters:
    """Mutable twin of :class:`Progress`, owned by the runtime."""

    __slots__ = ("batch_idx", "epoch", "eval_batch_idx", "global_step", "train_batches")

    def __init__(self) -> None:
        self.epoch = self.global_step = self.batch_idx = self.eval_batch_idx = self.train_batches = 0

    @classmethod
    def from_progress(cls, progress: Progress) -> Counters:
        c = cls()
        for name in cls.__slots__:
            setattr(c, name, getattr(progress, name))
        return c

    def freeze(self) -> Progress:
        return Progress(self.epoch, self.global_step, self.batch_idx, self.eval_batch_idx, self.train_batches)


def _next_epoch(c: Counters) -> None:
    c.epoch += 1
    c.batch_idx = 0


def _train_batch_done(c: Counters) -> None:
    c.batch_idx += 1
    c.train_batches += 1


def _stepped(c: Counters) -> None:
    c.global_step += 1


def _stepped_and_done(c: Counters) -> None:
    c.global_step += 1
    c.batch_idx += 1
    c.train_batches += 1


def _eval_start(c: Counters) -> None:
    c.eval_batch_idx = 0


def _eval_batch_done(c: Counters) -> None:
    c.eval_batch_idx += 1


def compile_counter_ops(chart: Chart) -> dict[tuple[str, str], Callable[[Counters], None]]:
    """Map each ``(source, trigger)`` that changes counters to the change it makes."""
    ops: dict[tuple[str, str], Callable[[Counters], None]] = {}
    for t in chart.transitions():
        if t.dest == "fit.train.batch.end":
            ops[(t.source, t.trigger)] = _stepped_and_done if t.source.endswith("optimizer_step") else _train_batch_done
        elif t.dest == "fit.train.epoch_start" and t.trigger == "next_epoch":
            ops[(t.source, t.trigger)] = _next_epoch
        elif any(t.dest == f"{loop}.start" for loop in EVAL_LOOPS):
            ops[(t.source, t.trigger)] = _eval_start
        elif any(t.dest == f"{loop}.batch.end" for loop in EVAL_LOOPS):
            ops[(t.source, t.trigger)] = _eval_batch_done
    return ops
