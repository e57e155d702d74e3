"""DDP, DDP-spawn, multi-node and the precision matrix, in real processes over gloo on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import _dist_worker as w
from interlock.connectors.hardware import resolve_hardware
from interlock.plugins.ddp import DDPSpawnStrategy, DDPStrategy
from interlock.plugins.precision import PRECISION_FLAGS

TIMEOUT = 180
TORCHRUN_ENV = {
    "TORCHELASTIC_RUN_ID": "x",
    "RANK": "1",
    "GROUP_RANK": "0",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-6) -> float:
    assert a.keys() == b.keys()
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    assert diff <= atol, f"weights differ by {diff}"
    return diff


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    return w.reference_weights(tmp_path_factory.mktemp("reference"))


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The module's real-process runs, started together at the first use of one: they are independent, and one's
    start-up (a launcher importing torch, a rank fitting on one device) leaves a core the others use."""
    out = {name: tmp_path_factory.mktemp(name) for name in ("ddp", "spawn", "precision", "multinode", "teardown")}
    ports: list[int] = []
    for _ in range(3):
        ports.append(w.free_port(*ports))
    nodes = [
        w.torchrun("--nnodes=2", "--nproc-per-node=1", f"--node-rank={node}", "--master-addr=127.0.0.1",
                   f"--master-port={ports[2]}", w.WORKER, "multinode", str(out["multinode"]))
        for node in (0, 1)
    ]  # fmt: skip
    runs = {
        "ddp": [
            w.torchrun("--nproc-per-node=2", f"--master-port={ports[0]}", w.WORKER, "distributed", str(out["ddp"]))
        ],
        "spawn": [[w.sys.executable, w.WORKER, "spawn", str(out["spawn"])]],
        "precision": [
            w.torchrun("--nproc-per-node=2", f"--master-port={ports[1]}", w.WORKER, "precision", str(out["precision"]))
        ],
        "multinode": nodes,  # two torchrun invocations, one process each: one fit on two nodes
        "teardown": [[sys.executable, "-c", RELEASE, str(out["teardown"])]],
    }  # fmt: skip
    handles = {name: (out[name], w.Started(commands, out[name])) for name, commands in runs.items()}
    yield handles
    for _, handle in handles.values():
        handle.stop()


@pytest.fixture(scope="module")
def ddp_run(started: Any) -> tuple[Path, list[dict[str, Any]], str]:
    out, handle = started["ddp"]
    (log,) = handle.wait(TIMEOUT)
    return out, [w.load(out, "distributed", r) for r in (0, 1)], log


@pytest.fixture(scope="module")
def spawn_run(started: Any) -> tuple[dict[str, Any], str]:
    out, handle = started["spawn"]
    (log,) = handle.wait(TIMEOUT)
    return w.load(out, "spawn"), log


@pytest.fixture(scope="module")
def precision_run(started: Any) -> dict[str, Any]:
    out, handle = started["precision"]
    handle.wait(TIMEOUT)
    results = {}
    for rank in (0, 1):
        for key, value in w.load(out, "precision", rank).items():
            results[key if key.endswith("single_device") else f"{key}/rank{rank}"] = value
    return results


def test_torchrun_ddp_ends_with_the_weights_of_one_process_on_the_union_batch(
    ddp_run: Any, reference: dict[str, torch.Tensor]
) -> None:
    """A 2-process torchrun DDP fit equals (1e-6) one process whose batches are the union of the ranks' batches."""
    _, results, _ = ddp_run
    for result in results:
        _close(result["equivalence"]["weights"], reference)


def test_ranks_exit_with_the_process_group_destroyed_and_its_threads_joined(ddp_run: Any) -> None:
    """After DDP fits, validation, test and predict, each rank's group is freed at exit: no gloo thread outlives it."""
    out, _, _ = ddp_run
    for rank in (0, 1):
        threads = w.threads_left(out, "distributed", rank)
        assert threads, "the rank did not reach its last exit handler"
        assert not [t for t in threads if "gloo" in t], threads


def test_setup_line_is_printed_once_per_fit_by_rank_zero_only(ddp_run: Any) -> None:
    """Each fit states the setup in one stderr line, from rank 0 only (9 fits in the run -> 9 lines)."""
    _, _, log = ddp_run
    lines = [line for line in log.splitlines() if line.startswith("interlock: accelerator=")]
    assert len(lines) == 9
    assert "strategy=ddp(world_size=2, processes=torchelastic)" in lines[0]


