"""Lightning's ``profilers`` names: ``SimpleProfiler`` (time per chart state) and ``PassThroughProfiler``.

``Trainer(profiler="simple")`` or ``Trainer(profiler=SimpleProfiler(dirpath, filename))`` installs
:class:`interlock.listeners.Profiler`, whose report lists the chart's states where Lightning's lists its
hook and strategy calls (the rows differ by design: they are what ``interlock chart`` draws). The other
profilers raise ``ImportError`` naming the way.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from interlock.lightning._refuse import missing
from interlock.listeners.profiler import Profiler as _Profiler

__all__ = ["PassThroughProfiler", "SimpleProfiler"]


class SimpleProfiler(_Profiler):
    """Lightning's ``SimpleProfiler(dirpath, filename, extended)``: the mean, calls and total of each chart state."""

    def __init__(
        self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None, extended: bool = True
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename, extended=extended)


class PassThroughProfiler:
    """Lightning's profiler that measures nothing (``trainer.profiler`` without one): ``profile()`` only runs."""

    dirpath: Path | None = None
    filename: str | None = None

    def start(self, action_name: str) -> None:
        """Nothing is timed."""

    def stop(self, action_name: str) -> None:
        """Nothing is timed."""

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Iterator[None]:
        """Run the block; nothing is timed."""
        yield

    def summary(self) -> str:
        return ""

    def describe(self) -> None:
        """Nothing to report."""


_TRACE = "the EventTrace listener times every transition (interlock trace, interlock view)"
__getattr__ = missing(
    "interlock.lightning.profilers",
    {
        "Profiler": "subclass interlock.listeners.Profiler (time per chart state; profile(name) times your code)",
        "AdvancedProfiler": f"run trainer.fit under cProfile, use SimpleProfiler (time per chart state), or {_TRACE}",
        "PyTorchProfiler": "wrap trainer.fit in torch.profiler.profile(...)",
        "XLAProfiler": "interlock has no XLA support",
    },
)

#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
