"""Background (asynchronous) sharded saves: what the loop waits for, what is written, and what a kill leaves."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import _dist_worker as w
from interlock.core.errors import CheckpointError
from interlock.plugins import sharded_io, sharded_writer
from interlock.plugins.checkpoint_io import TorchCheckpointIO
from interlock.plugins.sharded_writer import ShardedCheckpointIO, save_sharded

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """DCP's writes in the worker wait until the returned event is set (the test controls when a save lands)."""
    gate = threading.Event()
    real = sharded_writer.dcp.save

    def slow_save(*args: Any, **kwargs: Any) -> Any:
        assert gate.wait(60), "the test never released the write"
        return real(*args, **kwargs)

    monkeypatch.setattr(sharded_writer.dcp, "save", slow_save)
    return gate


def _saved(target: Path) -> tuple[torch.Tensor, dict[str, Any]]:
    sharded_io.read_manifest(target)  # every file hash-checked
    return sharded_io.load_all(target)["model"]["w"], TorchCheckpointIO().load_checkpoint(target / sharded_io.META)


def test_a_background_save_writes_the_values_of_the_moment_it_was_made(tmp_path: Path, held: threading.Event) -> None:
    """The loop changes the parameters and its state right after save() returns: the checkpoint has the old ones."""
    weights = torch.full((64, 8), 1.0)
    meta = {"state": {"lrs": [0.1]}}
    writer = ShardedCheckpointIO(background=True)
    writer.save(tmp_path / "a.ckpt", {"model": {"w": weights}}, meta, {"rng": None})
    weights.add_(1.0)  # the next optimizer step, in place
    meta["state"]["lrs"][0] = 0.5  # a scheduler step
    held.set()
    writer.wait()
    saved, saved_meta = _saved(tmp_path / "a.ckpt")
    assert torch.equal(saved, torch.full((64, 8), 1.0))
    assert saved_meta["state"]["lrs"] == [0.1]


