"""The view page's own counting (view.js `where`) agrees with read_trace on a compact trace's repeat records."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import TinyModule, loader, only
from interlock import Trainer
from interlock.core.traceformat import Decoder
from interlock.core.tracelist import read_transitions
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


class _FailsLate(TinyModule):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.current_epoch == 1 and batch_idx == 7:
            raise ValueError("late")
        return super().training_step(batch, batch_idx)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (it runs the page's script)")
def test_page_numbers_transitions_as_replay_does_and_finds_the_failure(tmp_path: Path) -> None:
    """The page's transition number (replay's --to) counts a repeat's turns; its failure number is failure.json's."""
    trainer = Trainer(**only(EventTrace()), default_root_dir=tmp_path, accelerator="cpu", max_epochs=2)
    with pytest.raises(ValueError, match="late"):
        trainer.fit(_FailsLate(), loader(160, 4), loader(32, 4))
    run_dir = Path(trainer.state.run_dir)
    decoder = Decoder()
    records = [
        r for line in (run_dir / "events.jsonl").read_text().splitlines() for r in decoder.feed(json.loads(line))
    ]
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
    assert page["number"] == len(read_transitions(run_dir, "idle")) == read_trace(run_dir).events
    assert page["failNumber"] == json.loads((run_dir / "failure.json").read_text())["transition"]
