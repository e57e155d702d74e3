"""Hardware: which devices exist, and how tensors reach them. No training logic."""

from interlock.accelerators.base import Accelerator, DevicesFlag
from interlock.accelerators.cpu import CPUAccelerator
from interlock.accelerators.cuda import CUDAAccelerator
from interlock.accelerators.mps import MPSAccelerator
from interlock.accelerators.registry import ACCELERATOR_FLAGS, ACCELERATORS, select_accelerator

__all__ = [
    "ACCELERATORS",
    "ACCELERATOR_FLAGS",
    "Accelerator",
    "CPUAccelerator",
    "CUDAAccelerator",
    "DevicesFlag",
    "MPSAccelerator",
    "select_accelerator",
]
