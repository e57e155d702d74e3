"""One measurement per process, for ``tools/bench.py``.

Run as ``python tools/_bench_workers.py SPEC_JSON OUT_JSON``: ``SPEC_JSON`` names the
measurement (``{"task": ..., ...}``); the result is written as JSON to ``OUT_JSON``.
Everything a measurement needs (data, model, temporary files) is built in this
process, so no run sees another's warm caches. Timings come from the
``training_step`` calls themselves (the same clock reads in every variant):
``us_per_step`` is the time from the first step's start to the last step's
start divided by the steps between them; ``startup_ms`` is the time from the
training call to the first step; ``total_ms`` is the whole call.
"""

from __future__ import annotations

import contextlib
import gc
import io
import itertools
import json
import logging
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

FEATURES, HIDDEN, CLASSES = 32, 32, 2
LR = 0.01
#: Trainer flags for a run with no listeners at all (every default switched off)
BARE: dict[str, Any] = {
    "listeners": [],
    "logger": False,
    "enable_trace": False,
    "enable_progress_bar": False,
    "enable_checkpointing": False,
}


# -- shared pieces ----------------------------------------------------------------------
class StepClock:
    """Clock reads at the start of every training step."""

    def __init__(self) -> None:
        self.first = self.last = 0.0
        self.first_cpu = self.last_cpu = 0.0
        self.count = 0
        self.times: list[float] = []
        self.gc_runs = [0, 0, 0]  # garbage collections per generation, from the first step on
        self.gc_seconds = 0.0
        self._gc_start = 0.0

    def tick(self) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        if self.count == 0:
            self.first, self.first_cpu = now, cpu
            gc.callbacks.append(self._on_gc)
        self.last, self.last_cpu = now, cpu
        self.times.append(now)
        self.count += 1

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_runs[info["generation"]] += 1
            self.gc_seconds += time.perf_counter() - self._gc_start

    def summary(self, t_call: float, t_end: float) -> dict[str, Any]:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        steps = self.count
        gaps = [b - a for a, b in itertools.pairwise(self.times)]
        return {
            # the median step: what one step costs, unmoved by the bursts of a shared machine
            "median_step_us": statistics.median(gaps) * 1e6 if gaps else float("nan"),
            "gc_collections": list(self.gc_runs),  # after the first step, so partly after the last one
            "gc_ms": self.gc_seconds * 1e3,
            "steps": steps,
            "us_per_step": (self.last - self.first) / max(steps - 1, 1) * 1e6,
            # CPU time of the process (all threads) over the same steps: what a step costs, less the time the
            # process was not running (other load, a hypervisor's steal), which is most of the noise here
            "cpu_us_per_step": (self.last_cpu - self.first_cpu) / max(steps - 1, 1) * 1e6,
            "startup_ms": (self.first - t_call) * 1e3,
            "total_ms": (t_end - t_call) * 1e3,
            "fit_us_per_step": (t_end - t_call) / max(steps, 1) * 1e6,
        }


def make_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))


def make_dataset(samples: int, features: int = FEATURES) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(samples, features, generator=g), torch.randint(0, CLASSES, (samples,), generator=g)
    )


