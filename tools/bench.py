"""Measure interlock's overhead side by side with a plain loop, Lightning and Ignite.

Every measurement runs in a fresh process (``tools/_bench_workers.py``), the
variants of a section interleaved round by round (A B C, B C A, ...), and each
result is the median over ``--repeats`` rounds. Targets are printed beside the
results with PASS/MISS; a miss is reported, never an error (exit status 0).

    .venv/bin/python tools/bench.py                 # everything, as on the Performance page
    .venv/bin/python tools/bench.py --only steps --repeats 9
    .venv/bin/python tools/bench.py --quick --json  # tiny sizes (the smoke test)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_bench_workers.py"
SRC = HERE.parent / "src"

SECTIONS = ("steps", "work", "split", "ddp", "ckpt", "resume", "rss", "epochs", "long", "failure")
STEP_VARIANTS = (
    "plain",
    "prebatched",
    "interlock_bare",
    "interlock_fast",
    "interlock_lightning",
    "interlock_default",
    "interlock_view",
    "interlock_mlflow",
    "interlock_wandb",
    "lightning",
    "lightning_default",
    "ignite",
)
#: Which import each optional variant needs.
NEEDS = {
    "interlock_view": "uvicorn",
    "interlock_mlflow": "mlflow",
    "interlock_wandb": "wandb",
    "lightning": "pytorch_lightning",
    "lightning_default": "pytorch_lightning",
    "ignite": "ignite",
}

TARGETS = {
    # per-step overhead over the plain loop, in µs, stated for a machine where the plain loop takes
    # REFERENCE_PLAIN_US; on a slower or faster machine the bench scales them with the plain loop
    "interlock_bare_us": 10.0,
    "interlock_default_us": 25.0,
    # the default listeners plus the view of the run (LiveView, `fit --view`) with a page following it
    "interlock_view_us": 25.0,
    "ddp_ratio": 1.10,
    "ckpt_ratio": 1.2,
    "resume_ratio": 2.0,
    "peak_rss_over_mb": 30.0,
    "rss_growth_mb": 5.0,
    # per-epoch cost late in a long run over its cost early on (1 train + 8 val batches per epoch)
    "epoch_growth_ratio": 1.2,
    # the step cost as a ratio to the plain loop, measured side by side in one process
    "interlock_bare_ratio": 1.03,
    "interlock_lightning_ratio": 1.03,  # the same module through interlock.lightning: the adapter costs nothing a step
    "interlock_default_ratio": 1.06,
    "interlock_view_ratio": 1.08,
    # the long run with every default listener on: per-epoch cost and checkpoint bytes late/early,
    # and what the run directory (checkpoints apart) holds per training step
    "long_epoch_ratio": 1.2,
    "long_ckpt_ratio": 1.1,
    "long_bytes_per_step": 100.0,
}

#: The plain loop's µs/step on the machine the step targets were set on (the issue's measurement).
REFERENCE_PLAIN_US = 139.0

#: Sizes of every section: the full run, and ``--quick`` (the smoke test).
SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "steps_samples": 20_000,
        "batch": 10,
        "ddp_samples": 20_000,
        "ckpt_megabytes": 50,
        "resume_samples": 1_050_000,
        "resume_near": 10,
        "resume_far": 100_000,
        "growth_steps": 100_000,
        "growth_every": 10_000,
        "growth_epochs": 1_500,
        "repeats": 5,
        "warmup": 1,
        "same_process_runs": 15,
        "same_process_samples": 3_000,
        "long_epochs": 1_000,
        "long_rounds": 3,
        "long_val_batches": 8,
        "long_steps_epochs": 100,
        "long_steps_per_epoch": 200,
        "failure_steps": 2_000,
        "failure_epochs": 10,
        "work_steps": [100, 300],
        "split_processes": 3,
        "split_runs": 8,
        "split_samples": 20_000,
    },
    "quick": {
        "steps_samples": 200,
        "batch": 10,
        "ddp_samples": 400,
        "ckpt_megabytes": 2,
        "resume_samples": 20_000,
        "resume_near": 10,
        "resume_far": 1_000,
        "growth_steps": 400,
        "growth_every": 100,
        "growth_epochs": 120,
        "repeats": 1,
        "warmup": 0,
        "same_process_runs": 2,
        "same_process_samples": 200,
        "long_epochs": 60,
        "long_rounds": 1,
        "long_val_batches": 2,
        "long_steps_epochs": 4,
        "long_steps_per_epoch": 50,
        "failure_steps": 20,
        "failure_epochs": 3,
        "work_steps": [20, 40],
        "split_processes": 1,
        "split_runs": 1,
        "split_samples": 300,
    },
}


class Runner:
    """Starts one worker process per measurement and collects its JSON result."""

    def __init__(self, workdir: Path, verbose: bool, timeout: float) -> None:
        self.workdir = workdir
        self.verbose = verbose
        self.timeout = timeout
        self.count = 0
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TMPDIR=str(workdir), PYTHONHASHSEED="0")
        self.env = env

    def log(self, message: str) -> None:
        if self.verbose:
            print(message, file=sys.stderr, flush=True)

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Run one measurement; ``{"error": ...}`` when the worker failed."""
        self.count += 1
        out = self.workdir / f"result-{self.count}.json"
        label = " ".join(f"{k}={v}" for k, v in spec.items() if k in ("task", "variant", "start"))
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, str(WORKER), json.dumps(spec), str(out)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=self.env,
                cwd=self.workdir,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.log(f"  {label}: timed out after {self.timeout:.0f} s")
            return {"error": f"timed out after {self.timeout:.0f} s"}
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or "").strip().splitlines()[-6:]
            self.log(f"  {label}: failed (exit {proc.returncode})\n    " + "\n    ".join(tail))
            return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
        result: dict[str, Any] = json.loads(out.read_text())
        out.unlink()
        self.log(f"  {label}: {_brief(result)} ({time.perf_counter() - t0:.1f} s)")
        return result


def _brief(result: dict[str, Any]) -> str:
    keys = ("us_per_step", "ms", "unavailable")
    return ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items() if k in keys)


def interleave(
    runner: Runner, specs: dict[str, dict[str, Any]], repeats: int, warmup: int
) -> dict[str, list[dict[str, Any]]]:
    """Run each named spec ``warmup + repeats`` times, rotating the order every round; drop the warm-up rounds."""
    names = list(specs)
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for rnd in range(warmup + repeats):
        shift = rnd % len(names)
        for name in names[shift:] + names[:shift]:
            result = runner.run(specs[name])
            if rnd >= warmup:
                results[name].append(result)
    return results


