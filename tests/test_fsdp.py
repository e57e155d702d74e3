"""FSDP (FSDP2 ``fully_shard``) on 2 CPU ranks over gloo: training, full-state checkpoints, exact resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import _dist_worker as w
from interlock.connectors import checkpoint as ckpt_connector
from interlock.connectors.hardware import resolve_hardware
from interlock.examples.digits import DigitsClassifier
from interlock.plugins.checkpoint_io import TorchCheckpointIO
from interlock.plugins.fsdp import FSDPStrategy

TIMEOUT = 180


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("fsdp")
    cmd = w.torchrun("--nproc-per-node=2", f"--master-port={w.free_port()}", w.WORKER, "fsdp", str(out))
    w.run_all([cmd], out, TIMEOUT)
    return out, [w.load(out, "fsdp", r) for r in (0, 1)]


def test_fsdp_on_two_cpu_ranks_lowers_the_validation_loss(fsdp_run: Any) -> None:
    """Three FSDP epochs on the digits example: the reduced validation loss falls every epoch, equal on both ranks."""
    _, results = fsdp_run
    losses = results[0]["val_losses"]
    assert len(losses) == 3
    assert losses[0] > losses[1] > losses[2]
    assert results[1]["val_losses"] == losses


def test_fsdp_checkpoint_is_an_ordinary_interlock_checkpoint(fsdp_run: Any) -> None:
    """The checkpoint holds full tensors and integer-keyed optimizer state, and restores into a single-device module."""
    out, _ = fsdp_run
    ckpt = TorchCheckpointIO().load_checkpoint(out / "fsdp_final_full.ckpt")
    module = DigitsClassifier(hidden=32)
    assert {k: v.shape for k, v in ckpt["state_dict"].items()} == {k: v.shape for k, v in module.state_dict().items()}
    assert all(type(v) is torch.Tensor for v in ckpt["state_dict"].values())
    optimizer = module.configure_optimizers()["optimizer"]
    state = ckpt_connector.restore(ckpt, module, [optimizer], [], "fsdp_final_full.ckpt")
    assert state.global_step == 24
    assert all(torch.equal(module.state_dict()[k], v) for k, v in ckpt["state_dict"].items())
    assert set(optimizer.state_dict()["state"]) == {0, 1, 2, 3}


def test_fsdp_resume_from_a_mid_run_checkpoint_is_exact(fsdp_run: Any) -> None:
    """Resuming under FSDP from a mid-epoch checkpoint ends with the weights and metrics of the uninterrupted run."""
    out, results = fsdp_run
    io = TorchCheckpointIO()
    full = io.load_checkpoint(out / "fsdp_final_full.ckpt")
    resumed = io.load_checkpoint(out / "fsdp_final_resumed.ckpt")
    for key, value in full["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][key], value, rtol=0, atol=1e-6)
    for r in results:
        assert r["resumed_val_losses"] == pytest.approx(r["val_losses"], abs=1e-6)


def test_fsdp_resume_without_optimizer_tensors_and_weights_after_the_fit(fsdp_run: Any) -> None:
    """Plain SGD (no optimizer tensors) resumes exactly; full weights can be gathered to rank 0 after the fit."""
    _, results = fsdp_run
    sgd = results[0]["sgd"]
    assert sgd["full"].keys() == {"net.0.weight", "net.0.bias", "net.3.weight", "net.3.bias"}
    for key, value in sgd["full"].items():
        torch.testing.assert_close(sgd["resumed"][key], value, rtol=0, atol=1e-6)
    assert results[1]["sgd"] == {"full": {}, "resumed": {}}


def test_fsdp_ranks_exit_with_the_process_group_destroyed_and_its_threads_joined(fsdp_run: Any) -> None:
    """After four FSDP fits (resumes, gathers) each rank's group is freed at exit: no gloo thread outlives it.

    A group left to interpreter finalization keeps its worker threads, and one that then needs
    the GIL kills the rank with SIGABRT after its work is done (seen in CI). Two things held the
    group: the last loss's graph, whose FSDP hooks kept every fit's module alive, and DTensor's caches.
    """
    out, _ = fsdp_run
    for rank in (0, 1):
        threads = w.threads_left(out, "fsdp", rank)
        assert threads, "the rank did not reach its last exit handler"
        assert not [t for t in threads if "gloo" in t], threads


def test_fsdp_resolves_from_flags_and_refuses_16_mixed() -> None:
    """strategy='fsdp' builds FSDPStrategy; precision='16-mixed' raises naming both flags."""
    assert isinstance(resolve_hardware("cpu", 2, "fsdp", "bf16-mixed", {}).strategy, FSDPStrategy)
    with pytest.raises(ValueError, match=r"Trainer\(strategy='fsdp', precision='16-mixed'\)"):
        resolve_hardware("cpu", 2, "fsdp", "16-mixed", {})
