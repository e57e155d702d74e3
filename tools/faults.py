"""Fault injection from outside: hostile and broken inputs, bad flags, kills, concurrent writers.

    python tools/faults.py            # every attempt
    python tools/faults.py --quick    # the short set `make test` runs
    python tools/faults.py --json --only checkpoints,flags

Every attempt runs in a fresh process with a time limit and is judged from outside:

- **hang**: it ran past its limit;
- **code executed**: a hostile file made its marker file appear;
- **data loss**: a file that must survive is gone or unloadable, or a file outside the run changed;
- **unclear error**: it failed with an error that does not name what was wrong (the attempt's
  expected phrase is missing, or the error is a bare Python one: KeyError, AttributeError,
  RecursionError, a traceback from deep inside a library);
- **safe**: none of these.

Prints ``tried N, safe S, data loss L, hang H, code executed E, unclear error U`` and the
attempts that were not safe; exits non-zero unless L = H = E = 0.

Classes (``--only``): ``checkpoints`` (hostile, corrupted, truncated files, pickle bombs, deep
nesting, FIFOs; through ``inspect`` and resume), ``flags``, ``runs`` (a read-only root, two
trainers on one root), ``kills`` (SIGKILL at random moments, then resume), ``midsave`` (SIGKILL
while a checkpoint's temporary file exists), ``storage`` (disk full, the run directory remounted
read-only or deleted while training), ``ranks`` (SIGTERM, SIGKILL or SIGUSR1 under SLURM to one
rank of a 2-rank ``torchrun`` DDP job on CPU/gloo, then ``--ckpt_path last``). A full disk and
read-only directories need root and ``mount -t tmpfs`` (a full disk falls back to RLIMIT_FSIZE);
an attempt this machine cannot build is listed as skipped and not counted. ``--quick`` runs one
attempt of most classes (not ``ranks``, which takes about half a minute per attempt).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(SRC))

#: The start of every script: a tiny module and data.
PRELUDE = """
import os, sys, torch
from torch.utils.data import DataLoader, TensorDataset
import interlock
from interlock.listeners.checkpoint import ModelCheckpoint

class Tiny(interlock.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 2)
    def training_step(self, batch, i):
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
    def validation_step(self, batch, i):
        return self.training_step(batch, i)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

def data(n=64):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=8)
"""


@attrs.frozen
class Attempt:
    """One fault: a script run in ``dir``, what its error must say, and what must survive."""

    kind: str
    name: str
    script: str
    expect: str = ""  # a phrase a clear error contains (checked case-insensitively; "a|b": either)
    timeout: float = 60.0
    prepare: Callable[[Path], object] | None = None
    survives: Callable[[Path], str | None] | None = None  # None when nothing was lost, else what
    quick: bool = False
    must_fail: bool = False  # bad input: finishing without an error is accepting it silently
    cleanup: Callable[[Path], object] | None = None  # undo what ``prepare`` set up outside the files (a mount)


class CannotBuild(Exception):
    """Raised by an attempt's ``prepare`` when this machine cannot make that fault (the attempt is skipped)."""


@attrs.frozen
class Outcome:
    attempt: str
    verdict: str
    detail: str = ""


_BARE = ("KeyError", "AttributeError", "RecursionError", "IndexError", "UnboundLocalError", "NameError", "OSError")


def _last_error(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln and not ln.startswith((" ", "\t"))]
    errors = [ln for ln in lines if ":" in ln and ln.split(":")[0].replace(".", "").isidentifier()]
    return errors[-1] if errors else (lines[-1] if lines else "")


def run_attempt(att: Attempt, base: Path) -> Outcome:
    """Run one attempt in a fresh directory; classify what happened."""
    name = f"{att.kind}-{att.name}".replace(" ", "_")
    work = base / name
    n = 1
    while work.exists():
        n += 1
        work = base / f"{name}-{n}"
    work.mkdir(parents=True)
    if att.prepare is not None:
        try:
            att.prepare(work)
        except CannotBuild as exc:  # this machine cannot make the fault (no root, no tmpfs): not tried
            return Outcome(att.name, "skipped", str(exc))
        except Exception as exc:  # the tool could not build this fault: say so, count it as not tried safely
            return Outcome(att.name, "unclear error", f"could not prepare the attempt: {type(exc).__name__}: {exc}")
    try:
        return _judge(att, work)
    finally:
        if att.cleanup is not None:
            att.cleanup(work)


