"""Seeding: ``seed_everything`` (interlock's, Lightning's meaning) and ``isolate_rng``."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from interlock.connectors.rng import seed_everything

__all__ = ["isolate_rng", "seed_everything"]


@contextmanager
def isolate_rng(include_cuda: bool = True) -> Iterator[None]:
    """Restore python's, numpy's and torch's (and CUDA's) random states on exit."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if include_cuda and torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