def test_sampler_shards_each_epoch_and_ranks_agree_on_the_shuffle(ddp_run: Any) -> None:
    """Per epoch the ranks' samples are disjoint and cover the data; shuffle seeds agree across ranks, vary by epoch."""
    _, results, _ = ddp_run
    shards = [r["shards"] for r in results]
    steps = w.N // (2 * w.RANK_BATCH)

    def flat(batches: list[list[int]]) -> list[int]:
        return [i for batch in batches for i in batch]

    for epoch in range(2):
        seen = [flat(s["seen"][epoch * steps : (epoch + 1) * steps]) for s in shards]
        assert not set(seen[0]) & set(seen[1])
        assert sorted(seen[0] + seen[1]) == list(range(w.N))
    assert shards[0]["seeds"] == shards[1]["seeds"]
    assert shards[0]["seeds"][0] != shards[0]["seeds"][1]
    assert flat(shards[0]["seen"][:steps]) != flat(shards[0]["seen"][steps:])


def test_a_prediction_writer_on_each_rank_gets_the_dataset_indices_of_its_own_batches(ddp_run: Any) -> None:
    """Under DDP with a shuffled loader, each rank's write_on_batch_end gets the indices of the samples in its batch,
    write_on_epoch_end all of its batches' indices, and the ranks' shares are disjoint and cover the data."""
    _, results, _ = ddp_run
    shares = []
    for written in (r["writer"] for r in results):
        assert written["batches"], "the rank predicted nothing"
        for given, carried in written["batches"]:
            assert given == carried  # the indices the writer is given are the batch's own
        predictions, indices = written["epoch"]
        # Lightning's shapes: the predictions of the one loader, its batches' indices per loader
        assert indices == [[given for given, _ in written["batches"]]] and predictions == indices[0]
        shares.append([i for given, _ in written["batches"] for i in given])
    assert not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == list(range(w.N))
    assert shares[0] != sorted(shares[0]), "the loader was shuffled"


def test_validation_metric_is_the_mean_over_ranks(ddp_run: Any) -> None:
    """Each rank validates its shard; the logged val metric is the mean over ranks, i.e. over the whole set."""
    _, results, _ = ddp_run
    expected = w.dataset(32, seed=1).tensors[0][:, 0].mean().item()
    local = [r["shards"]["local_val_xmean"] for r in results]
    assert local[0] != pytest.approx(local[1])
    for r in results:
        assert r["shards"]["val_xmean"] == pytest.approx(expected, abs=1e-6)
        # epoch means are reduced in float32 as Lightning does: equal to the mean of the ranks to float32 precision
        assert r["shards"]["val_xmean"] == pytest.approx(sum(local) / 2, rel=1e-6)


def test_a_rank_zero_only_value_logged_by_rank_zero_alone_is_its_own_and_syncs_nothing(ddp_run: Any) -> None:
    """self.log(..., rank_zero_only=True, sync_dist=True) on rank 0 only: rank 0 keeps its local mean, rank 1 has
    none, no collective hangs, and a sync_dist value beside it is still the mean over ranks."""
    _, results, _ = ddp_run
    zero, one = (r["zero_only"] for r in results)
    assert zero["metrics"]["zero_xmean"] == pytest.approx(zero["local"], rel=1e-6)
    assert "zero_xmean" not in one["metrics"]
    assert zero["local"] != pytest.approx(one["local"])
    for r in (zero, one):
        assert r["metrics"]["synced_xmean"] == pytest.approx((zero["local"] + one["local"]) / 2, rel=1e-6)


def test_stop_on_one_rank_stops_every_rank_at_the_same_step(ddp_run: Any) -> None:
    """A Stop on rank 1 only at step 3 (a listener's, or a LightningModule's self.trainer.should_stop = True) ends
    both ranks at the same later step, without a hang.

    Ranks vote without blocking (first 8 batches in, read one batch later), or agree at an epoch end.
    """
    _, results, _ = ddp_run
    for kind in ("stop", "view_stop"):  # a listener's Stop; a LightningModule's self.trainer.should_stop = True
        steps = {r[kind]["global_step"] for r in results}
        assert len(steps) == 1 and 3 < steps.pop() <= 3 + 8 + 1, kind
        assert all(r[kind]["status"] == "finished" for r in results)


