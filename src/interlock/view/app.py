"""The view's web app (starlette): the page, its assets, the runs, and one run pushed live over SSE.

Routes: ``/`` the page; ``/static/*`` its assets (from the package); ``/api/runs`` the runs
under the root; ``/api/chart.svg?run=R`` the chart run ``R`` ran (its ``chart.yaml``, written
at set-up; the built-in chart for a run without one) drawn by Graphviz, plus
``/api/chart.json?run=R`` (state path -> SVG node title, and the compound states); ``&region=X&depth=N``
on the SVG draws a part (``interlock chart --region X --depth N``: the page draws one level at a time);
``/api/stream?run=R`` server-sent events: a ``snapshot``
of run ``R`` then an ``update`` whenever its trace, metrics or checkpoints change (polled
every ``poll`` seconds); ``/api/file?run=R&path=P`` one file of a run. When a token is
set every request must carry it (``?token=`` or the cookie the page sets).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interlock.core.chart import Chart, load_chart
from interlock.core.errors import ChartError
from interlock.core.traceformat import Decoder
from interlock.view.checkpoints import checkpoint_rows
from interlock.view.runs import ForbiddenPath, find_runs, read_events, read_metrics, run_dir, safe_path
from interlock.viz import GraphvizError, render, state_ids
from interlock.viz.render import check_region

__all__ = ["ViewConfig", "make_app"]

TOKEN_COOKIE = "interlock_view_token"
_CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; object-src 'none'"


@attrs.frozen
class ViewConfig:
    """What one view serves: the root of runs, the run to open first, and who may ask."""

    root: Path
    run: str | None = None
    token: str | None = None
    argv: Sequence[str] | None = None
    """The arguments ``interlock`` was started with, for the resume command (``fit --view``)."""
    poll: float = 0.2
    chart: Chart | None = None


def _static_dir() -> Path:
    return Path(str(resources.files("interlock.view").joinpath("static")))


def _state(run: Path, cfg: ViewConfig, offset: int, seen: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """What changed in ``run`` since ``offset`` / ``seen`` (updated in place)."""
    out: dict[str, Any] = {}
    events, offset = read_events(run / "events.jsonl", offset, seen.setdefault("decoder", Decoder()))
    if events:
        out["events"] = events
    metrics = run / "metrics.csv"
    stamp = (metrics.stat().st_mtime_ns, metrics.stat().st_size) if metrics.is_file() else None
    if stamp != seen.get("metrics"):
        seen["metrics"] = stamp
        out["metrics"] = read_metrics(metrics)
    folder = run / "checkpoints"
    listing = sorted((p.name, p.stat().st_mtime_ns) for p in folder.glob("*.ckpt")) if folder.is_dir() else []
    if listing != seen.get("checkpoints"):
        seen["checkpoints"] = listing
        out["checkpoints"] = checkpoint_rows(run, cfg.argv)
    cli = (run / CLI_CONFIG).is_file() or cfg.argv is not None  # a run of `interlock fit`: `interlock replay` works
    if cli != seen.get("cli"):
        seen["cli"] = cli
        out["replay"] = {"run_dir": str(run.resolve()), "cli": cli}
    return out, offset


CHART_FILE = "chart.yaml"  # interlock.connectors.rundir.CHART_FILE (the view does not import the trainer's layers)
CLI_CONFIG = "cli.yaml"  # interlock.cli.commands.CLI_CONFIG: the config of a run started by `interlock fit`


class _Charts:
    """The chart of each run, parsed and drawn once per distinct chart text."""

    def __init__(self, default: Chart) -> None:
        self.default = default
        self.charts: dict[str, Chart] = {}
        self.svgs: dict[str, str | bytes] = {}

    def of(self, run: Path | None) -> tuple[str, Chart]:
        """``(key, chart)``: the run's recorded chart, or the default when it has none (or it does not load)."""
        file = run / CHART_FILE if run is not None else None
        try:
            text = file.read_text(encoding="utf-8") if file is not None else None
        except (OSError, UnicodeDecodeError):
            text = None
        if text is None:
            return "", self.default
        key = hashlib.sha256(text.encode()).hexdigest()
        if key not in self.charts:
            try:
                self.charts[key] = load_chart(file)
            except ChartError:
                return "", self.default
        return key, self.charts[key]

    def svg(self, key: str, chart: Chart, region: str | None = None, depth: int | None = None) -> str | bytes:
        """The drawing of ``chart`` (a part: ``region`` and ``depth``, as ``interlock chart``), made once."""
        part = f"{key}|{region or ''}|{depth or ''}"
        if part not in self.svgs:
            self.svgs[part] = render(chart, "svg", region=region, depth=depth)
        return self.svgs[part]


