"""Draw the statechart as Mermaid or Graphviz, optionally with a run's trace on top.

Edges are the transitions as *declared* in the chart: every ``always`` transition of a
state and every ``on`` event (an event on a compound state is one edge from its
cluster), not the exploded leaf table. An edge reads ``trigger [guard] / do1, do2``: the
guard in brackets when there is one, the transition's own actions after ``/`` when it
has some. A state shows its ``entry /`` and ``exit /`` actions under its name.

With a trace, visited states are filled and carry their entry counts; taken edges are
bold and add how often they were taken to their label, so ``validate [schedule.val_due]``
with a count of 12 says validation ran twelve times there because that guard held. The
state the run ended in is marked ``final`` (or ``current`` while it runs), the state a
failure happened in is red with the exception message, and the state a run was
interrupted or preempted in is marked with the trigger that stopped it. All functions
here are pure.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import textwrap
from collections import Counter, defaultdict

import attrs

from interlock.core.chart import Chart, StateSpec
from interlock.core.errors import InterlockError
from interlock.viz.trace import INTERRUPT_TRIGGERS, TraceSummary

__all__ = ["FORMATS", "GraphvizError", "render", "state_ids", "to_dot", "to_mermaid"]

FORMATS = ("mermaid", "dot", "svg", "png")

_MERMAID_KEYWORDS = {"default", "state", "note", "class", "classdef", "scale", "direction", "end", "hide", "root"}
_MERMAID_SPECIAL = set('#";:<>%{}&`\\')
_MARKDOWN_SPECIAL = set("*_[]|~")

# overlay palette: (fill, border)
_VISITED = ("#d8f0d8", "#2e7d32")
_CLUSTER_VISITED = ("#f1faf1", "#2e7d32")
_CURRENT = ("#fff3c4", "#b26a00")
_FAILED = ("#f8d0d0", "#c62828")
_INTERRUPTED = ("#ffe0b2", "#e65100")
_IDLE_EDGE = "#b0b0b0"
_ACTIONS_FONT = 'point-size="8" color="#555555"'
#: A part of the chart (a region) is drawn to be read at page width: no type smaller than 10 pt.
_PART_ACTIONS_FONT = 'point-size="10" color="#555555"'
_FAILURE_TRIGGERS = {"fail", "failed"}
_INTERRUPT_EDGE_TRIGGERS = {*INTERRUPT_TRIGGERS, "interrupted"}
_ACTIONS_WIDTH = 44  # characters per line of a state's action list
_PART_ACTIONS_WIDTH = 28  # the same in a drawing of a part of the chart (larger type)


class GraphvizError(InterlockError, RuntimeError):
    """Graphviz's ``dot`` is missing or could not render the chart."""


# -- ids and text -----------------------------------------------------------------
def state_ids(chart: Chart) -> dict[str, str]:
    """A unique identifier per state path, safe in DOT and Mermaid (``fit.train`` -> ``fit__train``)."""
    bases = {}
    for path in chart.states:
        base = re.sub(r"[^A-Za-z0-9_]", "_", path.replace(".", "__"))
        bases[path] = f"s_{base}" if base.lower() in _MERMAID_KEYWORDS else base
    # Mermaid names the [*] pseudo-states of composite X "X_start" / "X_end" (and "root_start").
    reserved = {"root_start", "root_end"}
    reserved |= {f"{bases[p]}_{kind}" for p, s in chart.states.items() if s.children for kind in ("start", "end")}
    ids: dict[str, str] = {}
    for path, base in bases.items():
        candidate, n = base, 1
        while candidate in reserved:
            n += 1
            candidate = f"{base}_{n}"
        ids[path] = candidate
        reserved.add(candidate)
    return ids


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _wrap(message: str, width: int = 48, max_lines: int = 6) -> list[str]:
    """Wrap an error message for a label: at most ``max_lines`` lines of ``width``."""
    lines = [part for raw in message.splitlines() or [""] for part in textwrap.wrap(raw, width) or [""]]
    if len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], lines[max_lines - 1][: width - 1] + "…"]
    return lines


def _dot_str(text: str) -> str:
    """A DOT double-quoted string; newlines become centred line breaks."""
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "")
    return '"' + text.replace("\n", "\\n") + '"'