def test_only_rank_zero_writes_checkpoints(ddp_run: Any) -> None:
    """Every rank asks to save to its own path; only rank 0's file is written."""
    out, _, _ = ddp_run
    assert (out / "own_rank0.ckpt").exists()
    assert not (out / "own_rank1.ckpt").exists()


def test_resume_under_ddp_is_exact(ddp_run: Any) -> None:
    """Resuming a shuffled, dropout DDP fit from a mid-epoch checkpoint ends with bit-identical weights."""
    _, results, _ = ddp_run
    for r in results:
        full, resumed = r["resume"]["full"], r["resume"]["resumed"]
        assert all(torch.equal(full[k], resumed[k]) for k in full)
    assert all(torch.equal(results[0]["resume"]["full"][k], results[1]["resume"]["full"][k]) for k in full)


def test_several_training_loaders_shard_per_rank_and_resume_exactly_under_ddp(ddp_run: Any) -> None:
    """A dict of two shuffled loaders: each rank sees its shard of each, and a mid-epoch resume ends bitwise."""
    _, results, _ = ddp_run
    for r in results:
        combined = r["combined"]
        assert all(torch.equal(combined["full"][k], combined["resumed"][k]) for k in combined["full"])
        assert combined["seen_resumed"] == combined["seen"][4:]
    (a0, b0), (a1, b1) = (r["combined"]["seen"][0] for r in results)  # batch 0 of each rank: its share of each
    assert not set(a0) & set(a1) and not set(b0) & set(b1)


def test_ddp_spawn_returns_the_run_to_the_caller(spawn_run: Any, reference: dict[str, torch.Tensor]) -> None:
    """ddp_spawn on 2 forked processes: the caller's module has the trained weights and trainer.state the run."""
    result, _ = spawn_run
    _close(result["spawn"]["weights"], reference)
    progress = result["spawn"]["state"]["progress"]
    assert (progress["global_step"], progress["epoch"]) == (16, 1)
    assert result["spawn"]["state"]["status"] == "finished"
    expected = w.dataset(32, seed=1).tensors[0][:, 0].mean().item()
    assert result["validate"]["val_xmean"] == pytest.approx(expected, abs=1e-6)


def test_ddp_without_a_launcher_forks_and_says_so(spawn_run: Any, reference: dict[str, torch.Tensor]) -> None:
    """strategy='ddp', devices=2 in a plain process starts 2 processes by fork, logs it, and trains the same."""
    result, log = spawn_run
    assert "no torchrun/SLURM launcher: starting 2 processes by fork" in log
    _close(result["ddp_fork"]["weights"], reference)


def test_ddp_on_one_device_is_a_group_of_one(spawn_run: Any, tmp_path: Path) -> None:
    """strategy='ddp', devices=1 runs as a process group of one and trains like a single-device run."""
    result, _ = spawn_run
    torch.manual_seed(0)
    module = w.Net()
    w.make_trainer(tmp_path, max_epochs=2, strategy="single_device").fit(
        module, DataLoader(w.dataset(), batch_size=w.RANK_BATCH)
    )
    _close(result["single"]["weights"], w.weights(module))
    assert result["single"]["state"]["progress"]["global_step"] == 32


def test_two_nodes_train_one_fit(started: Any, reference: dict[str, torch.Tensor]) -> None:
    """Two torchrun invocations (--nnodes=2, one process each) train one fit together."""
    out, handle = started["multinode"]
    handle.wait(TIMEOUT)
    for rank in (0, 1):
        result = w.load(out, "multinode", rank)
        assert result["world_size"] == 2
        _close(result["equivalence"]["weights"], reference)


_DTYPES = {
    "32-true": ("float32", "float32"),
    "64-true": ("float64", "float64"),
    "16-true": ("float16", "float16"),
    "bf16-true": ("bfloat16", "bfloat16"),
    "16-mixed": ("float32", "float16"),
    "bf16-mixed": ("float32", "bfloat16"),
}


