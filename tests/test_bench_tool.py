"""Smoke test of tools/bench.py: tiny sizes, checks the report's shape, never its timings."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from _together import run_together

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench.py"


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _sections() -> tuple[str, ...]:
    return tuple(_bench().SECTIONS)


#: The sections of one ``--quick`` report, in two processes that run at once (they share nothing but the CPU):
#: ``rss`` reads the ``steps`` runs, so the two stay together; the second half is every other section but
#: ``work``, whose counts (a third of the quick report's time, under a tracer) the bytecode test below checks.
FIRST = ("steps", "rss", "ddp")
HALVES = (",".join(FIRST), ",".join(s for s in _sections() if s not in (*FIRST, "work")))


def _quick_report(variants: str) -> dict[str, Any]:
    """``bench.py --quick --json``, every section, run as two concurrent processes and merged into one report."""
    commands = [
        [sys.executable, str(BENCH), "--quick", "--json", "--quiet", "--only", half, "--variants", variants]
        for half in HALVES
    ]
    outputs = run_together(commands, timeout=880)
    reports = []
    for code, out, err in outputs:
        assert code == 0, err[-3000:]
        reports.append(json.loads(out))
    first, second = reports
    for half, report in zip(HALVES, reports, strict=True):
        assert set(report["config"].pop("sections")) == set(half.split(",")), report["config"]
    assert first["config"] == second["config"]  # the same sizes and rounds in both halves
    return {**first, **{name: second[name] for name in HALVES[1].split(",")}}


@pytest.mark.timeout(900)
def test_bench_quick_json_shape() -> None:
    """Every section of a --quick run reports its numbers and verdicts in the documented JSON shape."""
    report = _quick_report("plain,interlock_bare,interlock_view,ignite")

    assert set(report) >= {
        "machine",
        "config",
        "targets",
        "variants",
        "steps",
        "ddp",
        "ckpt",
        "resume",
        "rss",
        "epochs",
        "long",
        "failure",
        "split",
    }
    assert report["config"]["quick"] is True
    failure = report["failure"]  # the flight recorder writes once, at the failure; the replay reproduces it
    assert failure["status"] == "ok" and failure["reproduced"] is True, failure
    assert _finite(failure["record_ms"]) and failure["replay_started_at"] > 0  # from a checkpoint, not step 0
    assert failure["resumed_reproduced"] is True and _finite(failure["save_ms"])  # saved at it, resumed to it

    variants = report["variants"]
    assert {"plain", "interlock_bare", "ignite"} <= set(variants)
    for name in ("plain", "interlock_bare"):
        row = variants[name]
        assert "error" not in row, row
        for key in ("us_per_step", "overhead_us_per_step", "ratio"):
            assert _finite(row[key]), (name, key, row[key])
    assert variants["plain"]["overhead_us_per_step"] == 0.0
    assert variants["plain"]["ratio"] == 1.0
    assert variants["plain"]["paired_overhead_us_per_step"] == 0.0
    bare = variants["interlock_bare"]
    assert bare["verdict"] in ("PASS", "MISS") and bare["target_us"] == report["targets"]["interlock_bare_us"]
    scale = variants["plain"]["us_per_step"] / 139.0  # targets are scaled with this machine's plain loop
    assert bare["target_us_here"] == pytest.approx(bare["target_us"] * scale)
    judged = bare["same_process_overhead_us_per_step"]  # plain and bare also ran side by side in one process
    assert _finite(judged) and len(bare["same_process_samples"]) == 1
    assert bare["overhead_at_reference_us"] == pytest.approx(judged / scale)
    assert bare["raw_verdict"] == ("PASS" if judged <= bare["target_us"] else "MISS")
    view = variants["interlock_view"]  # the default listeners plus LiveView, a page following the run
    if importlib.util.find_spec("uvicorn") is None:
        assert "[view]" in view["unavailable"]
    else:
        assert "error" not in view, view
        assert _finite(view["us_per_step"]) and _finite(view["same_process_overhead_us_per_step"])
        assert view["target_us"] == report["targets"]["interlock_view_us"] == 25.0
        assert view["verdict"] in ("PASS", "MISS")
    ignite = variants["ignite"]  # measured when installed, reported unavailable otherwise
    assert "unavailable" in ignite or _finite(ignite["us_per_step"])

    split = report["split"]  # a step's time by part: torch's calls, and the rest (the loop's or trainer's own Python)
    assert "error" not in split, split
    parts = ("fetch", "forward", "zero_grad", "backward", "optimizer_step", "rest", "step")
    assert set(split["us"]) == {"plain", "interlock_bare", "interlock_default"}
    assert all(_finite(row[p]) for row in split["us"].values() for p in parts)
    plain = split["us"]["plain"]  # plain's own values: every part takes time, and the parts lie inside the step
    assert all(plain[p] > 0 for p in parts)
    assert plain["step"] >= plain["forward"] + plain["backward"] + plain["optimizer_step"]

    ddp = report["ddp"]
    assert ddp["status"] in ("ok", "unavailable"), ddp
    if ddp["status"] == "ok":
        assert _finite(ddp["ratio"]) and ddp["verdict"] in ("PASS", "MISS")

    ckpt = report["ckpt"]
    assert ckpt["status"] == "ok", ckpt
    assert set(ckpt["ms"]) == {"torch_save", "torch_save_fsync", "interlock", "interlock_sync"}
    assert all(_finite(v) for v in (*ckpt["ms"].values(), *ckpt["durable_ms"].values()))
    assert ckpt["durable_ms"]["interlock"] >= ckpt["ms"]["interlock"]  # in place only after the call returned
    assert _finite(ckpt["ratio"]) and ckpt["verdict"] in ("PASS", "MISS")

    resume = report["resume"]
    assert resume["status"] == "ok", resume
    assert all(_finite(v) for v in resume["ms"].values())
    assert resume["resumed_at"] == [resume["near_batch"], resume["far_batch"]]
    assert resume["verdict"] in ("PASS", "MISS")

    rss = report["rss"]
    assert rss["status"] == "ok", rss
    assert all(_finite(v) for v in rss["peak_rss_mb"].values())
    assert all(_finite(g["mb"]) for g in rss["growth"].values()), rss["growth"]
    assert rss["peak_verdict"] in ("PASS", "MISS") and rss["growth_verdict"] in ("PASS", "MISS")

    epochs = report["epochs"]
    assert epochs["status"] == "ok", epochs
    assert epochs["epochs"] == report["config"]["growth_epochs"] and epochs["history_rows"] == 2 * epochs["epochs"]
    assert _finite(epochs["early_ms"]) and _finite(epochs["late_ms"]) and _finite(epochs["ratio"])
    assert epochs["verdict"] in ("PASS", "MISS")

    long = report["long"]  # every default listener on: epoch cost, checkpoint bytes, run-dir bytes per step
    assert long["status"] == "ok" and "error" not in long, long
    assert long["history_rows"] == 2 * long["total_epochs"] and long["epochs"] == report["config"]["long_epochs"]
    assert all(_finite(r["paired_wall"]) and _finite(r["paired_cpu"]) for r in long["per_round"])  # took turns
    assert long["ckpt_ratio"] <= 1.02  # bytes, not time: the checkpoint does not grow with the history
    assert {"events.jsonl", "history.jsonl", "metrics.csv"} <= set(long["files"])
    assert _finite(long["epoch_ratio"]) and _finite(long["bytes_per_step"]) and long["steps"] == 200
    assert all(long[k] in ("PASS", "MISS") for k in ("epoch_verdict", "ckpt_verdict", "bytes_verdict"))
    assert bare["target_ratio"] == 1.03 and bare["ratio_verdict"] in ("PASS", "MISS")
    assert _finite(bare["same_process_ratio"]) and len(bare["same_process_ratio_spread"]) == 2

    text = _bench().render(report)  # the text report renders every section the JSON has
    headings = ("steps:", "ddp", "checkpoint save (", "resume (", "peak RSS:", "epoch growth (", "long run, every")
    for heading in (*headings, "failure (", "where a step's time goes"):
        assert heading.lower() in text.lower(), (heading, text[-2000:])


def test_bytecode_counts_per_step_are_exact_and_leave_set_up_out() -> None:
    """Counting a variant's bytecodes per step twice gives the same numbers; interlock's own share is counted."""
    sys.path.insert(0, str(BENCH.parent))
    import _bench_workers as workers

    spec = {"variant": "interlock_bare", "batch": 10, "short": 10, "long": 20}
    first, again = workers.run_opcodes(spec), workers.run_opcodes(spec)
    assert first == again
    assert first["per_step"]["interlock"] > 50  # the chart's walk and the actions, every step
    plain = workers.run_opcodes({**spec, "variant": "plain"})  # the plain loop runs none of interlock's code
    assert plain["per_step"].get("interlock", 0) == 0 and plain["per_step"]["bench"] > 0
    assert first["total"] > plain["total"]
    # interlock's generated code counts as its own, not as "other" (the stdlib); its step runs less of the stdlib
    # than the plain loop, whose zero_grad opens torch's profiler span (interlock.plugins.grads skips it)
    assert 0 < first["per_step"]["other"] <= plain["per_step"]["other"]
    longer = workers.run_opcodes({**spec, "short": 15, "long": 30})  # set-up is left out: the same per step
    for origin in ("interlock", "torch", "bench"):
        assert longer["per_step"][origin] == first["per_step"][origin], origin
    assert longer["total"] == pytest.approx(first["total"], abs=1.0)  # the stdlib's share may move by a fraction


def test_bench_rejects_unknown_section() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--only", "nope"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 2
    assert "unknown section" in proc.stderr


@pytest.mark.timeout(300)
def test_a_sharded_save_holds_no_full_copy_of_the_model_on_any_rank() -> None:
    """bench --sharded on 2 ranks: a full save grows rank 0 by a whole model; a sharded one grows no rank as much."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        from bench_sharded import render_sharded, section_sharded
    finally:
        sys.path.remove(str(BENCH.parent))
    section = section_sharded(96, timeout=280)
    assert "error" not in section, section.get("error")
    model = section["rank0"]["model_mb"]
    assert section["rank0"]["full"]["peak_growth_mb"] >= model  # the measurement sees a full copy where there is one
    for rank in ("rank0", "rank1"):
        for way in ("sharded", "sharded_async"):
            assert section[rank][way]["peak_growth_mb"] < model, (rank, way, section[rank][way])
    background = section["rank0"]["sharded_async"]
    assert background["wait_s"] < 0.6 * background["write_s"], background  # the loop waits for a part of the write
    assert "the loop waits" in render_sharded(section)
