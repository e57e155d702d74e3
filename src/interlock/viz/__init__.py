"""Render the lifecycle statechart, optionally with a run's trace overlaid."""

from interlock.viz.render import FORMATS, GraphvizError, render, state_ids, to_dot, to_mermaid
from interlock.viz.trace import TRACE_FILE, TraceError, TraceSummary, read_trace

__all__ = [
    "FORMATS",
    "TRACE_FILE",
    "GraphvizError",
    "TraceError",
    "TraceSummary",
    "read_trace",
    "render",
    "state_ids",
    "to_dot",
    "to_mermaid",
]
