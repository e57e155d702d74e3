"""The CUDA accelerator."""

from __future__ import annotations

from typing import ClassVar

import torch

from interlock.accelerators.base import Accelerator

__all__ = ["CUDAAccelerator"]


class CUDAAccelerator(Accelerator):
    """NVIDIA (or ROCm) GPUs through ``torch.cuda``."""

    name: ClassVar[str] = "cuda"
    backend: ClassVar[str] = "nccl"

    @classmethod
    def is_available(cls) -> bool:
        return bool(torch.cuda.is_available())

    @classmethod
    def device_count(cls) -> int:
        return int(torch.cuda.device_count()) if cls.is_available() else 0

    def setup_device(self, device: torch.device | str) -> None:
        """Make ``device`` the current CUDA device."""
        torch.cuda.set_device(self._check_device(device))

    def synchronize(self, device: torch.device | str | None = None) -> None:
        torch.cuda.synchronize(None if device is None else self._check_device(device))

    def memory_stats(self, device: torch.device | str | None = None) -> dict[str, int]:
        """Tensor memory: ``allocated_bytes``, ``peak_bytes`` (max allocated) and ``reserved_bytes``."""
        dev = None if device is None else self._check_device(device)
        return {
            "allocated_bytes": int(torch.cuda.memory_allocated(dev)),
            "peak_bytes": int(torch.cuda.max_memory_allocated(dev)),
            "reserved_bytes": int(torch.cuda.memory_reserved(dev)),
        }

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        """All float dtypes; ``bfloat16`` only where the GPU supports it."""
        if dtype == torch.bfloat16:
            return bool(torch.cuda.is_bf16_supported())
        return super().supports_dtype(dtype)

    def teardown(self) -> None:
        """Return cached blocks to the driver."""
        if self.is_available():
            torch.cuda.empty_cache()
