"""DeviceStatsMonitor: log CPU and CUDA memory statistics at Lightning's moments and under its names.

At the start and end of each training, validation (and sanity-check) and test batch, when
Lightning's loggers would update (every ``log_every_n_steps`` training steps; in an evaluation
loop, every ``log_every_n_steps`` batches of it; always once a stop is asked for), it returns
``LogMetrics`` with keys ``DeviceStatsMonitor.<hook>/<stat>``: ``<hook>`` is Lightning's
(``on_train_batch_start``, ``on_validation_batch_end``, ...), ``<stat>`` one of
``torch.cuda.memory_stats()`` on a CUDA device, and on the CPU (or with ``cpu_stats=True``)
``cpu_vm_percent``, ``cpu_percent`` and ``cpu_swap_percent``: from ``psutil`` when it is
installed, else from ``/proc`` (Linux) with psutil's formulas.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from interlock.core.config import TrainerConfig
from interlock.core.events import Event, Listener, listen
from interlock.core.state import TrainerState
from interlock.core.updates import LogMetrics

__all__ = ["DeviceStatsMonitor", "cpu_stats"]

_HOOK = {"sanity": "validation", "val": "validation", "test": "test"}


def _meminfo() -> dict[str, int]:
    with open("/proc/meminfo", encoding="ascii") as f:
        return {line.split(":")[0]: int(line.split()[1]) for line in f if len(line.split()) >= 2}


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot (``/proc/stat``'s first line)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait, as psutil counts them
    total = sum(fields[:8])  # guest time is already in user/nice
    return total - idle, total


class _ProcStats:
    """psutil's ``virtual_memory().percent``, ``cpu_percent()`` and ``swap_memory().percent`` from ``/proc``."""

    def __init__(self) -> None:
        self._last = _cpu_times()

    def __call__(self) -> dict[str, float]:
        mem = _meminfo()
        total = mem.get("MemTotal", 0)
        available = mem.get("MemAvailable", mem.get("MemFree", 0))
        swap_total, swap_free = mem.get("SwapTotal", 0), mem.get("SwapFree", 0)
        busy, all_ = _cpu_times()
        d_busy, d_all = busy - self._last[0], all_ - self._last[1]
        self._last = (busy, all_)
        return {
            "cpu_vm_percent": round(100.0 * (total - available) / total, 1) if total else 0.0,
            "cpu_percent": round(100.0 * d_busy / d_all, 1) if d_all > 0 else 0.0,
            "cpu_swap_percent": round(100.0 * (swap_total - swap_free) / swap_total, 1) if swap_total else 0.0,
        }


def _psutil_stats() -> dict[str, float]:
    import psutil  # type: ignore[import-untyped,unused-ignore]

    return {
        "cpu_vm_percent": float(psutil.virtual_memory().percent),
        "cpu_percent": float(psutil.cpu_percent()),
        "cpu_swap_percent": float(psutil.swap_memory().percent),
    }


def cpu_stats() -> Any:
    """A callable returning the CPU statistics: psutil's, or ``/proc``'s where psutil is missing."""
    try:
        import psutil  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
    except ImportError:
        if not os.path.exists("/proc/stat"):
            raise ModuleNotFoundError(
                "DeviceStatsMonitor reads CPU statistics with psutil, or from /proc on Linux, and this system has "
                "neither: pip install psutil, or pass cpu_stats=False"
            ) from None
        return _ProcStats()
    return _psutil_stats


class DeviceStatsMonitor(Listener):
    """Lightning's ``DeviceStatsMonitor(cpu_stats=None)``: device statistics as metrics around each batch.

    ``cpu_stats``: ``None`` logs the CPU's statistics when the module runs on the CPU and the CUDA
    memory statistics on a GPU; ``True`` adds the CPU's on a GPU; ``False`` logs nothing on the CPU.
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        if cpu_stats is not None and not isinstance(cpu_stats, bool):
            raise ValueError(f"DeviceStatsMonitor(cpu_stats={cpu_stats!r}) must be True, False or None")
        self.cpu_stats = cpu_stats
        self.log_every_n_steps = 50
        self._cpu: Any = None  # the CPU reader (its last /proc sample is a display cache, not run state)
        self._loops: dict[str, str] = {}
        self._step_at_start: int | None = None

    def configure(self, config: TrainerConfig) -> None:
        """Take the Trainer's ``log_every_n_steps`` (Lightning's loggers' cadence)."""
        self.log_every_n_steps = config.log_every_n_steps

    def bind_tags(self, tags: Mapping[str, frozenset[str]]) -> None:
        """Learn which evaluation loop each event belongs to (Lightning's hook names differ by loop)."""
        self._loops = {name: kind for name, t in tags.items() for kind in _HOOK if kind in t}

    # -- handlers -----------------------------------------------------------------------
    @listen("#train_batch_start")
    def on_train_batch_start(self, event: Event, state: TrainerState) -> LogMetrics | None:
        self._step_at_start = state.global_step
        return self._log(event, state, "on_train_batch_start", state.global_step + 1)

    @listen("#train_batch_end")
    def on_train_batch_end(self, event: Event, state: TrainerState) -> LogMetrics | None:
        stepped = state.global_step if self._step_at_start is None else self._step_at_start
        return self._log(event, state, "on_train_batch_end", stepped + 1)

    @listen("#eval_batch_start")
    def on_eval_batch_start(self, event: Event, state: TrainerState) -> LogMetrics | None:
        return self._eval(event, state, "start", state.progress.eval_batch_idx + 1)

    @listen("#eval_batch_end")
    def on_eval_batch_end(self, event: Event, state: TrainerState) -> LogMetrics | None:
        return self._eval(event, state, "end", state.progress.eval_batch_idx)

    def _eval(self, event: Event, state: TrainerState, when: str, ready: int) -> LogMetrics | None:
        kind = _HOOK.get(self._loops.get(event.name, ""))
        return None if kind is None else self._log(event, state, f"on_{kind}_batch_{when}", ready)

    # -- reading and logging ---------------------------------------------------------------
    def _log(self, event: Event, state: TrainerState, hook: str, step: int) -> LogMetrics | None:
        if not self.log_every_n_steps or (step % self.log_every_n_steps and not state.should_stop):
            return None
        device: Any = event.payload.get("device") or torch.device("cpu")
        stats: dict[str, float] = {}
        if device.type == "cuda":
            stats.update(_numbers(torch.cuda.memory_stats(device)))
        if (device.type == "cpu" and self.cpu_stats is not False) or (device.type != "cpu" and self.cpu_stats):
            if self._cpu is None:
                self._cpu = cpu_stats()
            stats.update(self._cpu())
        if not stats:
            return None
        return LogMetrics({f"DeviceStatsMonitor.{hook}/{name}": value for name, value in stats.items()})

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cpu": None}


def _numbers(stats: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in stats.items() if isinstance(v, int | float) and not isinstance(v, bool)}
