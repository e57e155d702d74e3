"""RichProgressBar: the progress bar drawn with ``rich``, as Lightning's ``RichProgressBar`` looks.

One ``rich.progress.Progress`` display holds a bar per loop: ``Epoch N`` for training (kept
on screen), and ``Sanity Checking`` / ``Validation`` / ``Testing`` / ``Predicting`` for the
evaluation loops (a validation bar inside a fit goes away when it ends), each with its batch
count, elapsed and remaining time, speed, and then the loss and metrics after the bar. The
events it follows, the refresh rate and the plain-lines fallback are :class:`ProgressBar`'s.
``rich`` is imported when the listener is made (``pip install 'interlock[rich]'``).
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from interlock.listeners.progress import ProgressBar

__all__ = ["RichProgressBar"]

INSTALL = "pip install 'interlock[rich]'"


def _rich() -> Any:
    try:
        import rich.console
        import rich.progress
        import rich.text
    except ImportError as exc:
        raise ImportError(f"RichProgressBar draws with the `rich` package, which is not installed: {INSTALL}") from exc
    return rich


class _Task:
    """One bar of the display, driven as the tqdm bar is (``update``, ``reset``, ``set_postfix_str``, ``n``)."""

    def __init__(self, progress: Any, desc: str, total: int | None, initial: int, leave: bool) -> None:
        self._progress, self.leave, self.n = progress, leave, initial
        self._id = progress.add_task(desc, total=total, completed=initial, metrics="")
        self._drawn = 0.0  # when the display was last redrawn (at most ten times a second)

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self._progress.update(self._id, description=desc, refresh=refresh)

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self._progress.update(self._id, metrics=text, refresh=refresh)

    def reset(self, total: int | None = None) -> None:
        self.n = 0
        self._progress.reset(self._id, total=total, completed=0)

    def update(self, n: int = 1) -> None:
        self.n += n
        self._progress.update(self._id, completed=self.n)
        now = time.monotonic()
        if now - self._drawn >= 0.1:
            self._drawn = now
            self._progress.refresh()

    def refresh(self) -> None:
        self._progress.refresh()

    def close(self) -> None:
        if not self.leave:
            self._progress.remove_task(self._id)
        self._progress.refresh()


class RichProgressBar(ProgressBar):
    """Lightning's ``RichProgressBar``: per-loop ``rich`` bars with the metrics after the bar.

    ``refresh_rate``, ``mode``, ``leave`` and ``file`` as :class:`ProgressBar` (``mode="auto"``:
    bars on a terminal, plain lines otherwise). Raises ``ImportError`` naming
    ``pip install 'interlock[rich]'`` when ``rich`` is missing.
    """

    def __init__(self, refresh_rate: int = 1, mode: str = "auto", leave: bool = False, file: TextIO | None = None):
        self._rich_module = _rich()
        super().__init__(refresh_rate=refresh_rate, mode=mode, leave=leave, file=file)
        self._progress: Any = None

    def _display(self) -> Any:
        if self._progress is None:
            rich = self._rich_module
            p = rich.progress
            console = rich.console.Console(file=self._stream(), force_terminal=self.mode == "bar" or None)

            class Speed(p.ProgressColumn):  # type: ignore[name-defined]
                """Batches a second, as Lightning's column shows it."""

                def render(self, task: Any) -> Any:
                    speed = f"{task.speed:>.2f}" if task.speed is not None else "0.00"
                    return rich.text.Text(f"{speed}it/s", style="progress.data.speed")

            self._progress = p.Progress(
                p.TextColumn("[progress.description]{task.description}"),
                p.BarColumn(),
                p.MofNCompleteColumn(),
                p.TimeElapsedColumn(),
                p.TextColumn("•"),
                p.TimeRemainingColumn(),
                Speed(),
                p.TextColumn("{task.fields[metrics]}"),
                console=console,
                auto_refresh=False,
            )
            self._progress.start()
        return self._progress

    def _bar(self, loop: str, desc: str, total: int | None, initial: int, leave: bool) -> Any:
        bar = _Task(self._display(), desc, total, initial, leave)
        self._bars[loop] = bar
        return bar

    def close(self) -> None:
        super().close()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_progress": None, "_rich_module": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._rich_module = _rich()