def _mm_text(text: str, markdown: bool = False) -> str:
    """Mermaid label text: syntax characters as ``#NN;`` entity codes, newlines as ``<br>``."""
    special = _MERMAID_SPECIAL | _MARKDOWN_SPECIAL if markdown else _MERMAID_SPECIAL
    out = []
    for ch in text.replace("\r", ""):
        if ch == "\n":
            out.append("<br>")
        elif ch in special:
            out.append(f"#{ord(ch)};")
        else:
            out.append(ch)
    return "".join(out)


def _html(text: str) -> str:
    """Text for a Graphviz HTML-like label: XML-escaped, newlines as centred ``<br/>``."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return text.replace("\r", "").replace("\n", "<br/>")


def _times(n: int) -> str:
    return f" \N{MULTIPLICATION SIGN}{n}" if n else ""


def _action_lines(spec: StateSpec, width: int = _ACTIONS_WIDTH) -> list[str]:
    """``entry once / a``, ``entry / a, b`` and ``exit / c`` of a state, wrapped at spaces (empty: no actions)."""
    lines: list[str] = []
    for kind, names in (("entry once", spec.entry_once), ("entry", spec.entry), ("exit", spec.exit)):
        if names:
            text = f"{kind} / {', '.join(names)}"
            lines += textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)
    return lines


# -- declared edges ---------------------------------------------------------------
@attrs.frozen
class _Edge:
    """One transition as declared in the chart, on the state that declares it."""

    state: str
    trigger: str
    target: str
    guard: str | None
    do: tuple[str, ...]
    eventless: bool

    @property
    def key(self) -> tuple[str, str, bool]:
        return (self.state, self.trigger, self.eventless)

    def label(self, n: int = 0, guard: str | None = None, sep: str = " ") -> str:
        """``trigger [guard]``, the count ``n`` if any, then ``/ do1, do2``; ``sep`` goes before the ``/``.

        With a newline ``sep`` (a drawing) each action is a line of its own, which keeps a long list narrow.
        """
        guard = self.guard or guard
        text = self.trigger + (f" [{guard}]" if guard else "") + _times(n)
        return text + (f"{sep}/ {(',' + sep).join(self.do)}" if self.do else "")


def _declared(chart: Chart) -> list[_Edge]:
    """Every declared transition: per state in document order, its ``always`` ones then its ``on`` events."""
    return [
        _Edge(spec.path, t.trigger, t.target, t.guard, t.do, t.eventless)
        for spec in chart.states.values()
        for t in spec.declared()
    ]


def _edge_of(chart: Chart, source: str, trigger: str, dest: str) -> tuple[str, str, bool] | None:
    """The declared edge a traced leaf transition took (None: this chart has no such transition)."""
    leaf = chart.leaf_specs.get(source)
    if leaf is None:
        return None
    if any(t.trigger == trigger and t.dest == dest for t in leaf.always):
        return (source, trigger, True)
    event = leaf.on.get(trigger)
    if event is None or event.dest != dest:
        return None
    declared = next(a for a in chart.ancestors(source) if trigger in chart.states[a].on)
    return (declared, trigger, False)


# -- the overlay ------------------------------------------------------------------
@attrs.frozen
class _Overlay:
    """A trace mapped onto the chart's states and declared edges."""

    visits: Counter[str]
    edges: Counter[tuple[str, str, bool]]
    guards: dict[tuple[str, str, bool], str]
    """The guard that decided each taken edge, as the trace's summary names it."""
    last: str | None
    final: bool
    failed_in: str | None
    error: str | None
    interrupted_in: str | None
    interrupted_by: str | None
    unmatched: int
    caption: str

    def edge_label(self, edge: _Edge, sep: str = " ") -> str:
        return edge.label(self.edges[edge.key], self.guards.get(edge.key), sep)