def loss_of(net: torch.nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.cross_entropy(net(x), y)


def current_rss_mb() -> float:
    """Resident set size now (Linux ``/proc``; the peak elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence frameworks' warnings and log lines (stdout/stderr go to the parent's pipe anyway)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("lightning", "pytorch_lightning", "lightning.pytorch", "lightning_fabric", "ignite"):
            logging.getLogger(name).setLevel(logging.ERROR)
        yield


# -- steps: one training run of one variant ---------------------------------------------
def _prebatched(ds: TensorDataset, batch: int, clock: StepClock, max_steps: int) -> None:
    """The floor: the plain loop over batches sliced before the clock starts (no fetch at all)."""
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    x, y = ds.tensors
    batches = [[x[i : i + batch], y[i : i + batch]] for i in range(0, len(x), batch)]
    steps = 0
    while True:
        for batch_data in batches:
            clock.tick()
            opt.zero_grad(set_to_none=True)
            loss_of(net, batch_data).backward()
            opt.step()
            steps += 1
            if steps >= max_steps:
                return


def _plain(ds: TensorDataset, batch: int, clock: StepClock, max_steps: int, probe: Callable[[int], None]) -> None:
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    steps = 0
    while True:
        for batch_data in DataLoader(ds, batch_size=batch):
            clock.tick()
            opt.zero_grad(set_to_none=True)
            loss_of(net, batch_data).backward()
            opt.step()
            steps += 1
            probe(steps)
            if steps >= max_steps:
                return


def _interlock(
    ds: TensorDataset,
    batch: int,
    clock: StepClock,
    max_steps: int,
    probe: Callable[[int], None],
    probe_every: int | None,
    default: bool,
    view: bool = False,
    fast: bool = False,
    adapter: bool = False,
    tracker: str | None = None,
) -> None:
    import interlock

    if adapter:  # the same module and trainer written against Lightning's names (interlock.lightning)
        import interlock.lightning as lit

        base: Any = lit.LightningModule
        make_trainer: Any = lit.Trainer
    else:
        base, make_trainer = interlock.Module, interlock.Trainer

    class Net(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.net = make_net()

        def training_step(self, batch_data: Any, batch_idx: int) -> torch.Tensor:
            clock.tick()
            return loss_of(self.net, batch_data)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=LR)

    root = tempfile.mkdtemp(prefix="bench-interlock-")
    listeners: list[Any] = []
    watcher = None
    if view:  # the defaults plus the view of the run, with a page (another process) following it
        from interlock.view import LiveView

        port = _free_port()
        listeners = [LiveView(port=port)]
        watcher = _follow(f"http://127.0.0.1:{port}/api/stream?run=version_0")
    if tracker is not None:  # the defaults plus an experiment tracker, on disk (no server)
        listeners = [*listeners, _tracker(tracker, root)]
    trainer = make_trainer(
        max_epochs=10**6,
        max_steps=max_steps,
        **({"listeners": listeners} if default else {**BARE, "listeners": listeners}),
        num_sanity_val_steps=0,
        accelerator="cpu",
        default_root_dir=root,
    )
    if probe_every:
        trainer.on("fit.train.batch.end", lambda event: probe(event.global_step), every=probe_every)
    loader: Any = DataLoader(ds, batch_size=batch)
    try:
        trainer.fit(Net(), interlock.fast_fetch(loader) if fast else loader)
    finally:
        if watcher is not None:
            for listener in trainer.listeners:
                if hasattr(listener, "stop"):
                    listener.stop()
            watcher.kill()
            watcher.wait()


def _tracker(name: str, root: str) -> Any:
    """``MLFlowLogger`` on a file store or ``WandbLogger`` offline, both under ``root``."""
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=root, WANDB_DISABLE_GIT="true")
    from interlock.listeners import MLFlowLogger, WandbLogger

    if name == "mlflow":
        return MLFlowLogger(tracking_uri=f"file:{root}/mlruns")
    return WandbLogger(save_dir=root, offline=True)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: A page following the run: reads the view's event stream (retrying until the server is up) until it closes.
_FOLLOWER = """
import sys, time, urllib.request
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(sys.argv[1]) as stream:
            while stream.readline():
                pass
        break
    except OSError:
        time.sleep(0.01)
"""


def _follow(url: str) -> Any:
    import subprocess

    return subprocess.Popen(
        [sys.executable, "-c", _FOLLOWER, url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _lightning(ds: TensorDataset, batch: int, clock: StepClock, max_steps: int, default: bool) -> None:
    import pytorch_lightning as pl

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_net()

        def training_step(self, batch_data: Any, batch_idx: int) -> torch.Tensor:
            clock.tick()
            return loss_of(self.net, batch_data)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=LR)

    root = tempfile.mkdtemp(prefix="bench-lightning-")
    extra: dict[str, Any] = (
        {}
        if default
        else {
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        }
    )
    trainer = pl.Trainer(
        max_epochs=-1,
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        num_sanity_val_steps=0,
        default_root_dir=root,
        **extra,
    )
    trainer.fit(Net(), DataLoader(ds, batch_size=batch))


def _ignite(ds: TensorDataset, batch: int, clock: StepClock, max_steps: int) -> None:
    from ignite.engine import Engine

    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)

    def update(engine: Any, batch_data: Any) -> float:
        clock.tick()
        net.train()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(net, batch_data)
        loss.backward()
        opt.step()
        return loss

    engine = Engine(update)
    loader = DataLoader(ds, batch_size=batch)
    engine.run(loader, max_epochs=math.ceil(max_steps / len(loader)), epoch_length=None)


def _no_probe(step: int) -> None:
    return None


_FRAMEWORK = {
    "interlock_bare": "interlock",
    "interlock_fast": "interlock",
    "interlock_lightning": "interlock.lightning",
    "interlock_default": "interlock.listeners",
    "interlock_view": "interlock.view",
    "interlock_mlflow": "mlflow.tracking",
    "interlock_wandb": "wandb",
    "lightning": "pytorch_lightning",
    "lightning_default": "pytorch_lightning",
    "ignite": "ignite.engine",
}


def warm_up(variant: str) -> None:
    """Pay the process's one-time costs before the clock starts, the same for every variant.

    Imports the variant's framework, and takes one SGD step through a DataLoader
    (the first optimizer step and loader iteration import parts of torch lazily).
    """
    import importlib

    if variant in _FRAMEWORK:
        with quiet():
            importlib.import_module(_FRAMEWORK[variant])
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for batch_data in DataLoader(make_dataset(4), batch_size=2):
        opt.zero_grad(set_to_none=True)
        loss_of(net, batch_data).backward()
        opt.step()


def run_steps(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one variant for ``steps`` SGD steps (``samples``/``batch`` per epoch)."""
    torch.set_num_threads(spec.get("threads", 1))
    variant, batch = spec["variant"], spec["batch"]
    warm_up(variant)
    ds = make_dataset(spec["samples"])
    max_steps = spec.get("max_steps") or math.ceil(spec["samples"] / batch)
    every = spec.get("rss_every")
    rss: dict[int, float] = {}

    def probe(step: int) -> None:
        if step % every == 0:
            rss[step] = current_rss_mb()

    probe_fn = probe if every else _no_probe
    clock = StepClock()
    rss_before = current_rss_mb()
    with quiet():
        t_call = time.perf_counter()
        if variant == "plain":
            _plain(ds, batch, clock, max_steps, probe_fn)
        elif variant == "prebatched":
            _prebatched(ds, batch, clock, max_steps)
        elif variant == "interlock_fast":
            _interlock(ds, batch, clock, max_steps, probe_fn, every, default=False, fast=True)
        elif variant == "interlock_lightning":
            _interlock(ds, batch, clock, max_steps, probe_fn, every, default=False, adapter=True)
        elif variant in ("interlock_mlflow", "interlock_wandb"):
            _interlock(ds, batch, clock, max_steps, probe_fn, every, default=True, tracker=variant.split("_")[1])
        elif variant in ("interlock_bare", "interlock_default", "interlock_view"):
            _interlock(
                ds,
                batch,
                clock,
                max_steps,
                probe_fn,
                every,
                default=variant != "interlock_bare",
                view=variant == "interlock_view",
            )
        elif variant in ("lightning", "lightning_default"):
            _lightning(ds, batch, clock, max_steps, default=variant == "lightning_default")
        elif variant == "ignite":
            _ignite(ds, batch, clock, max_steps)
        else:
            raise ValueError(f"unknown variant {variant!r}")
        t_end = time.perf_counter()
    out: dict[str, Any] = clock.summary(t_call, t_end)
    out["peak_rss_mb"] = peak_rss_mb()
    out["rss_before_mb"] = rss_before
    if every:
        out["rss_mb"] = {str(k): v for k, v in sorted(rss.items())}
    return out


def run_steps_same_process(spec: dict[str, Any]) -> dict[str, Any]:
    """Several variants in one process, fresh objects (model, loader, trainer) for every run.

    Each variant first runs once unmeasured; then ``runs`` rounds run every variant, in an order
    rotated by ``shift`` plus the round. Differences between variants measured in one process are
    free of the process-to-process spread (memory layout), which is larger than a few µs a step.
    """
    torch.set_num_threads(spec.get("threads", 1))
    variants, batch = list(spec["variants"]), spec["batch"]
    for variant in variants:
        warm_up(variant)
    ds = make_dataset(spec["samples"])
    max_steps = math.ceil(spec["samples"] / batch)

    def once(variant: str) -> float:
        clock = StepClock()
        with quiet():
            if variant == "plain":
                _plain(ds, batch, clock, max_steps, _no_probe)
            elif variant == "prebatched":
                _prebatched(ds, batch, clock, max_steps)
            elif variant == "interlock_fast":
                _interlock(ds, batch, clock, max_steps, _no_probe, None, default=False, fast=True)
            elif variant == "interlock_lightning":
                _interlock(ds, batch, clock, max_steps, _no_probe, None, default=False, adapter=True)
            elif variant in ("interlock_mlflow", "interlock_wandb"):
                _interlock(ds, batch, clock, max_steps, _no_probe, None, default=True, tracker=variant.split("_")[1])
            elif variant in ("interlock_bare", "interlock_default", "interlock_view"):
                default, view = variant != "interlock_bare", variant == "interlock_view"
                _interlock(ds, batch, clock, max_steps, _no_probe, None, default=default, view=view)
            else:
                raise ValueError(f"variant {variant!r} is not measured in one process")
        return float(clock.summary(0.0, 0.0)["median_step_us"])

    for variant in variants:
        once(variant)
    results: dict[str, list[float]] = {v: [] for v in variants}
    for rnd in range(spec["runs"]):
        shift = (spec.get("shift", 0) + rnd) % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            results[variant].append(once(variant))
    return {"median_step_us": results}


# -- ddp: 2 ranks on CPU (gloo) ---------------------------------------------------------
def _ddp_write(path: str, clock: StepClock) -> None:
    Path(path).write_text(json.dumps({"first": clock.first, "last": clock.last, "count": clock.count}))


def _plain_ddp_rank(rank: int, world: int, port: int, samples: int, batch: int, out: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", init_method="env://", world_size=world, rank=rank)
    try:
        ddp = DistributedDataParallel(make_net())
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        ds = make_dataset(samples)
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False)
        clock = StepClock()
        for batch_data in DataLoader(ds, batch_size=batch, sampler=sampler):
            clock.tick()
            opt.zero_grad(set_to_none=True)
            loss_of(ddp, batch_data).backward()
            opt.step()
        if rank == 0:
            _ddp_write(out, clock)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ddp(spec: dict[str, Any]) -> dict[str, Any]:
    """2 CPU ranks over gloo: a plain DDP loop or ``interlock.Trainer(strategy="ddp", devices=2)``."""
    import torch.multiprocessing as mp

    world, samples, batch = spec.get("world", 2), spec["samples"], spec["batch"]
    out = tempfile.mktemp(prefix="bench-ddp-", suffix=".json")
    t_call = time.perf_counter()
    if spec["variant"] == "plain_ddp":
        mp.start_processes(
            _plain_ddp_rank, args=(world, _free_port(), samples, batch, out), nprocs=world, start_method="fork"
        )
    else:
        try:
            import interlock
            from interlock.plugins.ddp import DDPStrategy  # noqa: F401  (availability check)
        except ImportError as exc:
            return {"unavailable": f"interlock's ddp strategy cannot be imported: {exc}"}
        per_rank = math.ceil(math.ceil(samples / world) / batch)

        class Net(interlock.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net = make_net()
                self.clock = StepClock()

            def training_step(self, batch_data: Any, batch_idx: int) -> torch.Tensor:
                self.clock.tick()
                if self.clock.count == per_rank and int(os.environ.get("RANK", "0")) == 0:
                    _ddp_write(out, self.clock)
                return loss_of(self.net, batch_data)

            def configure_optimizers(self) -> Any:
                return torch.optim.SGD(self.parameters(), lr=LR)

        with quiet(), contextlib.redirect_stderr(io.StringIO()):
            trainer = interlock.Trainer(
                max_epochs=1,
                **BARE,
                num_sanity_val_steps=0,
                accelerator="cpu",
                devices=world,
                strategy="ddp",
                default_root_dir=tempfile.mkdtemp(prefix="bench-ddp-"),
            )
            trainer.fit(Net(), DataLoader(make_dataset(samples), batch_size=batch))
    t_end = time.perf_counter()
    clock = json.loads(Path(out).read_text())
    os.unlink(out)
    steps = clock["count"]
    return {
        "steps": steps,
        "us_per_step": (clock["last"] - clock["first"]) / max(steps - 1, 1) * 1e6,
        "total_ms": (t_end - t_call) * 1e3,
    }


# -- checkpoint writes --------------------------------------------------------------------
def _ckpt_payload(megabytes: float) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    side = 1024
    n = max(1, round(megabytes * 2**20 / (side * side * 4)))
    model = {}
    for i in range(n):
        model[f"layers.{i}.weight"] = torch.randn(side, side, generator=g)
        model[f"layers.{i}.bias"] = torch.randn(side, generator=g)
    return {"model": model, "step": 1}


def _save(method: str, payload: dict[str, Any], path: Path) -> float:
    """Save ``payload`` to ``path``; return the seconds until the save call returned (the whole save but
    for ``interlock``, the trainer's background mode, where this function goes on to wait until it is durable)."""
    t0 = time.perf_counter()
    if method == "torch_save":
        torch.save(payload, path)
    elif method == "torch_save_fsync":
        with open(path, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
    elif method in ("interlock", "interlock_sync"):
        from interlock.plugins.checkpoint_io import TorchCheckpointIO

        writer = TorchCheckpointIO(background=method == "interlock")
        writer.save_checkpoint(payload, path)
        returned = time.perf_counter() - t0
        writer.wait()
        return returned
    else:
        raise ValueError(f"unknown checkpoint method {method!r}")
    return time.perf_counter() - t0


def run_ckpt(spec: dict[str, Any]) -> dict[str, Any]:
    """Time one save of a ~``megabytes`` state dict (after one small warm-up save by the same method).

    ``ms``: until the save call returned (what a training loop waits); ``durable_ms``: until the file was
    in place (for ``torch_save``, which never syncs: the same as ``ms``).
    """
    directory = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=spec.get("dir")))
    payload = _ckpt_payload(spec["megabytes"])
    _save(spec["variant"], {"w": torch.zeros(16)}, directory / "warmup.ckpt")
    target = directory / "model.ckpt"
    t0 = time.perf_counter()
    returned = _save(spec["variant"], payload, target)
    durable = time.perf_counter() - t0
    size = target.stat().st_size
    for f in directory.iterdir():
        f.unlink()
    directory.rmdir()
    return {"ms": returned * 1e3, "durable_ms": durable * 1e3, "bytes": size}


# -- resume: how long until the first batch, near vs far into an epoch ------------------
def _resume_module(stop_at_first: bool) -> Any:
    import interlock

    class Reached(Exception):
        pass

    class Net(interlock.Module):
        reached = Reached

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Linear(4, 2)
            self.first_step: float | None = None

        def training_step(self, batch_data: Any, batch_idx: int) -> torch.Tensor:
            if self.first_step is None:
                self.first_step = time.perf_counter()
            if stop_at_first:
                raise Reached(batch_idx)
            return loss_of(self.net, batch_data)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=LR)

    return Net()


