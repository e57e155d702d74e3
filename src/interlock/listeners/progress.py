"""ProgressBar: tqdm bars for training and evaluation, or plain lines when not on a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from interlock.core.events import Event, Handler, Listener, listen
from interlock.core.state import TrainerState
from interlock.listeners._util import bar_metrics, format_metrics, loss_tensor, stage_starts

__all__ = ["ProgressBar"]

#: Evaluation loops (the chart's scope tags) and how the bar names them.
_EVAL = {"sanity": "Sanity Checking", "val": "Validation", "test": "Testing", "predict": "Predicting"}
#: The metrics each evaluation loop reports.
_PREFIX = {"val": "val_", "test": "test_"}
_MODES = ("auto", "bar", "lines")
#: Handlers of per-batch events: registered only when bars are drawn.
_PER_BATCH = frozenset({"on_train_batch_end", "on_eval_batch_end"})


def _isatty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


class ProgressBar(Listener):
    """Lightning's ``TQDMProgressBar``: epoch, batch, loss, it/s, and the evaluation loops.

    ``refresh_rate``: update the training bar (and read the loss with one
    ``.item()``) every N batches; ``0`` disables all output. ``mode``: ``"bar"``
    (tqdm), ``"lines"`` (one plain line per epoch and per validation / test, with
    the latest metrics), or ``"auto"``: bars when the output is a terminal, lines
    otherwise, decided here from ``file`` (default ``sys.stdout``, looked up again
    when printing). Only bars subscribe to per-batch events, so lines cost nothing
    per batch. ``leave`` keeps each finished epoch's bar on screen instead of
    reusing one. Under DDP only rank 0 prints (the rank is read at each stage
    start). Bars are display only: nothing here is run state, so nothing is stored.
    """

    def __init__(self, refresh_rate: int = 1, mode: str = "auto", leave: bool = False, file: TextIO | None = None):
        if not isinstance(refresh_rate, int) or isinstance(refresh_rate, bool) or refresh_rate < 0:
            raise ValueError(f"ProgressBar(refresh_rate={refresh_rate!r}) must be an int >= 0 (0 disables it)")
        if mode not in _MODES:
            raise ValueError(f"ProgressBar(mode={mode!r}); choose 'auto', 'bar' or 'lines'")
        self.refresh_rate = refresh_rate
        self.mode = mode
        self.leave = leave
        self.file = file
        self._bars: dict[str, Any] = {}
        self._started: dict[str, tuple[float, int]] = {}  # loop -> (clock, batches done) at its start
        self._total: int | None = None  # batches of a training epoch, learned from the last one
        self._use_bars = mode == "bar" or (mode == "auto" and _isatty(self._stream()))
        self._rank_zero: bool | None = None  # this process's rank is 0 (None: not known yet)
        self._loops: dict[str, str] = {}  # event name -> its evaluation loop's scope tag
        self._in_fit: frozenset[str] = frozenset()
        self._stage_starts: frozenset[str] = frozenset()

    def bind_tags(self, tags: Mapping[str, frozenset[str]]) -> None:
        """Learn which evaluation loop (``sanity``, ``val``, ``test``, ``predict``) each event belongs to."""
        self._loops = {name: kind for name, t in tags.items() for kind in _EVAL if kind in t}
        self._in_fit = frozenset(name for name, t in tags.items() if "fit" in t)
        self._stage_starts = stage_starts(tags)

    def subscriptions(self) -> Iterator[tuple[str, Handler, int | None, bool | int]]:
        """The declared handlers, less the per-batch ones unless bars are drawn."""
        per_batch = self.refresh_rate > 0 and self._use_bars
        for pattern, handler, every, once in super().subscriptions():
            if per_batch or getattr(handler, "__name__", "") not in _PER_BATCH:
                yield pattern, handler, every, once

    # -- output ------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        """Whether this process shows progress: ``refresh_rate > 0``, on rank 0 (or before the rank is known)."""
        return self.refresh_rate > 0 and self._rank_zero is not False

    def _stream(self) -> TextIO:
        return self.file if self.file is not None else sys.stdout

    def _learn_rank(self, event: Event, state: TrainerState) -> None:
        if event.name in self._stage_starts:
            self._rank_zero = state.is_global_zero

    def _line(self, text: str) -> None:
        print(text, file=self._stream(), flush=True)

    def _bar(self, loop: str, desc: str, total: int | None, initial: int, leave: bool) -> Any:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=total, initial=initial, desc=desc, leave=leave, file=self._stream(), dynamic_ncols=True, unit="it"
        )
        self._bars[loop] = bar
        return bar

    def _rate(self, loop: str, done: int) -> str:
        start = self._started.pop(loop, None)
        if start is None:
            return ""
        seconds = time.monotonic() - start[0]
        return f", {(done - start[1]) / seconds:.1f} it/s" if seconds > 0 else ""

    # -- training --------------------------------------------------------------------
    @listen("setup")
    def on_setup(self, event: Event) -> None:
        self.close()

    @listen("#fit#stage_start")
    def on_fit_start(self, event: Event, state: TrainerState) -> None:
        self._learn_rank(event, state)

    @listen("#epoch_start")
    def on_train_epoch_start(self, event: Event) -> None:
        self._started["train"] = (time.monotonic(), event.batch_idx)
        if self.enabled and self._use_bars:
            self._train_bar(event)

    def _train_bar(self, event: Event) -> Any:
        desc, bar = f"Epoch {event.epoch}", self._bars.get("train")
        if bar is None:
            return self._bar("train", desc, self._total, event.batch_idx, leave=True)
        bar.set_description(desc, refresh=False)
        bar.set_postfix_str("", refresh=False)
        bar.reset(total=self._total)
        if event.batch_idx:
            bar.update(event.batch_idx)
        return bar

    @listen("#train_batch_end")
    def on_train_batch_end(self, event: Event) -> None:
        n = event.batch_idx
        if not self.enabled or n % self.refresh_rate or not self._use_bars:
            return
        bar = self._bars.get("train")
        if bar is None:  # resumed inside an epoch (tqdm objects must not be used as booleans)
            bar = self._train_bar(event)
        loss = loss_tensor(event.payload.get("outputs"))
        if loss is not None and loss.numel() == 1:  # what set_postfix(loss=...) shows, without its dict work
            bar.set_postfix_str(f"loss={loss.detach().item():.4g}", refresh=False)
        bar.update(n - bar.n)

    @listen("#epoch_end")
    def on_train_epoch_end(self, event: Event, state: TrainerState) -> None:
        n = event.batch_idx
        self._total = max(self._total or 0, n) or None
        rate = self._rate("train", n)
        if not self.enabled:
            return
        metrics = format_metrics(bar_metrics(state))
        bar = self._bars.get("train")
        if bar is not None:
            bar.set_postfix_str(metrics, refresh=False)
            bar.update(n - bar.n)
            bar.refresh()
            if self.leave:
                self._bars.pop("train").close()
        elif not self._use_bars:
            self._line(f"Epoch {event.epoch}: {n} batches{rate}" + (f" | {metrics}" if metrics else ""))

    # -- evaluation ------------------------------------------------------------------
    @listen("#eval_start")
    def on_eval_start(self, event: Event, state: TrainerState) -> None:
        self._learn_rank(event, state)
        loop = self._loop(event)
        self._started[loop] = (time.monotonic(), 0)
        if self.enabled and self._use_bars:
            self._eval_bar(loop)

    def _loop(self, event: Event) -> str:
        """The bar's key: the loop's scope tag, ``fit:``-prefixed inside fit (``""``: an untagged loop)."""
        kind = self._loops.get(event.name, "")
        return f"fit:{kind}" if event.name in self._in_fit else kind

    def _eval_bar(self, loop: str) -> Any:
        label = _EVAL.get(loop.removeprefix("fit:"), "Evaluating")
        return self._bar(loop, label, None, 0, leave=not loop.startswith("fit:"))

    @listen("#eval_batch_end")
    def on_eval_batch_end(self, event: Event) -> None:
        if self.enabled and self._use_bars:
            loop = self._loop(event)
            bar = self._bars.get(loop)
            (self._eval_bar(loop) if bar is None else bar).update(1)

    @listen("#eval_end")
    def on_eval_end(self, event: Event, state: TrainerState) -> None:
        loop = self._loop(event)
        kind = loop.removeprefix("fit:")
        n = state.progress.eval_batch_idx
        rate = self._rate(loop, n)
        prefix = _PREFIX.get(kind)
        metrics = format_metrics(bar_metrics(state, prefix)) if prefix else ""
        bar = self._bars.pop(loop, None)
        if bar is not None:
            if metrics:
                bar.set_postfix_str(metrics, refresh=False)
            bar.close()
        elif self.enabled and kind != "sanity" and not self._use_bars:
            where = f" (epoch {event.epoch})" if loop.startswith("fit:") else ""
            label = _EVAL.get(kind, "Evaluating")
            self._line(f"{label}{where}: {n} batches{rate}" + (f" | {metrics}" if metrics else ""))

    # -- the end ---------------------------------------------------------------------
    @listen("teardown")
    @listen("failed")
    @listen("interrupted")
    def on_end(self, event: Event) -> None:
        self.close()

    def close(self) -> None:
        """Close every open bar."""
        bars, self._bars = self._bars, {}
        for bar in bars.values():
            bar.close()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_bars": {}}
