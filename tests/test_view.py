"""`interlock view`: what it serves and refuses (starlette's test client), and the page in headless Chromium.

The browser tests drive the system Chromium (Debian's ``chromium``, which ``make test`` installs through
``tools/sysdeps.sh``) through Playwright's Python client; they skip, saying so, when either is missing. Screenshots
go to ``tests/artifacts/view/`` (git-ignored).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the view extra is not installed: pip install 'interlock[view]'")
pytest.importorskip("sse_starlette", reason="the view extra is not installed: pip install 'interlock[view]'")
pytest.importorskip("uvicorn", reason="the view extra is not installed: pip install 'interlock[view]'")

from starlette.testclient import TestClient

from interlock.view import ForbiddenPath, ViewServer, find_runs, make_app, safe_path
from interlock.view.app import ViewConfig
from interlock.view.checkpoints import resume_command

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts" / "view"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
CLI = [sys.executable, "-m", "interlock.cli.main"]


def _fake_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_text(
        '{"time": 1.0, "event": "setup", "trigger": "setup", "source": "idle", "epoch": 0, "global_step": 0}\n'
    )
    (folder / "metrics.csv").write_text("stage,epoch,global_step,val_loss\nval,0,5,0.5\n")
    return folder


# -- serving only the runs under the root --------------------------------------------------------
def test_safe_path_refuses_what_leaves_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    run = _fake_run(root / "version_0")
    (tmp_path / "secret.txt").write_text("TOP-SECRET-CONTENT")
    (run / "out").symlink_to(tmp_path / "secret.txt")
    assert safe_path(root, "version_0/metrics.csv") == (run / "metrics.csv").resolve()
    for bad in ("../secret.txt", "version_0/../../secret.txt", "/etc/passwd", "version_0/out", "a\\..\\b", "C:x"):
        with pytest.raises(ForbiddenPath):
            safe_path(root, bad)


def test_runs_are_found_under_the_root(tmp_path: Path) -> None:
    _fake_run(tmp_path / "runs" / "version_0")
    _fake_run(tmp_path / "runs" / "exp" / "version_1")
    (tmp_path / "runs" / "empty").mkdir()
    assert sorted(find_runs(tmp_path / "runs")) == ["exp/version_1", "version_0"]
    assert find_runs(tmp_path / "runs" / "version_0") == ["."]


def test_the_app_serves_run_files_and_refuses_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run = _fake_run(root / "version_0")
    (tmp_path / "secret.txt").write_text("TOP-SECRET-CONTENT")
    (run / "leak").symlink_to(tmp_path / "secret.txt")
    (root / "outside").symlink_to(tmp_path, target_is_directory=True)
    client = TestClient(make_app(ViewConfig(root=root)))
    assert client.get("/api/runs").json()["runs"] == ["version_0"]
    ok = client.get("/api/file", params={"run": "version_0", "path": "metrics.csv"})
    assert ok.status_code == 200 and "val_loss" in ok.text
    assert "Content-Security-Policy" in ok.headers
    refused = [
        {"run": "version_0", "path": "../../secret.txt"},
        {"run": "version_0", "path": str(tmp_path / "secret.txt")},
        {"run": "version_0", "path": "leak"},
        {"run": "..", "path": "secret.txt"},
        {"run": "outside", "path": "secret.txt"},
        {"run": "/", "path": "etc/passwd"},
    ]
    for params in refused:
        response = client.get("/api/file", params=params)
        assert response.status_code == 403, params
        assert "TOP-SECRET" not in response.text
    assert client.get("/static/../../view/app.py").status_code == 404
    assert client.get("/api/stream", params={"run": "../.."}).status_code == 403


def test_another_address_needs_the_flag_and_then_a_token(tmp_path: Path) -> None:
    _fake_run(tmp_path / "version_0")
    with pytest.raises(ValueError, match="refusing to serve"):
        ViewServer(tmp_path, host="0.0.0.0")
    client = TestClient(make_app(ViewConfig(root=tmp_path, token="s3cret")))
    assert client.get("/api/runs").status_code == 401
    assert client.get("/api/runs", params={"token": "wrong"}).status_code == 401
    assert client.get("/", params={"token": "s3cret"}).status_code == 200
    assert client.get("/api/runs").status_code == 200  # the page set the cookie


def test_cli_view_refuses_a_remote_host_without_the_flag(tmp_path: Path) -> None:
    out = subprocess.run(
        [*CLI, "view", str(tmp_path), "--host", "0.0.0.0"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2 and "refusing to serve" in out.stderr


def test_resume_command_keeps_the_run_arguments() -> None:
    cmd = resume_command(Path("/r/last.ckpt"), ["fit", "--view", "--trainer.max_epochs", "2", "--ckpt_path", "x"])
    assert cmd == "interlock fit --trainer.max_epochs 2 --ckpt_path /r/last.ckpt"


# -- the page in a real browser ----------------------------------------------------------------
def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    exe = _chromium()
    if exe is None:
        pytest.skip("no system Chromium found (apt-get install chromium); the browser tests need one")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


class Page:
    """A page that records console errors and every request it makes."""

    def __init__(self, browser: Any, base: str) -> None:
        self.page = browser.new_page(viewport={"width": 1500, "height": 900})
        self.base = base
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def check_clean(self) -> None:
        assert not self.errors, self.errors
        outside = [u for u in self.requests if not u.startswith(self.base) and not u.startswith("data:")]
        assert not outside, outside

    def text(self, selector: str) -> str:
        return str(self.page.locator(selector).inner_text())

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(ARTIFACTS / name))


def _base(url: str) -> str:
    return url.split("/?", maxsplit=1)[0].rstrip("/") + "/"


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import interlock
    from _view_model import Broken
    from interlock.examples.digits import DigitsData

    root = tmp_path_factory.mktemp("failed") / "runs"
    data = DigitsData()
    trainer = interlock.Trainer(max_epochs=1, limit_train_batches=5, num_sanity_val_steps=0, default_root_dir=root)
    with pytest.raises(ValueError):
        trainer.fit(Broken(), data.train_dataloader(), data.val_dataloader())
    return root


def test_failed_run_shows_the_failing_state_and_scrubbing_moves_the_highlight(browser: Any, failed_run: Path) -> None:
    server = ViewServer(failed_run).start()
    try:
        page = Page(browser, _base(server.url))
        page.page.goto(server.url)
        page.page.wait_for_selector("#chart g.node.iv-failed")  # the overview: the box holding the failure
        assert page.page.locator("#chart g.node.iv-failed").get_attribute("data-state") == "fit"
        page.page.click("#now")  # the region the run is in
        page.page.wait_for_selector("#chart g.node.iv-failed[data-state='fit.train.val.batch.step']")
        assert "ValueError: labels out of range in batch 1" in page.text("#outcome")
        assert page.text("#status") == "failed"
        page.shot("failed.png")
        page.page.locator("#follow").uncheck()
        page.page.locator("#scrub").fill("6")
        page.page.click("#zoom-current")  # opens the region of the state at that moment
        early = page.text("#current-state")
        page.page.wait_for_selector(f"#chart g.node.iv-current[data-state='{early}']")
        assert early != "failed"
        assert not page.page.locator("#chart g.node.iv-failed").count()
        page.page.locator("#scrub").fill("12")
        later = page.text("#current-state")
        page.page.wait_for_selector(f"#chart g.node.iv-current[data-state='{later}']")
        assert later != early
        page.page.click("#zoom-in")
        page.page.mouse.wheel(0, -300)
        page.shot("scrubbed.png")
        page.check_clean()
    finally:
        server.stop()


def test_failed_run_page_shows_the_reproduce_command_and_each_point_its_replay(browser: Any, failed_run: Path) -> None:
    """A failed run's page names the replay of its failure; each timeline point shows the replay to that transition."""
    run = next(failed_run.glob("runs/version_*"))
    failure = json.loads((run / "failure.json").read_text())
    server = ViewServer(failed_run).start()
    try:
        page = Page(browser, _base(server.url))
        page.page.goto(server.url)
        page.page.wait_for_selector("#chart g.node.iv-failed")
        call = f"interlock.replay({json.dumps(str(run.resolve()))}, module, train_data, val_data, to="
        assert f"reproduce it: {call}{failure['transition']})" in page.text("#outcome")
        page.page.locator("#follow").uncheck()
        page.page.locator("#scrub").fill("5")  # the first records are single transitions: record 5 is transition 5
        assert page.text("#replay") == f"{call}5)"
        assert "transition 5:" in page.text("#moment")
        page.check_clean()
    finally:
        server.stop()