def _judge(att: Attempt, work: Path) -> Outcome:
    script = work / "attempt.py"
    script.write_text(PRELUDE + textwrap.dedent(att.script))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(work)],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: a hang is ended with everything it started
    )
    try:
        stdout, stderr = proc.communicate(timeout=att.timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Outcome(att.name, "hang", f"still running after {att.timeout:.0f} s")
    if (work / "pwned").exists():
        return Outcome(att.name, "code executed", "the hostile file's marker appeared")
    if att.survives is not None:
        lost = att.survives(work)
        if lost:
            return Outcome(att.name, "data loss", lost)
    output = stdout + stderr
    if proc.returncode == 0 and att.must_fail:
        return Outcome(att.name, "unclear error", "accepted silently: the run finished without an error")
    if proc.returncode != 0:
        error = _last_error(output)
        named = not att.expect or any(p in output.lower() for p in att.expect.lower().split("|"))
        if error.split(":")[0].split(".")[-1] in _BARE or not named:
            return Outcome(att.name, "unclear error", error[:300])
    return Outcome(att.name, "safe", f"exit {proc.returncode}: {_last_error(output)[:160]}")


# -- the attempts ------------------------------------------------------------------------------------------------
class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def _good(work: Path) -> Path:
    """A real checkpoint of the tiny run, made once per work dir."""
    script = PRELUDE + textwrap.dedent(
        """
        listeners = [ModelCheckpoint(save_last=True)]
        trainer = interlock.Trainer(max_epochs=1, listeners=listeners, default_root_dir=sys.argv[1])
        trainer.fit(Tiny(), data())
        """
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    subprocess.run(
        [sys.executable, "-c", script, str(work / "good")], env=env, check=True, capture_output=True, timeout=120
    )
    return next((work / "good").rglob("last.ckpt"))


def _framed(work: Path, name: str, obj: Any) -> None:
    """``obj`` saved with torch.save inside a well-formed interlock frame (header, length, hash)."""
    import hashlib
    import io

    import torch

    from interlock.plugins.checkpoint_io import TorchCheckpointIO, frame

    header = TorchCheckpointIO().read_header(_good(work))
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    payload = buffer.getvalue()
    header.update(sha256=hashlib.sha256(payload).hexdigest(), payload_bytes=len(payload))
    (work / name).write_bytes(frame(payload, header))


def _bomb(depth: int) -> Any:
    layer: Any = [0]
    for _ in range(depth):
        layer = [layer, layer]
    return layer


def _nested(depth: int) -> Any:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20 * depth))  # torch.save recurses once per level
    layer: Any = 0
    for _ in range(depth):
        layer = [layer]
    return layer