def _overlay(chart: Chart, trace: TraceSummary) -> _Overlay:
    states = chart.states
    visits: Counter[str] = Counter({s: n for s, n in trace.visits.items() if s in states})
    edges: Counter[tuple[str, str, bool]] = Counter()
    guards: dict[tuple[str, str, bool], str] = {}
    unmatched = 0
    for (source, trigger, dest), n in trace.transitions.items():
        key = _edge_of(chart, source, trigger, dest) if source in states and dest in states else None
        if key is None:
            unmatched += n
            continue
        edges[key] += n
        guard = trace.guards.get((source, trigger, dest)) or chart.guard_of(source, trigger)
        if guard is not None:
            guards[key] = guard
        left = set(chart.ancestors(source))
        for above in list(chart.ancestors(dest))[1:]:  # compound states entered from outside
            if above not in left:
                visits[above] += n
    if trace.first_state in states:
        for above in list(chart.ancestors(trace.first_state))[1:]:
            visits[above] += 1
    last = trace.last_state if trace.last_state in states else None
    failed_in = trace.failed_in if trace.failed_in in states else None
    interrupted_in = trace.interrupted_in if trace.interrupted and trace.interrupted_in in states else None
    if trace.events == 0:
        caption = f"run {trace.path.parent.name}: no events yet"
    elif trace.error is not None or failed_in is not None:
        lines = (trace.error or "").strip().splitlines()
        first_line = (lines[0] if len(lines[0]) <= 100 else lines[0][:99] + "…") if lines else "unknown error"
        caption = f"run {trace.path.parent.name}: failed in {trace.failed_where or trace.failed_in}: {first_line}"
    elif trace.interrupted:
        ended = f"ended in {trace.last_state}" if trace.is_final else f"now at {trace.last_state}"
        caption = f"run {trace.path.parent.name}: stopped by {trace.interrupted_by} in {trace.interrupted_in}, {ended}"
    elif trace.is_final:
        caption = f"run {trace.path.parent.name}: ended in {trace.last_state}"
    else:
        caption = f"run {trace.path.parent.name}: in progress at {trace.last_state}"
    if trace.last_epoch is not None:
        caption += f" (epoch {trace.last_epoch}, step {trace.last_global_step})"
    caption += f", {trace.events} events"
    if unmatched:
        caption += f"; {unmatched} transitions are not in this chart"
    return _Overlay(
        visits,
        edges,
        guards,
        last,
        trace.is_final,
        failed_in,
        trace.error,
        interrupted_in,
        trace.interrupted_by,
        unmatched,
        caption,
    )


def _note(ov: _Overlay | None, path: str) -> tuple[str, str | None]:
    """The label suffix lines and the overlay class of a leaf state."""
    if ov is None:
        return "", None
    if path == ov.failed_in:
        message = "\n".join(_wrap(ov.error or "failed"))
        return f"\n✗ {message}", "failure"
    if path == ov.interrupted_in:
        return f"\n(stopped here: {ov.interrupted_by})", "interrupted"
    if path == ov.last:
        return ("\n(final)", "final") if ov.final else ("\n(current)", "current")
    return "", "visited" if ov.visits[path] else None


def _scope(chart: Chart, source: str, target: str) -> str | None:
    """The deepest state strictly above both ends of an edge (None: the top level)."""
    above_source = list(chart.ancestors(source))[1:]
    above_target = set(list(chart.ancestors(target))[1:])
    return next((a for a in above_source if a in above_target), None)


def _children(chart: Chart, parent: str | None) -> list[str]:
    if parent is not None:
        return list(chart.states[parent].children)
    return [p for p, s in chart.states.items() if s.parent is None]


def _initial(chart: Chart, parent: str | None) -> str:
    if parent is not None:
        return chart.states[parent].initial  # type: ignore[return-value]
    top = chart.initial
    while chart.states[top].parent is not None:
        top = chart.states[top].parent  # type: ignore[assignment]
    return top


# -- Mermaid ----------------------------------------------------------------------
def to_mermaid(chart: Chart, trace: TraceSummary | None = None) -> str:
    """The chart as a Mermaid ``stateDiagram-v2``; every state is declared exactly once."""
    ids = state_ids(chart)
    ov = _overlay(chart, trace) if trace is not None else None
    edges: defaultdict[str | None, list[str]] = defaultdict(list)
    for e in _declared(chart):
        label = ov.edge_label(e) if ov else e.label()
        edges[_scope(chart, e.state, e.target)].append(f"{ids[e.state]} --> {ids[e.target]} : {_mm_text(label)}")
    classes: defaultdict[str, list[str]] = defaultdict(list)
    out: list[str] = []
    if ov is not None:
        out += ["---", f"title: {json.dumps(ov.caption.splitlines()[0] if ov.caption else '')}", "---"]
    out.append("stateDiagram-v2")

    def scope(parent: str | None, depth: int) -> None:
        pad = "    " * depth
        children = _children(chart, parent)
        for path in children:
            count = _times(ov.visits[path]) if ov else ""
            actions = _action_lines(chart.states[path])
            if chart.states[path].children:  # a composite's actions go under its name in its title
                title = "\n".join([_short(path) + count, *actions])
                out.append(f'{pad}state "{_mm_text(title)}" as {ids[path]} {{')
                scope(path, depth + 1)
                out.append(f"{pad}}}")
                continue
            suffix, cls = _note(ov, path)
            label = _mm_text(_short(path) + count) + _mm_text(suffix, markdown=True)
            out.append(f'{pad}state "{label}" as {ids[path]}')
            out.extend(f"{pad}{ids[path]} : {_mm_text(line)}" for line in actions)
            if cls:
                classes[cls].append(ids[path])
        out.append(f"{pad}[*] --> {ids[_initial(chart, parent)]}")
        out.extend(pad + line for line in edges[parent])
        out.extend(f"{pad}{ids[p]} --> [*]" for p in children if chart.states[p].final)

    scope(None, 1)
    if ov is not None:
        out += [
            f"    classDef visited fill:{_VISITED[0]},stroke:{_VISITED[1]}",
            f"    classDef final fill:{_VISITED[0]},stroke:{_VISITED[1]},stroke-width:4px",
            f"    classDef current fill:{_CURRENT[0]},stroke:{_CURRENT[1]},stroke-width:3px",
            f"    classDef failure fill:{_FAILED[0]},stroke:{_FAILED[1]},stroke-width:3px,color:#8e0000",
            f"    classDef interrupted fill:{_INTERRUPTED[0]},stroke:{_INTERRUPTED[1]},stroke-width:3px",
        ]
        out += [f"    class {','.join(members)} {cls}" for cls, members in classes.items()]
    return "\n".join(out) + "\n"