def test_the_previous_checkpoint_stays_in_place_until_the_background_save_is_sealed(
    tmp_path: Path, held: threading.Event
) -> None:
    """While a save of last.ckpt is in flight, last.ckpt is the previous one, whole; after wait() it is the new one."""
    target = tmp_path / "last.ckpt"
    held.set()
    save_sharded(target, {"model": {"w": torch.zeros(4)}}, {"state": {"i": 0}})
    held.clear()
    writer = ShardedCheckpointIO(background=True)
    writer.save(target, {"model": {"w": torch.ones(4)}}, {"state": {"i": 1}}, {})
    saved, meta = _saved(target)
    assert torch.equal(saved, torch.zeros(4)) and meta["state"] == {"i": 0}
    held.set()
    writer.wait()
    saved, meta = _saved(target)
    assert torch.equal(saved, torch.ones(4)) and meta["state"] == {"i": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_failed_background_save_is_raised_later_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    """A save that cannot write returns at once; wait() raises naming the checkpoint; the old one still loads."""
    target = tmp_path / "ckpts" / "last.ckpt"
    save_sharded(target, {"model": {"w": torch.zeros(4)}}, {"state": {}})
    writer = ShardedCheckpointIO(background=True)
    writer.save(target, {"model": {"w": torch.ones(4)}}, {"state": {"bad": object()}}, {})  # not plain data
    with pytest.raises(CheckpointError, match=r"last\.ckpt not saved: rank 0: .*previous one is kept"):
        writer.wait()
    assert torch.equal(_saved(target)[0], torch.zeros(4))
    assert [p.name for p in target.parent.iterdir()] == ["last.ckpt"]  # the failed save's directory is gone
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    writer = ShardedCheckpointIO(background=True, max_pending=1)
    writer.save(blocked / "x.ckpt", {"model": {"w": torch.ones(4)}}, {"state": {}}, {})
    with pytest.raises(CheckpointError, match=r"x\.ckpt not saved: cannot create"):
        writer.save(target, {"model": {"w": torch.ones(4)}}, {"state": {}}, {})  # the next save waits, raises it
    writer.save(target, {"model": {"w": torch.ones(4)}}, {"state": {}}, {})  # and then works
    writer.wait()
    assert torch.equal(_saved(target)[0], torch.ones(4))


def test_no_more_than_max_pending_saves_are_in_flight(tmp_path: Path, held: threading.Event) -> None:
    """With two saves in flight, a third waits in save() until the oldest is in place."""
    writer = ShardedCheckpointIO(background=True, max_pending=2)
    for i in range(2):
        writer.save(tmp_path / f"{i}.ckpt", {"model": {"w": torch.ones(2)}}, {"state": {}}, {})
    third = threading.Thread(
        target=writer.save, args=(tmp_path / "2.ckpt", {"model": {"w": torch.ones(2)}}, {"state": {}}, {})
    )
    third.start()
    third.join(0.5)
    assert third.is_alive()
    held.set()
    third.join(30)
    assert not third.is_alive()
    writer.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.ckpt", "1.ckpt", "2.ckpt"]


def test_a_replaced_checkpoint_is_removed_only_after_its_replacement_is_in_place(
    tmp_path: Path, held: threading.Event
) -> None:
    """Top-k removal waits behind the save of the new best, and is skipped when that save failed."""
    held.set()
    old, new = tmp_path / "old.ckpt", tmp_path / "new.ckpt"
    save_sharded(old, {"model": {"w": torch.zeros(2)}}, {"state": {}})
    held.clear()
    writer = ShardedCheckpointIO(background=True)
    writer.save(new, {"model": {"w": torch.ones(2)}}, {"state": {}}, {})
    writer.remove(old, replaced_by=new)
    assert sharded_io.is_sharded(old)  # still there: its replacement is not in place yet
    held.set()
    writer.wait()
    assert not old.exists() and sharded_io.is_sharded(new)
    writer.save(tmp_path / "bad.ckpt", {"model": {"w": torch.ones(2)}}, {"state": {"x": object()}}, {})
    writer.remove(new, replaced_by=tmp_path / "bad.ckpt")
    with pytest.raises(CheckpointError):
        writer.wait()
    assert sharded_io.is_sharded(new)  # kept: what would have replaced it was not saved


def test_max_pending_must_be_a_positive_int() -> None:
    """A bad max_pending is refused at once, naming the value."""
    with pytest.raises(ValueError, match=r"max_pending=0"):
        ShardedCheckpointIO(max_pending=0)


_TWO_RANK_SAVER = """
import os, sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from interlock.plugins.sharded_writer import ShardedCheckpointIO
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2,))
weights = distribute_tensor(torch.zeros(512, 1024), mesh, [Shard(0)])
writer, i = ShardedCheckpointIO(background=True), 0
while True:
    i += 1
    writer.save(sys.argv[1], {"model": {"w": weights}}, {"state": {"i": i}}, {"rng": i})
    weights.to_local().fill_(float(i))  # training goes on while the save is written
    if i == 2:
        writer.wait()
        print("saved", flush=True)
"""


def test_a_sigkill_of_either_rank_mid_background_save_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    """Two ranks save last.ckpt in the background over and over; one is SIGKILLed at a random moment: it loads."""
    target = tmp_path / "last.ckpt"
    rng = random.Random(1)
    for attempt in range(4):
        port = w.free_port()
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
        env["MASTER_PORT"] = str(port)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _TWO_RANK_SAVER, str(target)],
                env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            for r in range(2)
        ]
        try:
            assert procs[0].stdout is not None
            assert procs[0].stdout.readline().strip() == b"saved", f"attempt {attempt}: the saver did not start"
            time.sleep(rng.uniform(0.0, 1.5))
            procs[rng.randrange(2)].send_signal(signal.SIGKILL)
        finally:
            time.sleep(0.2)
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        manifest = sharded_io.read_manifest(target)  # every file hash-checked
        assert manifest["world_size"] == 2
        saved, meta = _saved(target)
        i = meta["state"]["i"]
        assert torch.equal(saved, torch.full_like(saved, float(i - 1))), "shards of one save, as they were then"
        for r in range(2):
            assert TorchCheckpointIO().load_checkpoint(target / f"rank{r}.ckpt")["rng"] == i
