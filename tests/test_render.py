"""Rendering the statechart (Mermaid, DOT, SVG, PNG) and overlaying a run's trace."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import interlock
from conftest import only
from interlock.core.chart import Chart, TransitionSpec, load_chart
from interlock.examples.digits import DigitsClassifier, DigitsData
from interlock.listeners import EventTrace
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
    state, lines, seen = chart.initial, [], dict[str, int]()
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
PREEMPTED = ["setup", "fit", "train", "run", "fetched", "backward", "optimizer_step", "stepped", "preempt"]
PREEMPTED += ["interrupted"]


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
def preempted_run(tmp_path: Path, chart: Chart) -> Path:
    return _write(tmp_path / "preempted", _run(chart, PREEMPTED))


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real fit with the EventTrace listener: 4 batches, validation every 2 (so twice), no sanity check."""
    root = tmp_path_factory.mktemp("real")
    trainer = interlock.Trainer(
        max_epochs=1,
        limit_train_batches=4,
        limit_val_batches=1,
        val_check_interval=2,
        num_sanity_val_steps=0,
        **only(EventTrace()),
        default_root_dir=root,
    )
    data = DigitsData()
    trainer.fit(DigitsClassifier(), data.train_dataloader(), data.val_dataloader())
    return Path(trainer.run_dir)


@pytest.fixture
def live_run(tmp_path: Path, chart: Chart) -> Path:
    lines = _run(chart, ["setup", "fit", "train", "run", "fetched", "backward"])
    return _write(tmp_path / "live", lines, tail='{"time": 9.5, "event": "fit.tra')


def _dot_ok(dot: str) -> str:
    done = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode().strip() == "", done.stderr.decode()
    return done.stdout.decode()


_HTML_LABEL = r"label=<((?:[^<>]|<[^<>]*>)*)>"


def _dot_node_label(dot: str, state_id: str) -> str:
    """The raw HTML-like label of a leaf's node."""
    match = re.search(rf'^\s*"{state_id}" \[{_HTML_LABEL}', dot, re.M)
    assert match, f"no node {state_id} in the DOT output"
    return match.group(1)


def _text(label: str) -> str:
    """An HTML-like label as the text it shows: line breaks as newlines, tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^<>]*>", "", label.replace("<br/>", "\n")))


def _dot_node_text(dot: str, state_id: str) -> str:
    return _text(_dot_node_label(dot, state_id))


def _dot_cluster_text(dot: str, state_id: str) -> str:
    match = re.search(rf'subgraph "cluster_{state_id}" {{\s*{_HTML_LABEL};', dot)
    assert match, f"no cluster {state_id} in the DOT output"
    return _text(match.group(1))


def _label(t: TransitionSpec, n: int = 0, sep: str = " ") -> str:
    """What an edge should read, built from the chart: ``trigger [guard]``, the count, ``/ do1, do2``.

    In a drawing (``sep`` a newline) each action is on a line of its own.
    """
    text = t.trigger + (f" [{t.guard}]" if t.guard else "") + (f" {X}{n}" if n else "")
    return text + (f"{sep}/ {(',' + sep).join(t.do)}" if t.do else "")


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


def test_read_trace_names_the_guard_that_decided_each_transition(real_run: Path) -> None:
    """A real run's trace: each taken transition maps to the guard that decided it (None for defaults)."""
    summary = read_trace(real_run)
    validate = ("fit.train.batch.end", "validate", "fit.train.val.start")
    assert summary.transitions[validate] == 2
    assert summary.guards[validate] == "schedule.val_due"
    assert summary.guards[("fit.train.batch.fetch", "fetched", "fit.train.batch.step")] == "data.fetched"
    assert summary.guards[("fit.train.batch.end", "next", "fit.train.batch.fetch")] is None  # the default
    assert summary.guards[("idle", "setup", "setup")] is None  # an event from outside
    assert summary.decided["schedule.val_due"] == 2 and summary.decided["optim.step_due"] == 4
    assert "schedule.sanity_due" not in summary.decided  # num_sanity_val_steps=0: the default was taken
    assert summary.last_state == "finished" and not summary.failed and not summary.interrupted


