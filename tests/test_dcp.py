"""Sharded checkpoints (``strategy="fsdp_sharded"``, torch.distributed.checkpoint) and resume on another world size."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import _dist_worker as w
from interlock.core.errors import CheckpointError
from interlock.plugins import sharded_io
from interlock.plugins.sharded_writer import save_sharded

TIMEOUT = 150


def _launch(
    out: Path, ckpt: Path | str, nproc: int, batch: int, phase: str, strategy: str = "fsdp_sharded"
) -> list[list[str]]:
    """One torchrun launch of ``nproc`` processes on this machine."""
    env = [f"RESHARD={phase}", f"RESHARD_BATCH={batch}", f"RESHARD_CKPT={ckpt}", f"RESHARD_STRATEGY={strategy}"]
    runner = w.torchrun(f"--nproc-per-node={nproc}", f"--master-port={w.free_port()}", w.WORKER)
    return [["env", *env, *runner, "reshard", str(out)]]


def _slurm(out: Path, ckpt: Path | str, ntasks: int, batch: int, phase: str, **extra: Any) -> list[list[str]]:
    """A SLURM job of ``ntasks`` nodes with one task each, simulated on loopback: one process per task."""
    port = w.free_port()
    common = [f"RESHARD={phase}", f"RESHARD_BATCH={batch}", f"RESHARD_CKPT={ckpt}", "RESHARD_DEVICES=1"]
    common += [f"SLURM_NTASKS={ntasks}", "SLURM_JOB_ID=4242", "SLURM_JOB_NAME=train", "SLURM_LOCALID=0"]
    common += ["MASTER_ADDR=127.0.0.1", f"MASTER_PORT={port}", *(f"{k}={v}" for k, v in extra.items())]
    return [
        ["env", *common, f"SLURM_PROCID={r}", f"RANK={r}", sys.executable, w.WORKER, "reshard", str(out)]
        for r in range(ntasks)
    ]


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
    """Uninterrupted runs on 2 and 1 ranks that save at step 3; then resumes on 1, 2, 3 ranks.

    Each resume starts as soon as the run it resumes has ended (the others still running): every launch waits
    only for what it reads.
    """
    root = tmp_path_factory.mktemp("dcp")
    two, one = root / "two" / "mid.ckpt", root / "one" / "mid.ckpt"
    ddp = root / "ddp" / "mid.ckpt"
    topk = w.torchrun("--nproc-per-node=2", f"--master-port={w.free_port()}", w.WORKER, "topk", str(root / "topk"))
    saves = {
        "one": w.Started(_launch(root / "one", one, 1, 6, "save"), root),
        "ddp": w.Started(_launch(root / "ddp", ddp, 2, 3, "save", "ddp_sharded"), root),
        "two": w.Started(_slurm(root / "two", two, 2, 3, "save"), root),
        "topk": w.Started([topk], root),
    }
    plan2 = {
        "2to1": (1, 6, two),
        "2to3": (3, 2, two),
        "2to2": (2, 3, two),
        "1to2": (2, 3, one),
        "2to1_small": (1, 3, two),
    }

    def resuming(ckpt: Path) -> list[list[str]]:
        return [
            c for k, (n, b, saved) in plan2.items() if saved == ckpt for c in _launch(root / k, ckpt, n, b, "resume")
        ]

    resumes = {  # what each save's checkpoint is resumed by, launched once that save has ended
        "one": lambda: resuming(one),
        "ddp": lambda: [*_launch(root / "ddp2to1", ddp, 1, 6, "resume", "ddp_sharded"),
                        *_launch(root / "ddp2to2", ddp, 2, 3, "resume", "ddp_sharded")],
        "two": lambda: [
            *resuming(two),
            *_slurm(root / "requeue", "last", 3, 2, "resume", RESHARD_ROOT=root / "two", SLURM_RESTART_COUNT=1),
        ],
    }  # fmt: skip
    later: list[w.Started] = []
    try:
        for name, commands in resumes.items():  # in the order the saves usually end
            saves[name].wait(TIMEOUT)
            later.append(w.Started(commands(), root))
        for handle in [saves["topk"], *later]:
            handle.wait(TIMEOUT)
    finally:
        for handle in [*saves.values(), *later]:
            handle.stop()
    sizes = {"two": 2, "one": 1, "requeue": 3, "ddp": 2, "ddp2to1": 1, "ddp2to2": 2}
    sizes |= {k: n for k, (n, _, _) in plan2.items()}
    found = {k: _results(root / k, n) for k, n in sizes.items()}
    found["root"] = root  # type: ignore[assignment]
    found["topk"] = [w.load(root / "topk", "topk", r) for r in range(2)]
    return found


ORDERS = [("2to1", "two"), ("2to3", "two"), ("2to2", "two"), ("1to2", "one"), ("requeue", "two")]
ORDERS += [("ddp2to1", "ddp"), ("ddp2to2", "ddp")]


@pytest.mark.parametrize(("resumed", "full"), ORDERS)
def test_resume_on_another_world_size_sees_the_uninterrupted_global_order(runs: Any, resumed: str, full: str) -> None:
    """Saved at step 3 on N ranks, resumed on M with the same global batch: every sample once, in the same order."""
    uninterrupted = _global(runs[full])
    assert sorted(uninterrupted) == list(range(48))
    done = 3 * 6  # three global batches of 6 before the save
    assert uninterrupted[:done] + _global(runs[resumed]) == uninterrupted


@pytest.mark.parametrize(
    ("resumed", "full"), [("2to1", "two"), ("2to3", "two"), ("1to2", "one"), ("requeue", "two"), ("ddp2to1", "ddp")]
)
def test_resume_on_another_world_size_keeps_the_weights(runs: Any, resumed: str, full: str) -> None:
    """Keeping the global batch, the resumed run ends with the uninterrupted run's weights (float tolerance)."""
    for key, value in runs[full][0]["weights"].items():
        torch.testing.assert_close(runs[resumed][0]["weights"][key], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("resumed", "full"), [("2to2", "two"), ("ddp2to2", "ddp")])