def _slow_config(folder: Path, epochs: int, delay: float) -> Path:
    cfg = folder / "slow.yaml"
    cfg.write_text(
        "model:\n  class_path: _view_model.SlowDigits\n"
        f"  init_args:\n    delay: {delay}\n"
        "data:\n  class_path: interlock.examples.digits.DigitsData\n"
        f"trainer:\n  max_epochs: {epochs}\n  limit_train_batches: 8\n  num_sanity_val_steps: 0\n  seed: 0\n"
        f"  default_root_dir: {folder}\n"
    )
    return cfg


def _url_from(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("interlock view: "):
            return line.split(": ", 1)[1].strip()
        if not line and proc.poll() is not None:
            break
    raise AssertionError("`interlock fit --view` printed no URL")


def test_live_run_is_followed_and_its_resume_command_resumes(browser: Any, tmp_path: Path) -> None:
    cfg = _slow_config(tmp_path, epochs=4, delay=0.12)
    argv = [*CLI, "fit", "--view", "--config", str(cfg), "--trainer.max_epochs", "4"]
    proc = subprocess.Popen(argv, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = _url_from(proc)
        page = Page(browser, _base(url))
        page.page.goto(url)
        page.page.wait_for_selector("#chart g.node.iv-current", timeout=60_000)
        page.page.click("#zoom-current")  # follow the run from region to region
        states: list[str | None] = []
        points: list[int] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and page.text("#status") != "finished":
            now = page.page.locator("#chart g.node.iv-current").first.get_attribute("data-state")
            if not states or states[-1] != now:
                states.append(now)
            points.append(page.page.locator("#plots circle").count())
            if len(points) == 8:
                page.shot("live.png")
            time.sleep(0.25)
        assert page.text("#status") == "finished"
        assert len(states) >= 2, states  # the highlight moved while the run trained (trace lines arrive in flushes)
        assert points and max(points) > min(points), points
        page.page.wait_for_selector(".ckpt[data-name='last.ckpt'] .resume")
        page.shot("finished.png")
        command = page.text(".ckpt[data-name='last.ckpt'] .resume")
        page.check_clean()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    args = shlex.split(command)
    assert args[:2] == ["interlock", "fit"] and "--view" not in args and "--trainer.max_epochs" in args
    trace = next((tmp_path / "runs").glob("version_*/events.jsonl"))
    runs_before = trace.read_text().count('"trigger": "setup"')
    args[args.index("--trainer.max_epochs") + 1] = "5"  # one more epoch than the run had
    resumed = subprocess.run(
        [*CLI, *args[1:]], env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "fit finished" in resumed.stdout
    assert trace.read_text().count('"trigger": "setup"') == runs_before + 1  # the same run directory went on


def test_preempted_run_shows_where_it_stopped(browser: Any, tmp_path: Path) -> None:
    cfg = _slow_config(tmp_path, epochs=20, delay=0.1)
    proc = subprocess.Popen([*CLI, "fit", "--config", str(cfg)], env=ENV, cwd=tmp_path, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((tmp_path / "runs").glob("*/metrics.csv")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    server = ViewServer(tmp_path / "runs").start()
    try:
        page = Page(browser, _base(server.url))
        page.page.goto(server.url)
        page.page.wait_for_selector("#chart g.node.iv-interrupted")
        assert "preempted in" in page.text("#outcome")
        assert page.text("#status") == "interrupted"
        page.shot("preempted.png")
        page.check_clean()
    finally:
        server.stop()


# -- the docs site --------------------------------------------------------------------------------
def test_docs_site_shows_a_rendered_chart_offline(browser: Any, tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the dev extra)")
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        env={**ENV, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/"
    try:
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base) else route.abort())
        page.goto(base + "concepts/")
        chart = page.locator("img[src*='trainer-overview.svg']").first
        chart.wait_for()
        assert page.evaluate("img => img.complete && img.naturalWidth > 500", chart.element_handle())
        assert "stateDiagram" not in page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "docs-concepts.png"))
    finally:
        httpd.shutdown()


# -- a run's own chart ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ema_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run trained with docs/extending.md's chart: an ``ema`` state after every optimizer step."""
    import interlock
    from conftest import TinyModule, loader
    from test_extend import BUILTIN, STEPPED, WITH_EMA, ema_update

    folder = tmp_path_factory.mktemp("ema")
    chart = folder / "ema.yaml"
    chart.write_text(BUILTIN.read_text().replace(STEPPED, WITH_EMA))
    trainer = interlock.Trainer(
        max_epochs=1, default_root_dir=folder, chart=chart, actions={"ema.update": ema_update}, num_sanity_val_steps=0
    )
    trainer.fit(TinyModule(), loader(32, 8))
    return folder / "runs"


def test_the_run_records_its_chart_and_the_view_serves_that_one(ema_run: Path, tmp_path: Path) -> None:
    """A run trained with a custom chart is drawn on it; a run without chart.yaml on the built-in one."""
    from interlock.core.chart import load_chart

    recorded = ema_run / "version_0" / "chart.yaml"
    assert "fit.train.batch.ema" in load_chart(recorded).states
    client = TestClient(make_app(ViewConfig(root=ema_run)))
    info = client.get("/api/chart.json", params={"run": "version_0"}).json()
    assert info["source"] == "run" and "fit.train.batch.ema" in info["ids"]
    _fake_run(tmp_path / "version_0")  # an older run: no chart.yaml
    info = TestClient(make_app(ViewConfig(root=tmp_path))).get("/api/chart.json", params={"run": "version_0"}).json()
    assert info["source"] == "built-in" and "fit.train.batch.ema" not in info["ids"]
    assert client.get("/api/chart.json", params={"run": "../.."}).status_code == 403
    if shutil.which("dot"):
        svg = client.get("/api/chart.svg", params={"run": "version_0"})
        assert svg.status_code == 200 and ">ema" in svg.text


def test_the_page_draws_a_custom_chart_run(browser: Any, ema_run: Path) -> None:
    """The page shows the run's own ``ema`` state, visited, with the run on it."""
    server = ViewServer(ema_run).start()
    try:
        page = Page(browser, _base(server.url))
        page.page.goto(server.url)
        for box in ("fit", "fit.train", "fit.train.batch"):  # open the regions down to the run's own state
            open_box(page.page, box)
        ema = page.page.locator("#chart g.node[data-state='fit.train.batch.ema']")
        ema.wait_for()
        page.page.wait_for_selector("#chart g.node[data-state='fit.train.batch.ema'].iv-visited")
        assert page.text("#status") == "finished"
        page.shot("custom-chart.png")
        page.check_clean()
    finally:
        server.stop()


def open_box(page: Any, state: str) -> None:
    """Click the box of region ``state`` (as a user does) and wait for its drawing."""
    box = page.locator(f"#chart g.node.iv-region[data-state='{state}']")
    box.wait_for()
    where = box.bounding_box()
    page.mouse.click(where["x"] + where["width"] / 2, where["y"] + where["height"] / 2)
    page.wait_for_function(
        "(r) => [...document.querySelectorAll('#crumbs .crumb')].pop().dataset.region === r", arg=state
    )


_SMALLEST_CHART_TEXT = """() => {
  const sizes = [...document.querySelectorAll("#chart svg text")].filter((t) => t.textContent.trim()).map((t) => {
    const m = t.getScreenCTM();
    return parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
  });
  return [Math.min(...sizes), sizes.length];
}"""


def test_the_view_opens_on_a_legible_overview_and_a_click_opens_a_region(browser: Any, failed_run: Path) -> None:
    """At 1400 px the first screen is the overview, no chart text under 8 px; a box opens, the breadcrumb returns."""
    server = ViewServer(failed_run).start()
    try:
        page = Page(browser, _base(server.url))
        page.page.set_viewport_size({"width": 1400, "height": 900})
        page.page.goto(server.url)
        page.page.wait_for_selector("#chart g.node.iv-failed")
        assert page.text("#crumbs").startswith("chart")
        regions = page.page.locator("#chart g.node.iv-region")
        assert {regions.nth(i).get_attribute("data-state") for i in range(regions.count())} >= {"fit", "validate"}
        smallest, count = page.page.evaluate(_SMALLEST_CHART_TEXT)
        assert count > 20 and smallest >= 8, (smallest, count)
        page.shot("overview.png")
        open_box(page.page, "fit")
        page.page.wait_for_selector("#chart g.node[data-state='fit.train']")
        assert not page.page.locator("#chart g.node[data-state='fit']").count()
        smallest, count = page.page.evaluate(_SMALLEST_CHART_TEXT)
        assert count > 10 and smallest >= 8, (smallest, count)
        open_box(page.page, "fit.train")
        assert page.page.locator("#crumbs .crumb").all_inner_texts() == ["chart", "fit", "train"]
        page.page.click("#crumbs .crumb[data-region='']")  # back to the overview
        page.page.wait_for_selector("#chart g.node.iv-region[data-state='fit']")
        assert page.page.locator("#crumbs .crumb").all_inner_texts() == ["chart"]
        page.check_clean()
    finally:
        server.stop()


# -- how soon the page shows what the run wrote ------------------------------------------------------
_RECORD_SHOWN = """
window.__shown = [];
document.addEventListener("DOMContentLoaded", () => {
  const scrub = document.getElementById("scrub");
  new MutationObserver(() => window.__shown.push([Date.now() / 1000, Number(scrub.max)]))
    .observe(document.getElementById("moment"), { childList: true, characterData: true, subtree: true });
});
"""


def _events_in(data: bytes) -> int:
    """The timeline points the complete lines of a trace hold: what the page's scrubber counts.

    A transition line is one point, a compact repeat line (a loop taken many times) is one point, a header
    or key line none.
    """
    from interlock.core.traceformat import Decoder

    decoder, events = Decoder(), 0
    for line in data.decode("utf-8").splitlines(keepends=True):
        if line.endswith("\n") and line.strip():
            events += len(decoder.feed(json.loads(line)))
    return events


def _watch_writes(trace: Path, writes: list[tuple[float, int]], stop: threading.Event) -> None:
    """Record ``(time, transitions in complete lines)`` each time the run appends to its trace (every 5 ms)."""
    size = -1
    while not stop.is_set():
        try:
            now_size = trace.stat().st_size
        except FileNotFoundError:
            now_size = -1
        if now_size != size:
            stamp = time.time()
            size = now_size
            writes.append((stamp, _events_in(trace.read_bytes()) if size >= 0 else 0))
        time.sleep(0.005)


def test_the_page_shows_what_a_live_run_writes_within_a_second(browser: Any, tmp_path: Path) -> None:
    """The median delay from the run writing trace lines to the page showing them is under 1 s."""
    cfg = _slow_config(tmp_path, epochs=6, delay=0.12)
    argv = [*CLI, "fit", "--view", "--config", str(cfg)]
    proc = subprocess.Popen(argv, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    writes: list[tuple[float, int]] = []
    stop = threading.Event()
    try:
        url = _url_from(proc)
        trace = tmp_path / "runs" / url.rsplit("run=", 1)[-1] / "events.jsonl"
        watcher = threading.Thread(target=_watch_writes, args=(trace, writes, stop), daemon=True)
        watcher.start()
        page = Page(browser, _base(url))
        page.page.add_init_script(_RECORD_SHOWN)
        page.page.goto(url)
        expect = pytest.importorskip("playwright.sync_api").expect
        expect(page.page.locator("#live")).to_have_text("live", timeout=60_000)
        live_from = time.time()
        expect(page.page.locator("#status")).to_have_text("finished", timeout=180_000)
        time.sleep(0.5)
        shown: list[tuple[float, int]] = page.page.evaluate("window.__shown")
        page.check_clean()
    finally:
        stop.set()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    delays = []
    for written_at, lines in writes:
        if written_at < live_from or lines == 0:
            continue  # written before the page followed the run
        seen = next((t for t, count in shown if count >= lines), None)
        assert seen is not None, f"the page never showed the {lines} points written at {written_at}: {shown[-3:]}"
        delays.append(max(0.0, seen - written_at))
    assert len(delays) >= 3, (writes, shown)
    median = sorted(delays)[len(delays) // 2]
    print(f"follow delay over {len(delays)} writes: median {median * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms")
    assert median < 1.0, delays


# -- the chart pictures of the README and docs, at page width -------------------------------------------
def _chart_pictures() -> list[Path]:
    """Every SVG picture the README and the docs pages show (Markdown image syntax), once each."""
    import re

    found: dict[Path, None] = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+\.svg)\)", page.read_text()):
            found[(page.parent / target).resolve()] = None
    return list(found)


_SMALLEST_TEXT = """() => {
  const svg = document.documentElement;
  const natural = svg.viewBox.baseVal.width * 4 / 3;  // pt -> px, as an <img> shows it at 100 %
  svg.setAttribute("width", String(Math.min(800, natural)));
  svg.removeAttribute("height");
  const heights = [...svg.querySelectorAll("text")].filter((t) => t.textContent.trim())
    .map((t) => t.getBoundingClientRect().height);
  return [Math.min(...heights), heights.length];
}"""


def test_every_chart_picture_reads_at_page_width(browser: Any) -> None:
    """Each chart picture of the README and docs, shown at most 800 px wide, has no text under 8 px tall."""
    pictures = _chart_pictures()
    assert any(p.name == "trainer-overview.svg" for p in pictures) and len(pictures) >= 5, pictures
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    small = {}
    for picture in pictures:
        assert picture.is_file(), picture
        page.goto(picture.as_uri())
        smallest, count = page.evaluate(_SMALLEST_TEXT)
        assert count > 0, picture
        if smallest < 8:
            small[picture.name] = round(smallest, 1)
    page.screenshot(path=str(ARTIFACTS / "last-chart-picture.png"))
    assert not small, f"text under 8 px at page width (draw a region instead: interlock chart --region): {small}"


def test_a_sharded_checkpoint_directory_is_listed_with_its_state_and_size(tmp_path: Path) -> None:
    """A run's sharded last.ckpt (a directory) is a checkpoint row: state from meta.ckpt, size of all its files."""
    import torch

    from interlock.plugins.sharded_writer import save_sharded
    from interlock.view.checkpoints import checkpoint_rows

    run = _fake_run(tmp_path / "run")
    state = {"chart": "fit.train.batch.end", "stage": "fit", "progress": {"epoch": 1, "global_step": 7}}
    save_sharded(run / "checkpoints" / "last.ckpt", {"model": {"w": torch.ones(100)}}, {"state": state})
    (run / "checkpoints" / ".last.ckpt.0123456789ab.tmp").mkdir()  # a killed save's leftover is not a row
    [row] = checkpoint_rows(run, ["fit"])
    assert (row["name"], row["sharded"], row["chart"], row["global_step"]) == ("last.ckpt", True, state["chart"], 7)
    on_disk = sum(p.stat().st_size for p in (run / "checkpoints" / "last.ckpt").iterdir() if p.name != "interlock.json")
    assert row["size"] == on_disk
    assert row["resume"].endswith(f"--ckpt_path {(run / 'checkpoints' / 'last.ckpt').absolute()}")
