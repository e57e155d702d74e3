"""Timer: stop training after a given amount of training time (Lightning's ``Timer`` / ``max_time``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from interlock.core.events import Event, Listener
from interlock.core.state import TrainerState
from interlock.core.updates import SetListenerState, Stop, Update

__all__ = ["Timer", "parse_duration"]

_INTERVALS = {"step": "#train_batch_end", "epoch": "#epoch_end"}


def parse_duration(duration: str | timedelta | Mapping[str, float]) -> timedelta:
    """``"DD:HH:MM:SS"``, a ``timedelta``, or ``timedelta`` keyword arguments such as ``{"hours": 2}``."""
    if isinstance(duration, timedelta):
        return duration
    if isinstance(duration, Mapping):
        try:
            return timedelta(**duration)
        except TypeError as exc:
            raise ValueError(
                f"duration {dict(duration)!r} is not valid timedelta keyword arguments ({exc}); "
                "use keys such as 'days', 'hours', 'minutes', 'seconds'"
            ) from None
    if isinstance(duration, str):
        parts = duration.strip().split(":")
        try:
            days, hours, minutes, seconds = (int(p) for p in parts)
        except ValueError:
            raise ValueError(
                f"duration {duration!r} must be 'DD:HH:MM:SS' (four integers), e.g. '00:12:00:00' for 12 hours"
            ) from None
        return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    raise TypeError(
        f"duration {duration!r} must be a 'DD:HH:MM:SS' string, a datetime.timedelta, or a dict such as {{'hours': 2}}"
    )


class Timer(Listener):
    """Stop the fit once the training time reaches ``duration``; checked every ``interval``.

    Training time is the time spent inside ``fit`` stages (from ``fit.start``).
    The elapsed seconds are stored in the trainer state at each check (and at
    ``fit.end``), so the total accumulates across resumed runs and successive
    ``fit`` calls. ``duration=None`` only measures. ``clock`` returns seconds
    (``time.monotonic`` unless given; tests pass a fake one).
    """

    def __init__(
        self,
        duration: str | timedelta | Mapping[str, float] | None = None,
        interval: str = "step",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval not in _INTERVALS:
            raise ValueError(f"Timer(interval={interval!r}); choose 'step' (every batch) or 'epoch'")
        self.duration = parse_duration(duration) if duration is not None else None
        if self.duration is not None and self.duration < timedelta(0):
            raise ValueError(f"Timer(duration={duration!r}) is negative; give a duration >= 0")
        self.interval = interval
        self.clock = clock
        self._mark: float | None = None  # clock reading the stored elapsed time is measured from

    def subscriptions(self) -> Iterator[tuple[str, Callable[..., Any], int | None, bool | int]]:
        # Callable[..., Any], not events.Handler: these handlers take only the event, which the bus allows
        # (it reads each handler's signature) but Handler, typed as (event, state), does not say
        yield "#fit#stage_start", self.on_fit_start, None, False
        yield _INTERVALS[self.interval], self.on_check, None, False
        yield "#fit#stage_end", self.on_fit_end, None, False

    def on_fit_start(self, event: Event) -> None:
        self._mark = self.clock()

    def _elapsed(self, state: TrainerState) -> tuple[float, float]:
        now = self.clock()
        since = 0.0 if self._mark is None else max(0.0, now - self._mark)
        return float(self.stored(state).get("elapsed", 0.0)) + since, now

    def time_elapsed(self, state: TrainerState) -> float:
        """Training seconds so far, as of the last check stored in ``state``."""
        return float(self.stored(state).get("elapsed", 0.0))

    def time_remaining(self, state: TrainerState) -> float | None:
        """Seconds left before the limit (None without a ``duration``)."""
        if self.duration is None:
            return None
        return max(0.0, self.duration.total_seconds() - self.time_elapsed(state))

    def on_check(self, event: Event, state: TrainerState) -> list[Update]:
        elapsed, self._mark = self._elapsed(state)
        updates: list[Update] = [self.store(state, elapsed=elapsed)]
        if self.duration is not None and elapsed >= self.duration.total_seconds():
            spent = timedelta(seconds=round(elapsed))
            updates.append(Stop(reason=f"Timer: training time {spent} reached the limit {self.duration}"))
        return updates

    def on_fit_end(self, event: Event, state: TrainerState) -> SetListenerState:
        elapsed, _ = self._elapsed(state)
        self._mark = None
        return self.store(state, elapsed=elapsed)