@pytest.mark.parametrize(
    ("triggers", "where", "by"),
    [
        (PREEMPTED, "fit.train.batch.end", "preempt"),
        (["setup", "fit", "train", "run", "fetched", "interrupt", "interrupted"], "fit.train.batch.step", "interrupt"),
    ],
)
def test_read_trace_reports_where_a_run_was_stopped(
    tmp_path: Path, chart: Chart, triggers: list[str], where: str, by: str
) -> None:
    """A preempted or Ctrl-C'd run: the state it was stopped in and the trigger; a new run clears them."""
    lines = _run(chart, triggers)
    summary = read_trace(_write(tmp_path / "stopped", lines))
    assert (summary.interrupted_in, summary.interrupted_by) == (where, by)
    assert summary.interrupted and not summary.failed and summary.failed_in is None
    assert summary.last_state == "interrupted" and summary.is_final
    rerun = [json.dumps({**json.loads(line), "source": "interrupted"}) for line in lines[:1]]
    summary = read_trace(_write(tmp_path / "again", [*lines, *rerun]))
    assert summary.interrupted_in is None and not summary.interrupted and summary.last_state == "setup"


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
    n_declared = sum(1 for s in chart.states.values() for _ in s.declared())
    assert len(re.findall(r" --> (?!\[\*\])\w+ : ", text)) == n_declared


def test_every_declared_transition_is_an_edge_with_its_guard_and_actions(chart: Chart) -> None:
    """Each `always` and `on` transition is one edge reading `trigger [guard] / do1, do2`, in Mermaid and DOT."""
    ids = state_ids(chart)
    text, dot = to_mermaid(chart), to_dot(chart)
    mermaid_edges = re.findall(r"^\s*(\w+) --> (\w+) : (.*)$", text, re.M)
    dot_edges = re.findall(r'^\s*"([\w#]+)" -> "([\w#]+)" \[label=" ((?:[^"\\]|\\.)*)"', dot, re.M)
    expected_mermaid, expected_dot = [], []
    for spec in chart.states.values():
        for t in spec.declared():
            expected_mermaid.append((ids[spec.path], ids[t.target], _label(t)))
            tail = f"{ids[spec.path]}#start" if chart.states[spec.path].children else ids[spec.path]
            head = f"{ids[t.target]}#start" if chart.states[t.target].children else ids[t.target]
            expected_dot.append((tail, head, _label(t, sep="\\n")))
    assert sorted(mermaid_edges) == sorted(expected_mermaid)
    assert sorted(dot_edges) == sorted(expected_dot)
    assert len(expected_mermaid) > sum(len(s.on) for s in chart.states.values())  # the `always` ones are there
    # the training batch loop's ways out, guards first, the default last
    assert "fit__train__batch__end --> fit__train__val : validate [schedule.val_due]\n" in text
    assert (
        "fit__train__batch__end --> teardown : preempt [signals.preempted] / optim.plateau_step, "
        "checkpoint.save_preempted\n" in text
    )
    assert "fit__train__batch__end --> fit__train__batch__fetch : next\n" in text
    assert "teardown --> finished : finish / run.finish\n" in text
    assert _dot_edge_label(dot, "fit__train__batch__end", "fit__train__epoch_end") == (
        "epoch_end [limits.epoch_done]\\n/ optim.plateau_step,\\nmodule.on_train_epoch_end,\\nmetrics.log_train"
    )


def test_states_show_their_entry_and_exit_actions(chart: Chart) -> None:
    """Leaves list `entry once / ...`, `entry / ...`, `exit / ...` under their name; compound states in the title."""
    ids = state_ids(chart)
    text, dot = to_mermaid(chart), to_dot(chart)
    assert "                fit__train__batch__fetch : entry / optim.plateau_step, data.fetch\n" in text
    assert 'state "batch<br>entry / data.reload, data.reenter" as fit__train__batch {' in text
    assert (
        'state "val<br>entry /<br>module.on_validation_model_zero_grad,<br>data.reload, data.reenter, '
        'data.reload_val,<br>eval.open<br>exit / eval.close" as fit__train__val {' in text
    )
    assert _dot_node_text(dot, "fit__train__batch__fetch") == "fetch\nentry / optim.plateau_step, data.fetch"
    end = "end\nentry once / module.on_train_batch_end\nentry / signals.vote"
    assert _dot_node_text(dot, "fit__train__batch__end") == end
    assert (
        _dot_cluster_text(dot, "fit__sanity")
        == "sanity\nentry / rng.isolate,\ncallbacks.on_sanity_check_start, eval.open\nexit / eval.close,\n"
        "callbacks.on_sanity_check_end, rng.restore"
    )
    assert 'point-size="8"' in _dot_node_label(dot, "fit__train__batch__fetch")  # the actions in small type
    for path, spec in chart.states.items():
        if spec.children:
            shown = re.search(rf'state "([^"]*)" as {ids[path]} {{', text)
            assert shown, path
            described = shown.group(1).replace("<br>", " ")
            described_dot = _dot_cluster_text(dot, ids[path]).replace("\n", " ")
        else:
            described = " ".join(re.findall(rf"^\s*{ids[path]} : (.*)$", text, re.M))
            described_dot = _dot_node_text(dot, ids[path]).replace("\n", " ")
        for kind, names in (("entry", spec.entry), ("exit", spec.exit)):
            for where in (described, described_dot):
                assert (f"{kind} / " in where) == bool(names), (path, kind)
                for name in names:
                    assert name in where, (path, name)
    assert not re.search(r"^\s*(finished|failed|interrupted|idle) : ", text, re.M)  # no actions: no line