def test_resume_on_the_same_world_size_is_bitwise(runs: Any, resumed: str, full: str) -> None:
    """2 ranks -> 2 ranks from a sharded checkpoint (fsdp_sharded, ddp_sharded): weights bitwise the uninterrupted's."""
    for key, value in runs[full][0]["weights"].items():
        assert torch.equal(runs[resumed][0]["weights"][key], value), key


def test_ddp_sharded_writes_replicated_tensors_once(runs: Any) -> None:
    """Under ddp_sharded each tensor (the same on every rank) is stored once, and both ranks share the writing."""
    ckpt = runs["root"] / "ddp" / "mid.ckpt"
    assert sharded_io.read_manifest(ckpt)["world_size"] == 2
    stored = sharded_io.SafeReader(ckpt).read_metadata().storage_data
    tensors = [index.fqn for index in stored if index.fqn in sharded_io.tensor_specs(ckpt)]
    assert sorted(tensors) == sorted(set(tensors)) and any(t.startswith("model.") for t in tensors)
    assert {info.relative_path for info in stored.values()} == {"__0_0.distcp", "__1_0.distcp"}


def test_top_k_and_last_keep_sharded_directories_as_they_keep_files(runs: Any) -> None:
    """save_top_k=2 + save_last under fsdp_sharded: the 2 best directories and last.ckpt remain; 'best' validates."""
    result = runs["topk"][0]
    assert result["entries"] == sorted([*result["best_k"], "last.ckpt"])
    assert len(result["best_k"]) == 2 and result["best"] == min(result["best_k"], key=result["best_k"].get)
    for name in result["entries"]:
        sharded_io.read_manifest(Path(result["folder"]) / name)  # whole, every file hash-checked
    assert result["validated"][0]["val_loss"] == pytest.approx(result["best_k"][result["best"]], rel=1e-5)
    assert runs["topk"][1]["validated"] == result["validated"]