def _checkpoint_attempts() -> list[Attempt]:
    inspect = "import interlock.cli.main as m\nsys.exit(m.main(['inspect', sys.argv[1] + '/{name}']))\n"
    resume = (
        "trainer = interlock.Trainer(max_epochs=1, enable_checkpointing=False, default_root_dir=sys.argv[1])\n"
        "trainer.fit(Tiny(), data(), ckpt_path=sys.argv[1] + '/{name}')\n"
    )
    out: list[Attempt] = []

    def both(name: str, file: str, prepare: Callable[[Path], object], expect: str, quick: bool = False) -> None:
        for verb, script in (("inspect", inspect), ("resume", resume)):
            attempt = Attempt("checkpoints", f"{verb} {name}", script.format(name=file), expect, 60, prepare)
            out.append(attrs.evolve(attempt, quick=quick and verb == "inspect", must_fail=True))

    both(
        "malicious raw pickle",
        "evil.pkl",
        lambda w: (w / "evil.pkl").write_bytes(pickle.dumps({"x": _Evil(str(w / "pwned"))})),
        "evil.pkl",
        quick=True,
    )
    both(
        "malicious framed pickle",
        "evil.ckpt",
        lambda w: _framed(w, "evil.ckpt", {"format": "interlock.checkpoint/2", "x": _Evil(str(w / "pwned"))}),
        "evil.ckpt",
    )
    both("random bytes", "noise.ckpt", lambda w: (w / "noise.ckpt").write_bytes(os.urandom(4096)), "noise.ckpt")
    both("fifo", "pipe.ckpt", lambda w: os.mkfifo(w / "pipe.ckpt"), "pipe.ckpt", quick=True)
    both("pickle bomb", "bomb.ckpt", lambda w: _framed(w, "bomb.ckpt", {"bomb": _bomb(60)}), "bomb.ckpt")
    both("deep nesting", "deep.ckpt", lambda w: _framed(w, "deep.ckpt", {"deep": _nested(500)}), "deep.ckpt")

    def flipped(w: Path) -> None:
        good = bytearray(_good(w).read_bytes())
        good[len(good) // 2] ^= 0xFF
        (w / "flip.ckpt").write_bytes(bytes(good))

    both("bit flip", "flip.ckpt", flipped, "flip.ckpt")

    def truncated(w: Path) -> None:
        good = _good(w).read_bytes()
        (w / "short.ckpt").write_bytes(good[: len(good) // 3])

    both("truncated", "short.ckpt", truncated, "short.ckpt")
    return out


def _flag_attempts() -> list[Attempt]:
    fit = "interlock.Trainer(default_root_dir=sys.argv[1], max_epochs=1, {flags}).fit(Tiny(), {train})\n"
    cases = [
        ("gradient_clip_val nan", "gradient_clip_val=float('nan')", "data()", "gradient_clip_val"),
        ("deterministic yes", "deterministic='yes'", "data()", "deterministic"),
        ("listeners string", "listeners='abc'", "data()", "listeners"),
        ("listeners object", "listeners=[object()]", "data()", "listener"),
        ("max_epochs -5", "max_epochs=-5", "data()", "max_epochs"),
        ("precision 7", "precision=7", "data()", "precision"),
        ("accelerator tpu", "accelerator='tpu'", "data()", "accelerator"),
        ("empty loader with max_steps", "max_steps=5", "data(0)", "empty"),
    ]
    out = [
        Attempt(
            "flags",
            name,
            fit.format(flags=flags, train=train).replace("max_epochs=1, max_epochs", "max_epochs"),
            expect,
            60,
            quick=name in ("deterministic yes", "listeners object"),
            must_fail=True,
        )
        for name, flags, train, expect in cases
    ]
    out.append(
        Attempt(
            "flags",
            "ckpt_path int",
            "trainer = interlock.Trainer(enable_checkpointing=False, default_root_dir=sys.argv[1], max_epochs=1)\n"
            "trainer.fit(Tiny(), data(), ckpt_path=3)\n",
            "ckpt_path",
            60,
            must_fail=True,
        )
    )
    return out


CHILD = """
trainer = interlock.Trainer(max_epochs=4, listeners=[ModelCheckpoint(save_last=True, every_n_train_steps=2)],
                            default_root_dir=sys.argv[1])
trainer.fit(Tiny(), data(256))
"""


def _loadable(work: Path) -> str | None:
    """Every last.ckpt under ``work`` loads, a sharded directory with every file hash-checked."""
    from interlock.plugins import sharded_io
    from interlock.plugins.checkpoint_io import TorchCheckpointIO

    for path in work.rglob("last.ckpt"):
        try:
            if path.is_dir():
                sharded_io.read_manifest(path)
                sharded_io.load_all(path)
            else:
                TorchCheckpointIO().load_checkpoint(path)
        except Exception as exc:
            return f"{path.relative_to(work)} does not load: {exc}"
    return None


def _kill_attempts(count: int) -> list[Attempt]:
    """SIGKILL a training process at a random moment; every last.ckpt must load, and resuming must run."""
    rng = random.Random(7)
    out = []
    for i in range(count):
        delay = rng.uniform(0.5, 4.0)
        script = f"""
        import subprocess, time, pathlib
        child = subprocess.Popen([sys.executable, sys.argv[1] + "/child.py", sys.argv[1]])
        time.sleep({delay:.3f})
        child.kill()
        child.wait()
        last = sorted(pathlib.Path(sys.argv[1]).rglob("last.ckpt"))
        if last:
            listeners = [ModelCheckpoint(save_last=True)]
            trainer = interlock.Trainer(max_epochs=4, listeners=listeners, default_root_dir=sys.argv[1])
            trainer.fit(Tiny(), data(256), ckpt_path=str(last[0]))
        """
        out.append(
            Attempt(
                "kills",
                f"sigkill after {delay:.2f} s",
                script,
                "",
                180,
                lambda w: (w / "child.py").write_text(PRELUDE + CHILD),
                _loadable,
                quick=i == 0,
            )
        )
    return out


def _runs_attempts() -> list[Attempt]:
    def readonly(w: Path) -> None:  # root ignores file modes: a read-only tmpfs then
        if os.geteuid() == 0:
            if (
                not _mount_tmpfs(w / "ro", "1m")
                or subprocess.run(["mount", "-o", "remount,ro", str(w / "ro")], check=False).returncode
            ):
                raise CannotBuild("needs tmpfs (mount -t tmpfs) to build a read-only directory as root")
            return
        (w / "ro").mkdir()
        (w / "ro").chmod(0o555)

    two = """
    import multiprocessing as mp
    def one(root):
        listeners = [ModelCheckpoint(save_last=True)]
        interlock.Trainer(max_epochs=2, listeners=listeners, default_root_dir=root).fit(Tiny(), data())
    ps = [mp.Process(target=one, args=(sys.argv[1],)) for _ in range(2)]
    [p.start() for p in ps]; [p.join() for p in ps]
    sys.exit(max(p.exitcode for p in ps))
    """

    def both_kept(w: Path) -> str | None:
        lasts = list(w.rglob("last.ckpt"))
        return None if len(lasts) == 2 else f"two trainers on one root left {len(lasts)} last.ckpt file(s), not 2"

    return [
        Attempt(
            "runs",
            "read-only root",
            "interlock.Trainer(max_epochs=1, default_root_dir=sys.argv[1] + '/ro').fit(Tiny(), data())\n",
            "read-only",
            60,
            readonly,
            must_fail=True,
            cleanup=lambda w: _umount(w / "ro"),
        ),
        Attempt("runs", "two trainers on one root", two, "", 120, survives=both_kept, quick=True),
    ]


#: A module whose checkpoint is large enough (about 16 MB) that a save takes long enough to be killed inside.
BIG = """
class Big(Tiny):
    def __init__(self):
        super().__init__()
        self.ballast = torch.nn.Parameter(torch.zeros(4_000_000), requires_grad=False)
"""


def _temps(work: Path) -> list[Path]:
    return [p for p in work.rglob("*.tmp") if p.name.startswith(".")]


def _midsave_attempts(count: int) -> list[Attempt]:
    """SIGKILL a training process while a checkpoint write is in progress (its temporary file exists)."""
    rng = random.Random(11)
    child = (
        BIG
        + """
trainer = interlock.Trainer(max_epochs=2, listeners=[ModelCheckpoint(save_last=True, every_n_train_steps=3)],
                            default_root_dir=sys.argv[1])
trainer.fit(Big(), data(96))
"""
    )
    out = []
    for i in range(count):
        skip = i % 3  # which save to kill: the first one (no previous last.ckpt) or a later one
        delay = rng.uniform(0.0, 0.03)  # into the write: payload, hash or fsync
        script = (
            BIG
            + f"""
import subprocess, time, pathlib
root = pathlib.Path(sys.argv[1])
child = subprocess.Popen([sys.executable, str(root / "child.py"), str(root / "run")])
seen, hit, t0 = set(), False, time.monotonic()
while child.poll() is None and time.monotonic() - t0 < 60:
    temps = {{p.name for p in root.rglob(".*.tmp")}}
    if temps - seen:
        seen |= temps
        if len(seen) > {skip}:
            time.sleep({delay:.4f})
            child.kill()
            hit = True
            break
    time.sleep(0.0005)
child.kill()
child.wait()
left = [str(p) for p in root.rglob(".*.tmp")]
(root / "hit").write_text(str(len(left) if hit else 0))
last = sorted(root.rglob("last.ckpt"))
if last:
    trainer = interlock.Trainer(max_epochs=2, listeners=[ModelCheckpoint(save_last=True, every_n_train_steps=3)],
                                default_root_dir=str(root / "run"))
    trainer.fit(Big(), data(96), ckpt_path=str(last[0]))
"""
        )

        def intact(w: Path) -> str | None:
            lost = _loadable(w)
            if lost:
                return lost
            left = [str(p.relative_to(w)) for p in _temps(w)]
            resumed = list(w.rglob("last.ckpt"))
            if left and resumed:
                return f"temporary files left after the resume: {left}"
            hit = (w / "hit").read_text() if (w / "hit").exists() else "0"
            print(f"  ({w.name}: temporary files the kill left mid-save: {hit})", file=sys.stderr)
            return None

        out.append(
            Attempt(
                "midsave",
                f"sigkill in save {skip + 1} after {delay * 1000:.0f} ms",
                script,
                "",
                240,
                lambda w: (w / "child.py").write_text(PRELUDE + child),
                intact,
                quick=i == 1,
            )
        )
    return out


DDP_FIT = """
import pathlib, time
class Slow(Tiny):
    def training_step(self, batch, i):
        time.sleep(0.01)
        return super().training_step(batch, i)
root = sys.argv[1]
pathlib.Path(root).mkdir(parents=True, exist_ok=True)
pathlib.Path(root, f"rank{os.environ['RANK']}.pid").write_text(str(os.getpid()))
strategy = os.environ.get("FAULT_STRATEGY", "ddp")
trainer = interlock.Trainer(strategy=strategy, devices=2, max_epochs=2, seed=0, default_root_dir=root,
                            listeners=[ModelCheckpoint(save_last=True, every_n_train_steps=4)])
try:
    trainer.fit(Slow(), data(1024), ckpt_path=sys.argv[2] if len(sys.argv) > 2 else None)
except interlock.Preempted as exc:
    sys.exit(128 + exc.signum)
"""


def _ddp_attempts() -> list[Attempt]:
    """Two ranks (torchrun, gloo on CPU): a signal to one rank only; bounded exit, loadable checkpoint, resume.

    Under ``fsdp_sharded`` the checkpoints are directories saved in the background.
    """
    cases = [("SIGTERM", 1, False, "ddp"), ("SIGTERM", 0, False, "ddp"), ("SIGKILL", 1, False, "ddp")]
    cases += [("SIGUSR1", 1, True, "ddp"), ("SIGTERM", 1, False, "fsdp_sharded"), ("SIGKILL", 0, False, "fsdp_sharded")]
    out = []
    for name, rank, slurm, strategy in cases:
        script = f"""
import json, pathlib, signal, socket, subprocess, time
root = pathlib.Path(sys.argv[1])

def torchrun(*args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, FAULT_STRATEGY="{strategy}")
    env.update({{"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "batch"}} if {slurm} else {{}})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={{port}}",
           str(root / "ddp_fit.py"), str(root / "out"), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

job, t0 = torchrun(), time.monotonic()
while not list(root.rglob("last.ckpt")) and job.poll() is None and time.monotonic() - t0 < 120:
    time.sleep(0.02)
pid = int((root / "out" / "rank{rank}.pid").read_text())
os.kill(pid, signal.{name})
sent = time.monotonic()
try:
    log = job.communicate(timeout=90)[0]
except subprocess.TimeoutExpired:
    job.kill()
    sys.exit("the job did not exit within 90 s of the signal")
report = {{"rc": job.returncode, "exit_s": round(time.monotonic() - sent, 1)}}
resume = torchrun("last")
report["resume_log"] = resume.communicate(timeout=150)[0][-2000:]
report["resume_rc"] = resume.returncode
(root / "report.json").write_text(json.dumps(report))
print(report["rc"], report["exit_s"], report["resume_rc"])
"""

        def judged(w: Path, name: str = name) -> str | None:
            lost = _loadable(w)
            if lost:
                return lost
            report = json.loads((w / "report.json").read_text()) if (w / "report.json").exists() else None
            if report is None:
                return None  # the script failed before: judged by its error
            if report["rc"] == 0:
                return f"the job exited 0 after {name} to one rank: a scheduler would not requeue it"
            if report["resume_rc"] != 0:
                return f"resuming with ckpt_path='last' failed (exit {report['resume_rc']}): {report['resume_log']}"
            return None

        out.append(
            Attempt(
                "ranks",
                f"{name} to rank {rank} of 2 ({strategy})" + (" under SLURM" if slurm else ""),
                script,
                "",
                400,
                lambda w: (w / "ddp_fit.py").write_text(PRELUDE + DDP_FIT),
                judged,
                quick=False,
            )
        )
    return out


def _mount_tmpfs(where: Path, size: str) -> bool:
    """Mount a small tmpfs at ``where`` (root only); False where mounting is not possible here."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, check=False
    )
    return done.returncode == 0


def _umount(where: Path) -> None:
    if os.path.ismount(where):
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


#: Trains with a checkpoint every 2 steps; ``FILL`` (a hook) runs once the first last.ckpt is in place.
FILLED = (
    BIG
    + """
import contextlib, pathlib
root = pathlib.Path(sys.argv[1]) / "disk"
done = []
def fill(event, state):
    last = list(root.rglob("last.ckpt"))
    if last and not done:
        done.append(FILL(root, last[0]))
trainer = interlock.Trainer(max_epochs=3, listeners=[ModelCheckpoint(save_last=True, every_n_train_steps=2)],
                            default_root_dir=str(root))
trainer.on("fit.train.batch.end", fill)
trainer.fit(Big(), data(256))
"""
)


def _storage_attempts() -> list[Attempt]:
    """Disk full, a run directory made read-only or deleted while training."""

    def full(root: Path, last: Path) -> None:  # fill what is left of the disk
        import os
        import resource
        import signal

        if not os.path.ismount(root):  # no tmpfs here: a file-size limit makes the next save fail (EFBIG)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
            return
        # unbuffered, and the error suppressed outside the file: a buffered file's close() retries the flush
        # that found the disk full and raises the bare OSError itself (the filler's, not the run's)
        with contextlib.suppress(OSError), open(root / "filler", "wb", buffering=0) as f:
            while True:
                f.write(bytes(65536))

    def readonly(root: Path, last: Path) -> None:
        import subprocess

        run = last.parent.parent
        subprocess.run(["mount", "--bind", str(run), str(run)], check=True)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(run)], check=True)

    def deleted(root: Path, last: Path) -> None:
        import shutil

        shutil.rmtree(last.parent.parent)

    def kept(w: Path) -> str | None:
        """The last.ckpt written before the fault still loads and no temporary file is left (unless deleted)."""
        lost = _loadable(w)
        if lost:
            return lost
        if (w / "deleted").exists():
            return None
        if (w / "readonly").exists():  # a save in flight when the directory turned read-only cannot remove its
            return None  # temporary file there; the next writer's first save sweeps it
        if not list(w.rglob("last.ckpt")):
            return "no last.ckpt is left"
        left = [str(p.relative_to(w)) for p in _temps(w)] + [str(p.relative_to(w)) for p in w.rglob("*.csv.tmp")]
        return f"temporary files left: {left}" if left else None

    def prepare(fill: Any, size: str, mount: bool) -> Callable[[Path], None]:
        def go(w: Path) -> None:
            if mount and not _mount_tmpfs(w / "disk", size) and fill is not full:  # a full disk: RLIMIT_FSIZE
                raise CannotBuild("needs root and tmpfs (mount -t tmpfs, mount --bind) to build this fault")
            (w / "disk").mkdir(exist_ok=True)
            (w / "fill.py").write_text(textwrap.dedent(inspect_source(fill)))

        return go

    cases = [
        # whichever writer meets the full disk first names it: the checkpoint's, or the trace's or a logger's
        ("disk full", full, "60m", True, "cannot write checkpoint|no space left on device|file too large", True),
        ("run directory made read-only", readonly, "200m", True, "read-only", False),
        ("run directory deleted", deleted, "200m", False, "deleted", False),
    ]
    out = []
    for name, fill, size, mount, expect, quick in cases:
        script = f"from pathlib import Path\nexec(open(sys.argv[1] + '/fill.py').read())\nFILL = {fill.__name__}\n"
        if fill is not full:
            script += f"open(sys.argv[1] + '/{fill.__name__}', 'w').close()\n"
        out.append(
            Attempt(
                "storage",
                name,
                script + FILLED,
                expect,
                180,
                prepare(fill, size, mount),
                kept,
                quick=quick,
                must_fail=True,
                cleanup=_unmount_disk,
            )
        )
    return out


def _unmount_disk(work: Path) -> None:
    _umount_all(work)
    _umount(work / "disk")


def _umount_all(work: Path) -> None:
    """Undo bind mounts an attempt made under ``work`` (deepest first)."""
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    for point in sorted((p for p in points if p.startswith(str(work / "disk") + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def inspect_source(fn: Callable[..., Any]) -> str:
    import inspect

    return inspect.getsource(fn)


def attempts(quick: bool) -> list[Attempt]:
    every = [
        *_checkpoint_attempts(),
        *_flag_attempts(),
        *_runs_attempts(),
        *_kill_attempts(6),
        *_midsave_attempts(6),
        *_storage_attempts(),
        *_ddp_attempts(),
    ]
    return [a for a in every if a.quick] if quick else every


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the short set (one attempt of most classes)")
    p.add_argument(
        "--only",
        default="",
        help="classes to run, comma-separated (checkpoints, flags, runs, kills, midsave, storage, ranks)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    chosen = [a for a in attempts(args.quick) if not args.only or a.kind in args.only.split(",")]
    outcomes: list[Outcome] = []
    skipped: list[Outcome] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="interlock-faults-") as tmp:
        for i, att in enumerate(chosen, 1):
            outcome = run_attempt(att, Path(tmp))
            (skipped if outcome.verdict == "skipped" else outcomes).append(outcome)
            print(f"[{i}/{len(chosen)}] {att.kind}: {att.name}: {outcome.verdict}", file=sys.stderr)
    counts = {
        v: sum(o.verdict == v for o in outcomes)
        for v in ("safe", "data loss", "hang", "code executed", "unclear error")
    }
    line = (
        f"tried {len(outcomes)}, safe {counts['safe']}, data loss {counts['data loss']}, hang {counts['hang']}, "
        f"code executed {counts['code executed']}, unclear error {counts['unclear error']}"
    )
    bad = [attrs.asdict(o) for o in outcomes if o.verdict != "safe"]
    if args.json:
        print(
            json.dumps(
                {
                    "summary": line,
                    **counts,
                    "tried": len(outcomes),
                    "not_safe": bad,
                    "skipped": [attrs.asdict(o) for o in skipped],
                    "seconds": round(time.perf_counter() - t0, 1),
                },
                indent=2,
            )
        )
    else:
        print(line)
        for o in bad:
            print(f"  {o['verdict']}: {o['attempt']}: {o['detail']}")
        for sk in skipped:
            print(f"  skipped (not counted): {sk.attempt}: {sk.detail}")
    return 0 if counts["data loss"] == counts["hang"] == counts["code executed"] == 0 else 1


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