@needs_dot
def test_dot_is_accepted_by_graphviz(
    chart: Chart, fit_run: Path, failed_run: Path, live_run: Path, preempted_run: Path
) -> None:
    """`dot -Tsvg` renders the plain and all traced charts without errors or warnings."""
    traces = [read_trace(run) for run in (fit_run, failed_run, live_run, preempted_run)]
    for trace in (None, *traces):
        _dot_ok(to_dot(chart, trace))


def test_dot_nests_compound_states_as_clusters(chart: Chart) -> None:
    """Compound states are clusters nested like the chart; edges from a compound use ltail."""
    dot = to_dot(chart)
    assert dot.startswith("digraph interlock {")
    assert dot.count("subgraph ") == sum(1 for s in chart.states.values() if s.children)
    outer, inner = dot.index('subgraph "cluster_fit__train" {'), dot.index('subgraph "cluster_fit__train__batch" {')
    assert outer < inner < dot.index('subgraph "cluster_validate" {')
    assert re.search(r'"fit#start" -> "teardown" \[label=" fail", ltail="cluster_fit"\]', dot)
    assert _dot_node_text(dot, "idle") == "idle"
    assert re.search(r'^\s*"finished" \[label=<finished>\];$', dot, re.M)  # final: a plain node to the end marker
    assert re.search(r'"finished" -> "root#end";', dot)


# -- the chart with a trace -----------------------------------------------------------
def test_traced_fit_highlights_visits_and_counts(chart: Chart, fit_run: Path) -> None:
    """Visited states are filled with counts, taken edges bold with counts, the end state final."""
    trace = read_trace(fit_run)
    dot = to_dot(chart, trace)
    end = f"end {X}6\nentry once / module.on_train_batch_end\nentry / signals.vote"
    assert _dot_node_text(dot, "fit__train__batch__end") == end
    assert _dot_node_text(dot, "finished") == f"finished {X}1\n(final)"
    assert re.search(r'"finished" \[[^\]]*peripheries=2', dot)
    assert re.search(r'"fit__train__batch__end" \[[^\]]*fillcolor="#d8f0d8"', dot)
    sanity_start = "start\nentry / eval.reset, module.on_eval_start,\nmodule.on_eval_epoch_start"
    assert _dot_node_text(dot, "fit__sanity__start") == sanity_start  # never visited: no count
    assert not re.search(r'"fit__sanity__start" \[[^\]]*fillcolor', dot)
    assert _dot_edge_label(dot, "fit__train__batch__end", "fit__train__batch__fetch").startswith(f"next {X}4")
    assert re.search(rf'label=" next {X}4", penwidth=2\.2', dot)
    assert re.search(rf'"cluster_fit__train" {{\s*label=<train {X}1<br/>[^;]*>;\s*style="rounded,filled"', dot)
    assert _dot_cluster_text(dot, "fit__train__batch").startswith(f"batch {X}2\n")  # entered once per epoch
    text = to_mermaid(chart, trace)
    assert f'state "end {X}6" as fit__train__batch__end' in text
    assert f"fit__train__batch__end --> fit__train__batch__fetch : next {X}4" in text
    assert f"fit__train__batch__fetch --> fit__train__batch__step : fetched [data.fetched] {X}6\n" in text
    assert f"fit__train__batch__end --> fit__train__epoch_end : epoch_end [limits.epoch_done] {X}2 / optim" in text
    assert "fit__train__batch__end --> fit__train__val : validate [schedule.val_due]\n" in text  # not taken
    assert re.search(r"^    class (\w+,)*finished(,\w+)* final$", text, re.M)
    assert re.search(r"^    class (\w+,)*fit__train__batch__end(,\w+)* visited$", text, re.M)