def _resume_trainer(root: str) -> Any:
    import interlock

    return interlock.Trainer(
        max_epochs=1,
        **BARE,
        num_sanity_val_steps=0,
        accelerator="cpu",
        default_root_dir=root,
    )


def run_resume_prepare(spec: dict[str, Any]) -> dict[str, Any]:
    """Write the checkpoints the resume runs start from: one really taken at batch ``near``, and the
    same checkpoint with its position moved to batch ``far`` (a run of ``far`` real steps would only
    add time; the resume path reads nothing but the position and the shuffle seed)."""
    import interlock
    from interlock.plugins.checkpoint_io import TorchCheckpointIO

    torch.set_num_threads(1)
    near, far, out = spec["near"], spec["far"], Path(spec["dir"])
    loader = DataLoader(make_dataset(spec["samples"], 4), batch_size=spec["batch"], shuffle=True)
    trainer = _resume_trainer(str(out / "runs"))
    near_path = out / "near.ckpt"
    trainer.on("fit.train.batch.end", lambda event: interlock.SaveCheckpoint(str(near_path), "bench"), once=near)
    trainer.on("fit.train.batch.end", lambda event: interlock.Stop("bench"), once=near + 1)
    with quiet(), contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(_resume_module(stop_at_first=False), loader)
    io_ = TorchCheckpointIO()
    ckpt = io_.load_checkpoint(near_path)
    progress = ckpt["state"]["progress"]
    saved_at = progress["batch_idx"]
    shift = far - saved_at
    for key in ("batch_idx", "global_step", "train_batches"):
        progress[key] += shift
    io_.save_checkpoint(ckpt, out / "far.ckpt")
    return {"near": saved_at, "far": far, "near_ckpt": str(near_path), "far_ckpt": str(out / "far.ckpt")}


