"""Seeding with Lightning's meaning: seed_everything, worker seeds, the CLI, and a sanity check that draws nothing."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import interlock
from conftest import TinyModule, loader, make_data
from interlock.cli.main import main
from interlock.connectors.rng import (
    GLOBAL_SEED_ENV,
    SEED_WORKERS_ENV,
    get_rng_states,
    seed_workers,
    set_rng_states,
    worker_init_function,
)
from interlock.plugins.checkpoint_io import TorchCheckpointIO


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Each test starts without the seed variables and leaves the global RNGs as it found them."""
    monkeypatch.delenv(GLOBAL_SEED_ENV, raising=False)
    monkeypatch.delenv(SEED_WORKERS_ENV, raising=False)
    states = get_rng_states()
    yield
    set_rng_states(states)


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(()))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_seed_everything_seeds_python_numpy_torch_and_returns_the_seed(seed: int) -> None:
    """The same seed gives the same draws from all three generators; the seed is returned and exported."""
    assert interlock.seed_everything(seed) == seed
    first = _draws()
    assert os.environ[GLOBAL_SEED_ENV] == str(seed) and os.environ[SEED_WORKERS_ENV] == "0"
    interlock.seed_everything(seed)
    assert _draws() == first


def test_seed_none_reads_the_environment_or_warns_and_seeds_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Lightning: None takes the exported seed (a spawned process), else 0 with a warning."""
    with pytest.warns(UserWarning, match="seeding 0"):
        assert interlock.seed_everything() == 0
    monkeypatch.setenv(GLOBAL_SEED_ENV, "7")
    assert interlock.seed_everything(None, workers=True) == 7
    assert os.environ[SEED_WORKERS_ENV] == "1"
    monkeypatch.setenv(GLOBAL_SEED_ENV, "seven")
    with pytest.raises(ValueError, match="INTERLOCK_GLOBAL_SEED='seven'"):
        interlock.seed_everything()


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, "3", True])
def test_bad_seeds_are_refused_by_value(bad: Any) -> None:
    """A seed numpy cannot take is an early error naming it."""
    with pytest.raises(ValueError, match=r"seed_everything\(seed=.*\) is invalid"):
        interlock.seed_everything(bad)


def test_worker_seeds_differ_per_worker_and_rank_and_repeat() -> None:
    """Each (worker, rank) gets its own python, numpy and torch streams, the same on every repetition."""

    def streams(worker: int, rank: int) -> tuple[float, float, float]:
        torch.manual_seed(1234 + worker)  # what torch gives worker ``worker`` from base seed 1234
        worker_init_function(worker, rank)
        return _draws()

    seen = {(w, r): streams(w, r) for w in range(3) for r in range(2)}
    assert len({v for draws in seen.values() for v in draws}) == 3 * len(seen)
    assert streams(1, 1) == seen[(1, 1)]


@settings(max_examples=60, deadline=None)
@given(base=st.integers(0, 2**32 - 1), worker=st.integers(0, 31), rank=st.integers(0, 511))
def test_a_seeded_worker_draws_what_it_draws_under_lightning(base: int, worker: int, rank: int) -> None:
    """worker_init_function seeds python, numpy and torch exactly as Lightning's pl_worker_init_function does."""
    lightning_seed = pytest.importorskip("lightning_fabric.utilities.seed")

    def draws(init: Any) -> tuple[float, ...]:
        torch.manual_seed(base + worker)  # what torch gives worker ``worker`` of an epoch with base seed ``base``
        init(worker, rank)
        return (*_draws(), random.getrandbits(64), int(np.random.randint(2**31)), int(torch.randint(2**62, ())))

    assert draws(worker_init_function) == draws(lightning_seed.pl_worker_init_function)


