"""ModelSummary: print the module's layer table when a fit starts (Lightning's ``ModelSummary``)."""

from __future__ import annotations

import sys

from interlock.core.events import Event, Listener, listen
from interlock.core.state import TrainerState
from interlock.core.summary import ModuleSummary, check_max_depth

__all__ = ["SUMMARY_PAYLOAD_KEY", "ModelSummary"]

SUMMARY_PAYLOAD_KEY = "summary"


class ModelSummary(Listener):
    """Print Lightning's ``Name | Type | Params | Mode`` table and totals on rank 0 at the start of each fit.

    ``max_depth`` as Lightning's: 1 the module's children, -1 every submodule, 0 no table
    (nothing printed). A ``Trainer`` installs ``ModelSummary()`` unless
    ``enable_model_summary=False`` or you pass one (which replaces it).
    """

    def __init__(self, max_depth: int = 1) -> None:
        self.max_depth = check_max_depth("ModelSummary", max_depth)

    @listen("#fit#stage_start")
    def on_fit_start(self, event: Event, state: TrainerState) -> None:
        if not self.max_depth or not state.is_global_zero:
            return
        summary = event.payload.get(SUMMARY_PAYLOAD_KEY)
        if not isinstance(summary, ModuleSummary):
            raise RuntimeError(
                f"ModelSummary needs the module's layer table in the payload of {event.name!r} (key "
                f"{SUMMARY_PAYLOAD_KEY!r}), and this chart does not declare it there; add `payload: [summary]` "
                "to the fit's stage_start state, or pass enable_model_summary=False"
            )
        sys.stdout.write(summary.table(self.max_depth) + "\n")
        sys.stdout.flush()
