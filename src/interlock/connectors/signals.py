"""Preemption signals: the handler only records the signal; loops act on it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

__all__ = ["PreemptionFlag"]


class PreemptionFlag:
    """Installs handlers for ``signals``; ``received`` holds the first one caught.

    The handler does no I/O and takes no lock: it stores an int. The fit loop
    reads the flag at the next batch boundary, saves and moves to ``interrupted``.
    """

    def __init__(self, signals: Iterable[int] = (signal.SIGTERM,)) -> None:
        self.signals = tuple(signals)
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