def median_of(runs: Sequence[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in runs if key in r and math.isfinite(float(r[key]))]
    return statistics.median(values) if values else None


#: Variants that can share a process (no third-party framework imported).
SAME_PROCESS = (
    "plain", "prebatched", "interlock_bare", "interlock_fast", "interlock_lightning", "interlock_default",
    "interlock_view", "interlock_mlflow", "interlock_wandb",
)  # fmt: skip


def steps_same_process(
    runner: Runner, size: dict[str, Any], variants: Sequence[str], processes: int
) -> dict[str, dict[str, Any]]:
    """Per variant: its overhead over ``plain`` measured inside one process, as the median over every round of
    every process of ``variant - plain`` in that round (each process runs every variant
    ``size['same_process_runs']`` times, ``size['same_process_samples']`` samples a run, fresh objects).

    A run's cost is its median step (the median gap between consecutive training steps). Pairing the runs of one
    round cancels what a shared machine does to the speed of everything for seconds at a time, which moves a
    run's cost by a hundred µs here; short runs and many rounds make the pairs close in time.
    """
    if "plain" not in variants or len(variants) < 2:
        return {}
    runner.log(
        f"[steps] the same variants in one process, fresh objects per run: {processes} processes x "
        f"{size['same_process_runs']} rounds"
    )
    base = {
        "task": "steps_same_process",
        "samples": size["same_process_samples"],
        "batch": size["batch"],
        "threads": 1,
    }
    per_round: dict[str, list[float]] = {v: [] for v in variants if v != "plain"}
    ratios: dict[str, list[float]] = {v: [] for v in per_round}
    per_process: dict[str, list[float]] = {v: [] for v in per_round}
    for index in range(processes):
        result = runner.run({**base, "variants": list(variants), "runs": size["same_process_runs"], "shift": index})
        times = result.get("median_step_us")
        if not times:
            continue
        for variant, diffs in per_round.items():
            pairs = [a - b for a, b in zip(times[variant], times["plain"], strict=True)]
            diffs.extend(pairs)
            ratios[variant].extend(a / b for a, b in zip(times[variant], times["plain"], strict=True) if b > 0)
            per_process[variant].append(statistics.median(pairs))
    return {
        v: {
            "overhead": statistics.median(diffs) if diffs else None,
            "samples": per_process[v],
            "rounds": len(diffs),
            "ratio": statistics.median(ratios[v]) if ratios[v] else None,
            "ratio_spread": spread(ratios[v]),
        }
        for v, diffs in per_round.items()
    }


def spread(values: Sequence[float]) -> list[float] | None:
    """The lower and upper quartiles of ``values`` (both the value itself when there is one)."""
    if not values:
        return None
    if len(values) == 1:
        return [values[0], values[0]]
    q = statistics.quantiles(values, n=4)
    return [q[0], q[2]]


def step_verdict(overhead: float | None, plain: float | None, target: float) -> dict[str, Any]:
    """Judge a per-step overhead against ``target`` µs, both scaled to this machine's plain loop.

    The target was set where the plain loop took ``REFERENCE_PLAIN_US``; the same Python work takes
    proportionally longer on a slower machine, so the target is scaled by ``plain / REFERENCE_PLAIN_US``.
    """
    if overhead is None or not plain:
        return {"target_us": target, "verdict": "n/a"}
    scale = plain / REFERENCE_PLAIN_US
    return {
        "target_us": target,
        "target_us_here": target * scale,
        "overhead_at_reference_us": overhead / scale,
        "verdict": verdict(overhead, target * scale),
    }


def paired_median(runs: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]], key: str) -> float | None:
    """The median over rounds of ``run - base`` (runs of one round are neighbours in time, so drift cancels)."""
    diffs = [
        float(a[key]) - float(b[key])
        for a, b in zip(runs, base, strict=False)
        if key in a and key in b and math.isfinite(float(a[key])) and math.isfinite(float(b[key]))
    ]
    return statistics.median(diffs) if diffs else None


def first_error(runs: Sequence[dict[str, Any]]) -> str | None:
    return next((r["error"] for r in runs if "error" in r), None)


def verdict(value: float | None, target: float) -> str:
    if value is None:
        return "n/a"
    return "PASS" if value <= target else "MISS"


# -- sections -----------------------------------------------------------------------------
Runs = dict[str, list[dict[str, Any]]]


def section_steps(
    runner: Runner, size: dict[str, Any], variants: Sequence[str], repeats: int, warmup: int
) -> tuple[dict[str, Any], dict[str, Any], Runs]:
    base = {"task": "steps", "samples": size["steps_samples"], "batch": size["batch"], "threads": 1}
    specs = {v: {**base, "variant": v} for v in variants}
    runner.log(f"[steps] {', '.join(variants)}: {repeats} rounds (+{warmup} warm-up), one process per run")
    runs = interleave(runner, specs, repeats, warmup)
    same_process = steps_same_process(runner, size, [v for v in variants if v in SAME_PROCESS], repeats)
    plain = median_of(runs.get("plain", []), "us_per_step")
    plain_cpu = median_of(runs.get("plain", []), "cpu_us_per_step")
    plain_fit = median_of(runs.get("plain", []), "fit_us_per_step")
    table: dict[str, Any] = {}
    for name, rs in runs.items():
        us = median_of(rs, "us_per_step")
        cpu = median_of(rs, "cpu_us_per_step")
        fit = median_of(rs, "fit_us_per_step")
        row: dict[str, Any] = {
            "us_per_step": us,
            "overhead_us_per_step": None if us is None or plain is None else us - plain,
            "ratio": None if us is None or not plain else us / plain,
            "paired_overhead_us_per_step": paired_median(rs, runs.get("plain", []), "us_per_step"),
            "cpu_us_per_step": cpu,
            "cpu_overhead_us_per_step": None if cpu is None or plain_cpu is None else cpu - plain_cpu,
            "paired_cpu_overhead_us_per_step": paired_median(rs, runs.get("plain", []), "cpu_us_per_step"),
            "min_us_per_step": min((r["us_per_step"] for r in rs if "us_per_step" in r), default=None),
            "median_step_us": median_of(rs, "median_step_us"),
            "paired_median_step_overhead_us": paired_median(rs, runs.get("plain", []), "median_step_us"),
            "startup_ms": median_of(rs, "startup_ms"),
            "fit_us_per_step": fit,
            "fit_overhead_us_per_step": None if fit is None or plain_fit is None else fit - plain_fit,
            "peak_rss_mb": median_of(rs, "peak_rss_mb"),
            "samples_us_per_step": [r.get("us_per_step") for r in rs],
            "samples_cpu_us_per_step": [r.get("cpu_us_per_step") for r in rs],
            "gc_ms": median_of(rs, "gc_ms"),
        }
        row["ratio_spread"] = spread(
            [float(a["us_per_step"]) / float(b["us_per_step"]) for a, b in zip(rs, runs.get("plain", []), strict=False)
             if "us_per_step" in a and "us_per_step" in b and b["us_per_step"]]
        )  # fmt: skip
        same = same_process.get(name)
        if same is not None:
            row["same_process_overhead_us_per_step"] = same["overhead"]
            row["same_process_samples"] = same["samples"]
            row["same_process_ratio"] = same["ratio"]
            row["same_process_ratio_spread"] = same["ratio_spread"]
        ratio_target = TARGETS.get(f"{name}_ratio")
        if ratio_target is not None:
            judged_ratio = row.get("same_process_ratio", row["ratio"])
            row["target_ratio"] = ratio_target
            row["ratio_verdict"] = verdict(judged_ratio, ratio_target)
        target = TARGETS.get(f"{name}_us")
        if target is not None:
            judged = row.get("same_process_overhead_us_per_step", row["paired_overhead_us_per_step"])
            row.update(step_verdict(judged, plain, target))
            row["raw_verdict"] = verdict(judged, target)
        error = first_error(rs)
        if error is not None:
            row["error"] = error
        table[name] = row
    steps = next((r["steps"] for rs in runs.values() for r in rs if "steps" in r), None)
    return table, {"steps_per_run": steps, "samples": size["steps_samples"], "batch": size["batch"]}, runs


