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
"""

from __future__ import annotations

import argparse
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
    expect: str = ""  # a phrase a clear error contains (checked case-insensitively)
    timeout: float = 60.0
    prepare: Callable[[Path], None] | None = None
    survives: Callable[[Path], str | None] | None = None  # None when nothing was lost, else what
    quick: bool = False
    must_fail: bool = False  # bad input: finishing without an error is accepting it silently


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
    work = base / f"{att.kind}-{att.name}".replace(" ", "_")
    work.mkdir(parents=True)
    if att.prepare is not None:
        try:
            att.prepare(work)
        except Exception as exc:  # the tool could not build this fault: say so, count it as not tried safely
            return Outcome(att.name, "unclear error", f"could not prepare the attempt: {type(exc).__name__}: {exc}")
    script = work / "attempt.py"
    script.write_text(PRELUDE + textwrap.dedent(att.script))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    try:
        proc = subprocess.run(
            [sys.executable, str(script), str(work)],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=att.timeout,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Outcome(att.name, "hang", f"still running after {att.timeout:.0f} s")
    if (work / "pwned").exists():
        return Outcome(att.name, "code executed", "the hostile file's marker appeared")
    if att.survives is not None:
        lost = att.survives(work)
        if lost:
            return Outcome(att.name, "data loss", lost)
    output = proc.stdout + proc.stderr
    if proc.returncode == 0 and att.must_fail:
        return Outcome(att.name, "unclear error", "accepted silently: the run finished without an error")
    if proc.returncode != 0:
        error = _last_error(output)
        if error.split(":")[0].split(".")[-1] in _BARE or (att.expect and att.expect.lower() not in output.lower()):
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

    from interlock.plugins.checkpoint_io import MAGIC

    good = _good(work).read_bytes()
    end = good.index(b"\n", len(MAGIC)) + 1
    header = json.loads(good[len(MAGIC) : end])
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    payload = buffer.getvalue()
    header.update(sha256=hashlib.sha256(payload).hexdigest(), payload_bytes=len(payload))
    line = json.dumps(header, sort_keys=True).encode()
    (work / name).write_bytes(MAGIC + line.ljust(end - len(MAGIC) - 1) + b"\n" + payload)


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

    def both(name: str, file: str, prepare: Callable[[Path], None], expect: str, quick: bool = False) -> None:
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
        lambda w: _framed(w, "evil.ckpt", {"format": "interlock.checkpoint/1", "x": _Evil(str(w / "pwned"))}),
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
    """Every last.ckpt under ``work`` loads (and there is one once training started)."""
    from interlock.plugins.checkpoint_io import TorchCheckpointIO

    for path in work.rglob("last.ckpt"):
        try:
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
    def readonly(w: Path) -> None:
        (w / "runs").mkdir()
        (w / "runs").chmod(0o555)

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
            "interlock.Trainer(max_epochs=1, default_root_dir=sys.argv[1]).fit(Tiny(), data())\n",
            "runs",
            60,
            readonly if os.geteuid() != 0 else None,
        ),
        Attempt("runs", "two trainers on one root", two, "", 120, survives=both_kept, quick=True),
    ]


def attempts(quick: bool) -> list[Attempt]:
    every = [*_checkpoint_attempts(), *_flag_attempts(), *_runs_attempts(), *_kill_attempts(6)]
    return [a for a in every if a.quick] if quick else every


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the short set (one attempt of most classes)")
    p.add_argument("--only", default="", help="classes to run, comma-separated (checkpoints, flags, runs, kills)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    chosen = [a for a in attempts(args.quick) if not args.only or a.kind in args.only.split(",")]
    outcomes: list[Outcome] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="interlock-faults-") as tmp:
        for i, att in enumerate(chosen, 1):
            outcome = run_attempt(att, Path(tmp))
            outcomes.append(outcome)
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
                    "seconds": round(time.perf_counter() - t0, 1),
                },
                indent=2,
            )
        )
    else:
        print(line)
        for o in bad:
            print(f"  {o['verdict']}: {o['attempt']}: {o['detail']}")
    return 0 if counts["data loss"] == counts["hang"] == counts["code executed"] == 0 else 1


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
