"""Accelerators by name, and resolution of the ``accelerator`` flag."""

from __future__ import annotations

from interlock.accelerators.base import Accelerator
from interlock.accelerators.cpu import CPUAccelerator
from interlock.accelerators.cuda import CUDAAccelerator
from interlock.accelerators.mps import MPSAccelerator

__all__ = ["ACCELERATORS", "ACCELERATOR_FLAGS", "select_accelerator"]

ACCELERATORS: dict[str, type[Accelerator]] = {
    CPUAccelerator.name: CPUAccelerator,
    CUDAAccelerator.name: CUDAAccelerator,
    MPSAccelerator.name: MPSAccelerator,
}

#: Every accepted string: the registered names plus ``"auto"`` and ``"gpu"``.
ACCELERATOR_FLAGS: tuple[str, ...] = ("auto", "cpu", "cuda", "gpu", "mps")


def _choices() -> str:
    return ", ".join(repr(f) for f in sorted({*ACCELERATOR_FLAGS, *ACCELERATORS}))


def select_accelerator(flag: str | Accelerator | type[Accelerator]) -> Accelerator:
    """Resolve ``accelerator=`` to an instance.

    ``"auto"`` picks CUDA, then MPS, then CPU; ``"gpu"`` picks CUDA or MPS. A named
    accelerator that is not available raises instead of silently falling back.
    """
    if isinstance(flag, Accelerator):
        return flag
    if isinstance(flag, type) and issubclass(flag, Accelerator):
        return select_accelerator(flag())
    if not isinstance(flag, str):
        raise ValueError(f"accelerator={flag!r} is not supported; choose one of {_choices()} or pass an Accelerator")
    name = flag.strip().lower()
    if name == "auto":
        for candidate in (CUDAAccelerator, MPSAccelerator):
            if candidate.is_available():
                return candidate()
        return CPUAccelerator()
    if name == "gpu":
        for candidate in (CUDAAccelerator, MPSAccelerator):
            if candidate.is_available():
                return candidate()
        raise ValueError(
            f"accelerator={flag!r} was requested, but neither CUDA nor MPS is available on this machine; "
            "use accelerator='cpu' or 'auto'"
        )
    if name not in ACCELERATORS:
        raise ValueError(f"accelerator={flag!r} is not supported; choose one of {_choices()}")
    cls = ACCELERATORS[name]
    if not cls.is_available():
        raise ValueError(
            f"accelerator={flag!r} was requested, but {name} is not available on this machine; "
            "use accelerator='cpu' or 'auto'"
        )
    return cls()