def section_ddp(runner: Runner, size: dict[str, Any], repeats: int, warmup: int) -> dict[str, Any]:
    base = {"task": "ddp", "samples": size["ddp_samples"], "batch": size["batch"], "world": 2}
    runner.log(f"[ddp] 2 ranks (gloo, fork): plain DDP loop vs interlock strategy='ddp', {repeats} rounds")
    runs = interleave(
        runner,
        {"plain_ddp": {**base, "variant": "plain_ddp"}, "interlock_ddp": {**base, "variant": "interlock_ddp"}},
        repeats,
        warmup,
    )
    missing = next((r["unavailable"] for r in runs["interlock_ddp"] if "unavailable" in r), None)
    if missing is not None:
        return {"status": "unavailable", "reason": missing, "target_ratio": TARGETS["ddp_ratio"]}
    plain, ours = median_of(runs["plain_ddp"], "us_per_step"), median_of(runs["interlock_ddp"], "us_per_step")
    ratio = ours / plain if ours is not None and plain else None
    out: dict[str, Any] = {
        "status": "ok" if ratio is not None else "error",
        "steps_per_rank": next((r["steps"] for r in runs["plain_ddp"] if "steps" in r), None),
        "plain_us_per_step": plain,
        "interlock_us_per_step": ours,
        "ratio": ratio,
        "target_ratio": TARGETS["ddp_ratio"],
        "verdict": verdict(ratio, TARGETS["ddp_ratio"]),
        "samples": {k: [r.get("us_per_step") for r in v] for k, v in runs.items()},
    }
    error = first_error(runs["plain_ddp"]) or first_error(runs["interlock_ddp"])
    if error is not None:
        out["error"] = error
    return out


def section_ckpt(runner: Runner, size: dict[str, Any], repeats: int, warmup: int) -> dict[str, Any]:
    """The trainer's save (``interlock``: returns once the bytes are written, made durable in a worker thread)
    against ``torch.save``; and the durable times: ``interlock`` until in place, ``interlock_sync`` (everything
    in the caller) and ``torch.save`` + ``fsync``."""
    base = {"task": "ckpt", "megabytes": size["ckpt_megabytes"], "dir": str(runner.workdir)}
    names = ("torch_save", "torch_save_fsync", "interlock", "interlock_sync")
    runner.log(f"[ckpt] save of a {size['ckpt_megabytes']} MB state dict: {', '.join(names)}, {repeats} rounds")
    runs = interleave(runner, {n: {**base, "variant": n} for n in names}, repeats, warmup)
    ms = {n: median_of(runs[n], "ms") for n in names}
    durable = {n: median_of(runs[n], "durable_ms") for n in names}
    ours, plain, synced = ms["interlock"], ms["torch_save"], ms["torch_save_fsync"]
    ratio = ours / plain if ours is not None and plain else None

    def over_fsync(value: float | None) -> float | None:
        return value / synced if value is not None and synced else None

    out: dict[str, Any] = {
        "status": "ok" if ratio is not None else "error",
        "megabytes": next((r["bytes"] / 2**20 for r in runs["torch_save"] if "bytes" in r), None),
        "ms": ms,
        "durable_ms": durable,
        "ratio": ratio,
        "ratio_durable_vs_fsync": over_fsync(durable["interlock"]),
        "ratio_sync_vs_fsync": over_fsync(ms["interlock_sync"]),
        "target_ratio": TARGETS["ckpt_ratio"],
        "verdict": verdict(ratio, TARGETS["ckpt_ratio"]),
        "samples_ms": {n: [r.get("ms") for r in runs[n]] for n in names},
        "samples_durable_ms": {n: [r.get("durable_ms") for r in runs[n]] for n in names},
    }
    error = next((e for n in names if (e := first_error(runs[n])) is not None), None)
    if error is not None:
        out["error"] = error
    return out