def test_a_slurm_requeue_on_more_nodes_resumes_from_last(runs: Any) -> None:
    """A 2-node SLURM job saves last.ckpt (a directory); requeued on 3 nodes, ckpt_path='last' resumes on 3 ranks."""
    assert [r["environment"] for r in runs["two"]] == ["SLURMEnvironment"] * 2
    assert [(r["environment"], r["world_size"]) for r in runs["requeue"]] == [("SLURMEnvironment", 3)] * 3
    assert sharded_io.read_manifest(next((runs["root"] / "two" / "runs").glob("*/checkpoints/last.ckpt")))


def test_a_changed_global_batch_warns_loudly(runs: Any) -> None:
    """2 ranks x 3 resumed on 1 rank x 3: a warning names both global batches; the epoch still sees each sample once."""
    result = runs["2to1_small"][0]
    assert any("global batch 6" in m and "global batch 3" in m for m in result["warnings"]), result["warnings"]
    assert not any("global batch" in m for m in runs["2to1"][0]["warnings"])
    seen = [i for batch in result["seen"] for i in batch]
    assert sorted(_global(runs["two"])[:18] + seen) == list(range(48))


def test_a_sharded_checkpoint_is_a_complete_hashed_directory(runs: Any) -> None:
    """Each rank wrote its shards and RNG file; the manifest hashes every file; a changed byte is refused at load."""
    ckpt = runs["root"] / "copy.ckpt"
    shutil.copytree(runs["root"] / "two" / "mid.ckpt", ckpt)
    manifest = sharded_io.read_manifest(ckpt)
    assert manifest["world_size"] == 2
    assert {".metadata", "meta.ckpt", "rank0.ckpt", "rank1.ckpt", "__0_0.distcp", "__1_0.distcp"} <= set(
        manifest["files"]
    )
    assert not [p for p in (runs["root"] / "two").iterdir() if p.name.startswith(".")]  # no temporary directory left
    shard = ckpt / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"__1_0.distcp does not match its SHA-256"):
        sharded_io.read_manifest(ckpt)


class _Boom:
    def __reduce__(self) -> Any:
        return (os.system, ("touch pwned",))


def test_loading_never_executes_code_from_a_hostile_directory(tmp_path: Path, monkeypatch: Any) -> None:
    """A .metadata that pickles a call, and a stored value that pickles one, are refused; nothing runs."""
    module = torch.nn.Linear(3, 2)
    target = tmp_path / "x.ckpt"
    save_sharded(target, {"model": module.state_dict(), "extra": [1, 2]}, {"state": {}})
    monkeypatch.chdir(tmp_path)
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
        sharded_io.tensor_specs(target)
    assert not (tmp_path / "pwned").exists()


