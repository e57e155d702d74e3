"""Profiler: where a stage's time went, by chart state (Lightning's ``SimpleProfiler`` report, with the chart's names).

Every transition is observed (:func:`~interlock.core.events.observe`: plain values, no event
built) and the time since the one before is charged to the state it left: that state's entry
actions (the hooks it calls), its decision and the work of the transition taken. At the end of
each stage the report lists every state with its mean time, visits, total and share of the stage,
the way Lightning's ``SimpleProfiler`` lists its actions; the rows are the chart's states
(``fit.train.batch.step``, ``fit.train.val.batch.step``, ...), which ``interlock chart`` draws.

Opt-in: observing costs about 1 µs a transition. The report is this process's measurement, not
run state, so it is kept on the listener and not checkpointed (a resumed run profiles itself).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from interlock.core.events import Event, Listener, listen, observe
from interlock.core.state import TrainerState

__all__ = ["Profiler"]


class Profiler(Listener):
    """Time per chart state, reported at the end of each stage.

    ``filename``: write each stage's report to ``{dirpath}/{stage}-{filename}.txt`` (``-{rank}``
    added with several processes; ``dirpath`` defaults to the run directory), as Lightning's
    profilers name their files; without one, rank 0 prints it. ``extended=False`` leaves out the
    calls and share columns. ``clock`` returns seconds. Code of your own is timed into the same
    table with ``with profiler.profile("name"):`` (or ``start``/``stop``), as in Lightning.
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        extended: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.dirpath = None if dirpath is None else Path(dirpath)
        self.filename = filename
        self.extended = extended
        self.clock = clock
        self._totals: dict[str, float] = {}
        self._calls: dict[str, int] = {}
        self._last: float | None = None
        self._open: dict[str, float] = {}
        self._start: float | None = None
        #: each finished stage's report, in order: ``(stage, text)`` (what was printed or written)
        self.reports: list[tuple[str, str]] = []

    @observe
    def _entered(self, name: str, trigger: str, source: str, count: int, epoch: int, step: int, batch: int) -> None:
        now = self.clock()
        last = self._last
        if last is None:
            self._start = now
        else:
            self._totals[source] = self._totals.get(source, 0.0) + (now - last)
            self._calls[source] = self._calls.get(source, 0) + 1
        self._last = now

    def start(self, action_name: str) -> None:
        """Start timing ``action_name`` (a row of its own in the report)."""
        self._open[action_name] = self.clock()

    def stop(self, action_name: str) -> None:
        """Stop timing ``action_name``; ``ValueError`` when it was not started."""
        began = self._open.pop(action_name, None)
        if began is None:
            raise ValueError(f"Profiler.stop({action_name!r}): it was not started (call start({action_name!r}) first)")
        self._totals[action_name] = self._totals.get(action_name, 0.0) + (self.clock() - began)
        self._calls[action_name] = self._calls.get(action_name, 0) + 1

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Iterator[None]:
        """Time the block as ``action_name``."""
        self.start(action_name)
        try:
            yield
        finally:
            self.stop(action_name)

    def stats(self) -> dict[str, tuple[int, float]]:
        """The stage so far: each state's ``(visits, total seconds)``."""
        return {name: (self._calls[name], total) for name, total in self._totals.items()}

    def summary(self, stage: str) -> str:
        """The report of the stage so far, as a table (Lightning's ``SimpleProfiler`` layout)."""
        rows = sorted(self.stats().items(), key=lambda kv: -kv[1][1])
        wall = (self._last - self._start) if self._last is not None and self._start is not None else 0.0
        width = max([len("Action"), *(len(name) for name, _ in rows)])

        def row(*cells: str) -> str:
            action, *rest = cells
            return f"|  {action:<{width}s}\t|" + "".join(f"  {c:<15}\t|" for c in rest)

        if self.extended:
            head = row("Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %")
            body = [row("Total", "-", str(sum(c for c, _ in self.stats().values())), f"{wall:.5}", "100 %")]
            lines = [
                row(name, f"{total / calls:.5}", str(calls), f"{total:.5}", f"{100 * total / wall if wall else 0:.5}")
                for name, (calls, total) in rows
            ]
        else:
            head, body = row("Action", "Mean duration (s)", "Total time (s)"), []
            lines = [row(name, f"{total / calls:.5}", f"{total:.5}") for name, (calls, total) in rows]
        rule = "-" * len(head.expandtabs())
        title = f"{stage.upper()} Profiler Report (time per chart state)"
        return "\n".join([title, "", rule, head, rule, *body, *([rule] if body else []), *lines, rule, ""])

    @listen("#stage_end")
    def on_stage_end(self, event: Event, state: TrainerState) -> None:
        text = self.summary(state.stage)
        self.reports.append((state.stage, text))
        self._totals, self._calls, self._last, self._start = {}, {}, None, None
        if self.filename:
            folder = self.dirpath if self.dirpath is not None else Path(state.run_dir or ".")
            parts = [state.stage, self.filename]
            if state.world_size > 1:
                parts.append(str(state.global_rank))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / ("-".join(parts) + ".txt")).write_text(text, encoding="utf-8")
        elif state.is_global_zero:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
