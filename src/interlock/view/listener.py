"""LiveView: serve the view of the run being trained, from a listener."""

from __future__ import annotations

import sys
import webbrowser
from pathlib import Path
from typing import Any

from interlock.core.events import Event, Listener, listen
from interlock.core.state import TrainerState

__all__ = ["LiveView"]


class LiveView(Listener):
    """Start ``interlock view`` for this run when a stage starts; print (and optionally open) its URL.

    It handles only stage starts: training pays nothing per step, since the view reads the
    files the run already writes (``events.jsonl``, ``metrics.csv``, ``checkpoints/``).
    Only rank 0 serves. The server runs on a daemon thread and lives as long as the process
    (or until :meth:`stop`); ``url`` is set once it runs.
    """

    def __init__(self, port: int = 0, host: str = "127.0.0.1", open_browser: bool = False) -> None:
        self.port = port
        self.host = host
        self.open_browser = open_browser
        self.url: str | None = None
        self._server: Any = None

    @listen("#stage_start")
    def on_stage_start(self, event: Event, state: TrainerState) -> None:
        """Serve the run directory's parent with this run open (once per process)."""
        if self._server is not None or not state.is_global_zero or not state.run_dir:
            return
        from interlock.view.server import ViewServer

        run = Path(state.run_dir).absolute()
        run.parent.mkdir(parents=True, exist_ok=True)
        self._server = ViewServer(run.parent, run=run.name, host=self.host, port=self.port).start()
        self.url = self._server.url
        print(f"interlock view: {self.url}", file=sys.stderr, flush=True)
        if self.open_browser:
            webbrowser.open(self.url)

    def stop(self) -> None:
        """Stop the server, if it runs."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_server": None, "url": None}
