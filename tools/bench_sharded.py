"""Sharded (DCP) save vs rank-0 full-state save under FSDP on 2 CPU ranks: loop wait and peak memory.

``python tools/bench.py --sharded`` runs it (``--sharded-mb`` sets the model size, default 256 MB).
Each rank builds the same model of ``4 x Linear(d, d)`` (float32), shards it with
:class:`~interlock.plugins.fsdp.FSDPStrategy`, then saves it the two ways a fit does:

* ``full``: gather full state dicts to rank 0 on the CPU and write one file there (``"fsdp"``);
* ``sharded``: every rank writes its own shards through DCP, and the loop waits for all of it;
* ``sharded_async``: the same directory written in the background, as ``"fsdp_sharded"`` saves
  during a fit: the loop waits only while this rank's shards are copied.

It reports, per way, the seconds the loop waits (``wait_s``: the save call, barrier
included), the seconds until the checkpoint is in place (``write_s``), and each rank's peak
RSS growth from the save until it is in place (``VmHWM`` after the kernel's peak counter is
reset through ``/proc/self/clear_refs``; Linux only). The median of 3 saves of each way.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def worker(out: Path, megabytes: int) -> None:
    """One rank (under torchrun): both saves, timed; writes ``out/rank<r>.json``."""
    import torch

    from interlock.connectors.rng import get_rng_states
    from interlock.plugins.checkpoint_io import TorchCheckpointIO
    from interlock.plugins.environments import detect_environment
    from interlock.plugins.fsdp import FSDPStrategy
    from interlock.plugins.sharded_writer import ShardedCheckpointIO, save_sharded

    torch.set_num_threads(1)
    d = int((megabytes * 2**20 / 4 / 4) ** 0.5)
    torch.manual_seed(0)
    module = torch.nn.Sequential(*(torch.nn.Linear(d, d, bias=False) for _ in range(4)))
    strategy = FSDPStrategy(2, detect_environment())
    device = torch.device("cpu")
    strategy.setup_environment(device, "gloo")
    strategy.setup_module(module, device)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)  # over the sharded parameters, as a fit makes it
    rank = strategy.global_rank
    result: dict[str, Any] = {"rank": rank, "model_mb": sum(p.numel() * 4 for p in module.parameters()) / 2**20}
    result["rss_before_mb"] = _rss_mb("VmRSS")

    def full(path: Path) -> None:
        payload = {"model": strategy.model_state_dict(module), "rng": get_rng_states()}
        if strategy.is_global_zero:
            TorchCheckpointIO().save_checkpoint(payload, path)
        strategy.barrier()

    def sharded(path: Path) -> None:
        save_sharded(path, strategy.sharded_state(module, [optimizer]), {"state": {}}, {"rng": get_rng_states()})

    writer = ShardedCheckpointIO(background=True)

    def sharded_async(path: Path) -> None:
        writer.save(path, strategy.sharded_state(module, [optimizer]), {"state": {}}, {"rng": get_rng_states()})

    for name, save in (("full", full), ("sharded", sharded), ("sharded_async", sharded_async)):
        waits, writes, peaks = [], [], []
        for i in range(3):
            strategy.barrier()
            base = _rss_mb("VmRSS")
            _reset_peak()
            t0 = time.perf_counter()
            save(out / f"{name}{i}.ckpt")
            waits.append(time.perf_counter() - t0)
            writer.wait()
            writes.append(time.perf_counter() - t0)
            peaks.append(_rss_mb("VmHWM") - base)
        result[name] = {"wait_s": sorted(waits)[1], "write_s": sorted(writes)[1], "peak_growth_mb": max(peaks)}
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def section_sharded(megabytes: int = 256, timeout: float = 900) -> dict[str, Any]:
    """Launch 2 ranks with torchrun; return both ranks' measurements."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="interlock-bench-sharded-") as tmp:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={port}"]
        cmd += [str(HERE / "bench_sharded.py"), tmp, str(megabytes)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            return {"error": (proc.stdout + proc.stderr)[-4000:]}
        return {f"rank{r}": json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in (0, 1)}


def render_sharded(section: dict[str, Any]) -> str:
    """The section as a table: per way, rank 0's loop wait, time until in place, and peak growth of each rank."""
    if "error" in section:
        return f"sharded: failed\n{section['error']}"
    r0, r1 = section["rank0"], section["rank1"]
    lines = [
        f"sharded save, FSDP on 2 ranks, model {r0['model_mb']:.0f} MB (median of 3)",
        f"  {'way':<14} {'loop waits':>11} {'in place':>9} {'rank0 peak +MB':>15} {'rank1 peak +MB':>15}",
    ]
    for way in ("full", "sharded", "sharded_async"):
        a, b = r0[way], r1[way]
        times = f"{a['wait_s']:>10.3f}s {a['write_s']:>8.3f}s"
        lines.append(f"  {way:<14} {times} {a['peak_growth_mb']:>15.0f} {b['peak_growth_mb']:>15.0f}")
    share = r0["sharded_async"]["wait_s"] / r0["sharded_async"]["write_s"]
    lines.append(f"  the loop waits {share:.0%} of a background sharded save")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and "RANK" in os.environ:
        worker(Path(sys.argv[1]), int(sys.argv[2]))
    else:
        print(render_sharded(section_sharded(int(sys.argv[1]) if len(sys.argv) > 1 else 256)))
