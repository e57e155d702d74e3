"""EarlyStopping: stop training when a monitored metric stops improving (Lightning's rules)."""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterator
from typing import Any

from interlock.core.config import TrainerConfig
from interlock.core.events import Event, Handler, Listener
from interlock.core.state import TrainerState
from interlock.core.updates import SetListenerState, Stop, Update

__all__ = ["EarlyStopping"]

_MODES = ("min", "max")
_log = logging.getLogger(__name__)


class EarlyStopping(Listener):
    """Stop when ``monitor`` has not improved by more than ``min_delta`` for ``patience`` checks.

    When the check runs follows Lightning's ``check_on_train_epoch_end``: ``True``
    checks at the end of each training epoch (after that epoch's validation),
    ``False`` after each validation inside fit, and ``None`` (the default) decides
    at set-up as Lightning does: at the training epoch end when the trainer
    validates once per epoch (``val_check_interval=1.0`` and
    ``check_val_every_n_epoch=1``), so a training metric or a run without
    validation data is checked every epoch, else after each validation.
    ``check_on`` (an event name) overrides both. A check reads
    ``state.metrics[monitor]``; it stops at once when the value is not finite
    (``check_finite``), reaches ``stopping_threshold``, or is worse than
    ``divergence_threshold``. The counters ``wait_count``, ``best_score`` and
    ``stopped_epoch`` are stored in the trainer state
    (``state.listeners["EarlyStopping"]``), so a resumed run continues them. A
    missing metric raises ``RuntimeError`` naming the available ones with
    ``strict`` (Lightning's default), else the check is skipped (with a warning
    when ``verbose``). ``verbose`` also reports each improvement and the stop.
    Checks are skipped under ``fast_dev_run``, as in Lightning.
    """

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        check_on: str | None = None,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"EarlyStopping(monitor={monitor!r}) must name a metric, e.g. 'val_loss'")
        if mode not in _MODES:
            raise ValueError(f"EarlyStopping(mode={mode!r}); choose 'min' (lower is better) or 'max'")
        if not isinstance(patience, int) or isinstance(patience, bool) or patience < 0:
            raise ValueError(f"EarlyStopping(patience={patience!r}) must be an int >= 0 (checks without improvement)")
        if isinstance(min_delta, bool) or not isinstance(min_delta, int | float) or min_delta < 0:
            raise ValueError(f"EarlyStopping(min_delta={min_delta!r}) must be a number >= 0")
        if check_on_train_epoch_end not in (None, True, False):
            raise ValueError(
                f"EarlyStopping(check_on_train_epoch_end={check_on_train_epoch_end!r}) must be None (decide at "
                "set-up, as Lightning), True (training epoch end) or False (after each validation)"
            )
        for name, value in (("stopping_threshold", stopping_threshold), ("divergence_threshold", divergence_threshold)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ValueError(f"EarlyStopping({name}={value!r}) must be None or a number")
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = float(min_delta)
        self.verbose = bool(verbose)
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.check_on = check_on
        self.strict = strict
        self._on_epoch_end = True if check_on_train_epoch_end is None else check_on_train_epoch_end
        self._skip = False

    def configure(self, config: TrainerConfig) -> None:
        """Resolve ``check_on_train_epoch_end=None`` against the trainer's validation schedule (Lightning's rule)."""
        if self.check_on_train_epoch_end is None:
            self._on_epoch_end = config.val_check_interval == 1.0 and config.check_val_every_n_epoch == 1
        self._skip = bool(config.fast_dev_run)

    def subscriptions(self) -> Iterator[tuple[str, Handler, int | None, bool | int]]:
        if self.check_on is not None:
            yield self.check_on, self.on_check, None, False
            return
        yield "#fit#val#eval_end", self.on_validation_end, None, False
        yield "#epoch_end", self.on_train_epoch_end, None, False

    def on_validation_end(self, event: Event, state: TrainerState) -> list[Update] | None:
        if self._on_epoch_end:
            return None
        return self.on_check(event, state)

    def on_train_epoch_end(self, event: Event, state: TrainerState) -> list[Update] | None:
        if not self._on_epoch_end:
            return None
        return self.on_check(event, state)

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

    def _missing_monitor(self, event: Event, state: TrainerState) -> str:
        """The message (an error when ``strict``) for a monitor no metric has."""
        return (
            f"Early stopping conditioned on metric {self.monitor!r}, which is not available at {event.name!r}. "
            f"Pass in or modify your EarlyStopping listener to use any of the following: {sorted(state.metrics)}"
        )

    def on_check(self, event: Event, state: TrainerState) -> list[Update] | None:
        if self._skip:
            return None
        if self.monitor not in state.metrics:
            message = self._missing_monitor(event, state)
            if self.strict:
                raise RuntimeError(message)
            if self.verbose:
                warnings.warn(message, RuntimeWarning, stacklevel=2)
            return None
        current = float(state.metrics[self.monitor])
        c = self.counters(state)
        best, reason, code = c["best_score"], None, 3
        if self.check_finite and not math.isfinite(current):
            reason, code = f"monitored metric {self.monitor}={current} is not finite; the best value was {best:.6g}", 4
        elif self.stopping_threshold is not None and self._better(current, self.stopping_threshold):
            code = 1
            reason = f"stopping threshold reached: {self.monitor}={current:.6g} beats {self.stopping_threshold}"
        elif self.divergence_threshold is not None and self._better(self.divergence_threshold, current):
            code = 2
            reason = (
                f"divergence threshold reached: {self.monitor}={current:.6g} is worse than {self.divergence_threshold}"
            )
        elif self._better(current + self.min_delta if self.mode == "min" else current - self.min_delta, best):
            if self.verbose:
                gain = f"improved by {abs(best - current):.3f}" if math.isfinite(best) else "improved"
                _log.info("Metric %s %s. New best score: %.3f", self.monitor, gain, current)
            c.update(best_score=current, wait_count=0)
        else:
            c["wait_count"] += 1
            if c["wait_count"] >= self.patience:
                reason = (
                    f"{self.monitor} did not improve by more than {self.min_delta} in the last {c['wait_count']} "
                    f"checks; best score {best:.6g}"
                )
        updates: list[Update] = []
        if reason is not None:  # Lightning's EarlyStoppingReason code, the value that stopped it and the best before
            c.update(stopped_epoch=event.epoch, stopping_reason=code, stopping_value=current, stopping_best=best)
            if self.verbose:
                _log.info("EarlyStopping: %s", reason)
            updates.append(Stop(reason=f"EarlyStopping: {reason}"))
        updates.insert(0, SetListenerState(self.key, {**self.stored(state), **c}))
        return updates
