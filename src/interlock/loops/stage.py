"""One run of a stage: setup, the stage's loop, teardown, and how it ended.

``idle|finished|... -setup-> setup -<stage>-> <stage>... -teardown-> teardown -finish-> finished``.
An exception anywhere fires ``fail`` (``interrupt`` for Ctrl-C or preemption):
the chart moves to ``teardown``, teardown runs, the chart moves to ``failed`` /
``interrupted``, listeners get those events with the exception in the payload,
and the exception is re-raised with a note naming the state where it happened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from interlock.loops.context import Preempted
from interlock.loops.driver import Driver

__all__ = ["TRIGGERS", "run_stage"]

TRIGGERS = frozenset(
    {"setup", "fit", "validate", "test", "predict", "teardown", "finish", "fail", "interrupt"}
    | {"failed", "interrupted"}
)

T = TypeVar("T")


def run_stage(
    drv: Driver,
    stage: str,
    setup: Callable[[], None],
    body: Callable[[], T],
    teardown: Callable[[], None],
) -> T:
    """Drive ``stage`` through the chart around ``body``; return what it returns."""
    drv.evolve(stage=stage, status="running", should_stop=False, stop_reason="")
    try:
        drv.fire("setup")
        setup()
        drv.fire(stage)
        result = body()
        drv.fire("teardown")
        teardown()
    except BaseException as exc:  # every failure ends the run through the chart
        _abort(drv, exc, teardown)
        raise
    drv.evolve(status="finished")
    drv.fire("finish")
    return result


def _abort(drv: Driver, exc: BaseException, teardown: Callable[[], None]) -> None:
    where = drv.at
    interrupted = isinstance(exc, KeyboardInterrupt | Preempted)
    payload: dict[str, Any] = {"exception": exc, "error": f"{type(exc).__name__}: {exc}", "where": where}
    if where == "teardown":  # teardown itself failed: do not run it twice
        drv.evolve(status="failed")
        drv.fire("failed", payload)
        exc.add_note(f"interlock: the run failed in state {where!r}")
        return
    try:
        drv.fire("interrupt" if interrupted else "fail", payload)
    finally:
        try:
            teardown()
        finally:
            drv.evolve(status="interrupted" if interrupted else "failed")
            drv.fire("interrupted" if interrupted else "failed", payload)
    if not isinstance(exc, KeyboardInterrupt):
        exc.add_note(f"interlock: the run {'was interrupted' if interrupted else 'failed'} in state {where!r}")
