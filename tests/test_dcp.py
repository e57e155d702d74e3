"""Sharded checkpoints (``strategy="fsdp_sharded"``, torch.distributed.checkpoint) and resume on another world size."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

import _dist_worker as w
from interlock.core.errors import CheckpointError
from interlock.plugins import sharded_io

TIMEOUT = 150


def _launch(out: Path, ckpt: Path, nproc: int, batch: int, phase: str) -> list[str]:
    env = f"RESHARD={phase} RESHARD_BATCH={batch} RESHARD_CKPT={ckpt}"
    runner = " ".join(w.torchrun(f"--nproc-per-node={nproc}", f"--master-port={w.free_port()}", w.WORKER))
    return ["sh", "-c", f"{env} {runner} reshard {out}"]


def _results(out: Path, nproc: int) -> list[dict[str, Any]]:
    return [w.load(out, "reshard", r) for r in range(nproc)]


def _global(results: list[dict[str, Any]]) -> list[int]:
    """The global order of sample ids: per step, per position in the rank's batch, per rank (DistributedSampler)."""
    seq: list[int] = []
    for step in zip(*(r["seen"] for r in results), strict=True):
        for i in range(len(step[0])):
            seq.extend(batch[i] for batch in step if i < len(batch))
    return seq


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Uninterrupted runs on 2 and 1 ranks that save at step 3; then resumes on 1, 2, 3 ranks."""
    root = tmp_path_factory.mktemp("dcp")
    plan1 = {"two": (2, 3, root / "two" / "mid.ckpt"), "one": (1, 6, root / "one" / "mid.ckpt")}
    w.run_all([_launch(root / k, c, n, b, "save") for k, (n, b, c) in plan1.items()], root, TIMEOUT)
    two, one = plan1["two"][2], plan1["one"][2]
    plan2 = {
        "2to1": (1, 6, two),
        "2to3": (3, 2, two),
        "2to2": (2, 3, two),
        "1to2": (2, 3, one),
        "2to1_small": (1, 3, two),
    }
    w.run_all([_launch(root / k, c, n, b, "resume") for k, (n, b, c) in plan2.items()], root, TIMEOUT)
    found = {k: _results(root / k, n) for k, (n, _, _) in {**plan1, **plan2}.items()}
    found["root"] = root  # type: ignore[assignment]
    return found


@pytest.mark.parametrize(("resumed", "full"), [("2to1", "two"), ("2to3", "two"), ("2to2", "two"), ("1to2", "one")])
def test_resume_on_another_world_size_sees_the_uninterrupted_global_order(runs: Any, resumed: str, full: str) -> None:
    """Saved at step 3 on N ranks, resumed on M with the same global batch: every sample once, in the same order."""
    uninterrupted = _global(runs[full])
    assert sorted(uninterrupted) == list(range(48))
    done = 3 * 6  # three global batches of 6 before the save
    assert uninterrupted[:done] + _global(runs[resumed]) == uninterrupted


@pytest.mark.parametrize(("resumed", "full"), [("2to1", "two"), ("2to3", "two"), ("1to2", "one")])
def test_resume_on_another_world_size_keeps_the_weights(runs: Any, resumed: str, full: str) -> None:
    """Keeping the global batch, the resumed run ends with the uninterrupted run's weights (float tolerance)."""
    for key, value in runs[full][0]["weights"].items():
        torch.testing.assert_close(runs[resumed][0]["weights"][key], value, rtol=1e-5, atol=1e-6)


def test_resume_on_the_same_world_size_is_bitwise(runs: Any) -> None:
    """2 ranks -> 2 ranks from a sharded checkpoint: the final weights are bitwise the uninterrupted run's."""
    for key, value in runs["two"][0]["weights"].items():
        assert torch.equal(runs["2to2"][0]["weights"][key], value), key


def test_a_changed_global_batch_warns_loudly(runs: Any) -> None:
    """2 ranks x 3 resumed on 1 rank x 3: a warning names both global batches; the epoch still sees each sample once."""
    result = runs["2to1_small"][0]
    assert any("global batch 6" in m and "global batch 3" in m for m in result["warnings"]), result["warnings"]
    assert not any("global batch" in m for m in runs["2to1"][0]["warnings"])
    seen = [i for batch in result["seen"] for i in batch]
    assert sorted(_global(runs["two"])[:18] + seen) == list(range(48))


def test_a_sharded_checkpoint_is_a_complete_hashed_directory(runs: Any) -> None:
    """Each rank wrote its shards and RNG file; the manifest hashes every file; a changed byte is refused at load."""
    ckpt = runs["root"] / "two" / "mid.ckpt"
    manifest = sharded_io.read_manifest(ckpt)
    assert manifest["world_size"] == 2
    assert {".metadata", "meta.ckpt", "rank0.ckpt", "rank1.ckpt", "__0_0.distcp", "__1_0.distcp"} <= set(
        manifest["files"]
    )
    assert not [p for p in ckpt.parent.iterdir() if p.name.startswith(".")]  # no temporary directory left
    shard = ckpt / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"__1_0.distcp does not match its SHA-256"):
        sharded_io.read_manifest(ckpt)


class _Boom:
    def __reduce__(self) -> Any:
        return (os.system, ("touch pwned",))


def test_loading_never_executes_code_from_a_hostile_directory(tmp_path: Path) -> None:
    """A .metadata that pickles a call, and a stored value that pickles one, are refused; nothing runs."""
    module = torch.nn.Linear(3, 2)
    target = tmp_path / "x.ckpt"
    sharded_io.save_sharded(
        target, {"model": module.state_dict(), "extra": [1, 2]}, {"state": {}}, {}, 0, 1, lambda x: x, lambda: None
    )
    os.chdir(tmp_path)
    # the stored non-tensor value replaced by a pickled call
    shard = target / "__0_0.distcp"
    blob = shard.read_bytes()
    hostile = io.BytesIO()
    torch.save(_Boom(), hostile)
    metadata = pickle.loads((target / ".metadata").read_bytes())
    info = metadata.storage_data
    key = next(k for k in info if k.fqn == "extra")
    start = info[key].offset
    new = blob[:start] + hostile.getvalue() + blob[start + info[key].length :]
    info[key].length = len(hostile.getvalue())
    shard.write_bytes(new)
    (target / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match="not plain data"):
        sharded_io.load_tensors(target, {"model": module.state_dict(), "extra": None})
    (target / ".metadata").write_bytes(pickle.dumps(_Boom()))
    with pytest.raises(CheckpointError, match="os.system|posix.system"):
        sharded_io.tensor_shapes(target)
    assert not (tmp_path / "pwned").exists()
