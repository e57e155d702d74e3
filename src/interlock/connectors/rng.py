"""Random number generators: seeding (Lightning's ``seed_everything``), isolation, and states for exact resume."""

from __future__ import annotations

import functools
import os
import random
import warnings
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from interlock.core.registry import Action, Registry
from interlock.core.run import Run
from interlock.core.slots import Fill, RngSlot
from interlock.core.updates import SetRunInfo, Update

__all__ = [
    "GLOBAL_SEED_ENV",
    "SEED_WORKERS_ENV",
    "RestoreRNG",
    "get_rng_states",
    "register",
    "seed_everything",
    "seed_workers",
    "set_rng_states",
    "worker_init_function",
    "worker_seeds",
]

GLOBAL_SEED_ENV = "INTERLOCK_GLOBAL_SEED"
"""Set by :func:`seed_everything` (Lightning's ``PL_GLOBAL_SEED``): the seed, inherited by spawned processes."""
SEED_WORKERS_ENV = "INTERLOCK_SEED_WORKERS"
"""Set by :func:`seed_everything` (Lightning's ``PL_SEED_WORKERS``): ``"1"`` when workers get derived seeds."""
_MAX_SEED = 2**32 - 1


def _check_seed(seed: Any, call: str) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"{call}(seed={seed!r}) is invalid: expected an int in [0, 2**32 - 1] (what numpy accepts)")
    return seed


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed python's ``random``, numpy and torch (CPU and CUDA); return the seed. Lightning's meaning.

    ``None`` reads :data:`GLOBAL_SEED_ENV` (set by an earlier call, e.g. in the parent of a spawned
    process) and otherwise seeds 0 with a warning. The seed is stored in :data:`GLOBAL_SEED_ENV`;
    ``workers=True`` also sets :data:`SEED_WORKERS_ENV`, so the DataLoaders the Trainer runs
    (with ``num_workers > 0`` and no ``worker_init_fn`` of their own) give every worker of every
    rank its own seeds derived from the global one (:func:`worker_init_function`). Call it before
    building the model, so the initial weights are seeded too.
    """
    if not isinstance(workers, bool):
        raise ValueError(f"seed_everything(workers={workers!r}) is invalid: expected True or False")
    if seed is None:
        env = os.environ.get(GLOBAL_SEED_ENV)
        if env is None:
            warnings.warn("seed_everything(): no seed given and none in the environment; seeding 0", stacklevel=2)
            seed = 0
        else:
            try:
                seed = int(env)
            except ValueError:
                raise ValueError(
                    f"{GLOBAL_SEED_ENV}={env!r} is not an int seed; unset it or set it to an int in [0, 2**32 - 1]"
                ) from None
    seed = _check_seed(seed, "seed_everything")
    os.environ[GLOBAL_SEED_ENV] = str(seed)
    os.environ[SEED_WORKERS_ENV] = str(int(workers))
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return seed
    np.random.seed(seed)
    return seed


_U64 = (1 << 64) - 1


def worker_seeds(base_seed: int, worker_id: int, rank: int, count: int = 4) -> list[int]:
    """``count`` 64-bit seeds for one worker, derived as Lightning derives them (bit for bit).

    ``(base_seed, worker_id, rank)`` packed into one integer (base seed above bit 32, worker id
    above bit 16), scrambled by MurmurHash3's 64-bit finalizer, then stepped by Knuth's MMIX
    linear congruential generator (``x * 6364136223846793005 + 1 mod 2**64``), one seed a step.
    """
    x = (base_seed << 32) | (worker_id << 16) | rank
    for multiplier in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        x = ((x ^ (x >> 33)) * multiplier) & _U64
    x ^= x >> 33
    seeds = []
    for _ in range(count):
        x = (x * 6364136223846793005 + 1) & _U64
        seeds.append(x)
    return seeds


def worker_init_function(worker_id: int, rank: int = 0) -> None:
    """Seed a DataLoader worker's python, numpy and torch RNGs from its base seed, worker id and rank.

    torch gives each worker ``base_seed + worker_id`` as its torch seed, where the base seed
    comes from the main process's (seeded) torch RNG once per epoch; that alone leaves numpy
    and python identical in every worker and every rank. Here all three are derived from
    ``(base_seed, worker_id, rank)`` as Lightning's ``pl_worker_init_function`` derives them
    (:func:`worker_seeds` for torch and python, numpy's ``SeedSequence`` for numpy), so they
    differ per worker, rank and epoch, repeat when the run is repeated with the same seed, and
    a worker draws the numbers it draws under Lightning.
    """
    import numpy as np

    base_seed = torch.initial_seed() - worker_id
    seeds = worker_seeds(base_seed, worker_id, rank)
    torch.manual_seed(seeds[0])
    random.seed((seeds[1] << 32) | seeds[2])
    np.random.seed(np.random.SeedSequence([base_seed, worker_id, rank]).generate_state(4))


def seed_workers(loader: Any, rank: int = 0) -> None:
    """Give a DataLoader :func:`worker_init_function` when ``seed_everything(workers=True)`` asked for it.

    Only a loader with workers and no ``worker_init_fn`` of its own is changed (as in Lightning).
    """
    if os.environ.get(SEED_WORKERS_ENV) != "1":
        return
    if getattr(loader, "num_workers", 0) > 0 and getattr(loader, "worker_init_fn", False) is None:
        loader.worker_init_fn = functools.partial(worker_init_function, rank=rank)


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
    """Restore what :func:`get_rng_states` captured (its tensors may come from a checkpoint loaded onto a GPU)."""
    version, internal, gauss = states["python"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    torch.set_rng_state(states["torch"].cpu())  # torch takes an RNG state as a CPU ByteTensor only
    if "numpy" in states:
        import numpy as np

        kind, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((kind, keys.cpu().numpy(), int(pos), int(has_gauss), float(cached)))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([state.cpu() for state in states["cuda"]])


@attrs.frozen
class RestoreRNG(Update):
    """Effect: set every global RNG to a checkpoint's states (returned with a restore, applied after re-entry)."""

    states: dict[str, Any] = attrs.field(eq=False)


def register(reg: Registry) -> None:
    """``rng.seed``, ``rng.isolate``/``rng.restore`` and the ``RestoreRNG`` effect."""

    @reg.action("rng.seed")
    def seed(run: Run, params: Mapping[str, Any]) -> Action:
        """Seed python, numpy and torch with Trainer(seed=) (nothing without one)."""

        def act() -> SetRunInfo | None:
            if run.plan.seed is None:
                return None
            keep_workers = os.environ.get(SEED_WORKERS_ENV) == "1"  # set by the user's seed_everything(workers=True)
            seed_everything(_check_seed(run.plan.seed, "Trainer"), workers=keep_workers)
            return SetRunInfo(seed=run.plan.seed)

        return act

    @reg.action("rng.isolate", writes=("rng",))
    def isolate(run: Run, params: Mapping[str, Any]) -> Action:
        """Remember every global RNG state, for ``rng.restore`` (the sanity check's entry, as Lightning isolates it)."""
        return lambda: Fill(RngSlot(get_rng_states()))

    @reg.action("rng.restore", reads=("rng",), writes=("rng",))
    def restore_isolated(run: Run, params: Mapping[str, Any]) -> Action:
        """Put back the RNG states ``rng.isolate`` remembered: what ran in between drew nothing from them."""
        states = run.slot(RngSlot).isolated

        def act() -> Fill | None:
            if states is None:
                return None
            set_rng_states(states)
            return Fill(RngSlot())

        return act

    @reg.effect(RestoreRNG)
    def restore(run: Run) -> Any:
        """Set the global RNGs to the saved states."""
        return lambda update: set_rng_states(update.states)
