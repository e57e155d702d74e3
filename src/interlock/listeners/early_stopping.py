"""EarlyStopping: stop training when a monitored metric stops improving (Lightning's rules)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from interlock.core.events import Event, Handler, Listener
from interlock.core.state import TrainerState
from interlock.core.updates import SetListenerState, Stop, Update

__all__ = ["EarlyStopping"]

_MODES = ("min", "max")


class EarlyStopping(Listener):
    """Stop when ``monitor`` has not improved by more than ``min_delta`` for ``patience`` checks.

    A check runs on every ``check_on`` event (default: the end of each
    validation inside fit) and reads ``state.metrics[monitor]``. It stops at once
    when the value is not finite (``check_finite``), reaches
    ``stopping_threshold``, or is worse than ``divergence_threshold``. The
    counters ``wait_count``, ``best_score`` and ``stopped_epoch`` are stored in
    the trainer state (``state.listeners["EarlyStopping"]``), so a resumed run
    continues them. With ``strict`` a missing metric is a ``KeyError``; otherwise
    the check is skipped.
    """

    def __init__(
        self,
        monitor: str,
        mode: str = "min",
        patience: int = 3,
        min_delta: float = 0.0,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on: str = "fit.train.val.end",
        strict: bool = True,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"EarlyStopping(monitor={monitor!r}) must name a metric, e.g. 'val_loss'")
        if mode not in _MODES:
            raise ValueError(f"EarlyStopping(mode={mode!r}); choose 'min' (lower is better) or 'max'")
        if not isinstance(patience, int) or isinstance(patience, bool) or patience < 0:
            raise ValueError(f"EarlyStopping(patience={patience!r}) must be an int >= 0 (checks without improvement)")
        if isinstance(min_delta, bool) or not isinstance(min_delta, int | float) or min_delta < 0:
            raise ValueError(f"EarlyStopping(min_delta={min_delta!r}) must be a number >= 0")
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = float(min_delta)
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.check_on = check_on
        self.strict = strict

    def subscriptions(self) -> Iterator[tuple[str, Handler, int | None, bool | int]]:
        yield self.check_on, self.on_check, None, False

    def _better(self, a: float, b: float) -> bool:
        return a < b if self.mode == "min" else a > b

    def counters(self, state: TrainerState) -> dict[str, Any]:
        """``wait_count``, ``best_score`` and ``stopped_epoch`` as stored in ``state``."""
        stored = self.stored(state)
        worst = math.inf if self.mode == "min" else -math.inf
        return {
            "wait_count": int(stored.get("wait_count", 0)),
            "best_score": float(stored.get("best_score", worst)),
            "stopped_epoch": int(stored.get("stopped_epoch", 0)),
        }

    def on_check(self, event: Event, state: TrainerState) -> list[Update] | None:
        if self.monitor not in state.metrics:
            if not self.strict:
                return None
            raise KeyError(
                f"EarlyStopping monitors {self.monitor!r}, which is not among the metrics "
                f"{sorted(state.metrics)} at {event.name!r}; return it from a step or fix `monitor`"
            )
        current = float(state.metrics[self.monitor])
        c = self.counters(state)
        best, reason = c["best_score"], None
        if self.check_finite and not math.isfinite(current):
            reason = f"monitored metric {self.monitor}={current} is not finite; the best value was {best:.6g}"
        elif self.stopping_threshold is not None and self._better(current, self.stopping_threshold):
            reason = f"stopping threshold reached: {self.monitor}={current:.6g} beats {self.stopping_threshold}"
        elif self.divergence_threshold is not None and self._better(self.divergence_threshold, current):
            reason = (
                f"divergence threshold reached: {self.monitor}={current:.6g} is worse than {self.divergence_threshold}"
            )
        elif self._better(current + self.min_delta if self.mode == "min" else current - self.min_delta, best):
            c.update(best_score=current, wait_count=0)
        else:
            c["wait_count"] += 1
            if c["wait_count"] >= self.patience:
                reason = (
                    f"{self.monitor} did not improve by more than {self.min_delta} in the last {c['wait_count']} "
                    f"checks; best score {best:.6g}"
                )
        updates: list[Update] = []
        if reason is not None:
            c["stopped_epoch"] = event.epoch
            updates.append(Stop(reason=f"EarlyStopping: {reason}"))
        updates.insert(0, SetListenerState(self.key, {**self.stored(state), **c}))
        return updates
