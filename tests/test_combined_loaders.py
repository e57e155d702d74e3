"""Several training loaders cycled together as Lightning does, each resuming exactly where it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

import interlock
from interlock.connectors.combined import CombinedData
from interlock.listeners import ModelCheckpoint

pl = pytest.importorskip("pytorch_lightning")
from pytorch_lightning.utilities import CombinedLoader as LightningCombined  # noqa: E402

QUIET: dict[str, Any] = {
    "logger": False,
    "enable_progress_bar": False,
    "enable_trace": False,
    "enable_model_summary": False,
    "accelerator": "cpu",
}


def _data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g))


def _loaders(spec: list[tuple[int, bool, bool]]) -> dict[str, DataLoader[Any]]:
    """One loader per ``(samples, shuffle, own generator)``, batches of 2."""
    out = {}
    for i, (n, shuffle, own) in enumerate(spec):
        g = torch.Generator().manual_seed(100 + i) if own else None
        out[f"l{i}"] = DataLoader(_data(n, i), batch_size=2, shuffle=shuffle, generator=g)
    return out


class Seen(interlock.Module):
    """Trains on every loader's batch (dropout on the global RNG); records each batch's first value."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.drop = torch.nn.Dropout(0.3)
        self.seen: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        parts = [b for b in batch.values() if b is not None] if isinstance(batch, dict) else [batch]
        self.seen.append((self.current_epoch, batch_idx, [round(float(b[0][0, 0]), 6) for b in parts]))
        return sum(torch.nn.functional.mse_loss(self.layer(self.drop(x)), y) for x, y in parts)  # type: ignore[return-value]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


