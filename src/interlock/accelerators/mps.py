"""The Apple-silicon MPS accelerator."""

from __future__ import annotations

from typing import ClassVar

import torch

from interlock.accelerators.base import Accelerator

__all__ = ["MPSAccelerator"]


class MPSAccelerator(Accelerator):
    """The single Metal GPU of an Apple-silicon Mac."""

    name: ClassVar[str] = "mps"
    backend: ClassVar[str] = "gloo"
    floating_dtypes: ClassVar[frozenset[torch.dtype]] = frozenset({torch.float16, torch.bfloat16, torch.float32})

    @classmethod
    def is_available(cls) -> bool:
        return bool(torch.backends.mps.is_available())

    @classmethod
    def device_count(cls) -> int:
        return 1 if cls.is_available() else 0

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        """No float64 (nor complex128) on MPS."""
        if dtype == torch.complex128:
            return False
        return super().supports_dtype(dtype)

    def synchronize(self, device: torch.device | str | None = None) -> None:
        if device is not None:
            self._check_device(device)
        torch.mps.synchronize()

    def memory_stats(self, device: torch.device | str | None = None) -> dict[str, int]:
        """``allocated_bytes`` held by tensors and ``driver_allocated_bytes`` held by the Metal driver."""
        if device is not None:
            self._check_device(device)
        return {
            "allocated_bytes": int(torch.mps.current_allocated_memory()),
            "driver_allocated_bytes": int(torch.mps.driver_allocated_memory()),
        }

    def teardown(self) -> None:
        """Return cached blocks to the driver."""
        if self.is_available():
            torch.mps.empty_cache()