class _Augmenting(torch.utils.data.Dataset[torch.Tensor]):
    """Each item draws from torch, numpy and python, as random augmentations do."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i), float(torch.rand(())), float(np.random.rand()), random.random()])


def test_seeded_workers_feed_the_batches_lightnings_workers_feed(tmp_path: Path) -> None:
    """seed_everything(workers=True), two shuffled epochs over 2 workers: the augmented batches Lightning trains on."""
    pl = pytest.importorskip("pytorch_lightning")
    import interlock.lightning as il

    def batches(lib: Any) -> list[list[float]]:
        seen: list[list[float]] = []

        class Records(lib.LightningModule):  # type: ignore[misc,name-defined]
            def __init__(self) -> None:
                super().__init__()
                self.net = torch.nn.Linear(4, 1)

            def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
                seen.append(batch.flatten().tolist())
                return self.net(batch).mean()

            def configure_optimizers(self) -> Any:
                return torch.optim.SGD(self.parameters(), lr=0.0)

        lib.seed_everything(7, workers=True)
        trainer = lib.Trainer(
            max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=tmp_path / lib.__name__,
        )  # fmt: skip
        trainer.fit(Records(), DataLoader(_Augmenting(), batch_size=4, num_workers=2, shuffle=True))
        return seen

    lightning = batches(pl)
    assert len(lightning) == 6 and batches(il) == lightning


def test_workers_true_gives_loaders_the_worker_init_fn_unless_they_have_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only loaders with workers and no worker_init_fn of their own are changed, and only with workers=True."""
    plain = DataLoader(make_data(), num_workers=2)
    seed_workers(plain)
    assert plain.worker_init_fn is None
    interlock.seed_everything(3, workers=True)
    own = DataLoader(make_data(), num_workers=2, worker_init_fn=print)
    single = DataLoader(make_data())
    for each in (plain, own, single):
        seed_workers(each, rank=1)
    assert plain.worker_init_fn.func is worker_init_function and plain.worker_init_fn.keywords == {"rank": 1}
    assert own.worker_init_fn is print and single.worker_init_fn is None


def test_workers_true_gives_reproducible_distinct_worker_numpy_streams(tmp_path: Path) -> None:
    """Real worker processes: numpy draws differ between workers and repeat with the same seed."""

    class Draws(torch.utils.data.Dataset[float]):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> float:
            return float(np.random.rand())

    def run() -> list[float]:
        interlock.seed_everything(5, workers=True)
        data = DataLoader(Draws(), batch_size=None, num_workers=2)
        seed_workers(data)
        return [float(x) for x in data]

    first = run()
    assert run() == first
    assert len(set(first)) == 4  # without derived seeds both workers would draw the same numbers


def _fit_weights(trainer_factory: Any, sanity: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    module = TinyModule(dropout=0.3)
    trainer = trainer_factory(max_epochs=2, seed=1, num_sanity_val_steps=sanity)
    trainer.fit(module, loader(shuffle=True), loader(n=32))
    return module.state_dict()


def test_sanity_check_leaves_the_global_rng_untouched(trainer_factory: Any) -> None:
    """Shuffled order and dropout do not depend on num_sanity_val_steps (Lightning isolates the sanity check)."""
    without = _fit_weights(trainer_factory, 0)
    for sanity in (2, -1):
        with_sanity = _fit_weights(trainer_factory, sanity)
        assert all(torch.equal(without[k], with_sanity[k]) for k in without)


def test_cli_seeds_before_building_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two `interlock fit` runs with trainer.seed give bitwise equal weights and the same printed metrics."""
    quick = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2"]
    outputs, weights = [], []
    for i in range(2):
        torch.manual_seed(100 + i)  # whatever the global RNG held before must not matter
        root = tmp_path / str(i)
        assert main(["fit", *quick, "--trainer.seed", "0", "--trainer.default_root_dir", str(root)]) == 0
        out = capsys.readouterr().out
        outputs.append(out[out.index("final metrics:") :])
        ckpt = TorchCheckpointIO().load_checkpoint(next(root.rglob("last.ckpt")))
        weights.append(ckpt["state_dict"])
    assert outputs[0] == outputs[1]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_cli_refuses_a_bad_seed_before_building(capsys: pytest.CaptureFixture[str]) -> None:
    """A seed out of range is a usage error (status 2) naming trainer.seed."""
    assert main(["fit", "--trainer.seed", "-3"]) == 2
    assert "trainer.seed (-3)" in capsys.readouterr().err


def test_trainer_seed_keeps_the_workers_choice(trainer_factory: Any, tiny: TinyModule) -> None:
    """Trainer(seed=) reseeds at set-up but keeps seed_everything(workers=True) in force."""
    interlock.seed_everything(0, workers=True)
    trainer_factory(max_steps=1, seed=4, num_sanity_val_steps=0).fit(tiny, loader())
    assert os.environ[SEED_WORKERS_ENV] == "1" and os.environ[GLOBAL_SEED_ENV] == "4"