# -- regions ----------------------------------------------------------------------
def check_region(chart: Chart, region: str | None, depth: int | None) -> None:
    """Refuse a region that is not a compound state of ``chart``, or a depth below 1, naming the fix."""
    if region is not None and (region not in chart.states or not chart.states[region].children):
        compounds = ", ".join(p for p, st in chart.states.items() if st.children)
        raise ValueError(f"region {region!r} is not a compound state of the chart; use one of: {compounds}")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise ValueError(f"depth {depth!r} must be an int >= 1 (levels of states drawn below the region)")


def _level(chart: Chart, path: str, region: str | None) -> int:
    """How many levels ``path`` is below ``region`` (1: a child of it)."""
    return path.count(".") - (region.count(".") if region is not None else -1)


# -- Graphviz ---------------------------------------------------------------------
def to_dot(chart: Chart, trace: TraceSummary | None = None, region: str | None = None, depth: int | None = None) -> str:
    """The chart as Graphviz DOT: compound states are nested ``cluster_`` subgraphs.

    ``region`` (a compound state) draws only the states inside it; ``depth`` draws that many
    levels below the region (or the top) and each compound state at the last level as one
    collapsed box (its inside is a region of its own). A transition that leaves the drawn
    part ends at a dashed box naming its target.
    """
    check_region(chart, region, depth)
    ids = state_ids(chart)
    ov = _overlay(chart, trace) if trace is not None else None
    partial = region is not None or depth is not None

    def shown(path: str) -> str | None:
        """The drawn state that stands for ``path`` (itself, or the collapsed box holding it); None: outside."""
        if region is not None and region not in list(chart.ancestors(path))[1:]:
            return None
        if depth is None:
            return path
        chain = list(chart.ancestors(path))[::-1]  # top-level first
        return next(
            a for a in chain if _level(chart, a, region) >= 1 and (_level(chart, a, region) >= depth or a == path)
        )

    def collapsed(path: str) -> bool:
        return bool(chart.states[path].children) and depth is not None and _level(chart, path, region) >= depth

    out = [
        "digraph interlock {",
        '  graph [compound=true, fontname="Helvetica", fontsize=11, nodesep=0.3, ranksep=0.35];',
        '  node [shape=box, style="rounded", fontname="Helvetica", fontsize=10, height=0.3];',
        f'  edge [fontname="Helvetica", fontsize={10 if partial else 9}, arrowsize=0.7];',
    ]
    if ov is not None:
        out.append(f"  label={_dot_str(ov.caption)}; labelloc=t;")
    elif region is not None:
        out.append(f"  label={_dot_str(region)}; labelloc=t; fontsize=13;")

    def marker(parent: str | None, kind: str) -> str:
        return _dot_str(f"{ids[parent] if parent else 'root'}#{kind}")

    def anchor(path: str) -> str:  # the node an edge to or from a cluster attaches to
        return marker(path, "start") if chart.states[path].children and not collapsed(path) else _dot_str(ids[path])

    def inside(path: str, container: str) -> bool:
        return path in chart.states and container in chart.ancestors(path)

    def label(path: str, suffix: str = "") -> str:
        """An HTML-like label: the name (and count), its actions in small grey type, then ``suffix``."""
        parts = [_html(_short(path) + (_times(ov.visits[path]) if ov else ""))]
        actions = _action_lines(chart.states[path], _PART_ACTIONS_WIDTH if partial else _ACTIONS_WIDTH)
        if actions:
            font = _PART_ACTIONS_FONT if partial else _ACTIONS_FONT
            parts.append(f"<font {font}>{'<br/>'.join(_html(line) for line in actions)}</font>")
        if suffix:
            parts.append(_html(suffix.lstrip("\n")))
        return "<" + "<br/>".join(parts) + ">"

    def node(path: str, pad: str) -> str:
        suffix, cls = _note(ov, path)
        if collapsed(path):  # a box for a whole compound state: what happened inside shows on it
            inner = [p for p in chart.states if path in list(chart.ancestors(p))[1:]]
            notes = [_note(ov, p) for p in inner if _note(ov, p)[1] not in (None, "visited")]
            suffix, cls = notes[0] if notes else ("", "visited" if ov is not None and ov.visits[path] else None)
            suffix = f"\n[{len(inner)} states inside]" + suffix
        attrs_ = [f"label={label(path, suffix)}"]
        if collapsed(path):
            attrs_.append("peripheries=2")
        if cls == "failure":
            attrs_ += [f'style="rounded,filled,bold", fillcolor="{_FAILED[0]}", color="{_FAILED[1]}"']
            attrs_.append('fontcolor="#8e0000"')
        elif cls == "current":
            attrs_ += [f'style="rounded,filled,bold", fillcolor="{_CURRENT[0]}", color="{_CURRENT[1]}", penwidth=2']
        elif cls == "interrupted":
            attrs_ += [f'style="rounded,filled,bold", fillcolor="{_INTERRUPTED[0]}", color="{_INTERRUPTED[1]}"']
        elif cls in ("visited", "final"):
            attrs_ += [f'style="rounded,filled", fillcolor="{_VISITED[0]}", color="{_VISITED[1]}"']
        if cls == "final":
            attrs_.append("peripheries=2, penwidth=2")
        return f"{pad}{_dot_str(ids[path])} [{', '.join(attrs_)}];"

    def scope(parent: str | None, depth: int) -> None:
        pad = "  " * depth
        children = _children(chart, parent)
        out.append(f'{pad}{marker(parent, "start")} [shape=point, width=0.12, label=""];')
        if any(chart.states[p].final for p in children):
            out.append(
                f'{pad}{marker(parent, "end")} [shape=doublecircle, width=0.06, label="", style=filled, '
                "fillcolor=black];"
            )
        for path in children:
            if not chart.states[path].children or collapsed(path):
                out.append(node(path, pad))
                continue
            n = ov.visits[path] if ov else 0
            out.append(f"{pad}subgraph {_dot_str('cluster_' + ids[path])} {{")
            out.append(f"{pad}  label={label(path)};")
            fill, border = _CLUSTER_VISITED
            out.append(
                f'{pad}  style="rounded,filled"; fillcolor="{fill}"; color="{border}";'
                if n
                else f"{pad}  style=rounded; color=gray60;"
            )
            scope(path, depth + 1)
            out.append(f"{pad}}}")

    def edge(tail: str, head: str, tail_node: str, head_node: str, extra: list[str]) -> str:
        attrs_ = list(extra)
        if tail in chart.states and chart.states[tail].children and not collapsed(tail) and not inside(head, tail):
            attrs_.append(f"ltail={_dot_str('cluster_' + ids[tail])}")
        if head in chart.states and chart.states[head].children and not collapsed(head) and not inside(tail, head):
            attrs_.append(f"lhead={_dot_str('cluster_' + ids[head])}")
        return f"  {tail_node} -> {head_node}" + (f" [{', '.join(attrs_)}];" if attrs_ else ";")

    def edge_style(text: str, color: str | None) -> list[str]:
        extra = [f"label={_dot_str(' ' + text)}"]
        if color is not None:
            extra.append(f'penwidth=2.2, color="{color}", fontcolor="{color}"')
        elif ov is not None:
            extra.append(f'color="{_IDLE_EDGE}", fontcolor="{_IDLE_EDGE}"')
        return extra

    def stub(target: str) -> str:
        """A dashed box for a state outside the drawn part (declared once)."""
        name = _dot_str(f"outside#{target}")
        if name not in stubs:
            stubs.add(name)
            out.append(f'  {name} [label={_dot_str("→ " + target)}, style="rounded,dashed", color=gray50];')
        return name

    stubs: set[str] = set()
    scope(region, 1)
    drawn: list[str | None] = [region]
    drawn += [p for p, st in chart.states.items() if st.children and shown(p) == p and not collapsed(p) and p != region]
    for parent in drawn:
        first = _initial(chart, parent)
        out.append(edge("", first, marker(parent, "start"), anchor(first), []))
        for path in _children(chart, parent):
            if chart.states[path].final:
                out.append(edge(path, "", anchor(path), marker(parent, "end"), []))
    # in a partial drawing, the transitions between one pair of boxes are one edge listing them all
    merged: dict[tuple[str, str], tuple[list[str], str | None]] = {}
    for e in _declared(chart):
        tail, head = shown(e.state), shown(e.target)
        if tail is None or (partial and tail == head and collapsed(tail)):
            continue  # starts outside the drawn part, or inside one collapsed box
        text = ov.edge_label(e, sep="\n") if ov else e.label(sep="\n")
        color = None
        if ov is not None and ov.edges[e.key]:
            color = _VISITED[1]
            if e.trigger in _FAILURE_TRIGGERS:
                color = _FAILED[1]
            elif e.trigger in _INTERRUPT_EDGE_TRIGGERS:
                color = _INTERRUPTED[1]
        if not partial:
            out.append(edge(e.state, e.target, anchor(e.state), anchor(e.target), edge_style(text, color)))
            continue
        key = (tail, head if head is not None else "outside#" + e.target)
        texts, was = merged.get(key, ([], None))
        if text not in texts:
            texts.append(text)
        merged[key] = (texts, was if was not in (None, _VISITED[1]) else color or was)
    for (tail, head), (texts, color) in merged.items():
        extra = edge_style("\n".join(texts), color)
        if head.startswith("outside#"):
            out.append(edge(tail, "", anchor(tail), stub(head.removeprefix("outside#")), extra))
        else:
            out.append(edge(tail, head, anchor(tail), anchor(head), extra))
    out.append("}")
    return "\n".join(out) + "\n"


