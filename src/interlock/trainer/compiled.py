"""A leaf's arrival compiled to one Python function: the interpreter's walk, unrolled for that leaf.

:meth:`Runtime._arrive <interlock.trainer.runtime.Runtime._arrive>` is the interpreter's
generic step of a walk: enter a leaf (move, observers, event, ``entry_once``, saves), run its
entry actions, decide with :func:`~interlock.core.step.step` and run the chosen transition's
work. For a leaf the walk keeps entering (the batch loop's states), :func:`compile_arrival`
writes the same step as the source of one function with that leaf's tables unrolled: each
entry action a call of its own, the ``always`` transitions' guards tried in order as
:func:`~interlock.core.step.step` tries them, the chosen transition's work inline, and the
checks a leaf cannot need (``entry_once`` on a leaf without it, saves on a leaf that is not a
checkpoint state) left out. What it does, in what order, is the generic step's;
``tests/test_compiled_walk.py`` runs random fits both ways and compares every hook, transition,
event, failure note, file and weight.

The source depends only on the leaf's shape (how many actions, guards, transitions), never on
the callables, which are passed in: code objects are cached by source, and binding one to a
stage's callables costs a function call. A leaf is compiled only when none of its actions may
fill a slot (declared ``writes``): a fill rebinds the chart mid-sequence, which the generic
step handles.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from interlock.core.progress import FrozenCounters
from interlock.core.step import Facts

__all__ = ["compile_arrival", "source_of"]

_new = tuple.__new__
#: What every arrival function is given before its own constants (:func:`compile_arrival` passes them in order)
_FIXED = (
    "rt", "counts", "observers", "recorders", "counters", "signal", "node", "emit", "apply_result", "after_jump", "new",
    "Facts", "FrozenCounters", "clock",
)  # fmt: skip
_code_cache: dict[tuple[str, str], Any] = {}


class _Source:
    """Lines of Python being written, with their indentation and the constants they name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}
        self.depth = 1

    def put(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def const(self, prefix: str, value: Any) -> str:
        name = f"{prefix}{len(self.names)}"
        self.names[name] = value
        return name


def _actions(src: _Source, fns: Sequence[Callable[[], Any]], where: str | None = None) -> None:
    """Call each of ``fns`` in order, applying what it returns; ``where``: the edge whose failure note names it."""
    if not fns:
        return
    if where is not None:
        src.put("act = None")
        src.put("try:")
        src.depth += 1
    for fn in fns:
        name = src.const("a", fn)
        if where is not None:
            src.put(f"act = {name}")
        src.put(f"out = {name}()")
        src.put("if out is not None:")
        src.put(f"    apply_result(out, {name})")
    if where is not None:
        src.depth -= 1
        src.put("except BaseException:")
        src.put(f"    rt._where = {where}.where(act)")
        src.put("    raise")


def source_of(node: Any) -> tuple[str, dict[str, Any]]:
    """The source of ``node``'s arrival function and the constants it names (callables, edges, the node)."""
    src = _Source()
    dest = src.const("path", node.path)
    src.put("source = rt._at")
    src.put(f"rt._at = {dest}")
    src.put(f"count = counts[{dest}] = counts[{dest}] + 1")
    src.put("rt._snapshot = None")
    src.put("if observers:")
    src.put("    c = counters")
    src.put("    for observe in observers:")
    src.put(f"        observe({dest}, edge.trigger, source, count, c.epoch, c.global_step, c.batch_idx)")
    src.put("if recorders:")
    src.put("    c = counters")
    src.put("    now = clock()")
    src.put(f"    row = (now, {dest}, edge.trigger, source, count, c.epoch, c.global_step, c.batch_idx)")
    src.put("    for recorder in recorders:")
    src.put("        rows = recorder.rows")
    src.put("        rows.append(row)")
    src.put("        if now >= recorder.due or len(rows) >= recorder.limit:")
    src.put(f"            recorder.flush_due({dest})")
    if node.once:
        src.put("rt._holding = True")
        src.put("if signal.receivers:")
        src.put("    emit(node, edge, source, count)")
        src.put("rt._holding = False")
        _actions(src, node.once)
    else:
        src.put("if signal.receivers:")
        src.put("    emit(node, edge, source, count)")
    if node.checkpoint:
        src.put("if rt._pending_saves:")
        src.put("    rt._flush_saves()")
    src.put("taken = rt._taken")
    src.put("if taken is not None:")
    src.put("    taken()")
    _actions(src, node.entry)
    src.put("if rt._jump is not None:")
    src.put("    return after_jump(rt._do_jump())")
    facts_built = False
    for edge in node.always:
        e = src.const("e", edge)
        guarded = edge.guard is not None
        if guarded:
            if not facts_built:
                src.put("facts = rt._facts")
                src.put("if facts is None:")
                src.put("    c = counters")
                fields = ", ".join(f"c.{f}" for f in FrozenCounters._fields)
                src.put(f"    facts = rt._facts = new(Facts, (rt._base, new(FrozenCounters, ({fields},)), rt._config))")
                facts_built = True
            src.put(f"if {src.const('g', edge.guard)}(facts):")
            src.depth += 1
        _actions(src, edge.actions, e)
        if edge.ops is not None:
            src.put(f"{src.const('ops', edge.ops)}(counters)")
            src.put("rt._snapshot = rt._facts = rt._progress = None")
        _actions(src, edge.enters, e)
        src.put(f"return {e}")
        if not guarded:
            break
        src.depth -= 1
    else:
        src.put("return None")
    params = ", ".join((*_FIXED, *src.names))
    head = f"def make({params}):\n    def arrive(edge):\n"
    body = "\n".join("    " + line for line in src.lines)
    return head + body + "\n    return arrive\n", src.names


def compile_arrival(rt: Any, node: Any) -> Callable[[Any], Any]:
    """``node``'s arrival as one function bound to ``rt``'s stage: ``arrive(edge)`` -> the next edge (its work done)."""
    text, names = source_of(node)
    code = _code_cache.get((node.path, text))
    if code is None:  # compiled once per leaf and shape in a process (the leaf's name is the code's, in tracebacks)
        code = _code_cache[node.path, text] = compile(text, f"<interlock arrival: {node.path}>", "exec")
    scope: dict[str, Any] = {}
    exec(code, scope)  # source written by source_of from the leaf's shape; names and callables are arguments
    make: Callable[..., Callable[[Any], Any]] = scope["make"]
    return make(
        rt, rt._counts, rt._observers, rt._recorders, rt.counters, node.signal, node, rt._emit, rt._apply_result,
        rt._settle, _new, Facts, FrozenCounters, time.time, **names,
    )  # fmt: skip
