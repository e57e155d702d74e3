"""The view page's own counting (view.js `where`) agrees with read_trace on a compact trace's repeat records."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import TinyModule, loader, only
from interlock import Trainer
from interlock.core.traceformat import Decoder
from interlock.listeners import EventTrace
from interlock.viz import read_trace

VIEW_JS = Path(__file__).resolve().parents[1] / "src" / "interlock" / "view" / "static" / "view.js"
#: Runs the page's `where(n)` on the records given as argv[2] and prints its result.
RUNNER = """
const src = require("fs").readFileSync(process.argv[1], "utf8");
const start = src.indexOf("function where(n)"), end = src.indexOf("const pos = ()", start);
const FINALS = new Set(["finished", "failed", "interrupted"]), STOPS = new Set(["interrupt", "preempt"]);
const run = { events: JSON.parse(process.argv[2]) };
eval(src.slice(start, end));
console.log(JSON.stringify(where(run.events.length)));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (it runs the page's script)")
def test_page_counts_visits_and_transitions_of_a_compact_trace_as_read_trace(tmp_path: Path) -> None:
    """Visits, taken transitions and the current state the page computes equal read_trace's, loops included."""
    trainer = Trainer(**only(EventTrace()), default_root_dir=tmp_path, accelerator="cpu", max_epochs=2)
    trainer.fit(TinyModule(), loader(160, 4), loader(32, 4))
    file = Path(trainer.state.run_dir) / "events.jsonl"
    decoder = Decoder()
    records = [r for line in file.read_text().splitlines() for r in decoder.feed(json.loads(line))]
    assert any("cycle" in r for r in records)
    proc = subprocess.run(
        ["node", "-e", RUNNER, str(VIEW_JS), json.dumps(records)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    page = json.loads(proc.stdout)
    summary = read_trace(file)
    assert page["visits"] == summary.visits
    assert page["taken"] == {"|".join(k): n for k, n in summary.transitions.items()}
    assert page["current"] == summary.last_state == "finished"