def section_resume(runner: Runner, size: dict[str, Any], repeats: int, warmup: int) -> dict[str, Any]:
    near, far, samples = size["resume_near"], size["resume_far"], size["resume_samples"]
    directory = Path(tempfile.mkdtemp(prefix="resume-", dir=runner.workdir))
    runner.log(f"[resume] {samples:,} samples, batch {size['batch']}: resume at batch {near} vs {far:,}")
    prepared = runner.run(
        {
            "task": "resume_prepare",
            "samples": samples,
            "batch": size["batch"],
            "near": near,
            "far": far,
            "dir": str(directory),
        }
    )
    if "error" in prepared:
        shutil.rmtree(directory, ignore_errors=True)
        return {"status": "error", "error": prepared["error"], "target_ratio": TARGETS["resume_ratio"]}
    base = {"task": "resume", "samples": samples, "batch": size["batch"]}
    specs = {
        "fit_near": {**base, "variant": "fit", "start": near, "ckpt": prepared["near_ckpt"]},
        "fit_far": {**base, "variant": "fit", "start": far, "ckpt": prepared["far_ckpt"]},
        "iterate_near": {**base, "variant": "iterate", "start": near},
        "iterate_far": {**base, "variant": "iterate", "start": far},
    }
    runs = interleave(runner, specs, repeats, warmup)
    shutil.rmtree(directory, ignore_errors=True)
    ms = {n: median_of(runs[n], "ms") for n in specs}
    fit_ratio = ms["fit_far"] / ms["fit_near"] if ms["fit_far"] is not None and ms["fit_near"] else None
    it_ratio = ms["iterate_far"] / ms["iterate_near"] if ms["iterate_far"] is not None and ms["iterate_near"] else None
    worst = max((r for r in (fit_ratio, it_ratio) if r is not None), default=None)
    out: dict[str, Any] = {
        "status": "ok" if worst is not None else "error",
        "samples": samples,
        "near_batch": near,
        "far_batch": far,
        "resumed_at": sorted({r["batch_idx"] for n in ("fit_near", "fit_far") for r in runs[n] if "batch_idx" in r}),
        "ms": ms,
        "fit_ratio": fit_ratio,
        "iterate_ratio": it_ratio,
        "target_ratio": TARGETS["resume_ratio"],
        "verdict": verdict(worst, TARGETS["resume_ratio"]),
        "samples_ms": {n: [r.get("ms") for r in runs[n]] for n in specs},
    }
    error = next((e for n in specs if (e := first_error(runs[n])) is not None), None)
    if error is not None:
        out["error"] = error
    return out


def section_rss(
    runner: Runner,
    size: dict[str, Any],
    repeats: int,
    warmup: int,
    steps_runs: dict[str, list[dict[str, Any]]] | None,
    variants: Sequence[str],
) -> dict[str, Any]:
    names = [n for n in ("plain", "interlock_bare", "interlock_default") if n in variants]
    if steps_runs is not None and all(n in steps_runs for n in names):
        runs = {n: steps_runs[n] for n in names}
        runner.log("[rss] peak RSS: taken from the steps runs")
    else:
        runner.log(f"[rss] peak RSS: {', '.join(names)}, {repeats} rounds")
        base = {"task": "steps", "samples": size["steps_samples"], "batch": size["batch"], "threads": 1}
        runs = interleave(runner, {n: {**base, "variant": n} for n in names}, repeats, warmup)
    peak = {n: median_of(runs[n], "peak_rss_mb") for n in names}
    over = {
        n: (peak[n] - peak["plain"]) if peak[n] is not None and peak["plain"] is not None else None for n in names[1:]
    }
    worst_over = max((v for v in over.values() if v is not None), default=None)

    total, every = size["growth_steps"], size["growth_every"]
    runner.log(f"[rss] growth over {total:,} steps (RSS every {every:,} steps), one run each")
    base = {"task": "steps", "samples": 20_000 if total >= 20_000 else 2_000, "batch": size["batch"], "threads": 1}
    growth: dict[str, Any] = {}
    for n in names:
        result = runner.run({**base, "variant": n, "max_steps": total, "rss_every": every})
        samples = {int(k): v for k, v in result.get("rss_mb", {}).items()}
        if every in samples and total in samples:
            growth[n] = {"mb": samples[total] - samples[every], "rss_mb": {str(k): v for k, v in samples.items()}}
        else:
            growth[n] = {"mb": None, "error": result.get("error", "no RSS samples at the first/last step")}
    worst_growth = max((g["mb"] for n, g in growth.items() if n != "plain" and g["mb"] is not None), default=None)
    return {
        "status": "ok" if worst_over is not None or worst_growth is not None else "error",
        "peak_rss_mb": peak,
        "peak_over_plain_mb": over,
        "target_peak_over_mb": TARGETS["peak_rss_over_mb"],
        "peak_verdict": verdict(worst_over, TARGETS["peak_rss_over_mb"]),
        "growth_steps": total,
        "growth_from_step": every,
        "growth": growth,
        "target_growth_mb": TARGETS["rss_growth_mb"],
        "growth_verdict": verdict(worst_growth, TARGETS["rss_growth_mb"]),
    }


#: The variants whose Python work per step is counted (``work``): the plain loop and interlock's.
WORK_VARIANTS = ("plain", "interlock_bare", "interlock_default")


def section_work(runner: Runner, size: dict[str, Any]) -> dict[str, Any]:
    """Python bytecodes per training step, by whose code ran: exact, so a change of a few per step shows.

    Time on a shared machine moves by more than the few µs a regression costs; a count of the
    bytecodes each variant runs per step does not move at all between runs of the same code, and
    shows where interlock's per-step Python work is (C work inside torch is not counted).
    """
    short, long = size["work_steps"]
    runner.log(f"[work] Python bytecodes per step ({', '.join(WORK_VARIANTS)}): runs of {short} and {long} steps")
    out: dict[str, Any] = {"steps": [short, long], "variants": {}}
    for variant in WORK_VARIANTS:
        spec = {"task": "opcodes", "variant": variant, "batch": size["batch"], "short": short, "long": long}
        out["variants"][variant] = runner.run(spec)
    plain = out["variants"]["plain"].get("total")
    for row in out["variants"].values():
        if "total" in row and plain is not None:
            row["over_plain"] = row["total"] - plain
    return out


SPLIT_VARIANTS = ("plain", "interlock_bare", "interlock_default")
SPLIT_PARTS = ("fetch", "forward", "zero_grad", "backward", "optimizer_step", "rest", "step")


def section_split(runner: Runner, size: dict[str, Any]) -> dict[str, Any]:
    """Where a step's time goes: torch's parts against the trainer's own Python (``rest``), each over plain.

    The ratio targets judge a whole step; this says whether a variant's extra time is its own work
    (``rest``: the trainer's code between torch's calls) or torch's parts running slower beside it.
    Per part, the median over every round of every process of ``variant - plain`` in that round.
    """
    procs, runs = size["split_processes"], size["split_runs"]
    runner.log(f"[split] a step's parts, lower decile over each run's steps: {procs} processes x {runs} rounds")
    diffs: dict[str, dict[str, list[float]]] = {v: {p: [] for p in SPLIT_PARTS} for v in SPLIT_VARIANTS}
    for index in range(procs):
        spec = {"task": "split", "variants": list(SPLIT_VARIANTS), "batch": size["batch"], "runs": runs}
        result = runner.run({**spec, "samples": size["split_samples"], "shift": index})
        rounds = result.get("rounds")
        if not rounds:
            return {"error": result.get("error", "no result")}
        for variant in SPLIT_VARIANTS:
            for mine, base in zip(rounds[variant], rounds["plain"], strict=True):
                for part in SPLIT_PARTS:
                    diffs[variant][part].append(mine[part] - base[part] if variant != "plain" else base[part])
    return {
        "processes": procs,
        "runs": runs,
        "us": {v: {p: statistics.median(xs) for p, xs in parts.items()} for v, parts in diffs.items()},
    }


