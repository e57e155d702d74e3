"""The accelerator interface: one kind of hardware, with no training logic."""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from interlock.plugins.precision import apply_to_tensors

__all__ = ["Accelerator", "DevicesFlag"]

DevicesFlag = int | str | Sequence[int]


class Accelerator(ABC):
    """One kind of hardware: availability, device selection, transfer, memory and sync."""

    name: ClassVar[str]
    #: The ``torch.distributed`` backend that suits this hardware.
    backend: ClassVar[str] = "gloo"
    #: Floating dtypes this hardware computes in; other dtypes are accepted.
    floating_dtypes: ClassVar[frozenset[torch.dtype]] = frozenset(
        {torch.float16, torch.bfloat16, torch.float32, torch.float64}
    )

    @classmethod
    @abstractmethod
    def is_available(cls) -> bool:
        """Whether this hardware can be used in this process."""

    @classmethod
    @abstractmethod
    def device_count(cls) -> int:
        """How many devices of this kind are visible (0 when unavailable)."""

    def _max_devices(self) -> int | None:
        """The most devices ``parse_devices`` may select; ``None`` for no limit."""
        return self.device_count()

    def _auto_devices(self) -> list[int]:
        """What ``devices='auto'`` selects: every visible device."""
        return self._count_to_indices(self.device_count() or 1, "'auto'")

    def parse_devices(self, devices: DevicesFlag) -> list[int]:
        """Turn a ``devices`` flag into device indices.

        Accepts a count (``2``, ``"2"``), ``-1``/``"-1"`` or ``"auto"`` for all,
        or indices (``[0, 1]``, ``"0,1"``, ``"1,"``).
        """
        if isinstance(devices, str):
            text = devices.strip().lower()
            if text == "auto":
                return self._auto_devices()
            if "," in text:
                parts = [p.strip() for p in text.split(",")]
                if parts and parts[-1] == "":
                    parts.pop()
                return self._check_indices([self._to_int(p, devices) for p in parts], devices)
            return self._parse_count(self._to_int(text, devices), devices)
        if isinstance(devices, bool):
            raise self._error(devices, "is not a device count")
        if isinstance(devices, numbers.Integral):
            return self._parse_count(int(devices), devices)
        if isinstance(devices, Sequence):
            indices: list[int] = []
            for item in devices:
                if isinstance(item, bool) or not isinstance(item, numbers.Integral):
                    raise self._error(devices, f"contains {item!r}, which is not a device index")
                indices.append(int(item))
            return self._check_indices(indices, devices)
        raise self._error(devices, "is not a count, 'auto', or a list of indices")

    def _error(self, devices: object, why: str) -> ValueError:
        return ValueError(
            f"devices={devices!r} {why}; pass a positive count like 2, -1 or 'auto' for all, "
            f"or indices like [0, 1] or '0,1' (accelerator={self.name!r})"
        )

    def _to_int(self, text: str, original: object) -> int:
        try:
            return int(text)
        except ValueError:
            raise self._error(original, f"has {text!r}, which is not an integer") from None

    def _parse_count(self, count: int, original: object) -> list[int]:
        if count == -1:
            total = self.device_count()
            if total < 1:
                raise self._error(original, f"asks for all {self.name} devices, but none are available")
            return list(range(total))
        if count < 1:
            raise self._error(original, "must be at least 1 (or -1 for all devices)")
        return self._count_to_indices(count, original)

    def _count_to_indices(self, count: int, original: object) -> list[int]:
        limit = self._max_devices()
        if limit is not None and count > limit:
            raise self._error(original, f"asks for {count} {self.name} devices, but only {limit} are available")
        return list(range(count))

    def _check_indices(self, indices: list[int], original: object) -> list[int]:
        if not indices:
            raise self._error(original, "selects no device")
        negative = [i for i in indices if i < 0]
        if negative:
            raise self._error(original, f"has negative index {negative[0]}")
        duplicates = sorted({i for i in indices if indices.count(i) > 1})
        if duplicates:
            raise self._error(original, f"repeats index {duplicates[0]}")
        limit = self._max_devices()
        too_high = [i for i in indices if limit is not None and i >= limit]
        if too_high and limit is not None:  # limit is never None when too_high is not empty
            raise self._error(
                original, f"has index {too_high[0]}, but only {limit} {self.name} devices exist (0..{limit - 1})"
            )
        return indices

    def device(self, index: int = 0) -> torch.device:
        """The ``torch.device`` for device ``index``."""
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"index={index!r} is not a device index; pass an integer >= 0")
        return torch.device(self.name, index)

    def _check_device(self, device: torch.device | str) -> torch.device:
        device = torch.device(device)
        if device.type != self.name:
            raise ValueError(f"device={str(device)!r} is not a {self.name} device; pass one from accelerator.device()")
        return device

    def setup_device(self, device: torch.device | str) -> None:
        """Make ``device`` current for this process (a no-op where there is no such notion)."""
        self._check_device(device)

    def move_to_device(self, batch: Any, device: torch.device | str) -> Any:
        """Move every tensor in ``batch`` (nested dicts, lists, tuples, namedtuples) to ``device``."""
        device = torch.device(device)
        non_blocking = device.type in {"cuda", "mps"}
        return apply_to_tensors(batch, lambda t: t.to(device, non_blocking=non_blocking))

    def synchronize(self, device: torch.device | str | None = None) -> None:  # noqa: B027 - optional hook
        """Wait until queued work on ``device`` has finished."""

    @abstractmethod
    def memory_stats(self, device: torch.device | str | None = None) -> dict[str, int]:
        """Memory use in bytes; always includes ``allocated_bytes``."""

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        """Whether tensors of ``dtype`` can be computed on this hardware."""
        if not dtype.is_floating_point:
            return True
        return dtype in self.floating_dtypes

    def default_backend(self) -> str:
        """The ``torch.distributed`` backend name for this hardware."""
        return self.backend

    def teardown(self) -> None:  # noqa: B027 - optional hook
        """Release cached resources at the end of a run."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
