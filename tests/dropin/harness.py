"""Run one Lightning-style source twice: under Lightning, and with only its imports switched to interlock.lightning.

An example is a file in ``examples/`` written as Lightning code (``pytorch_lightning``,
``lightning.pytorch`` or ``import lightning as L`` imports) with a ``main(root)`` that trains
and returns the trained module. ``lightning.pytorch`` and ``lightning`` are run as
``pytorch_lightning`` on the Lightning side (the same code, packaged twice; only
``pytorch_lightning`` is installed). On the interlock side every one of those import paths becomes
``interlock.lightning`` and nothing else in the text changes.
"""

from __future__ import annotations

import logging
import os
import random
import re
import sys
import types
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import attrs
import numpy as np
import torch

EXAMPLES = Path(__file__).parent / "examples"
#: Differential probes: Lightning scripts whose module records what the run showed it (``module.seen``).
PROBES = Path(__file__).parent / "probes"

#: ``lightning.pytorch`` and the top-level ``lightning`` package (``import lightning as L``), as written in examples.
_LIGHTNING = re.compile(r"\blightning\.pytorch\b|(?<![\w.])lightning(?=\s+as\s|\.)(?!\.pytorch)")
_PL = re.compile(r"\bpytorch_lightning\b")
_ENV = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS", "INTERLOCK_GLOBAL_SEED", "INTERLOCK_SEED_WORKERS")

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
logging.getLogger("lightning_fabric").setLevel(logging.ERROR)


def source(name: str, folder: Path = EXAMPLES) -> str:
    return (folder / f"{name}.py").read_text()


def as_lightning(text: str) -> str:
    """The Lightning side: ``lightning.pytorch`` / ``lightning`` spelt ``pytorch_lightning`` (the installed copy)."""
    return _LIGHTNING.sub("pytorch_lightning", text)


def switched(text: str) -> str:
    """The drop-in: every Lightning import path replaced by ``interlock.lightning``; nothing else changes."""
    out = _PL.sub("interlock.lightning", _LIGHTNING.sub("interlock.lightning", text))
    changed = [(a, b) for a, b in zip(text.splitlines(), out.splitlines(), strict=True) if a != b]
    bad = [b for _, b in changed if not re.match(r"\s*((from|import)\s+interlock\.lightning\b|#)", b)]
    assert not bad, f"the switch changed lines that are not imports: {bad}"
    assert changed, "the example has no Lightning import to switch"
    return out


@contextmanager
def _fresh(root: Path) -> Iterator[None]:
    """Run in ``root`` with the RNGs at a fixed seed and the seed variables cleared; restore after."""
    here, env = os.getcwd(), {k: os.environ.get(k) for k in _ENV}
    for key in _ENV:
        os.environ.pop(key, None)
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    root.mkdir(parents=True, exist_ok=True)
    os.chdir(root)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        os.chdir(here)
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run(text: str, name: str, root: Path) -> torch.nn.Module:
    """Execute ``text`` as module ``name`` (importable while it runs, for class paths) and return ``main(root)``."""
    return _run(text, name, root)[0]


def _run(text: str, name: str, root: Path, folder: Path = EXAMPLES) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """``main(root)``'s module, and a draw from torch's, numpy's and python's global RNGs right after it."""
    module = types.ModuleType(name)
    module.__file__ = str(folder / f"{name}.py")
    sys.modules[name] = module
    try:
        with _fresh(root):
            exec(compile(text, module.__file__, "exec"), module.__dict__)
            trained = module.main(str(root))
            draws = (int(torch.randint(2**30, (1,))), int(np.random.randint(2**30)), random.getrandbits(30))
    finally:
        sys.modules.pop(name, None)
    assert isinstance(trained, torch.nn.Module), f"{name}.main() returned {type(trained).__name__}, not the module"
    return trained, draws


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def differences(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor], atol: float = 0.0) -> list[str]:
    """What differs between two state dicts: missing keys, shapes, values beyond ``atol`` (0: bitwise)."""
    out = [f"{k}: only on one side" for k in sorted(set(a) ^ set(b))]
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if x.shape != y.shape or x.dtype != y.dtype:
            out.append(f"{key}: {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}")
        elif atol == 0.0 and not torch.equal(x, y):
            out.append(f"{key}: max |diff| {(x.double() - y.double()).abs().max().item():.3g} (bitwise expected)")
        elif atol > 0.0 and not torch.allclose(x.double(), y.double(), rtol=0.0, atol=atol):
            out.append(f"{key}: max |diff| {(x.double() - y.double()).abs().max().item():.3g} > {atol}")
    return out


@attrs.frozen
class Outcome:
    """What one run of an example left: the trained weights and the global RNGs' next draws."""

    weights: dict[str, torch.Tensor]
    rng: tuple[int, ...]
    #: what a probe's module recorded of the run (``module.seen``; None for an example)
    seen: object = None


def both(name: str, tmp: Path, folder: Path = EXAMPLES) -> tuple[Outcome, Outcome]:
    """Train example (or probe) ``name`` under Lightning, then switched to interlock."""
    text = source(name, folder)
    out = []
    for side, code in (("lightning", as_lightning(text)), ("interlock", switched(text))):
        trained, draws = _run(code, f"dropin_{name}_{side}", tmp / side, folder)
        out.append(Outcome(weights(trained), draws, getattr(trained, "seen", None)))
    return out[0], out[1]