def run_resume(spec: dict[str, Any]) -> dict[str, Any]:
    """``fit``: from ``trainer.fit(ckpt_path=...)`` to the first training step; ``iterate``:
    ``EpochData.iterate(start)`` plus the first ``next()``, the data connector alone."""
    torch.set_num_threads(1)
    warm_up("interlock_bare")
    ds = make_dataset(spec["samples"], 4)
    loader = DataLoader(ds, batch_size=spec["batch"], shuffle=True)
    if spec["variant"] == "iterate":
        from interlock.connectors.data import EpochData, prepare_loader

        data = EpochData(prepare_loader(loader))
        t0 = time.perf_counter()
        it = data.iterate(spec["start"], 12345)
        next(it)
        return {"ms": (time.perf_counter() - t0) * 1e3}
    module = _resume_module(stop_at_first=True)
    trainer = _resume_trainer(tempfile.mkdtemp(prefix="bench-resume-"))
    with quiet(), contextlib.redirect_stderr(io.StringIO()):
        t0 = time.perf_counter()
        try:
            trainer.fit(module, loader, ckpt_path=spec["ckpt"])
        except module.reached as exc:
            start = int(exc.args[0])
        else:
            raise RuntimeError("the resumed fit never reached a training step")
    return {"ms": (module.first_step - t0) * 1e3, "batch_idx": start}


