"""Random number generator states: captured and restored for exact resume."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from interlock.core.registry import Action, Registry
from interlock.core.run import Run
from interlock.core.updates import SetRunInfo, Update

__all__ = ["RestoreRNG", "get_rng_states", "register", "seed_everything", "set_rng_states"]


def seed_everything(seed: int) -> None:
    """Seed python, numpy (when installed) and torch (CPU and every CUDA device)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError(f"Trainer(seed={seed!r}) is invalid: expected an int in [0, 2**32)")
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return
    np.random.seed(seed)


def get_rng_states() -> dict[str, Any]:
    """Every global RNG state as plain data (lists and tensors)."""
    version, internal, gauss = random.getstate()
    states: dict[str, Any] = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state()}
    try:
        import numpy as np

        kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        states["numpy"] = [kind, torch.from_numpy(np.array(keys, copy=True)), int(pos), int(has_gauss), float(cached)]
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_states` captured."""
    version, internal, gauss = states["python"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    torch.set_rng_state(states["torch"])
    if "numpy" in states:
        import numpy as np

        kind, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((kind, keys.numpy(), int(pos), int(has_gauss), float(cached)))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


@attrs.frozen
class RestoreRNG(Update):
    """Effect: set every global RNG to a checkpoint's states (returned with a restore, applied after re-entry)."""

    states: dict[str, Any] = attrs.field(eq=False)


def register(reg: Registry) -> None:
    """``rng.seed`` and the ``RestoreRNG`` effect."""

    @reg.action("rng.seed")
    def seed(run: Run, params: Mapping[str, Any]) -> Action:
        """Seed python, numpy and torch with Trainer(seed=) (nothing without one)."""

        def act() -> SetRunInfo | None:
            if run.plan.seed is None:
                return None
            seed_everything(run.plan.seed)
            return SetRunInfo(seed=run.plan.seed)

        return act

    @reg.effect(RestoreRNG)
    def restore(run: Run) -> Any:
        """Set the global RNGs to the saved states."""
        return lambda update: set_rng_states(update.states)