def test_inspect_and_convert_a_sharded_checkpoint(runs: Any, tmp_path: Path, capsys: Any) -> None:
    """inspect prints a directory without a model; convert makes a file a single-device run restores, and back."""
    from interlock.cli.main import main
    from interlock.connectors import checkpoint as ckpt_connector
    from interlock.plugins.checkpoint_io import TorchCheckpointIO

    src = runs["root"] / "two" / "mid.ckpt"
    assert main(["inspect", str(src)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["header"]["world_size"] == 2 and shown["global_step"] == 3
    assert shown["model"]["net.0.weight"] == [[8, w.FEATURES], "float32"]
    assert main(["convert", str(src), str(tmp_path / "one.ckpt"), "--to", "file"]) == 0
    single = TorchCheckpointIO().load_checkpoint(tmp_path / "one.ckpt")
    module = w.Net(momentum=0.9)
    optimizer = module.configure_optimizers()
    state = ckpt_connector.restore(single, module, [optimizer], [], "one.ckpt")
    assert state.global_step == 3 and set(optimizer.state_dict()["state"]) == {0, 1, 2, 3}
    full = sharded_io.load_all(src)["model"]
    assert all(torch.equal(module.state_dict()[k], v) for k, v in full.items())
    assert main(["convert", str(tmp_path / "one.ckpt"), str(tmp_path / "back.ckpt"), "--to", "sharded"]) == 0
    back = sharded_io.load_all(tmp_path / "back.ckpt")
    assert all(torch.equal(back["model"][k], v) for k, v in full.items())
    assert sharded_io.read_manifest(tmp_path / "back.ckpt")["world_size"] == 1


_SAVER = """
import sys, torch
from interlock.plugins.sharded_writer import save_sharded
target, i = sys.argv[1], 0
sys.stdin.readline()  # started ahead of its turn: imports done, it waits for the go
while True:
    i += 1
    tensors = {"model": {"w": torch.full((256, 1024), float(i))}}
    save_sharded(target, tensors, {"state": {"i": i}})
    print(i, flush=True)
"""


def test_a_sigkill_mid_save_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    """A process saving the same sharded checkpoint over and over is SIGKILLed at random moments: it always loads."""
    import random
    import subprocess
    import time

    target = tmp_path / "last.ckpt"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}

    def saver() -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-c", _SAVER, str(target)]
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    delays = random.Random(0).sample([0.05 * k for k in range(1, 30)], 4)
    ahead = saver()  # each saver imports while its predecessor runs; one saver writes at a time
    try:
        for n, delay in enumerate(delays):
            proc, ahead = ahead, (saver() if n + 1 < len(delays) else None)
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            assert proc.stdout.readline()  # one save is complete
            time.sleep(delay)
            proc.kill()
            proc.wait()
            manifest = sharded_io.read_manifest(target)  # every file hash-checked
            assert manifest["world_size"] == 1
            w_ = sharded_io.load_all(target)["model"]["w"]
            assert torch.equal(w_, torch.full_like(w_, w_[0, 0].item()))
    finally:
        if ahead is not None:
            ahead.kill()
            ahead.wait()
    tensors = {"model": {"w": torch.zeros(1)}}
    save_sharded(target, tensors, {"state": {}})
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # the killed saves' leftovers are gone


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 60),
    saved=st.tuples(st.integers(1, 4), st.integers(1, 5)),
    now=st.tuples(st.integers(1, 4), st.integers(1, 5)),
    steps=st.integers(0, 20),
    seed=st.integers(0, 2**31),
)
def test_reposition_continues_the_global_order_on_any_layout(
    size: int, saved: tuple[int, int], now: tuple[int, int], steps: int, seed: int
) -> None:
    """Saved after k global batches of N x B, resumed as M x B': the ranks together take the rest of the order once."""
    import warnings

    from torch.utils.data import DataLoader

    from interlock.connectors.data import PositionSampler, prepare_loader, reposition

    (n, b), (m, b2) = saved, now
    consumed = min(steps * n * b, (size // (n * b)) * n * b)  # whole global batches the saved run finished
    order = PositionSampler(size, True)
    order.seed = seed
    full = order.order()
    data = {"seed": seed, "world_size": n, "batch_size": b}
    loaders = [prepare_loader(DataLoader(w.dataset(size), batch_size=b2, shuffle=True), m, r) for r in range(m)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moved, batch_idx = reposition(data, consumed // (n * b), m, loaders[0])
    assert bool(caught) == (n * b != m * b2 and (n, b) != (m, b2))
    if (n, b) == (m, b2):
        assert moved == data
        return
    assert batch_idx == consumed // (m * b2)
    taken = []
    for loader in loaders:
        sampler = loader.sampler
        sampler.seed, sampler.skip = seed, moved["skip"]
        taken.append(list(sampler))
    rest = full[consumed:]
    dealt = [i for j in range(max(map(len, taken), default=0)) for t in taken if j < len(t) for i in [t[j]]]
    assert dealt[: len(rest)] == rest  # the global order continues; only DistributedSampler-style padding follows