def run_epoch_growth(spec: dict[str, Any]) -> dict[str, Any]:
    """Many short epochs (1 training + ``val_batches`` validation batches, no listeners): ms per epoch over the run.

    The clock is read on every entry into ``fit.train.epoch_start`` by an observer (no state snapshot).
    """
    import interlock

    warm_up("interlock_bare")

    class Net(interlock.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_net()

        def training_step(self, batch_data: Any, batch_idx: int) -> torch.Tensor:
            return loss_of(self.net, batch_data)

        def validation_step(self, batch_data: Any, batch_idx: int) -> torch.Tensor:
            return loss_of(self.net, batch_data)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=LR)

    batch, epochs = spec["batch"], spec["epochs"]
    train = DataLoader(make_dataset(batch), batch_size=batch)
    val = DataLoader(make_dataset(batch * spec["val_batches"]), batch_size=batch)
    starts: list[float] = []

    def observe(name: str, *_: Any) -> None:
        if name == "fit.train.epoch_start":
            starts.append(time.perf_counter())

    trainer = interlock.Trainer(
        max_epochs=epochs,
        **BARE,
        num_sanity_val_steps=0,
        accelerator="cpu",
        default_root_dir=tempfile.mkdtemp(prefix="bench-epochs-"),
    )
    trainer.observe(observe)
    with quiet(), contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(Net(), train, val)
    ms = [(b - a) * 1e3 for a, b in itertools.pairwise(starts)]
    return {"epoch_ms": ms, "history_rows": len(trainer.state.history)}


def _logging_module(interlock: Any) -> Any:
    """A module that ``self.log``s its training and validation loss (what a new user writes)."""

    class Net(interlock.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_net()

        def training_step(self, batch_data: Any, batch_idx: int) -> torch.Tensor:
            loss = loss_of(self.net, batch_data)
            self.log("train_loss", loss, on_epoch=True)
            return loss

        def validation_step(self, batch_data: Any, batch_idx: int) -> torch.Tensor:
            loss = loss_of(self.net, batch_data)
            self.log("val_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=LR)

    return Net()


def _tree_bytes(root: Path, skip: str = "") -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not (skip and skip in p.parts))


class _Baton:
    """Two processes take turns, an epoch each: a byte on a pipe passes the turn (the other waits, blocked)."""

    def __init__(self, read_fd: int, write_fd: int, timeout: float) -> None:
        self.read_fd, self.write_fd, self.timeout = read_fd, write_fd, timeout

    def give(self) -> None:
        os.write(self.write_fd, b"t")

    def take(self, timeout: float | None = None) -> bool:
        """Wait for the turn; False when the other process is gone (end of file) or took too long."""
        import select

        ready, _, _ = select.select([self.read_fd], [], [], self.timeout if timeout is None else timeout)
        return bool(ready) and os.read(self.read_fd, 1) == b"t"


class _EpochMarks:
    """Clock reads at each epoch start: the previous epoch ends (``end``), this one starts (``start``).

    Between the two reads go what must not count as an epoch's cost: the size of ``last.ckpt``,
    and the wait for the other process's epoch when two processes take turns.
    """

    def __init__(self) -> None:
        self.starts: list[tuple[float, float, float]] = []  # (wall, CPU, seconds in fsync so far)
        self.ends: list[tuple[float, float, float]] = []
        self.fsync_s = 0.0  # seconds the training thread waited in os.fsync so far: the disk's part of an epoch

    def _now(self) -> tuple[float, float, float]:
        return time.perf_counter(), time.process_time(), self.fsync_s

    def end(self) -> None:
        if self.starts:
            self.ends.append(self._now())

    def start(self) -> None:
        self.starts.append(self._now())

    def epochs(self, first: int = 0, last: int | None = None) -> dict[str, list[float]]:
        """Wall, CPU and fsync milliseconds of the epochs ``first`` to ``last`` (exclusive), each start to its end."""
        pairs = list(zip(self.starts, self.ends, strict=False))[first:last]
        return {
            key: [(b[i] - a[i]) * 1e3 for a, b in pairs]
            for i, key in enumerate(("epoch_ms", "epoch_cpu_ms", "epoch_fsync_ms"))
        }

    def timed_fsync(self) -> Callable[[Any], None]:
        """``os.fsync`` that adds the calling thread's wait to ``fsync_s`` when it is this (the training) thread.

        The background checkpoint save fsyncs on its own thread while the next epoch runs: that wait is no
        part of an epoch's wall time, so it is not counted.
        """
        import threading

        real, training = os.fsync, threading.get_ident()

        def timed(fd: Any) -> None:
            if threading.get_ident() != training:
                real(fd)
                return
            t0 = time.perf_counter()
            try:
                real(fd)
            finally:
                self.fsync_s += time.perf_counter() - t0

        return timed


def _long_trainer(interlock: Any, spec: dict[str, Any], root: Path, epochs: int) -> tuple[Any, Any, Any]:
    batch = spec["batch"]
    train = DataLoader(make_dataset(batch * spec["train_batches"]), batch_size=batch)
    val = DataLoader(make_dataset(batch * spec["val_batches"]), batch_size=batch)
    trainer = interlock.Trainer(
        max_epochs=epochs, num_sanity_val_steps=0, accelerator="cpu", default_root_dir=str(root),
        **spec.get("flags", {}),
    )  # fmt: skip
    return trainer, train, val


def _companion(spec: dict[str, Any], result: Path) -> tuple[subprocess.Popen[bytes], _Baton, Path]:
    """Start the fresh process that takes turns with this one (:func:`run_long_companion`)."""
    to_it, from_us = os.pipe()
    from_it, to_us = os.pipe()
    errors = result.with_suffix(".stderr")
    child_spec = {**spec, "task": "long_companion", "read_fd": to_it, "write_fd": to_us, "result": str(result)}
    with open(errors, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, __file__, json.dumps(child_spec), str(result.with_suffix(".unused"))],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, pass_fds=(to_it, to_us),
        )  # fmt: skip
    os.close(to_it)
    os.close(to_us)
    return proc, _Baton(from_it, from_us, timeout=120.0), errors