@pytest.mark.parametrize("flag", list(PRECISION_FLAGS))
def test_precision_matrix_on_cpu(precision_run: dict[str, Any], flag: str) -> None:
    """Each precision, single device and 2-rank DDP: the loss falls; parameters and activations have its dtypes."""
    params, activations = _DTYPES[flag]
    runs = [precision_run[f"{flag}/{run}"] for run in ("single_device", "ddp/rank0", "ddp/rank1")]
    for run in runs:
        assert run["dtypes"] == [(f"torch.{params}", f"torch.{activations}")]
        losses = run["losses"]
        assert sum(losses[-4:]) / 4 < 0.8 * sum(losses[:4]) / 4


@pytest.mark.parametrize(
    ("strategy", "devices", "precision", "environ", "message"),
    [
        ("horovod", 1, "32-true", {}, "strategy='horovod'"),
        ("fsdp", 2, "16-mixed", {}, "Trainer(strategy='fsdp', precision='16-mixed') is not supported"),
        ("ddp_spawn", 2, "32-true", TORCHRUN_ENV, "use strategy='ddp' under an external launcher"),
        ("ddp", 1, "32-true", TORCHRUN_ENV, "started this process as local rank 1"),
        ("single_device", 2, "32-true", {}, "strategy='single_device'"),
    ],
)
def test_invalid_strategy_flags_raise_naming_the_flags(
    strategy: str, devices: int, precision: str, environ: dict[str, str], message: str
) -> None:
    """Unknown strategies, unsupported combinations and device counts a launcher contradicts raise ValueError."""
    with pytest.raises(ValueError, match="Trainer\\(") as info:
        resolve_hardware("cpu", devices, strategy, precision, environ)
    assert message in str(info.value)


def test_strategy_resolution_follows_the_launcher() -> None:
    """'auto' picks ddp under torchrun; ddp takes ranks from it; one device without a launcher is a group of one."""
    hw = resolve_hardware("cpu", 2, "auto", "32-true", TORCHRUN_ENV)
    assert isinstance(hw.strategy, DDPStrategy)
    assert (hw.strategy.world_size, hw.strategy.global_rank, hw.strategy.local_rank) == (2, 1, 1)
    assert not hw.strategy.launches_processes
    assert resolve_hardware("cpu", 1, "auto", "32-true", {}).strategy.name == "single_device"
    single = resolve_hardware("cpu", 1, "ddp", "32-true", {}).strategy
    assert (single.world_size, single.launches_processes) == (1, False)
    spawn = resolve_hardware("cpu", 2, "ddp_spawn", "32-true", {}).strategy
    assert isinstance(spawn, DDPSpawnStrategy)
    assert spawn.launches_processes
    assert (
        "ddp_spawn(world_size=2, processes=fork)" in resolve_hardware("cpu", 2, "ddp_spawn", "32-true", {}).describe()
    )


RELEASE = """
import gc, sys
import torch
from torch.nn.parallel import DistributedDataParallel
import interlock
from interlock.examples.digits import DigitsClassifier, DigitsData

gc.disable()  # what is released must be released by the teardown, not by a collection
data = DigitsData()
trainer = interlock.Trainer(strategy="ddp", devices=1, max_epochs=1, limit_train_batches=2, listeners=[],
                            logger=False, enable_trace=False, enable_progress_bar=False, enable_checkpointing=False,
                            default_root_dir=sys.argv[1], num_sanity_val_steps=0)
trainer.fit(DigitsClassifier(), data.train_dataloader())
alive = [o for o in gc.get_objects() if isinstance(o, DistributedDataParallel)]
print("ALIVE", len(alive))
"""


def test_teardown_releases_the_ddp_wrapper_before_exit(started: Any) -> None:
    """After fit the DDP wrapper is gone (not left for interpreter exit, where its destruction aborted ranks)."""
    _, handle = started["teardown"]
    (output,) = handle.wait(240)  # raises, with the output, unless it exited 0
    assert "ALIVE 0" in output, output


def test_ddp_exit_check_tool_reports_clean_runs() -> None:
    """tools/ddp_exit_check.py runs real 2-rank torchrun fits and reports each exit code (smoke: one FSDP run)."""
    tool = Path(__file__).resolve().parents[1] / "tools" / "ddp_exit_check.py"
    proc = subprocess.run(
        [sys.executable, str(tool), "--runs", "1", "--strategy", "fsdp", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = json.loads(proc.stdout)
    assert report["runs"] == 1 and report["clean"] == 1 and proc.returncode == 0, report
    assert report["strategy"] == "fsdp"