def _graphviz(dot: str, fmt: str) -> bytes:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizError(
            f"--format {fmt} needs Graphviz's `dot` program, which is not on PATH; install Graphviz "
            "(Debian/Ubuntu: `apt-get install graphviz`, macOS: `brew install graphviz`) "
            "or use --format mermaid or --format dot"
        )
    try:
        done = subprocess.run([exe, f"-T{fmt}"], input=dot.encode(), capture_output=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise GraphvizError(f"`{exe} -T{fmt}` took over 120 s; use --format dot and render it yourself") from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip()
        raise GraphvizError(f"`{exe} -T{fmt}` failed with exit code {done.returncode}: {detail}")
    return done.stdout


SOURCE_STAMP = "interlock-chart-source-sha256"


def source_digest(dot: str) -> str:
    """The digest of the DOT source an SVG was drawn from (it marks the SVG, so staleness is testable)."""
    return hashlib.sha256(dot.encode()).hexdigest()


def _stamp(svg: bytes, dot: str) -> bytes:
    """Insert a comment naming the DOT source's digest after the SVG's XML declaration."""
    comment = f"<!-- {SOURCE_STAMP}: {source_digest(dot)} -->\n".encode()
    head, sep, rest = svg.partition(b"?>\n")
    return head + sep + comment + rest if sep else comment + svg


def render(
    chart: Chart, fmt: str, trace: TraceSummary | None = None, region: str | None = None, depth: int | None = None
) -> str | bytes:
    """The chart in ``fmt``: ``mermaid`` / ``dot`` text, or ``svg`` / ``png`` bytes (needs Graphviz).

    ``region`` and ``depth`` draw a part of the chart (see :func:`to_dot`; Graphviz formats only).
    """
    if fmt == "mermaid":
        if region is not None or depth is not None:
            raise ValueError("a region or depth is drawn by Graphviz only: use --format dot, svg or png")
        return to_mermaid(chart, trace)
    if fmt == "dot":
        return to_dot(chart, trace, region, depth)
    if fmt in ("svg", "png"):
        dot = to_dot(chart, trace, region, depth)
        out = _graphviz(dot, fmt)
        return _stamp(out, dot) if fmt == "svg" else out
    raise ValueError(f"unknown chart format {fmt!r}; use one of: {', '.join(FORMATS)}")
