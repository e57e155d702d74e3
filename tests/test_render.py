"""Rendering the statechart (Mermaid, DOT, SVG, PNG) and overlaying a run's trace."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from interlock.core.chart import Chart, load_chart
from interlock.viz import (
    FORMATS,
    GraphvizError,
    TraceError,
    read_trace,
    render,
    state_ids,
    to_dot,
    to_mermaid,
)

X = "\N{MULTIPLICATION SIGN}"
ERROR = 'ValueError: bad "x" <y> & {z}; 50% #1\nsecond line'
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")


@pytest.fixture(scope="module")
def chart() -> Chart:
    return load_chart()


def _run(chart: Chart, triggers: list[str], error_on: tuple[str, ...] = ()) -> list[str]:
    """JSONL lines of the run that fires ``triggers`` from the initial state, as EventTrace writes them."""
    state, lines, seen = chart.initial, [], {}
    for i, trigger in enumerate(triggers):
        dest = chart.transition(state, trigger)
        seen[dest] = seen.get(dest, 0) + 1
        record = {"time": 0.1 * i, "event": dest, "trigger": trigger, "source": state, "epoch": 0}
        record |= {"global_step": i, "batch_idx": 0, "count": seen[dest]}
        if trigger in error_on:
            record["error"] = ERROR
        lines.append(json.dumps(record))
        state = dest
    return lines


def _fit_triggers(epochs: int = 2, batches: int = 3) -> list[str]:
    out = ["setup", "fit", "train"]
    for epoch in range(epochs):
        out.append("run")
        for b in range(batches):
            out += ["fetched", "backward", "optimizer_step", "stepped"]
            out.append("next" if b < batches - 1 else "epoch_end")
        out.append("next_epoch" if epoch < epochs - 1 else "done")
    return [*out, "teardown", "finish"]


FAILED = ["setup", "fit", "train", "run", "fetched", "backward", "optimizer_step", "stepped", "next", "fetched"]
FAILED += ["fail", "failed"]


def _write(directory: Path, lines: list[str], tail: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "events.jsonl").write_text("".join(line + "\n" for line in lines) + tail, encoding="utf-8")
    return directory


@pytest.fixture
def fit_run(tmp_path: Path, chart: Chart) -> Path:
    return _write(tmp_path / "fit", _run(chart, _fit_triggers()))


@pytest.fixture
def failed_run(tmp_path: Path, chart: Chart) -> Path:
    return _write(tmp_path / "failed", _run(chart, FAILED, error_on=("fail", "failed")))


@pytest.fixture
def live_run(tmp_path: Path, chart: Chart) -> Path:
    lines = _run(chart, ["setup", "fit", "train", "run", "fetched", "backward"])
    return _write(tmp_path / "live", lines, tail='{"time": 9.5, "event": "fit.tra')


def _dot_ok(dot: str) -> str:
    done = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode().strip() == "", done.stderr.decode()
    return done.stdout.decode()


def _dot_node_label(dot: str, state_id: str) -> str:
    match = re.search(rf'^\s*"{state_id}" \[label="((?:[^"\\]|\\.)*)"', dot, re.M)
    assert match, f"no node {state_id} in the DOT output"
    return match.group(1)


def _dot_edge_label(dot: str, tail: str, head: str) -> str:
    match = re.search(rf'^\s*"{tail}" -> "{head}" \[label=" ((?:[^"\\]|\\.)*)"', dot, re.M)
    assert match, f"no edge {tail} -> {head} in the DOT output"
    return match.group(1)


# -- trace reading ----------------------------------------------------------------
def test_read_trace_counts_a_finished_fit(fit_run: Path) -> None:
    """A finished fit: visit and transition counts, final state, no error."""
    summary = read_trace(fit_run)
    assert summary.visits["fit.train.batch.end"] == 6
    assert summary.visits["idle"] == 1
    assert summary.transitions[("fit.train.batch.end", "next", "fit.train.batch.fetch")] == 4
    assert summary.last_state == "finished"
    assert summary.is_final and not summary.in_progress and not summary.truncated
    assert summary.error is None and summary.failed_in is None
    assert summary.events == len(_fit_triggers())


def test_read_trace_accepts_the_file_itself(fit_run: Path) -> None:
    """The events.jsonl path works as well as its run directory."""
    assert read_trace(fit_run / "events.jsonl") == read_trace(fit_run)


def test_read_trace_reports_the_failure(failed_run: Path) -> None:
    """A failed run: the error message and the state the `fail` trigger left."""
    summary = read_trace(failed_run)
    assert summary.error == ERROR
    assert summary.failed_in == "fit.train.batch.step"
    assert summary.last_state == "failed" and summary.is_final and summary.failed


def test_read_trace_ignores_a_partial_last_line(live_run: Path) -> None:
    """A run still writing: the partial last line is dropped and the run is in progress."""
    summary = read_trace(live_run)
    assert summary.truncated and summary.in_progress
    assert summary.last_state == "fit.train.batch.backward"
    assert summary.events == 6


def test_read_trace_rejects_a_bad_line_in_the_middle(tmp_path: Path, chart: Chart) -> None:
    """Only the last line may be incomplete; a broken middle line names file and line."""
    lines = _run(chart, ["setup", "fit", "train"])
    run = _write(tmp_path / "bad", [lines[0], '{"event": ', *lines[1:]])
    with pytest.raises(TraceError, match=r"events\.jsonl:2: not valid JSON"):
        read_trace(run)


def test_read_trace_without_events_file_says_what_to_pass(tmp_path: Path) -> None:
    """A directory with no events.jsonl gives an error naming it and the fix."""
    with pytest.raises(TraceError, match=r"no events\.jsonl in run directory .*EventTrace"):
        read_trace(tmp_path)
    with pytest.raises(TraceError, match="does not exist"):
        read_trace(tmp_path / "missing")


# -- the chart without a trace --------------------------------------------------------
def test_state_ids_are_unique_and_plain(chart: Chart) -> None:
    """Every state gets a distinct identifier made of word characters."""
    ids = state_ids(chart)
    assert len(set(ids.values())) == len(chart.states)
    assert all(re.fullmatch(r"\w+", i) for i in ids.values())
    assert ids["fit.train.batch.end"] == "fit__train__batch__end"


def test_mermaid_declares_every_state_exactly_once(chart: Chart, failed_run: Path) -> None:
    """Each state path is declared once, compound states as blocks, in both plain and traced output."""
    ids = state_ids(chart)
    for text in (to_mermaid(chart), to_mermaid(chart, read_trace(failed_run))):
        declared = re.findall(r'^\s*state "[^"\n]*" as (\w+)( \{)?$', text, re.M)
        assert sorted(i for i, _ in declared) == sorted(ids.values())
        blocks = {i for i, brace in declared if brace}
        assert blocks == {ids[p] for p, s in chart.states.items() if s.children}
        body = text.split("stateDiagram-v2\n", 1)[1]  # the title may quote braces from an error message
        assert body.count("{") == body.count("}") == len(blocks)


def test_mermaid_has_initials_finals_and_declared_edges(chart: Chart) -> None:
    """One [*] start per scope, finals lead to [*], and compound edges are drawn as declared."""
    text = to_mermaid(chart)
    assert text.startswith("stateDiagram-v2\n")
    compounds = [p for p, s in chart.states.items() if s.children]
    assert len(re.findall(r"^\s*\[\*\] --> ", text, re.M)) == len(compounds) + 1
    assert "    [*] --> idle\n" in text
    assert "        [*] --> fit__train__epoch_start\n" in text
    for final in chart.final_states:
        assert f"    {final} --> [*]\n" in text
    assert "    fit --> teardown : fail\n" in text  # one edge from the compound, not one per leaf
    assert "fit__train__batch__step --> teardown" not in text
    n_declared = sum(len(s.on) for s in chart.states.values())
    assert len(re.findall(r" --> (?!\[\*\])\w+ : ", text)) == n_declared


@needs_dot
def test_dot_is_accepted_by_graphviz(chart: Chart, fit_run: Path, failed_run: Path, live_run: Path) -> None:
    """`dot -Tsvg` renders the plain and all traced charts without errors or warnings."""
    for trace in (None, read_trace(fit_run), read_trace(failed_run), read_trace(live_run)):
        _dot_ok(to_dot(chart, trace))


def test_dot_nests_compound_states_as_clusters(chart: Chart) -> None:
    """Compound states are clusters nested like the chart; edges from a compound use ltail."""
    dot = to_dot(chart)
    assert dot.startswith("digraph interlock {")
    assert dot.count("subgraph ") == sum(1 for s in chart.states.values() if s.children)
    outer, inner = dot.index('subgraph "cluster_fit__train" {'), dot.index('subgraph "cluster_fit__train__batch" {')
    assert outer < inner < dot.index('subgraph "cluster_validate" {')
    assert re.search(r'"fit#start" -> "teardown" \[label=" fail", ltail="cluster_fit"\]', dot)
    assert _dot_node_label(dot, "fit__train__batch__end") == "end"


# -- the chart with a trace -----------------------------------------------------------
def test_traced_fit_highlights_visits_and_counts(chart: Chart, fit_run: Path) -> None:
    """Visited states are filled with counts, taken edges bold with counts, the end state final."""
    trace = read_trace(fit_run)
    dot = to_dot(chart, trace)
    assert _dot_node_label(dot, "fit__train__batch__end") == f"end {X}6"
    assert _dot_node_label(dot, "finished") == f"finished {X}1\\n(final)"
    assert re.search(r'"finished" \[[^\]]*peripheries=2', dot)
    assert re.search(r'"fit__train__batch__end" \[[^\]]*fillcolor="#d8f0d8"', dot)
    assert _dot_node_label(dot, "fit__sanity__start") == "start"  # never visited: no count, no fill
    assert not re.search(r'"fit__sanity__start" \[[^\]]*fillcolor', dot)
    assert _dot_edge_label(dot, "fit__train__batch__end", "fit__train__batch__fetch").startswith(f"next {X}4")
    assert re.search(rf'label=" next {X}4", penwidth=2\.2', dot)
    assert re.search(rf'"cluster_fit__train" {{\s*label="train {X}1";\s*style="rounded,filled"', dot)
    assert re.search(rf'"cluster_fit__train__batch" {{\s*label="batch {X}2";', dot)  # entered once per epoch
    text = to_mermaid(chart, trace)
    assert f'state "end {X}6" as fit__train__batch__end' in text
    assert f"fit__train__batch__end --> fit__train__batch__fetch : next {X}4" in text
    assert re.search(r"^    class (\w+,)*finished(,\w+)* final$", text, re.M)
    assert re.search(r"^    class (\w+,)*fit__train__batch__end(,\w+)* visited$", text, re.M)


def test_traced_failure_is_red_with_the_escaped_message(chart: Chart, failed_run: Path) -> None:
    """The failing state is red and carries the message, escaped for DOT and Mermaid."""
    trace = read_trace(failed_run)
    failing = state_ids(chart)[trace.failed_in]
    dot = to_dot(chart, trace)
    label = _dot_node_label(dot, failing)
    assert label.startswith(f'step {X}2\\n✗ ValueError: bad \\"x\\" <y>')
    assert "\\nsecond line" in label and "\n" not in label
    assert re.search(rf'"{failing}" \[[^\]]*fillcolor="#f8d0d0", color="#c62828"', dot)
    assert re.search(rf'"fit#start" -> "teardown" \[label=" fail {X}1", penwidth=2\.2, color="#c62828"', dot)
    text = to_mermaid(chart, trace)
    line = next(ln for ln in text.splitlines() if ln.strip().endswith(f" as {failing}"))
    assert "#34;x#34;" in line and "#60;y#62;" in line and "<br>second line" in line
    label = re.sub(r"#\d+;", "", line.split('"')[1]).replace("<br>", "")
    assert line.count('"') == 2 and not set(label) & set('";:<>%{}#&')
    assert re.search(rf"^    class {failing} failure$", text, re.M)
    assert f"fit --> teardown : fail {X}1" in text


@needs_dot
def test_traced_failure_message_survives_into_svg(chart: Chart, failed_run: Path) -> None:
    """Graphviz shows the message with its special characters intact."""
    svg = _dot_ok(to_dot(chart, read_trace(failed_run)))
    assert "bad &quot;x&quot; &lt;y&gt; &amp; {z}" in svg or 'bad "x" &lt;y&gt; &amp; {z}' in svg


def test_traced_live_run_marks_the_current_state(chart: Chart, live_run: Path) -> None:
    """An in-progress run has no final state; the state it is in is marked current."""
    trace = read_trace(live_run)
    dot = to_dot(chart, trace)
    assert _dot_node_label(dot, "fit__train__batch__backward") == f"backward {X}1\\n(current)"
    assert "(final)" not in dot
    assert "in progress at fit.train.batch.backward" in dot
    text = to_mermaid(chart, trace)
    assert re.search(r"^    class fit__train__batch__backward current$", text, re.M)
    assert text.startswith("---\ntitle: ")


# -- render() ---------------------------------------------------------------------
@needs_dot
def test_render_svg_and_png_bytes(chart: Chart, fit_run: Path) -> None:
    """svg and png come back as bytes with the right signatures; text formats as str."""
    svg = render(chart, "svg")
    assert isinstance(svg, bytes) and svg.lstrip().startswith((b"<?xml", b"<svg"))
    png = render(chart, "png", read_trace(fit_run))
    assert isinstance(png, bytes) and png.startswith(b"\x89PNG\r\n\x1a\n")
    assert render(chart, "mermaid") == to_mermaid(chart)
    assert render(chart, "dot") == to_dot(chart)


def test_render_rejects_an_unknown_format(chart: Chart) -> None:
    """An unknown format names itself and the allowed ones."""
    with pytest.raises(ValueError, match=r"'jpeg'.*mermaid, dot, svg, png"):
        render(chart, "jpeg")
    assert FORMATS == ("mermaid", "dot", "svg", "png")


def test_render_without_graphviz_says_how_to_get_it(chart: Chart, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `dot` on PATH, svg/png fail with install hints and the text-format alternative."""
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(GraphvizError) as info:
        render(chart, "svg")
    message = str(info.value)
    assert "apt-get install graphviz" in message and "brew install graphviz" in message
    assert "--format mermaid" in message and "--format dot" in message
    assert to_dot(chart)  # the text formats still work