def make_app(cfg: ViewConfig) -> Starlette:
    """The starlette app serving ``cfg.root``."""
    charts = _Charts(cfg.chart or load_chart())
    root = cfg.root.resolve()

    def run_of(request: Request) -> Path | None:
        """The run a chart request names (None: none, or not a run yet); ForbiddenPath outside the root."""
        name = request.query_params.get("run")
        if name is None:
            return None
        path = safe_path(root, name)
        return path if path.is_dir() else None

    async def page(request: Request) -> Response:
        response = FileResponse(_static_dir() / "index.html")
        if cfg.token is not None:
            response.set_cookie(TOKEN_COOKIE, cfg.token, httponly=True, samesite="strict")
        return response

    async def runs(request: Request) -> Response:
        return JSONResponse({"root": str(root), "runs": find_runs(root), "open": cfg.run})

    async def chart_svg(request: Request) -> Response:
        region = request.query_params.get("region") or None
        depth_text = request.query_params.get("depth") or None
        try:
            depth = int(depth_text) if depth_text is not None else None
            key, chart = await asyncio.to_thread(charts.of, run_of(request))
            check_region(chart, region, depth)
            svg = await asyncio.to_thread(charts.svg, key, chart, region, depth)
        except ForbiddenPath as exc:
            return Response(str(exc), status_code=403, media_type="text/plain")
        except ValueError as exc:
            return Response(str(exc), status_code=400, media_type="text/plain")
        except GraphvizError as exc:
            return Response(str(exc), status_code=503, media_type="text/plain")
        return Response(svg, media_type="image/svg+xml")

    async def chart_json(request: Request) -> Response:
        try:
            key, chart = await asyncio.to_thread(charts.of, run_of(request))
        except ForbiddenPath as exc:
            return Response(str(exc), status_code=403, media_type="text/plain")
        return JSONResponse(
            {
                "ids": state_ids(chart),
                "regions": sorted(p for p, st in chart.states.items() if st.children),
                "finals": sorted(chart.final_states),
                "guards": _guards(chart),
                "source": "run" if key else "built-in",
            }
        )

    async def stream(request: Request) -> Response:
        try:
            name = request.query_params.get("run", "")
            # the run the view was opened for may not have written anything yet
            run = safe_path(root, name) if name == cfg.run else run_dir(root, name)
        except ForbiddenPath as exc:
            return Response(str(exc), status_code=403, media_type="text/plain")

        async def updates() -> AsyncIterator[dict[str, Any]]:
            seen: dict[str, Any] = {}
            snapshot, offset = await asyncio.to_thread(_state, run, cfg, 0, seen)
            snapshot.setdefault("events", [])
            snapshot["run"] = request.query_params["run"]
            yield {"event": "snapshot", "data": _dumps(snapshot)}
            while not await request.is_disconnected():
                await asyncio.sleep(cfg.poll)
                change, offset = await asyncio.to_thread(_state, run, cfg, offset, seen)
                if change:
                    yield {"event": "update", "data": _dumps(change)}

        return EventSourceResponse(updates(), ping=10)

    async def file(request: Request) -> Response:
        try:
            run = run_dir(root, request.query_params.get("run", ""))
            path = safe_path(run, request.query_params.get("path", ""))
        except ForbiddenPath as exc:
            return Response(str(exc), status_code=403, media_type="text/plain")
        if not path.is_file():
            return Response("no such file", status_code=404, media_type="text/plain")
        return FileResponse(path)

    return Starlette(
        middleware=[Middleware(_Guard, token=cfg.token)],
        routes=[
            Route("/", page),
            Route("/api/runs", runs),
            Route("/api/chart.svg", chart_svg),
            Route("/api/chart.json", chart_json),
            Route("/api/stream", stream),
            Route("/api/file", file),
            Mount("/static", StaticFiles(directory=_static_dir()), name="static"),
        ],
    )


def _guards(chart: Chart) -> dict[str, str]:
    """``"source|trigger"`` -> the guard that decides that leaf transition, for every guarded one."""
    return {f"{leaf}|{t.trigger}": t.guard for leaf, spec in chart.leaf_specs.items() for t in spec.always if t.guard}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class _Guard:
    """ASGI middleware: refuse requests without the token (when one is set); add security headers."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.token is not None:
            request = Request(scope)
            given = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                await Response("a token is needed: open the URL the server printed", status_code=401)(
                    scope, receive, send
                )
                return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = _CSP
                headers["X-Content-Type-Options"] = "nosniff"
            await send(message)

        await self.app(scope, receive, send_with_headers)
