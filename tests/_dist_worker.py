"""Scenarios run in real processes by tests/test_ddp.py and tests/test_fsdp.py.

``python tests/_dist_worker.py SCENARIO OUT_DIR`` (under ``torch.distributed.run`` for the
distributed ones). Each process saves what it observed to ``OUT_DIR/SCENARIO_rank<R>.pt``;
the tests read those files. Nothing here asserts: the tests do.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock
from interlock.examples.digits import DigitsClassifier, DigitsData
from interlock.plugins.precision import PRECISION_FLAGS

N, FEATURES, RANK_BATCH = 64, 4, 4
WORKER = str(Path(__file__).resolve())


# -- launching (used by the tests) -------------------------------------------------------------------


def free_port(*taken: int) -> int:
    """A port free now on 127.0.0.1, none of ``taken`` (ports chosen for launches not started yet)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


class Started:
    """Commands started at once, each in its own session; ``wait`` collects them (``run_all`` in two halves)."""

    def __init__(self, commands: list[list[str]], cwd: Path) -> None:
        self.commands = commands
        self.procs = [
            subprocess.Popen(
                cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
            )
            for cmd in commands
        ]

    def wait(self, timeout: float) -> list[str]:
        """Each one's stdout+stderr. Raise on a failure or after ``timeout`` seconds (from this call)."""
        outputs = []
        try:
            for proc in self.procs:
                outputs.append(proc.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            outputs.append("(timed out)")
        finally:
            self.stop()
        failed = [i for i, proc in enumerate(self.procs) if proc.returncode != 0]
        if failed:
            raise AssertionError(f"{[self.commands[i] for i in failed]} failed:\n" + "\n".join(outputs)[-6000:])
        return outputs

    def stop(self) -> None:
        """Kill whatever is still running (with everything it started)."""
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run_all(commands: list[list[str]], cwd: Path, timeout: float) -> list[str]:
    """Run the commands at once; each one's stdout+stderr. Raise on a failure or after ``timeout`` seconds."""
    return Started(commands, cwd).wait(timeout)


def threads_left(out: Path, scenario: str, rank: int) -> list[str]:
    """The threads a rank still had at exit, after interlock destroyed the process group (``main``)."""
    names = (out / f"{scenario}_threads_rank{rank}.txt").read_text().split()
    if names == ["(no", "/proc)"]:
        pytest.skip("no /proc here to list a process's threads")
    return names


def load(out: Path, scenario: str, rank: int = 0) -> Any:
    return torch.load(out / f"{scenario}_rank{rank}.pt", weights_only=False)


def dataset(n: int = N, seed: int = 0) -> TensorDataset:
    """Features, a label, and each sample's index (so a run can record what it saw)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long(), torch.arange(n))


class Net(interlock.Module):
    """A small MLP that records the sample indices it trains on and its local validation sums."""

    def __init__(self, dropout: float = 0.0, momentum: float = 0.0) -> None:
        super().__init__()
        self.momentum = momentum
        self.net = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(), torch.nn.Dropout(dropout), torch.nn.Linear(8, 2)
        )
        self.seen: list[list[int]] = []
        self.val_sums = [0.0, 0.0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, idx = batch
        self.seen.append(idx.tolist())
        return torch.nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y, _ = batch
        self.val_sums[0] += float(x[:, 0].sum())
        self.val_sums[1] += len(x)
        return {"loss": torch.nn.functional.cross_entropy(self(x), y), "xmean": x[:, 0].mean()}

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=self.momentum)


def make_trainer(root: Path, **kwargs: Any) -> interlock.Trainer:
    kwargs.setdefault("num_sanity_val_steps", 0)
    kwargs.setdefault("listeners", [])
    bare = {"logger": False, "enable_trace": False, "enable_progress_bar": False, "enable_checkpointing": False}
    return interlock.Trainer(accelerator="cpu", default_root_dir=root, **{**bare, **kwargs})


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def reference_weights(root: Path) -> dict[str, torch.Tensor]:
    """One process whose batch is the union of the two ranks' batches (sequential order), same init."""
    torch.manual_seed(0)
    module = Net()
    trainer = make_trainer(root, max_epochs=2, strategy="single_device")
    trainer.fit(module, DataLoader(dataset(), batch_size=2 * RANK_BATCH))
    return weights(module)


# -- scenarios -------------------------------------------------------------------------------------


def equivalence(out: Path, strategy: str = "ddp", devices: int = 2) -> dict[str, Any]:
    """Fit on 2 ranks, batch RANK_BATCH each, no shuffle: the final weights."""
    torch.manual_seed(0)
    module = Net()
    trainer = make_trainer(out, max_epochs=2, strategy=strategy, devices=devices)
    trainer.fit(module, DataLoader(dataset(), batch_size=RANK_BATCH))
    return {"weights": weights(module), "state": trainer.state.to_dict()}


def distributed(out: Path) -> dict[str, Any]:
    """Sharding, metric reduction, Stop on one rank, checkpoints by rank 0, exact resume."""
    r = rank()
    result: dict[str, Any] = {"equivalence": equivalence(out)}

    # shards and reduced metrics
    torch.manual_seed(0)
    module = Net()
    trainer = make_trainer(out, max_epochs=2, seed=3, strategy="ddp", devices=2)
    seeds: list[int] = []
    trainer.on("fit.train.epoch_end", lambda e, s: seeds.append(s.data["seed"]))
    val = dataset(32, seed=1)
    trainer.fit(module, DataLoader(dataset(), batch_size=RANK_BATCH, shuffle=True), DataLoader(val, batch_size=4))
    result["shards"] = {
        "seen": module.seen,
        "seeds": seeds,
        "val_xmean": trainer.state.metrics["val_xmean"],
        "local_val_xmean": module.val_sums[0] / module.val_sums[1],
    }

    # self.log(rank_zero_only=True) from rank 0 alone is never synced (no collective waits for rank 1)
    class ZeroOnly(Net):
        def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
            out = super().validation_step(batch, batch_idx)
            if r == 0:
                self.log("zero_xmean", out["xmean"], rank_zero_only=True, sync_dist=True)
            self.log("synced_xmean", out["xmean"], sync_dist=True)
            return out

    torch.manual_seed(0)
    zero = ZeroOnly()
    trainer = make_trainer(out, max_epochs=1, strategy="ddp", devices=2)
    trainer.fit(zero, DataLoader(dataset(), batch_size=RANK_BATCH), DataLoader(val, batch_size=4))
    result["zero_only"] = {"metrics": dict(trainer.state.metrics), "local": zero.val_sums[0] / zero.val_sums[1]}

    # a Stop from rank 1 only
    torch.manual_seed(0)
    trainer = make_trainer(out, max_epochs=3, strategy="ddp", devices=2)
    trainer.on(
        "fit.train.batch.end", lambda e: interlock.Stop("rank 1 says") if r == 1 and e.global_step == 3 else None
    )
    trainer.fit(Net(), DataLoader(dataset(), batch_size=RANK_BATCH))
    result["stop"] = {"global_step": trainer.state.global_step, "status": trainer.state.status}

    # the same stop asked by a LightningModule through its trainer view, on rank 1 only
    import interlock.lightning as il

    class Asks(il.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Net()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if r == 1 and self.trainer.global_step == 3:
                self.trainer.should_stop = True
            return self.inner.training_step(batch, batch_idx)

        def configure_optimizers(self) -> Any:
            return self.inner.configure_optimizers()

    torch.manual_seed(0)
    trainer = make_trainer(out, max_epochs=3, strategy="ddp", devices=2)
    trainer.fit(Asks(), DataLoader(dataset(), batch_size=RANK_BATCH))
    result["view_stop"] = {"global_step": trainer.state.global_step, "status": trainer.state.status}

    # checkpoints: each rank asks for its own file; exact resume from a mid-epoch checkpoint
    def save(e: interlock.Event) -> Any:
        if e.global_step == 2:
            return interlock.SaveCheckpoint(str(out / f"own_rank{r}.ckpt"))
        if e.global_step == 5:
            return interlock.SaveCheckpoint(str(out / "resume.ckpt"))
        return None

    def run(ckpt_path: Path | None) -> dict[str, torch.Tensor]:
        torch.manual_seed(0 if ckpt_path is None else 99)
        module = Net(dropout=0.2, momentum=0.9)
        trainer = make_trainer(out, max_epochs=2, seed=5, strategy="ddp", devices=2)
        if ckpt_path is None:
            trainer.on("fit.train.batch.end", save)
        trainer.fit(module, DataLoader(dataset(), batch_size=RANK_BATCH, shuffle=True), ckpt_path=ckpt_path)
        return weights(module)

    full = run(None)
    resumed = run(out / "resume.ckpt")
    result["resume"] = {"full": full, "resumed": resumed}
    result["combined"] = combined_resume(out)
    result["writer"] = prediction_writer(out)
    return result


class Pair(Net):
    """Trains on a dict of two loaders' batches (Lightning's max_size_cycle), recording both batches' indices."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append([batch["a"][2].tolist(), batch["b"][2].tolist()])  # type: ignore[list-item]
        return sum(torch.nn.functional.cross_entropy(self(x), y) for x, y, _ in batch.values())  # type: ignore[return-value]


def combined_resume(out: Path) -> dict[str, Any]:
    """Two shuffled training loaders (the shorter restarting mid-epoch) on 2 ranks, resumed after a restart."""

    def loaders() -> dict[str, DataLoader[Any]]:
        a = DataLoader(dataset(), batch_size=RANK_BATCH, shuffle=True)
        b = DataLoader(dataset(12, seed=2), batch_size=2, shuffle=True)  # 3 batches a rank: restarts each 3 steps
        return {"a": a, "b": b}

    def run(ckpt_path: Path | None) -> tuple[dict[str, torch.Tensor], list[list[int]]]:
        torch.manual_seed(0 if ckpt_path is None else 99)
        module = Pair(dropout=0.2)
        trainer = make_trainer(out, max_epochs=2, seed=5, strategy="ddp", devices=2)
        if ckpt_path is None:
            trainer.on(
                "fit.train.batch.end",
                lambda e: interlock.SaveCheckpoint(str(out / "combined.ckpt")) if e.global_step == 4 else None,
            )
        trainer.fit(module, loaders(), ckpt_path=ckpt_path)
        return weights(module), module.seen

    (full, seen), (resumed, seen_resumed) = run(None), run(out / "combined.ckpt")
    return {"full": full, "resumed": resumed, "seen": seen, "seen_resumed": seen_resumed}


def prediction_writer(out: Path) -> dict[str, Any]:
    """A Lightning prediction writer: each rank's batches, the indices it is given and the batch's own indices."""
    import interlock.lightning as il

    class Indexed(Net):
        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return batch[2]  # the dataset's indices, as the batch carries them

    class Writer(il.callbacks.BasePredictionWriter):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__("batch_and_epoch")
            self.batches: list[tuple[list[int], list[int]]] = []
            self.epoch: Any = None

        def write_on_batch_end(
            self, trainer: Any, pl_module: Any, prediction: Any, batch_indices: Any, *rest: Any
        ) -> None:
            self.batches.append((list(batch_indices), prediction.tolist()))

        def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
            self.epoch = ([p.tolist() for p in predictions], [list(b) for b in batch_indices])

    writer = Writer()
    trainer = make_trainer(out, strategy="ddp", devices=2, listeners=[writer])
    torch.manual_seed(7)
    trainer.predict(Indexed(), DataLoader(dataset(), batch_size=RANK_BATCH, shuffle=True), return_predictions=False)
    return {"batches": writer.batches, "epoch": writer.epoch}


def spawn(out: Path) -> dict[str, Any]:
    """ddp_spawn and ddp without a launcher, from a plain process; then ddp on one device."""
    result = {"spawn": equivalence(out, "ddp_spawn"), "ddp_fork": equivalence(out, "ddp")}
    torch.manual_seed(0)
    module = Net()
    trainer = make_trainer(out, max_epochs=2, strategy="ddp_spawn", devices=2)
    trainer.fit(module, DataLoader(dataset(), batch_size=RANK_BATCH))
    result["validate"] = trainer.validate(module, DataLoader(dataset(32, seed=1), batch_size=4))[0]
    result["single"] = equivalence(out, "ddp", devices=1)
    return result


def multinode(out: Path) -> dict[str, Any]:
    """One process per node, two nodes: devices=1 on each."""
    return {"equivalence": equivalence(out, "ddp", devices=1), "world_size": int(os.environ["WORLD_SIZE"])}


class DtypeDigits(DigitsClassifier):
    """Records per-step training loss, parameter dtype and activation (logits) dtype."""

    def __init__(self) -> None:
        super().__init__(hidden=32, lr=0.1, dropout=0.0)
        self.losses: list[float] = []
        self.dtypes: set[tuple[str, str]] = set()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.losses.append(float(loss.detach()))
        self.dtypes.add((str(self.net[0].weight.dtype), str(logits.dtype)))
        return loss


def precision(out: Path) -> dict[str, Any]:
    """Every precision flag: a single-device fit (on one rank, alternating), then a 2-rank ddp fit."""
    data = DigitsData(batch_size=32)
    result: dict[str, Any] = {}
    for i, flag in enumerate(PRECISION_FLAGS):
        for strategy, devices in (("single_device", 1), ("ddp", 2)):
            if strategy == "single_device" and rank() != i % 2:
                continue
            torch.manual_seed(0)
            module = DtypeDigits()
            trainer = make_trainer(
                out, max_epochs=2, limit_train_batches=12, precision=flag, strategy=strategy, devices=devices
            )
            trainer.fit(module, data.train_dataloader())
            result[f"{flag}/{strategy}"] = {"losses": module.losses, "dtypes": sorted(module.dtypes)}
    return result


def fsdp(out: Path) -> dict[str, Any]:
    """FSDP on 2 ranks: validation loss per epoch, mid-run and final checkpoints, resume from the mid one."""
    data = DigitsData(batch_size=32)

    def run(ckpt_path: Path | None, tag: str) -> list[float]:
        torch.manual_seed(0)
        module = DigitsClassifier(hidden=32, lr=0.05)
        trainer = make_trainer(
            out, max_epochs=3, limit_train_batches=8, limit_val_batches=2, seed=1, strategy="fsdp", devices=2
        )

        def save(e: interlock.Event) -> Any:
            if ckpt_path is None and e.global_step == 11:
                return interlock.SaveCheckpoint(str(out / "fsdp_mid.ckpt"))
            if e.global_step == 24:
                return interlock.SaveCheckpoint(str(out / f"fsdp_final_{tag}.ckpt"))
            return None

        trainer.on("fit.train.batch.end", save)
        trainer.fit(module, data.train_dataloader(), data.val_dataloader(), ckpt_path=ckpt_path)
        return [row["val_loss"] for row in trainer.state.history if "val_loss" in row]

    full = run(None, "full")
    resumed = run(out / "fsdp_mid.ckpt", "resumed")

    def plain_sgd(ckpt_path: Path | None) -> dict[str, torch.Tensor]:
        """SGD without momentum has no optimizer tensors to shard; weights gathered after the fit."""
        torch.manual_seed(0)
        module = Net()
        trainer = make_trainer(out, max_epochs=1, strategy="fsdp", devices=2)
        trainer.on(
            "fit.train.batch.end",
            lambda e: (
                interlock.SaveCheckpoint(str(out / "sgd.ckpt")) if ckpt_path is None and e.global_step == 3 else None
            ),
        )
        trainer.fit(module, DataLoader(dataset(), batch_size=RANK_BATCH), ckpt_path=ckpt_path)
        return trainer.hardware.strategy.model_state_dict(module)

    sgd = {"full": plain_sgd(None), "resumed": plain_sgd(out / "sgd.ckpt")}
    return {"val_losses": full, "resumed_val_losses": resumed, "sgd": sgd}


def reshard(out: Path) -> dict[str, Any]:
    """One epoch of 48 shuffled samples, sharded checkpoints; ``RESHARD=save`` saves at step 3, ``=resume`` resumes.

    ``RESHARD_STRATEGY`` is the strategy (default ``fsdp_sharded``), ``RESHARD_BATCH`` the per-rank batch,
    ``RESHARD_CKPT`` the checkpoint (``last``: the run's ``last.ckpt``,
    which a save also writes), ``RESHARD_ROOT`` the trainer's root (default ``out``), ``RESHARD_DEVICES`` the
    devices per node (default ``WORLD_SIZE``). Records the sample ids of each step and the final full weights.
    """
    import warnings

    phase, batch, ckpt = os.environ["RESHARD"], int(os.environ["RESHARD_BATCH"]), os.environ["RESHARD_CKPT"]
    root = Path(os.environ.get("RESHARD_ROOT", out))
    devices = int(os.environ.get("RESHARD_DEVICES", os.environ.get("WORLD_SIZE", "1")))
    torch.manual_seed(0)
    module = Net(momentum=0.9)
    strategy = os.environ.get("RESHARD_STRATEGY", "fsdp_sharded")
    trainer = make_trainer(root, max_epochs=1, seed=7, strategy=strategy, devices=devices)
    if phase == "save":

        def save(e: interlock.Event, s: Any) -> Any:
            if e.global_step != 3:
                return None
            last = str(Path(s.run_dir) / "checkpoints" / "last.ckpt")
            return [interlock.SaveCheckpoint(ckpt), interlock.SaveCheckpoint(last)]

        trainer.on("fit.train.batch.end", save)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(
            module,
            DataLoader(dataset(48), batch_size=batch, shuffle=True),
            ckpt_path=ckpt if phase == "resume" else None,
        )
    full = {k: v.clone() for k, v in trainer.hardware.strategy.model_state_dict(module).items()}
    return {
        "seen": module.seen,
        "weights": full,
        "warnings": [str(w.message) for w in caught],
        "world_size": trainer.state.world_size,
        "environment": type(trainer.hardware.strategy.environment).__name__,  # type: ignore[attr-defined]
    }


def topk(out: Path) -> dict[str, Any]:
    """``fsdp_sharded`` for 4 epochs keeping the 2 best checkpoints by ``val_loss`` and ``last``; then validate best."""
    from interlock.listeners.checkpoint import ModelCheckpoint

    torch.manual_seed(0)
    module = Net(momentum=0.9)
    keep = ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True)
    trainer = make_trainer(
        out, max_epochs=4, seed=3, strategy="fsdp_sharded", devices=2, listeners=[keep], enable_checkpointing=True
    )
    train, val = DataLoader(dataset(32), batch_size=4, shuffle=True), DataLoader(dataset(16, seed=1), batch_size=4)
    trainer.fit(module, train, val)
    folder, state = Path(trainer.state.run_dir) / "checkpoints", trainer.state
    return {
        "entries": sorted(p.name for p in folder.iterdir()),
        "best_k": {Path(k).name: float(v) for k, v in keep.best_k_models(state).items()},  # type: ignore[arg-type]
        "best": Path(keep.best_model_path(state)).name,
        "validated": trainer.validate(module, val, ckpt_path="best"),
        "folder": str(folder),
    }


SCENARIOS = {
    "distributed": distributed,
    "spawn": spawn,
    "multinode": multinode,
    "precision": precision,
    "fsdp": fsdp,
    "reshard": reshard,
    "topk": topk,
}


def threads_at_exit(path: Path) -> None:
    """At exit, after interlock's own exit handler (registered later, so run earlier): this process's threads."""
    tasks = Path("/proc/self/task")
    names = sorted((t / "comm").read_text().strip() for t in tasks.iterdir()) if tasks.is_dir() else ["(no /proc)"]
    path.write_text("\n".join(names) + "\n")


def main() -> None:
    name, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    atexit.register(threads_at_exit, out / f"{name}_threads_rank{rank()}.txt")
    result = SCENARIOS[name](out)
    torch.save(result, out / f"{name}_rank{rank()}.pt")


if __name__ == "__main__":
    main()
