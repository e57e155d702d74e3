"""Run the view: uvicorn on a socket bound here, in the foreground or on a daemon thread."""

from __future__ import annotations

import ipaddress
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from interlock.view.app import ViewConfig, make_app
from interlock.view.runs import MARKERS

__all__ = ["LOCAL_HOST", "ViewServer", "is_loopback", "split_target"]

LOCAL_HOST = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_target(path: Path) -> tuple[Path, str | None]:
    """``(root, run)``: a run directory is served as the only run of its own root (``.``)."""
    if any((path / name).exists() for name in MARKERS):
        return path, "."
    return path, None


class ViewServer:
    """The view of the runs under ``root`` on ``host:port`` (port 0: any free one).

    A host that is not a loopback address needs ``token`` (one is made when it is None and
    ``allow_remote`` is set); requests then carry it. ``url`` includes it.
    """

    def __init__(
        self,
        root: str | Path,
        run: str | None = None,
        host: str = LOCAL_HOST,
        port: int = 0,
        token: str | None = None,
        allow_remote: bool = False,
        argv: Sequence[str] | None = None,
        poll: float = 0.2,
    ) -> None:
        if not is_loopback(host):
            if not allow_remote:
                raise ValueError(
                    f"refusing to serve on {host!r}: the view binds {LOCAL_HOST} unless asked to serve "
                    "another address explicitly (--remote, ViewServer(allow_remote=True))"
                )
            token = token or secrets.token_urlsafe(24)
        self.token = token
        self.host = host
        self.config = ViewConfig(root=Path(root), run=run, token=token, argv=argv, poll=poll)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(make_app(self.config), log_level="warning", timeout_graceful_shutdown=1, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        query = f"?token={self.token}" if self.token else ""
        if self.config.run and self.config.run != ".":
            query += ("&" if query else "?") + f"run={self.config.run}"
        return f"http://{host}:{self.port}/{query}"

    def serve_forever(self) -> None:
        """Serve in this thread until Ctrl-C."""
        self._server.run(sockets=[self._socket])

    def start(self) -> ViewServer:
        """Serve on a daemon thread; returns once it accepts connections."""
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="interlock-view", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop a server started with :meth:`start`."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