def section_epochs(runner: Runner, size: dict[str, Any]) -> dict[str, Any]:
    """How the cost of an epoch grows with the run: early epochs against the last ones, one long run."""
    epochs = size["growth_epochs"]
    runner.log(f"[epochs] {epochs:,} epochs of 1 training + 8 validation batches, no listeners")
    result = runner.run({"task": "epoch_growth", "epochs": epochs, "batch": size["batch"], "val_batches": 8})
    ms = result.get("epoch_ms") or []
    if len(ms) < 20:
        return {"status": "error", "error": result.get("error", "too few epochs measured")}
    # lower quartiles of two long windows: an epoch's own cost, robust to the bursts of a shared machine
    early_from, window = (50, 200) if len(ms) >= 1000 else (2, max(8, len(ms) // 8))

    def typical(values: list[float]) -> float:
        return statistics.quantiles(values, n=4)[0]

    early = typical(ms[early_from : early_from + window])
    late = typical(ms[-window:])
    ratio = late / early if early else None
    return {
        "status": "ok",
        "epochs": epochs,
        "history_rows": result.get("history_rows"),
        "early_epochs": [early_from, early_from + window],
        "late_epochs": [len(ms) - window, len(ms)],
        "early_ms": early,
        "late_ms": late,
        "statistic": "lower quartile of the epochs' times in each window",
        "ratio": ratio,
        "target_ratio": TARGETS["epoch_growth_ratio"],
        "verdict": verdict(ratio, TARGETS["epoch_growth_ratio"]),
    }


def _long_round(result: dict[str, Any], early_from: int, window: int) -> dict[str, Any]:
    """One long run's late/early ratios: its own windows (wall, CPU, wall less fsync) and the paired epochs."""

    def lower_quartile(values: list[float]) -> float:
        return statistics.quantiles(values, n=4)[0]

    def growth(values: list[float]) -> tuple[float, float, float]:
        """Lower quartile of the early window, of the late window, and their ratio."""
        a, b = lower_quartile(values[early_from : early_from + window]), lower_quartile(values[-window:])
        return a, b, (b / a if a else float("nan"))

    ms = result["epoch_ms"]
    early, late, ratio = growth(ms)
    out: dict[str, Any] = {"early_ms": early, "late_ms": late, "wall": ratio}
    cpu, fsync = result.get("epoch_cpu_ms") or [], result.get("epoch_fsync_ms") or []
    if len(cpu) == len(ms):  # the process's CPU time per epoch
        out["cpu"] = growth(cpu)[2]
    if len(fsync) == len(ms):  # wall time less the training thread's waits for the disk (fsync of the history)
        out["wall_less_fsync"] = growth([w - f for w, f in zip(ms, fsync, strict=True)])[2]
    paired, fresh = result.get("paired") or {}, result.get("companion") or {}
    if "error" in fresh:
        out["paired_error"] = fresh["error"]
    for key, name in (("epoch_ms", "paired_wall"), ("epoch_cpu_ms", "paired_cpu")):
        late_here, early_there = paired.get(key) or [], fresh.get(key) or []
        n = min(len(late_here), len(early_there))
        if n >= early_from + 4:  # epoch k here ran right after the fresh process's epoch k: one pair per k
            pairs = [a / b for a, b in zip(late_here[early_from:n], early_there[early_from:n], strict=True) if b > 0]
            out[name] = statistics.median(pairs)
            out[name + "_quartiles"] = statistics.quantiles(pairs, n=4)[::2]
            if name == "paired_wall":
                out["paired_late_ms"] = statistics.median(late_here[early_from:n])
                out["paired_early_ms"] = statistics.median(early_there[early_from:n])
                out["paired_epochs"] = n - early_from
    return out


def section_long(runner: Runner, size: dict[str, Any]) -> dict[str, Any]:
    """Long runs with every default listener on (progress bar, CSV, trace, ModelCheckpoint), a module that logs.

    Each round: one run of ``long_epochs`` epochs of 1 training + ``long_val_batches`` validation
    batches: the per-epoch cost (wall, CPU) and the size of ``last.ckpt``, late window against the
    early one; then the same run goes on for ``early_from + window`` epochs taking turns, epoch by
    epoch, with a fresh process running the same workload from its start (the paired epochs): its
    late epochs against the fresh process's early ones, measured at the same moments. One run of
    ``long_steps_epochs`` epochs of ``long_steps_per_epoch`` training batches (+2 validation): the run
    directory's bytes per training step, checkpoints apart (what grows with the run: trace, metrics, history).
    """
    epochs, rounds = size["long_epochs"], size["long_rounds"]
    # the early window starts after the warm-up: epoch 0 pays once for the first checkpoint (files, the
    # writer thread, torch.save's lazy imports) and epoch 1 for the CSV header widening to validation's names
    early_from, window = (20, 100) if epochs >= 500 else (2, max(8, epochs // 8))
    pair = early_from + window
    runner.log(
        f"[long] {epochs:,} epochs of 1 training + {size['long_val_batches']} validation batches, defaults on, "
        f"then {pair} paired with a fresh process; {rounds} run(s)"
    )
    per_round: list[dict[str, Any]] = []
    ms: list[float] = []
    ckpt: list[int] = []
    result: dict[str, Any] = {}
    for _ in range(rounds):
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        result = runner.run(
            {"task": "long", "epochs": epochs, "batch": size["batch"], "train_batches": 1,
             "val_batches": size["long_val_batches"], "pair_epochs": pair}
        )  # fmt: skip
        ms, ckpt = result.get("epoch_ms") or [], result.get("ckpt_bytes") or []
        if len(ms) < 20 or len(ckpt) < 20:
            return {"status": "error", "error": result.get("error", "too few epochs measured")}
        one = _long_round(result, early_from, window)
        one["load"] = [load_before, os.getloadavg()[0] if hasattr(os, "getloadavg") else None]
        per_round.append(one)
        runner.log("  round: " + ", ".join(f"{k} {v:.3f}" for k, v in one.items() if isinstance(v, float)))

    def across(key: str) -> dict[str, Any]:
        values = [r[key] for r in per_round if isinstance(r.get(key), float)]
        if not values:
            return {"median": None, "min": None, "max": None, "rounds": []}
        return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}

    kinds = {k: across(k) for k in ("wall", "cpu", "wall_less_fsync", "paired_wall", "paired_cpu")}
    judged = kinds["paired_wall"]["max"] if kinds["paired_wall"]["max"] is not None else kinds["wall"]["max"]
    ckpt_early, ckpt_late = ckpt[min(20, len(ckpt) // 4)], ckpt[-1]
    n_steps = size["long_steps_epochs"] * size["long_steps_per_epoch"]
    runner.log(f"[long] {n_steps:,} training steps ({size['long_steps_epochs']} epochs), defaults on: bytes per step")
    disk = runner.run(
        {"task": "long", "epochs": size["long_steps_epochs"], "batch": size["batch"],
         "train_batches": size["long_steps_per_epoch"], "val_batches": 2}
    )  # fmt: skip
    per_step = disk.get("bytes_per_step")
    return {
        "status": "ok",
        "epochs": epochs,
        "history_rows": result.get("history_rows"),
        "rounds": rounds,
        "early_epochs": [early_from, early_from + window],
        "late_epochs": [len(ms) - window, len(ms)],
        "paired_epochs": [epochs + early_from, epochs + pair],
        "total_epochs": epochs + pair,
        "statistic": (
            "own windows: lower quartile of each window's epoch times, late/early; paired: the median over the "
            "paired epochs of (this run's epoch / the fresh process's epoch just before it); the target is judged "
            "on the worst round of the paired wall-time ratio"
        ),
        "per_round": per_round,
        "ratios": kinds,
        "early_ms": statistics.median(r["early_ms"] for r in per_round),
        "late_ms": statistics.median(r["late_ms"] for r in per_round),
        "epoch_ratio": judged,
        "epoch_ratios": kinds["wall"]["rounds"],
        "epoch_verdict": verdict(judged, TARGETS["long_epoch_ratio"]),
        "epoch_cpu_ratio": kinds["cpu"]["median"],
        "epoch_cpu_ratios": kinds["cpu"]["rounds"],
        "epoch_ratio_less_fsync": kinds["wall_less_fsync"]["median"],
        "ckpt_bytes_early": ckpt_early,
        "ckpt_bytes_late": ckpt_late,
        "ckpt_epochs": [min(20, len(ckpt) // 4), len(ckpt) - 1],
        "ckpt_ratio": ckpt_late / ckpt_early if ckpt_early else None,
        "ckpt_verdict": verdict(ckpt_late / ckpt_early if ckpt_early else None, TARGETS["long_ckpt_ratio"]),
        "steps": disk.get("steps"),
        "files": disk.get("files"),
        "bytes_per_step": per_step,
        "trace_bytes_per_step": disk.get("trace_bytes_per_step"),
        "bytes_verdict": verdict(per_step, TARGETS["long_bytes_per_step"]),
        **({"error": disk["error"]} if "error" in disk else {}),
    }


# -- report -------------------------------------------------------------------------------
def section_failure(runner: Runner, size: dict[str, Any]) -> dict[str, Any]:
    """The flight recorder (written once, at a failure: nothing per step) and the replay to the failure."""
    steps, epochs = size["failure_steps"], size["failure_epochs"]
    runner.log(f"[failure] a run of {steps * epochs:,} steps failing at its last: flight record and replay")
    result = runner.run({"task": "failure", "steps": steps, "epochs": epochs, "batch": size["batch"]})
    if "error" in result:
        return {"status": "error", "error": result["error"]}
    return {"status": "ok", **result}


def machine() -> dict[str, Any]:
    versions = {}
    for dist in ("torch", "interlock", "pytorch-lightning", "pytorch-ignite"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "torch_threads": 1,
        "load_average_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _num(value: Any, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def render(report: dict[str, Any]) -> str:
    lines: list[str] = []
    m = report["machine"]
    lines.append(
        f"machine: {m['cpus']} CPUs, {m['platform']}, python {m['python']}, torch {m['versions']['torch']}, "
        f"load average {_num((m.get('load_average_start') or [None])[0], '{:.2f}')} at start, "
        f"{_num((m.get('load_average_end') or [None])[0], '{:.2f}')} at end"
    )
    steps = report.get("steps")
    if steps is not None:
        lines.append("")
        lines.append(
            f"steps: {steps['steps_per_run']} SGD steps per run (MLP 32-32-2, {steps['samples']:,} samples, "
            f"batch {steps['batch']}, 1 thread), median of {report['config']['repeats']} interleaved runs"
        )
        head = (
            f"{'variant':<19} {'us/step':>9} {'overhead':>9} {'paired':>8} {'ratio':>7} {'startup ms':>11} "
            f"{'peak RSS MB':>12}  target"
        )
        lines.append(head)
        lines.append("-" * len(head))
        for name, row in report["variants"].items():
            if "unavailable" in row:
                lines.append(f"{name:<19} unavailable ({row['unavailable']})")
                continue
            target = ""
            if "same_process_overhead_us_per_step" in row:
                target += f"  same process {_num(row['same_process_overhead_us_per_step'], '{:+.1f}')}"
            if row.get("same_process_ratio") is not None:
                lo, hi = row.get("same_process_ratio_spread") or [None, None]
                target += f" = {row['same_process_ratio']:.3f}x (quartiles {_num(lo, '{:.3f}')}-{_num(hi, '{:.3f}')})"
            if "target_ratio" in row:
                target += f"; ratio target <= {row['target_ratio']:.2f}x {row['ratio_verdict']}"
            if "target_us_here" in row:
                target += (
                    f"; target +{row['target_us']:.0f} {row['raw_verdict']}, scaled to this plain loop "
                    f"+{row['target_us_here']:.1f} {row['verdict']}"
                )
            lines.append(
                f"{name:<19} {_num(row['us_per_step']):>9} {_num(row['overhead_us_per_step'], '{:+.1f}'):>9} "
                f"{_num(row.get('paired_overhead_us_per_step'), '{:+.1f}'):>8} "
                f"{_num(row['ratio'], '{:.2f}x'):>7} {_num(row['startup_ms']):>11} {_num(row['peak_rss_mb']):>12}"
                + target
                + (f"  ERROR {row['error']}" if "error" in row else "")
            )
    split = report.get("split")
    if split is not None:
        lines.append("")
        if "error" in split:
            lines.append(f"split: error ({split['error']})")
        else:
            lines.append(
                f"where a step's time goes, us (lower decile of each run's steps; {split['processes']} processes x "
                f"{split['runs']} rounds; plain's own, the others over plain):"
            )
            lines.append(f"  {'':<18}" + "".join(f"{p:>15}" for p in SPLIT_PARTS))
            for name, row in split["us"].items():
                fmt = "{:.1f}" if name == "plain" else "{:+.1f}"
                lines.append(f"  {name:<18}" + "".join(f"{fmt.format(row[p]):>15}" for p in SPLIT_PARTS))
    ddp = report.get("ddp")
    if ddp is not None:
        lines.append("")
        if ddp["status"] == "unavailable":
            lines.append(f"ddp: unavailable ({ddp['reason']})")
        else:
            lines.append(
                f"ddp (2 ranks, gloo, {ddp['steps_per_rank']} steps/rank): plain {_num(ddp['plain_us_per_step'])} "
                f"us/step, interlock {_num(ddp['interlock_us_per_step'])} us/step, ratio "
                f"{_num(ddp['ratio'], '{:.2f}x')} (target <= {ddp['target_ratio']:.2f}x) {ddp['verdict']}"
            )
    wk = report.get("work")
    if wk is not None:
        lines.append("")
        short, long = wk["steps"]
        lines.append(f"Python bytecodes per training step (exact; runs of {short} and {long} steps):")
        for name, row in wk["variants"].items():
            if "error" in row:
                lines.append(f"  {name}: error ({row['error']})")
                continue
            parts = ", ".join(f"{k} {v:.0f}" for k, v in row["per_step"].items())
            extra = f", {row['over_plain']:+.0f} over plain" if name != "plain" and "over_plain" in row else ""
            lines.append(f"  {name}: {row['total']:.0f}{extra} ({parts})")
    ck = report.get("ckpt")
    if ck is not None:
        lines.append("")
        ms, durable = ck.get("ms", {}), ck.get("durable_ms", {})
        lines.append(
            f"checkpoint save ({_num(ck.get('megabytes'))} MB): the training loop waits {_num(ms.get('interlock'))} ms "
            f"vs torch.save {_num(ms.get('torch_save'))} ms: {_num(ck.get('ratio'), '{:.2f}x')} "
            f"(target <= {ck['target_ratio']:.1f}x) {ck.get('verdict', 'n/a')}"
        )
        lines.append(
            f"  durable: interlock {_num(durable.get('interlock'))} ms in the background "
            f"({_num(ck.get('ratio_durable_vs_fsync'), '{:.2f}x')} of torch.save+fsync "
            f"{_num(ms.get('torch_save_fsync'))} ms); all in the caller {_num(ms.get('interlock_sync'))} ms "
            f"({_num(ck.get('ratio_sync_vs_fsync'), '{:.2f}x')})"
        )
    fl = report.get("failure")
    if fl is not None:
        lines.append("")
        if fl["status"] == "error":
            lines.append(f"failure: error ({fl['error']})")
        else:
            lines.append(
                f"failure (a run of {fl['steps']:,} steps failing at its last): the flight recorder's failure.json "
                f"{_num(fl['record_ms'])} ms, once, at the failure (its trace: {fl['transitions']:,} transitions, "
                f"{fl['trace_bytes'] / 1024:.1f} KB; nothing per step); replay to the failure from global step "
                f"{fl['replay_started_at']} {_num(fl['replay_ms'] / 1e3, '{:.2f}')} s vs the run's "
                f"{_num(fl['fit_ms'] / 1e3, '{:.2f}')} s" + ("" if fl["reproduced"] else " (NOT REPRODUCED)")
            )
            if "save_ms" in fl:
                lines.append(
                    f"  saved at the failure {_num(fl['save_ms'])} ms; a fit from that file to the same failure "
                    f"{_num(fl['resumed_ms'] / 1e3, '{:.2f}')} s"
                    + ("" if fl["resumed_reproduced"] else " (NOT REPRODUCED)")
                )
    rs = report.get("resume")
    if rs is not None:
        lines.append("")
        if rs["status"] == "error":
            lines.append(f"resume: error ({rs['error']})")
        else:
            ms = rs["ms"]
            lines.append(
                f"resume ({rs['samples']:,} samples, batch 10) to the first training step: at batch {rs['near_batch']} "
                f"{_num(ms['fit_near'])} ms, at batch {rs['far_batch']:,} {_num(ms['fit_far'])} ms "
                f"({_num(rs['fit_ratio'], '{:.2f}x')}); EpochData.iterate+next {_num(ms['iterate_near'])} ms vs "
                f"{_num(ms['iterate_far'])} ms ({_num(rs['iterate_ratio'], '{:.2f}x')}); "
                f"target <= {rs['target_ratio']:.1f}x {rs['verdict']}"
            )
    rss = report.get("rss")
    if rss is not None:
        lines.append("")
        peak, over = rss["peak_rss_mb"], rss["peak_over_plain_mb"]
        parts = [f"plain {_num(peak.get('plain'))} MB"] + [
            f"{n} {_num(peak[n])} MB ({_num(over[n], '{:+.1f}')})" for n in over
        ]
        lines.append(
            f"peak RSS: {', '.join(parts)}; target <= +{rss['target_peak_over_mb']:.0f} MB {rss['peak_verdict']}"
        )
        parts = [f"{n} {_num(g['mb'], '{:+.2f}')} MB" for n, g in rss["growth"].items()]
        lines.append(
            f"RSS growth from step {rss['growth_from_step']:,} to {rss['growth_steps']:,}: {', '.join(parts)}; "
            f"target <= {rss['target_growth_mb']:.0f} MB {rss['growth_verdict']}"
        )
    ep = report.get("epochs")
    if ep is not None:
        lines.append("")
        if ep.get("status") != "ok":
            lines.append(f"epoch growth: {ep.get('error')}")
        else:
            lines.append(
                f"epoch growth ({ep['epochs']:,} epochs, {ep['history_rows']:,} history rows): epochs "
                f"{ep['early_epochs'][0]}-{ep['early_epochs'][1]} {_num(ep['early_ms'], '{:.2f}')} ms, epochs "
                f"{ep['late_epochs'][0]}-{ep['late_epochs'][1]} {_num(ep['late_ms'], '{:.2f}')} ms "
                f"({_num(ep['ratio'], '{:.2f}x')}); target <= {ep['target_ratio']:.1f}x {ep['verdict']}"
            )
    lg = report.get("long")
    if lg is not None:
        lines.append("")
        if lg.get("status") != "ok":
            lines.append(f"long run: {lg.get('error')}")
        else:
            rt = lg["ratios"]

            def spread(key: str) -> str:
                r = rt[key]
                if r["median"] is None:
                    return "n/a"
                each = ", ".join(f"{v:.2f}x" for v in r["rounds"])
                return f"{r['median']:.2f}x (rounds: {each}; spread {r['min']:.2f}-{r['max']:.2f})"

            lines.append(
                f"long run, every default listener on ({lg['epochs']:,} epochs + "
                f"{lg['total_epochs'] - lg['epochs']} paired, {lg['history_rows']:,} history rows, "
                f"{lg['rounds']} run(s)): "
                f"epochs {lg['early_epochs'][0]}-{lg['early_epochs'][1]} {_num(lg['early_ms'], '{:.2f}')} ms, "
                f"epochs {lg['late_epochs'][0]}-{lg['late_epochs'][1]} {_num(lg['late_ms'], '{:.2f}')} ms"
            )
            lines.append(f"  late/early, own windows, wall time: {spread('wall')}")
            lines.append(f"  late/early, own windows, CPU time: {spread('cpu')}")
            lines.append(f"  late/early, own windows, wall less fsync: {spread('wall_less_fsync')}")
            lines.append(f"  late/early, paired with a fresh process, CPU time: {spread('paired_cpu')}")
            lines.append(
                f"  late/early, paired with a fresh process, wall time: {spread('paired_wall')}; worst round "
                f"{_num(lg['epoch_ratio'], '{:.2f}x')}, target <= {TARGETS['long_epoch_ratio']:.1f}x "
                f"{lg['epoch_verdict']}"
            )
            loads = ", ".join("-".join(_num(x, "{:.1f}") for x in r["load"]) for r in lg["per_round"])
            lines.append(f"  load average (1 min) at each round's start-end: {loads}")
            errors = [r["paired_error"] for r in lg["per_round"] if "paired_error" in r]
            if errors:
                lines.append(f"  paired epochs failed: {errors[0]}")
            lines.append(
                f"  last.ckpt at epoch {lg['ckpt_epochs'][0]} {lg['ckpt_bytes_early']:,} bytes, at epoch "
                f"{lg['ckpt_epochs'][1]} {lg['ckpt_bytes_late']:,} bytes ({_num(lg['ckpt_ratio'], '{:.3f}x')}); "
                f"target <= {TARGETS['long_ckpt_ratio']:.1f}x {lg['ckpt_verdict']}"
            )
            lines.append(
                f"  run directory over {lg['steps'] or 0:,} steps, checkpoints apart: "
                f"{_num(lg['bytes_per_step'])} bytes/step (trace {_num(lg['trace_bytes_per_step'])}); "
                f"target <= {TARGETS['long_bytes_per_step']:.0f} {lg['bytes_verdict']}; files {lg['files']}"
            )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"sections to run, comma-separated: {SECTIONS}")
    parser.add_argument("--variants", default=",".join(STEP_VARIANTS), help="training-loop variants of `steps`")
    parser.add_argument("--repeats", type=int, default=None, help="measured rounds per variant (default 5; quick 1)")
    parser.add_argument("--warmup", type=int, default=None, help="unmeasured rounds first (default 1; quick 0)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes everywhere (a smoke test, not a measurement)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON report to this file")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed to one worker process")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--sharded",
        action="store_true",
        help="also measure a sharded (DCP) save vs a rank-0 full save under FSDP on 2 ranks (slow; opt-in)",
    )
    parser.add_argument("--sharded-mb", type=int, default=256, help="model size in MB for --sharded (default 256)")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    args.sections = [s for s in SECTIONS if s in only]
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = sorted(set(args.variant_list) - set(STEP_VARIANTS))
    if bad:
        parser.error(f"unknown variant(s) {bad}; choose from {', '.join(STEP_VARIANTS)}")
    if "plain" not in args.variant_list:
        args.variant_list.insert(0, "plain")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = SIZES["quick" if args.quick else "full"]
    repeats = max(1, args.repeats if args.repeats is not None else size["repeats"])
    warmup = max(0, args.warmup if args.warmup is not None else size["warmup"])
    workdir = Path(tempfile.mkdtemp(prefix="interlock-bench-"))
    runner = Runner(workdir, verbose=not args.quiet, timeout=args.timeout)
    report: dict[str, Any] = {
        "machine": machine(),
        "config": {**size, "quick": args.quick, "repeats": repeats, "warmup": warmup, "sections": args.sections},
        "targets": TARGETS,
        "variants": {},
    }
    t0 = time.perf_counter()
    steps_runs: dict[str, list[dict[str, Any]]] | None = None
    sections: dict[str, Callable[[], Any]] = {
        "ddp": lambda: section_ddp(runner, size, repeats, warmup),
        "ckpt": lambda: section_ckpt(runner, size, repeats, warmup),
        "resume": lambda: section_resume(runner, size, repeats, warmup),
        "rss": lambda: section_rss(runner, size, repeats, warmup, steps_runs, args.variant_list),
        "work": lambda: section_work(runner, size),
        "split": lambda: section_split(runner, size),
        "epochs": lambda: section_epochs(runner, size),
        "long": lambda: section_long(runner, size),
        "failure": lambda: section_failure(runner, size),
    }
    try:
        for name in args.sections:
            if name == "steps":
                available = [v for v in args.variant_list if v not in NEEDS or importlib.util.find_spec(NEEDS[v])]
                table, info, steps_runs = section_steps(runner, size, available, repeats, warmup)
                for v in args.variant_list:
                    if v not in available:
                        extra = "view" if v == "interlock_view" else "bench"
                        table[v] = {"unavailable": f"{NEEDS[v]} is not installed (pip install -e '.[{extra}]')"}
                report["variants"] = table
                report["steps"] = info
            else:
                report[name] = sections[name]()
        if args.sharded:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from bench_sharded import section_sharded

            report["sharded"] = section_sharded(args.sharded_mb, args.timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    report["seconds"] = time.perf_counter() - t0
    text = json.dumps(report, indent=2)
    if args.output is not None:
        args.output.write_text(text + "\n")
    print(text if args.json else render(report))
    if "sharded" in report and not args.json:
        from bench_sharded import render_sharded

        print(render_sharded(report["sharded"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