def run_long(spec: dict[str, Any]) -> dict[str, Any]:
    """A long run with every default listener on (progress bar, CSV, trace, ``ModelCheckpoint``).

    ``epochs`` epochs of ``train_batches`` training and ``val_batches`` validation batches, a module
    that ``self.log``s. Per epoch: its wall and CPU time (clocks read at each ``fit.train.epoch_start``
    by an observer), the seconds it waited in ``fsync``, and the size of ``last.ckpt`` (read at the
    next epoch start, after the save finished; not counted in the epoch). At the end: the run
    directory's bytes by file (checkpoints apart) and per training step.

    With ``pair_epochs`` > 0 the run goes on for that many epochs more, taking turns with a fresh
    process that runs the same workload from its first epoch (:func:`run_long_companion`): an epoch
    here, an epoch there, each process blocked while the other runs. Those epochs of this run
    (``paired``) and the fresh process's (``companion``) are measured at the same moments, so a
    slow stretch of a shared machine slows both alike: late against early without the drift.
    """
    import interlock

    torch.set_num_threads(1)
    warm_up("interlock_default")
    epochs, pair = spec["epochs"], spec.get("pair_epochs", 0)
    root = Path(tempfile.mkdtemp(prefix="bench-long-"))
    trainer, train, val = _long_trainer(interlock, spec, root, epochs + pair)
    marks, sizes = _EpochMarks(), []
    os.fsync = marks.timed_fsync()  # type: ignore[assignment]
    companion: dict[str, Any] = {}
    result_path = root.parent / f"{root.name}-companion.json"

    def observe(name: str, *_: Any) -> None:
        if name != "fit.train.epoch_start":
            return
        marks.end()
        last = Path(trainer.state.run_dir or root) / "checkpoints" / "last.ckpt"
        with contextlib.suppress(OSError):
            sizes.append(last.stat().st_size)
        if pair and len(marks.starts) >= epochs and "error" not in companion:
            if "baton" not in companion:
                companion["proc"], companion["baton"], companion["stderr"] = _companion(spec, result_path)
            baton: _Baton = companion["baton"]
            baton.give()  # the fresh process runs an epoch; this one waits (the first wait includes its start-up)
            if not baton.take():
                companion["error"] = "the companion process stopped taking turns"
        marks.start()

    trainer.observe(observe)
    with quiet(), contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(_logging_module(interlock), train, val)
    run_dir = Path(trainer.state.run_dir)
    files = {
        str(p.relative_to(run_dir)): p.stat().st_size
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and "checkpoints" not in p.relative_to(run_dir).parts
    }
    steps = trainer.state.global_step
    out: dict[str, Any] = {
        **marks.epochs(0, epochs),
        "ckpt_bytes": sizes[: epochs + 1],
        "files": files,
        "steps": steps,
        "run_dir_bytes": sum(files.values()),
        "bytes_per_step": sum(files.values()) / steps if steps else None,
        "trace_bytes_per_step": sum(v for k, v in files.items() if k.startswith("events")) / steps if steps else None,
        "history_rows": len(trainer.state.history),
    }
    if pair:
        out["paired"] = marks.epochs(epochs, epochs + pair)
        proc = companion.get("proc")
        if proc is not None:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                companion.setdefault("error", "the companion process did not exit")
            os.close(companion["baton"].read_fd)
            os.close(companion["baton"].write_fd)
        if result_path.exists():
            out["companion"] = json.loads(result_path.read_text())
        else:
            tail = companion["stderr"].read_text(errors="replace").strip().splitlines()[-4:] if proc else []
            out["companion"] = {"error": companion.get("error", "no result") + ": " + " | ".join(tail)}
        for leftover in (result_path, result_path.with_suffix(".stderr")):
            leftover.unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    return out


def run_long_companion(spec: dict[str, Any]) -> dict[str, Any]:
    """The fresh process of :func:`run_long`'s paired epochs: the same workload, an epoch per turn.

    It waits for its turn before each of its ``pair_epochs`` epochs, and gives the turn back at
    the next epoch start; after its last measured epoch it writes its times to ``result`` and exits.
    """
    import interlock

    torch.set_num_threads(1)
    warm_up("interlock_default")
    pair = spec["pair_epochs"]
    root = Path(tempfile.mkdtemp(prefix="bench-long-companion-"))
    trainer, train, val = _long_trainer(interlock, spec, root, pair + 1)
    marks = _EpochMarks()
    os.fsync = marks.timed_fsync()  # type: ignore[assignment]
    baton = _Baton(spec["read_fd"], spec["write_fd"], timeout=600.0)

    def observe(name: str, *_: Any) -> None:
        if name != "fit.train.epoch_start":
            return
        marks.end()
        if len(marks.starts) == pair:
            Path(spec["result"]).write_text(json.dumps(marks.epochs()))
            baton.give()
            shutil.rmtree(root, ignore_errors=True)
            os._exit(0)  # measured: the epochs after would only wait for turns nobody gives
        if marks.starts:
            baton.give()
        if not baton.take():
            os._exit(1)  # the measuring process is gone
        marks.start()

    trainer.observe(observe)
    with quiet(), contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(_logging_module(interlock), train, val)
    return {"error": "the run ended before its paired epochs did"}


