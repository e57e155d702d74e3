"""A slow digits model for the live-view tests: each training step sleeps, so a page can watch it train."""

from __future__ import annotations

import time
from typing import Any

from interlock.examples.digits import DigitsClassifier


class SlowDigits(DigitsClassifier):
    """DigitsClassifier whose training steps take at least ``delay`` seconds."""

    def __init__(self, delay: float = 0.05, hidden: int = 128, lr: float = 0.05) -> None:
        super().__init__(hidden=hidden, lr=lr)
        self.delay = delay

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        time.sleep(self.delay)
        return super().training_step(batch, batch_idx)


class Broken(DigitsClassifier):
    """Fails on the second validation batch."""

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        if batch_idx == 1:
            raise ValueError("labels out of range in batch 1")
        return super().validation_step(batch, batch_idx)