spec_st = st.lists(st.tuples(st.integers(1, 9), st.booleans(), st.booleans()), min_size=2, max_size=3)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=spec_st, mode=st.sampled_from(["max_size_cycle", "max_size", "min_size"]), pick=st.floats(0, 1))
def test_a_resume_from_any_step_of_several_loaders_ends_bitwise_as_the_whole_run(
    tmp_path_factory: pytest.TempPathFactory, spec: list[tuple[int, bool, bool]], mode: str, pick: float
) -> None:
    """Every loader continues at its pass and batch (a restarted shorter one too): the same batches, weights and RNG."""
    root = tmp_path_factory.mktemp("whole")
    data: Any = _loaders(spec) if mode == "max_size_cycle" else interlock.CombinedLoader(_loaders(spec), mode)
    torch.manual_seed(0)
    whole = Seen()
    saver = ModelCheckpoint(every_n_train_steps=1, save_top_k=-1)
    interlock.Trainer(max_epochs=2, default_root_dir=root, callbacks=[saver], **QUIET).fit(whole, data)
    after_whole = torch.randint(2**30, (1,)).item()
    files = sorted(root.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime_ns)
    assert len(files) == len(whole.seen)
    chosen = files[min(int(pick * len(files)), len(files) - 1)]
    step = int(chosen.stem.split("step=")[1])
    torch.manual_seed(123)
    resumed = Seen()
    data = _loaders(spec) if mode == "max_size_cycle" else interlock.CombinedLoader(_loaders(spec), mode)
    trainer = interlock.Trainer(max_epochs=2, default_root_dir=tmp_path_factory.mktemp("resumed"), **QUIET)
    trainer.fit(resumed, data, ckpt_path=str(chosen))
    assert resumed.seen == whole.seen[step:]
    assert torch.equal(resumed.layer.weight, whole.layer.weight) and torch.equal(resumed.layer.bias, whole.layer.bias)
    assert torch.randint(2**30, (1,)).item() == after_whole


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), min_size=1, max_size=3),
    batch=st.integers(1, 4),
    mode=st.sampled_from(["min_size", "max_size_cycle", "max_size", "sequential"]),
    as_dict=st.booleans(),
)
def test_a_combined_loader_iterated_directly_yields_lightnings_batches(
    sizes: list[int], batch: int, mode: str, as_dict: bool
) -> None:
    """``interlock.CombinedLoader`` yields Lightning's ``(batch, batch_idx, dataloader_idx)`` and length, each mode."""

    def make() -> Any:
        loaders = [DataLoader(range(100 * i, 100 * i + n), batch_size=batch) for i, n in enumerate(sizes)]
        return {f"k{i}": x for i, x in enumerate(loaders)} if as_dict else loaders

    def plain(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            return item.tolist()
        if isinstance(item, dict):
            return {k: plain(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [plain(v) for v in item]
        return item

    theirs, mine = LightningCombined(make(), mode), interlock.CombinedLoader(make(), mode)
    iter(theirs)
    assert len(mine) == len(theirs)
    assert [plain(x) for x in mine] == [plain(x) for x in theirs]


def test_lightnings_sequential_mode_is_refused_for_training_before_anything_runs(tmp_path: Path) -> None:
    """Lightning's fit refuses CombinedLoader(mode='sequential'); interlock too, as the fit starts, naming the modes."""
    module = Seen()
    data = interlock.CombinedLoader(_loaders([(4, False, False), (6, False, False)]), "sequential")
    with pytest.raises(ValueError, match=r"mode 'sequential'.*use 'max_size_cycle', 'max_size' or 'min_size'"):
        interlock.Trainer(max_epochs=1, default_root_dir=tmp_path, **QUIET).fit(module, data)
    assert module.seen == [] and not list(tmp_path.rglob("*.ckpt"))


def test_evaluation_loaders_combined_batch_by_batch_are_refused_naming_sequential(tmp_path: Path) -> None:
    """Evaluation runs loaders one after the other: a CombinedLoader in another mode is an error naming 'sequential'."""

    class Val(Seen):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.seen.append(dataloader_idx)

    data = _loaders([(4, False, False), (6, False, False)])
    trainer = interlock.Trainer(max_epochs=1, default_root_dir=tmp_path, **QUIET)
    with pytest.raises(ValueError, match=r"CombinedLoader in mode 'min_size'.*CombinedLoader\(loaders, 'sequential'\)"):
        trainer.validate(Val(), interlock.CombinedLoader(data, "min_size"))
    module = Val()
    interlock.Trainer(max_epochs=1, default_root_dir=tmp_path, **QUIET).validate(
        module, interlock.CombinedLoader(data, "sequential")
    )
    assert module.seen == [0, 0, 1, 1, 1]


def test_a_resume_with_other_training_data_is_refused_naming_it(tmp_path: Path) -> None:
    """A mid-epoch checkpoint of several loaders does not resume one loader, or another mode, or the reverse."""
    saver = ModelCheckpoint(every_n_train_steps=2, save_top_k=-1)
    two = [(8, True, False), (4, True, False)]
    interlock.Trainer(max_epochs=1, default_root_dir=tmp_path / "a", callbacks=[saver], **QUIET).fit(
        Seen(), _loaders(two)
    )
    combined = next(iter((tmp_path / "a").rglob("*step=2.ckpt")))
    one = {"l0": DataLoader(_data(8, 0), batch_size=2)}
    trainer = interlock.Trainer(max_epochs=1, default_root_dir=tmp_path / "b", **QUIET)
    with pytest.raises(RuntimeError, match=r"epoch of 2 training loaders .* this run has one"):
        trainer.fit(Seen(), one["l0"], ckpt_path=str(combined))
    trainer = interlock.Trainer(max_epochs=1, default_root_dir=tmp_path / "c", **QUIET)
    with pytest.raises(RuntimeError, match=r"2 loader\(s\), mode 'max_size_cycle'; this run's is 2 loader\(s\), mode "):
        trainer.fit(Seen(), interlock.CombinedLoader(_loaders(two), "max_size"), ckpt_path=str(combined))
    saver = ModelCheckpoint(every_n_train_steps=2, save_top_k=-1)
    interlock.Trainer(max_epochs=1, default_root_dir=tmp_path / "d", callbacks=[saver], **QUIET).fit(
        Seen(), DataLoader(_data(8, 0), batch_size=2)
    )
    single = next(iter((tmp_path / "d").rglob("*step=2.ckpt")))
    trainer = interlock.Trainer(max_epochs=1, default_root_dir=tmp_path / "e", **QUIET)
    with pytest.raises(RuntimeError, match=r"holds no position for them"):
        trainer.fit(Seen(), _loaders(two), ckpt_path=str(single))


def test_positions_saved_by_another_number_of_processes_are_refused() -> None:
    """Each loader's position is per process: a state saved by 2 processes does not open on 1."""
    loaders = _loaders([(4, False, False), (6, False, False)])
    from interlock.connectors.data import EpochData

    data = CombinedData(interlock.CombinedLoader(loaders, "max_size_cycle"), [EpochData(x) for x in loaders.values()])
    iter(data.iterate(0))
    state = data.data_state()
    assert state is not None and state["world_size"] == 1
    with pytest.raises(RuntimeError, match=r"saved by 2 process\(es\).*this run has 1"):
        data.iterate(1, state={**state, "world_size": 2})


def test_a_collection_holding_a_batch_or_a_nested_collection_is_refused(tmp_path: Path) -> None:
    """Each item of a dict or list of training loaders must be a loader; one level of them."""
    good = DataLoader(_data(4, 0), batch_size=2)
    trainer = interlock.Trainer(max_epochs=1, default_root_dir=tmp_path, **QUIET)
    with pytest.raises(TypeError, match=r"item 'b' is a Tensor: each item must be a loader"):
        trainer.fit(Seen(), {"a": good, "b": torch.zeros(2, 3)})
    with pytest.raises(TypeError, match=r"item 'b' is a dict of loaders; interlock combines one level"):
        interlock.CombinedLoader({"a": good, "b": {"c": good}})
    with pytest.raises(ValueError, match=r"Unsupported mode 'cycle'"):
        interlock.CombinedLoader([good], "cycle")


def test_the_trainer_shows_the_collection_and_counts_the_longest_loader(tmp_path: Path) -> None:
    """``trainer.train_dataloader`` is the dict given (Lightning's); the epoch is the longest loader's, limits apply."""
    got: list[Any] = []
    from interlock.lightning import LightningModule

    class Look(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def on_train_start(self) -> None:
            t = self.trainer
            got.append((type(t.train_dataloader).__name__, sorted(t.train_dataloader), t.num_training_batches))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return sum(torch.nn.functional.mse_loss(self.layer(x), y) for x, y in batch.values())  # type: ignore[return-value]

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = _loaders([(4, False, False), (10, False, False)])
    interlock.Trainer(max_epochs=1, default_root_dir=tmp_path, **QUIET).fit(Look(), data)
    interlock.Trainer(max_epochs=1, limit_train_batches=3, default_root_dir=tmp_path, **QUIET).fit(Look(), data)
    assert got == [("dict", ["l0", "l1"], 5), ("dict", ["l0", "l1"], 3)]