def run_failure(spec: dict[str, Any]) -> dict[str, Any]:
    """A default-listener run that fails at its last step: the flight recorder's one-time cost, and the replay.

    ``record_ms``: the recorder's work at the failure (reading the whole trace back and writing
    ``failure.json``), measured by running it again on the finished trace; ``fit_ms``: the run;
    ``replay_ms``: ``interlock.replay`` to the failure, from the newest checkpoint (the last epoch end);
    ``save_ms``: ``Replay.save`` there (between checkpoint states: the batch end before, plus the
    transitions to re-execute); ``resumed_ms``: a fit from that file, to the same failure.
    """
    import interlock
    from interlock.core.state import TrainerState
    from interlock.core.tracelist import read_transitions
    from interlock.listeners.flight import record_failure

    torch.set_num_threads(1)
    steps, batch, epochs = spec["steps"], spec["batch"], spec["epochs"]
    fail_at = steps * epochs - 1

    class Fails(interlock.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_net()

        def training_step(self, batch_data: Any, batch_idx: int) -> torch.Tensor:
            if self.global_step == fail_at:
                raise RuntimeError("the last step fails")
            return loss_of(self.net, batch_data)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=LR)

    def data() -> DataLoader[Any]:
        return DataLoader(make_dataset(steps * batch), batch_size=batch, shuffle=True)

    root = Path(tempfile.mkdtemp(prefix="bench-failure-"))
    flags = {"max_epochs": epochs, "num_sanity_val_steps": 0, "accelerator": "cpu", "seed": 0}
    trainer = interlock.Trainer(**flags, enable_progress_bar=False, default_root_dir=str(root))
    with quiet(), contextlib.redirect_stderr(io.StringIO()):
        t0 = time.perf_counter()
        with contextlib.suppress(RuntimeError):
            trainer.fit(Fails(), data())
        fit_s = time.perf_counter() - t0
        run_dir = Path(trainer.state.run_dir)
        trace = run_dir / "events.jsonl"
        t0 = time.perf_counter()
        record = record_failure(trace, TrainerState(), None, False)
        record_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with interlock.replay(run_dir, Fails(), data()) as rep:
            replay_s = time.perf_counter() - t0
            started = rep.started_at
            same = rep.number == record["transition"] and rep.error is not None
            t0 = time.perf_counter()  # at the failure, between checkpoint states: the batch end before + replay_to
            saved = rep.save(root / "at_failure.ckpt")
            save_s = time.perf_counter() - t0
        again = interlock.Trainer(**flags, enable_progress_bar=False, default_root_dir=str(root / "again"))
        t0 = time.perf_counter()
        try:
            again.fit(Fails(), data(), ckpt_path=saved)
            reproduced_again = False
        except RuntimeError as exc:
            reproduced_again = str(exc) == "the last step fails"
        again_s = time.perf_counter() - t0
    out = {
        "fit_ms": fit_s * 1e3,
        "record_ms": record_s * 1e3,
        "replay_ms": replay_s * 1e3,
        "transitions": len(read_transitions(trace, "")),
        "trace_bytes": trace.stat().st_size,
        "steps": fail_at,
        "replay_started_at": started,
        "reproduced": same,
        "save_ms": save_s * 1e3,
        "resumed_ms": again_s * 1e3,
        "resumed_reproduced": reproduced_again,
    }
    shutil.rmtree(root, ignore_errors=True)
    return out


def _origin(filename: str) -> str:
    """Whose code a frame runs: interlock's own, torch's, the bench's (module, loop), or the rest.

    interlock's own includes the code it generates (a hot leaf's compiled step, ``<interlock arrival: ...>``).
    """
    if filename.startswith("<interlock"):
        return "interlock"
    if f"{os.sep}interlock{os.sep}" in filename and f"{os.sep}tools{os.sep}" not in filename:
        return "interlock"
    if f"{os.sep}torch{os.sep}" in filename:
        return "torch"
    return "bench" if filename == __file__ else "other"