def test_traced_failure_is_red_with_the_escaped_message(chart: Chart, failed_run: Path) -> None:
    """The failing state is red and carries the message, escaped for DOT and Mermaid."""
    trace = read_trace(failed_run)
    assert trace.failed_in is not None
    failing = state_ids(chart)[trace.failed_in]
    dot = to_dot(chart, trace)
    label = _dot_node_label(dot, failing)
    assert "bad &quot;x&quot; &lt;y&gt; &amp; {z}" in label and "\n" not in label
    text = _dot_node_text(dot, failing)
    assert text.startswith(
        f"step {X}2\nentry / module.on_train_batch_start,\nmodule.training_step, callbacks.flush\n"
        f'✗ ValueError: bad "x" <y> & {{z}}'
    )
    assert text.endswith("\nsecond line")
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
    assert _dot_node_text(dot, "fit__train__batch__backward") == (
        f"backward {X}1\nentry / module.on_before_zero_grad,\nmodule.optimizer_zero_grad,\nmodule.on_before_backward,\n"
        "precision.backward, module.on_after_backward\n(current)"
    )
    assert "(final)" not in dot
    assert "in progress at fit.train.batch.backward" in dot
    text = to_mermaid(chart, trace)
    assert re.search(r"^    class fit__train__batch__backward current$", text, re.M)
    assert text.startswith("---\ntitle: ")


def test_traced_real_run_labels_taken_edges_with_guard_and_count(chart: Chart, real_run: Path) -> None:
    """Why validation ran: the taken edge reads `validate [schedule.val_due]` and its count; untaken ones are grey."""
    trace = read_trace(real_run)
    dot = to_dot(chart, trace)
    assert (
        _dot_edge_label(dot, "fit__train__batch__end", "fit__train__val#start") == f"validate [schedule.val_due] {X}2"
    )
    assert re.search(rf'label=" validate \[schedule\.val_due\] {X}2", penwidth=2\.2, color="#2e7d32"', dot)
    assert re.search(
        rf'label=" epoch_end \[limits\.epoch_done_after_val\] {X}1\\n/ optim\.plateau_step,\\n'
        r'module\.on_train_epoch_end,\\nmetrics\.log_train", penwidth=2\.2',
        dot,
    )
    assert re.search(
        r'label=" epoch_end \[limits\.epoch_done\]\\n/ optim\.plateau_step,\\nmodule\.on_train_epoch_end,\\n'
        r'metrics\.log_train", color="#b0b0b0"',
        dot,
    )
    assert re.search(r'label=" sanity_check \[schedule\.sanity_due\]", color="#b0b0b0"', dot)  # never held
    assert re.search(rf'label=" train {X}1", penwidth=2\.2', dot)  # the default taken instead
    text = to_mermaid(chart, trace)
    assert f"fit__train__batch__end --> fit__train__val : validate [schedule.val_due] {X}2\n" in text
    assert f"fit__train__val__end --> fit__train__batch__fetch : resume {X}1\n" in text
    assert f"setup --> fit : fit [stage.is_fit] {X}1\n" in text
    assert "setup --> validate : validate [stage.is_validate]\n" in text


def test_traced_preemption_marks_where_the_run_stopped(chart: Chart, preempted_run: Path) -> None:
    """A preempted run: the preempt edge and its guard, the state it was stopped in, and where it ended."""
    trace = read_trace(preempted_run)
    dot = to_dot(chart, trace)
    assert _dot_node_text(dot, "fit__train__batch__end") == (
        f"end {X}1\nentry once / module.on_train_batch_end\nentry / signals.vote\n(stopped here: preempt)"
    )
    assert re.search(r'"fit__train__batch__end" \[[^\]]*fillcolor="#ffe0b2", color="#e65100"', dot)
    assert _dot_edge_label(dot, "fit__train__batch__end", "teardown") == (
        f"preempt [signals.preempted] {X}1\\n/ optim.plateau_step,\\ncheckpoint.save_preempted"
    )
    assert re.search(rf'preempt \[signals\.preempted\] {X}1[^"]*", penwidth=2\.2, color="#e65100"', dot)
    assert re.search(rf'label=" interrupted \[run\.interrupted\] {X}1", penwidth=2\.2, color="#e65100"', dot)
    assert _dot_node_text(dot, "interrupted") == f"interrupted {X}1\n(final)"
    assert "stopped by preempt in fit.train.batch.end, ended in interrupted" in dot
    assert "✗" not in dot  # no failure
    text = to_mermaid(chart, trace)
    assert (
        f"fit__train__batch__end --> teardown : preempt [signals.preempted] {X}1 / optim.plateau_step, "
        "checkpoint.save_preempted" in text
    )
    assert re.search(r"^    class fit__train__batch__end interrupted$", text, re.M)
    assert re.search(r"^    class (\w+,)*interrupted(,\w+)* final$", text, re.M)
    assert re.search(r'^title: "run preempted: stopped by preempt in fit\.train\.batch\.end', text, re.M)


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


