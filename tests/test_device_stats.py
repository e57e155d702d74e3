"""DeviceStatsMonitor: CPU statistics logged at Lightning's moments, under Lightning's names."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from _lightning_twin import LitTwin, Twin, lightning_trainer, loader
from conftest import only
from interlock.listeners import DeviceStatsMonitor
from interlock.listeners.device_stats import cpu_stats

pl = pytest.importorskip("pytorch_lightning")
FAKE = {"cpu_vm_percent": 1.0, "cpu_percent": 2.0, "cpu_swap_percent": 3.0}


class Recording(DeviceStatsMonitor):
    """Keeps the key of every metric it logs, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[str] = []

    def _log(self, event: Any, state: Any, hook: str, step: int) -> Any:
        out = super()._log(event, state, hook, step)
        if out is not None:
            self.logged.extend(out.metrics)
        return out


def lightning_keys(tmp_path: Path, monkeypatch: Any, every: int) -> list[str]:
    """The keys Lightning's DeviceStatsMonitor sends its loggers (psutil faked: it is not installed here)."""
    from pytorch_lightning.accelerators import cpu as pl_cpu
    from pytorch_lightning.callbacks import device_stats_monitor

    monkeypatch.setattr(device_stats_monitor, "_PSUTIL_AVAILABLE", True)
    monkeypatch.setattr(pl_cpu, "get_cpu_stats", lambda: dict(FAKE))
    keys: list[str] = []

    class Keys(pl.loggers.logger.Logger):  # type: ignore[misc]
        name, version = "keys", 0

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            keys.extend(k for k in metrics if k.startswith("DeviceStatsMonitor"))

        def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
            pass

    trainer = lightning_trainer(
        tmp_path / "pl", max_epochs=2, log_every_n_steps=every, callbacks=[pl.callbacks.DeviceStatsMonitor()]
    )
    trainer.loggers = [Keys()]
    trainer.fit(LitTwin(), loader(8, batch_size=2), loader(6, batch_size=2))
    trainer.test(LitTwin(), loader(6, batch_size=2))
    return keys


@pytest.mark.parametrize("every", [1, 2, 3])
def test_the_moments_and_names_equal_lightnings(tmp_path: Path, monkeypatch: Any, every: int) -> None:
    """Train, sanity, validation and test batches log the same keys, in the same order, as Lightning's."""
    listener = Recording()
    trainer = interlock.Trainer(
        max_epochs=2, log_every_n_steps=every, default_root_dir=tmp_path, accelerator="cpu", **only(listener)
    )
    trainer.fit(Twin(), loader(8, batch_size=2), loader(6, batch_size=2))
    trainer.test(Twin(), loader(6, batch_size=2))
    theirs = lightning_keys(tmp_path, monkeypatch, every)
    assert theirs and listener.logged == theirs
    assert "DeviceStatsMonitor.on_test_batch_end/cpu_percent" in trainer.state.metrics


def test_cpu_statistics_are_percentages_from_proc() -> None:
    """Without psutil the readings come from /proc and are percentages."""
    if "psutil" in sys.modules or not Path("/proc/stat").exists():
        pytest.skip("reads /proc on Linux without psutil")
    read = cpu_stats()
    sum(i * i for i in range(200_000))  # some CPU time between the two samples
    stats = read()
    assert set(stats) == set(FAKE)
    assert all(0.0 <= v <= 100.0 for v in stats.values()), stats
    assert stats["cpu_vm_percent"] > 0.0  # this process uses memory


def test_psutil_is_used_when_installed(monkeypatch: Any) -> None:
    """With psutil importable its virtual memory, CPU and swap percentages are logged."""
    fake = types.ModuleType("psutil")
    fake.virtual_memory = lambda: types.SimpleNamespace(percent=11.5)  # type: ignore[attr-defined]
    fake.cpu_percent = lambda: 22.5  # type: ignore[attr-defined]
    fake.swap_memory = lambda: types.SimpleNamespace(percent=33.5)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "psutil", fake)
    assert cpu_stats()() == {"cpu_vm_percent": 11.5, "cpu_percent": 22.5, "cpu_swap_percent": 33.5}


def test_cpu_stats_false_logs_nothing_on_the_cpu(tmp_path: Path) -> None:
    """cpu_stats=False on the CPU logs no statistic; a non-bool is refused."""
    trainer = interlock.Trainer(
        max_epochs=1,
        log_every_n_steps=1,
        accelerator="cpu",  # on a GPU machine "auto" would pick CUDA, whose statistics are logged
        default_root_dir=tmp_path,
        **only(DeviceStatsMonitor(cpu_stats=False)),
    )
    trainer.fit(Twin(), loader(4, batch_size=2))
    assert not [k for k in trainer.state.metrics if k.startswith("DeviceStatsMonitor")]
    with pytest.raises(ValueError, match="cpu_stats='yes'"):
        DeviceStatsMonitor(cpu_stats="yes")  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_memory_statistics_on_a_gpu(tmp_path: Path) -> None:
    """On a GPU the torch.cuda.memory_stats() keys are logged."""
    trainer = interlock.Trainer(
        max_epochs=1,
        log_every_n_steps=1,
        accelerator="cuda",
        devices=1,
        default_root_dir=tmp_path,
        **only(DeviceStatsMonitor()),
    )
    trainer.fit(Twin(), loader(4, batch_size=2))
    assert "DeviceStatsMonitor.on_train_batch_end/allocated_bytes.all.current" in trainer.state.metrics
