"""The CPU accelerator: always available; ``devices=N`` means N processes."""

from __future__ import annotations

import os
import sys
from typing import ClassVar

import torch

from interlock.accelerators.base import Accelerator

__all__ = ["CPUAccelerator"]


def _current_rss_bytes() -> int | None:
    """Resident set size from ``/proc`` (Linux); ``None`` where it is not available."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            resident_pages = int(f.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _peak_rss_bytes() -> int | None:
    """Peak resident set size from ``resource`` (POSIX); ``None`` where it is not available."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


class CPUAccelerator(Accelerator):
    """The host CPU. One device; any positive number of processes may share it."""

    name: ClassVar[str] = "cpu"
    backend: ClassVar[str] = "gloo"

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def device_count(cls) -> int:
        return 1

    def _max_devices(self) -> int | None:
        return None

    def _auto_devices(self) -> list[int]:
        return [0]

    def device(self, index: int = 0) -> torch.device:
        """``cpu`` for every index: processes share the host."""
        super().device(index)
        return torch.device("cpu")

    def memory_stats(self, device: torch.device | str | None = None) -> dict[str, int]:
        """Resident memory of this process: ``allocated_bytes`` (current) and ``peak_bytes``."""
        peak = _peak_rss_bytes()
        current = _current_rss_bytes()
        allocated = current if current is not None else (peak or 0)
        stats = {"allocated_bytes": allocated}
        if peak is not None:
            stats["peak_bytes"] = max(peak, allocated)
        return stats