# -- regions: a part of the chart that reads at page width ----------------------------------------
def _dot_nodes(dot: str) -> set[str]:
    return set(re.findall(r'^\s*"([^"#]+)" \[label=', dot, flags=re.MULTILINE))


def test_a_region_draws_only_its_states_and_names_where_edges_leave() -> None:
    """`fit.train.batch` draws its five states; edges out of it end at dashed boxes naming their targets."""
    chart = load_chart()
    ids = state_ids(chart)
    dot = to_dot(chart, region="fit.train.batch")
    inside = {p for p in chart.states if p.startswith("fit.train.batch.")}
    assert _dot_nodes(dot) == {ids[p] for p in inside}
    assert '"outside#fit.train.epoch_end"' in dot or '"outside#fit.train.val"' in dot
    assert 'style="rounded,dashed"' in dot and 'point-size="8"' not in dot  # no type under 10 pt


def test_depth_collapses_compound_states_into_one_box() -> None:
    """At depth 1 the top level shows fit/validate/test/predict as boxes with their state counts, nothing inside."""
    chart = load_chart()
    ids = state_ids(chart)
    dot = to_dot(chart, depth=1)
    top = {p for p, s in chart.states.items() if s.parent is None}
    assert _dot_nodes(dot) == {ids[p] for p in top}
    inside = sum(1 for p in chart.states if p.startswith("fit."))
    assert "cluster_" not in dot and f"[{inside} states inside]" in dot
    # the transitions between one pair of boxes are one edge listing them all
    assert len(re.findall(rf'"{ids["fit"]}" -> "{ids["teardown"]}"', dot)) == 1


def test_a_collapsed_box_shows_the_failure_inside_it(tmp_path: Path) -> None:
    """A failed run drawn on `fit.train --depth 1` marks the `val` box red with the exception."""
    chart = load_chart()
    trace = tmp_path / "events.jsonl"
    rows = [
        ("setup", "setup", "idle", ""),
        ("fit.start", "fit", "setup", ""),
        ("fit.train.val.start", "validate", "fit.start", ""),
        ("teardown", "fail", "fit.train.val.start", ', "error": "ValueError: boom"'),
        ("failed", "failed", "teardown", ', "error": "ValueError: boom"'),
    ]
    trace.write_text(
        "".join(
            f'{{"time": 1.0, "event": "{e}", "trigger": "{t}", "source": "{s}", "epoch": 0, "global_step": 0, '
            f'"batch_idx": 0, "count": 1{err}}}\n'
            for e, t, s, err in rows
        )
    )
    dot = to_dot(chart, read_trace(trace, chart), region="fit.train", depth=1)
    val = next(line for line in dot.splitlines() if line.strip().startswith(f'"{state_ids(chart)["fit.train.val"]}"'))
    assert "ValueError: boom" in val and "#f8d0d0" in val


@pytest.mark.parametrize(
    ("region", "depth"), [("fit.train.batch.step", None), ("nope", None), (None, 0), ("fit", True)]
)
def test_a_bad_region_or_depth_is_refused_with_the_choices(region: str | None, depth: int | None) -> None:
    """A leaf, an unknown state or a depth below 1 is an early error that names what to use."""
    with pytest.raises(ValueError, match="compound state of the chart; use one of: fit, |must be an int >= 1"):
        to_dot(load_chart(), region=region, depth=depth)


def test_mermaid_refuses_a_region() -> None:
    """Regions are drawn by Graphviz; Mermaid says which formats to use."""
    with pytest.raises(ValueError, match="--format dot, svg or png"):
        render(load_chart(), "mermaid", region="fit")


def test_cli_draws_a_region_and_refuses_a_bad_one() -> None:
    """`interlock chart --region fit.train.batch --format dot` prints that part; a leaf is refused with exit 2."""
    import os
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    cli = [sys.executable, "-m", "interlock.cli.main", "chart", "--format", "dot"]
    done = subprocess.run(
        [*cli, "--region", "fit.train.batch"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout == to_dot(load_chart(), region="fit.train.batch")
    bad = subprocess.run(
        [*cli, "--region", "fit.train.batch.step"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert bad.returncode == 2 and "use one of: fit," in bad.stderr