def _count_opcodes(spec: dict[str, Any]) -> dict[str, int]:
    """Python bytecodes executed by one ``run_steps(spec)``, by the origin of their code (set-up included)."""
    counts: dict[str, int] = {}
    origins: dict[Any, str] = {}

    def trace(frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        origin = origins.get(code)
        if origin is None:
            origin = origins[code] = _origin(code.co_filename)
        frame.f_trace_opcodes = True

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[origin] = counts.get(origin, 0) + 1
            return local

        return local

    gc.collect()
    gc.disable()  # no collection (nor the step clock's gc callback) at allocation-dependent moments: exact counts
    sys.settrace(trace)
    try:
        run_steps(spec)
    finally:
        sys.settrace(None)
        gc.enable()
    return counts


def run_opcodes(spec: dict[str, Any]) -> dict[str, Any]:
    """Python bytecodes per training step of one variant: a count, not a time, so it is exactly repeatable.

    Two runs of ``short`` and ``long`` steps; their difference over the extra steps leaves set-up
    out. Split by whose code ran: interlock's, torch's, the bench's own module and loop, the rest.
    """
    base = {"task": "steps", "variant": spec["variant"], "batch": spec["batch"]}
    _count_opcodes({**base, "samples": spec["batch"] * 20})  # imports and first-call caches, not counted
    short, long = spec["short"], spec["long"]
    a = _count_opcodes({**base, "samples": spec["batch"] * short})
    b = _count_opcodes({**base, "samples": spec["batch"] * long})
    per = {k: (b.get(k, 0) - a.get(k, 0)) / (long - short) for k in sorted(set(a) | set(b))}
    return {"per_step": per, "total": sum(per.values()), "steps": [short, long]}


#: The parts of a step that are torch's own work, each timed around one call (the same calls in every variant).
SPLIT_PARTS = ("fetch", "forward", "zero_grad", "backward", "optimizer_step")


def _split_timers(log: list[tuple[int, float]]) -> list[tuple[Any, str, Any]]:
    """Wrap the torch calls of a step so each logs (part, seconds); return what to restore."""
    import torch.utils.data.dataloader as dl

    module = sys.modules[__name__]
    targets = [
        (dl._BaseDataLoaderIter, "__next__", 0),
        (module, "loss_of", 1),
        (torch.optim.Optimizer, "zero_grad", 2),
        (torch.Tensor, "backward", 3),
        (torch.optim.SGD, "step", 4),
    ]
    saved = []
    clock = time.perf_counter

    for owner, name, part in targets:
        original = owner.__dict__[name]

        def timed(*args: Any, _fn: Any = original, _part: int = part, **kwargs: Any) -> Any:
            start = clock()
            try:
                return _fn(*args, **kwargs)
            finally:
                log.append((_part, clock() - start))

        saved.append((owner, name, original))
        setattr(owner, name, timed)
    # interlock releases gradients itself when torch's zero_grad is not overridden (interlock.plugins.grads): time
    # that as the zero_grad part, and let it see the timed torch method as torch's own, so it still takes its path
    from interlock.plugins import grads

    timed_torch = torch.optim.Optimizer.zero_grad
    original_release, original_torch = grads.zero_grad, grads._TORCH_ZERO_GRAD

    def timed_release(optimizer: Any) -> None:
        start = clock()
        try:
            original_release(optimizer)
        finally:
            log.append((2, clock() - start))

    grads._TORCH_ZERO_GRAD = timed_torch
    saved += [(grads, "zero_grad", original_release), (grads, "_TORCH_ZERO_GRAD", original_torch)]
    grads.zero_grad = timed_release
    return saved


def run_split(spec: dict[str, Any]) -> dict[str, Any]:
    """Where a step's time goes: torch's parts (``SPLIT_PARTS``) and the rest (the loop or trainer's own Python).

    Every variant runs in this process, ``runs`` rounds in a rotating order, with the same five torch
    calls timed; a step is the time between two ``training_step`` starts, and each part's cost is
    the lower decile over a run's steps (the machine undisturbed: a shared machine slows whole
    stretches of a run, which moves medians by more than the few µs measured here).
    """
    torch.set_num_threads(1)
    variants, batch = list(spec["variants"]), spec["batch"]
    for variant in variants:
        warm_up(variant)
    ds = make_dataset(spec["samples"])
    max_steps = math.ceil(spec["samples"] / batch)
    log: list[tuple[int, float]] = []
    saved = _split_timers(log)

    def once(variant: str) -> dict[str, float]:
        clock, marks = StepClock(), []
        tick = clock.tick

        def mark() -> None:  # where each step starts in the log of parts
            marks.append(len(log))
            tick()

        clock.tick = mark  # type: ignore[method-assign]
        log.clear()
        with quiet(), contextlib.redirect_stdout(io.StringIO()):
            if variant == "plain":
                _plain(ds, batch, clock, max_steps, _no_probe)
            else:
                default, view = variant != "interlock_bare", variant == "interlock_view"
                _interlock(ds, batch, clock, max_steps, _no_probe, None, default=default, view=view)
        parts: list[list[float]] = [[] for _ in SPLIT_PARTS]
        rest: list[float] = []
        steps: list[float] = []
        for i in range(len(marks) - 1):
            gap = clock.times[i + 1] - clock.times[i]
            sums = [0.0] * len(SPLIT_PARTS)
            for part, seconds in log[marks[i] : marks[i + 1]]:
                sums[part] += seconds
            for part, total in enumerate(sums):
                parts[part].append(total)
            rest.append(gap - sum(sums))
            steps.append(gap)

        def low(values: list[float]) -> float:
            return statistics.quantiles(values, n=10)[0] * 1e6

        out = {name: low(values) for name, values in zip(SPLIT_PARTS, parts, strict=True)}
        out.update(rest=low(rest), step=low(steps))
        return out

    try:
        for variant in variants:
            once(variant)
        results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
        for rnd in range(spec["runs"]):
            shift = (spec.get("shift", 0) + rnd) % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                results[variant].append(once(variant))
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
    return {"rounds": results}


TASKS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "opcodes": run_opcodes,
    "split": run_split,
    "failure": run_failure,
    "long": run_long,
    "long_companion": run_long_companion,
    "epoch_growth": run_epoch_growth,
    "steps": run_steps,
    "steps_same_process": run_steps_same_process,
    "ddp": run_ddp,
    "ckpt": run_ckpt,
    "resume_prepare": run_resume_prepare,
    "resume": run_resume,
}


def main(argv: list[str]) -> int:
    spec, out = json.loads(argv[0]), Path(argv[1])
    result = TASKS[spec["task"]](spec)
    out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
