"""The flight recorder: what a failed run leaves for :func:`interlock.replay` to get back to the failure.

When a run fails (an exception, or a non-finite loss under ``FiniteGuard``), the event trace writes
``RUN/failure.json`` once the trace is complete: the number of the transition the run failed after
(the state that raised), its counters, the data position of the failing batch (epoch, batch index
and the loader's shuffle seed of that epoch) and the error, with the one command that reproduces it.
The same command is added to the exception's notes, so the traceback prints it.

It costs nothing per step: the trace is read back once, at the failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from interlock.core.errors import add_note
from interlock.core.state import TrainerState
from interlock.core.tracelist import last_failure

__all__ = ["FAILURE_FILE", "record_failure"]

FAILURE_FILE = "failure.json"


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def record_failure(trace: Path, state: TrainerState, exception: BaseException | None, cli: bool) -> dict[str, Any]:
    """Write ``failure.json`` beside the complete ``trace``; add the reproducing command to ``exception``."""
    failure = last_failure(trace)
    if failure is None:
        return {}
    number = failure.number
    run_dir = trace.parent
    python = f"interlock.replay({str(run_dir)!r}, module, <train data>, <val data>, to={number})"
    command = f"interlock replay {run_dir} --to {number}"
    record = {
        "transition": number,
        "state": failure.state,
        "epoch": state.epoch if failure.epoch is None else failure.epoch,
        "global_step": state.global_step if failure.global_step is None else failure.global_step,
        "batch_idx": state.batch_idx if failure.batch_idx is None else failure.batch_idx,
        "data": {k: v for k, v in state.data.items() if _plain(v)},
        "error": failure.error,
        "replay": python,
        "command": command,
    }
    tmp = None
    try:  # a run directory that cannot be written (full, read-only, gone) costs the record, not the error
        fd, tmp = tempfile.mkstemp(prefix=".failure-", suffix=".tmp", dir=run_dir)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1)
        os.replace(tmp, run_dir / FAILURE_FILE)
    except OSError:  # the failure being reported matters more than its record
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return record
    if exception is not None:
        how = command if cli else f"{python} (or `{command}` for a run started by `interlock fit`)"
        add_note(
            exception, f"interlock: reproduce it (transition {number}, recorded in {run_dir / FAILURE_FILE}): {how}"
        )
    return record
