"""``self.log``'s every Lightning option: honoured as Lightning honours it, or refused naming what to do."""

from __future__ import annotations

import dataclasses
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _twins import twins
from conftest import loader

pl = pytest.importorskip("pytorch_lightning")
for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
    logging.getLogger(_name).setLevel(logging.ERROR)

FLAGS = {
    "max_epochs": 2, "num_sanity_val_steps": 0, "enable_checkpointing": False, "logger": False,
    "enable_progress_bar": False, "enable_model_summary": False,
}  # fmt: skip


class Options:
    """Mixed into a Lightning module and its interlock port: the options, by keyword and in Lightning's order."""

    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.log("none_logger", loss, logger=None, prog_bar=True)  # type: ignore[attr-defined]
        self.log("zero_only", loss * 2, rank_zero_only=True, sync_dist=True, on_epoch=True)  # type: ignore[attr-defined]
        # positionally: prog_bar, logger, on_step, on_epoch, reduce_fx, enable_graph, sync_dist, group, add_idx, size
        self.log("positional", loss * 3, True, True, False, True, "max", False, False, None, True, 8)  # type: ignore[attr-defined]
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.log(f"own_{dataloader_idx}", loss, add_dataloader_idx=False, prog_bar=True, on_step=True)  # type: ignore[attr-defined]
        self.log("suffixed", loss * 2, prog_bar=True)  # type: ignore[attr-defined]
        self.log_dict({"dict_own": loss * 3}, False, None, None, None, "mean", False, False, None, dataloader_idx > 0)  # type: ignore[attr-defined]

    def on_validation_epoch_end(self) -> None:
        self.log("hook_own", 1.0, add_dataloader_idx=False)  # type: ignore[attr-defined]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


def _reader(base: type) -> Any:
    class Reader(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.seen: list[tuple[str, dict[str, float]]] = []

        def _read(self, when: str, trainer: Any) -> None:
            for kind in ("progress_bar_metrics", "callback_metrics", "logged_metrics"):
                values = {k: round(float(v), 5) for k, v in getattr(trainer, kind).items()}
                if kind == "callback_metrics":  # a documented difference: returned scalars are metrics
                    values.pop("train_loss", None)
                self.seen.append((f"{kind}, {when}", values))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self._read(f"batch {batch_idx}", trainer)

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            self._read("validation end", trainer)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self._read("epoch end", trainer)

    return Reader()


def test_every_log_option_names_and_reduces_as_lightning(tmp_path: Path) -> None:
    """logger=None logs, rank_zero_only never syncs, add_dataloader_idx=False keeps the name, positional
    arguments mean what Lightning's mean: a callback reads the same metrics at every moment as under Lightning."""
    import interlock.lightning as il

    Lit, Ours = twins(Options)

    theirs, mine = _reader(pl.Callback), _reader(il.Callback)
    vals = [loader(16, 8, seed=i) for i in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit = pl.Trainer(default_root_dir=tmp_path / "pl", callbacks=[theirs], **FLAGS)
        lit.fit(Lit(), loader(24, 8), vals)
    ours = il.Trainer(default_root_dir=tmp_path / "il", callbacks=[mine], **FLAGS)
    ours.fit(Ours(), loader(24, 8), [loader(16, 8, seed=i) for i in range(2)])
    assert mine.seen == theirs.seen
    final = dict(theirs.seen[-3:][2][1])  # what the loggers got last, under Lightning
    expected = {"own_0_epoch", "own_1_epoch", "dict_own", "dict_own/dataloader_idx_1", "hook_own", "none_logger"}
    assert expected | {"suffixed/dataloader_idx_0", "zero_only_epoch", "positional"} <= set(final)
    for kind in ("progress_bar_metrics", "logged_metrics"):  # and what the trainer holds after the fit
        assert {k: round(float(v), 5) for k, v in getattr(ours, kind).items()} == {
            k: round(float(v), 5) for k, v in getattr(lit, kind).items()
        }, kind


class _Logs:
    option: dict[str, Any] = {}
    name = "x"

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log(self.name, float(batch_idx), **self.option)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("option", "name", "said"),
    [
        ({"enable_graph": True}, "x", "keep the tensor yourself"),
        ({"sync_dist_group": object()}, "x", "torch.distributed.all_reduce(value, group=group)"),
        ({}, "x/dataloader_idx_0", "add_dataloader_idx=False"),
        ({"metric_attribute": "nope"}, "x", "the module's metrics are []"),
        ({"add_dataloader_idx": False}, "x", "was logged by dataloader 0 and again by dataloader 1"),
        ({"add_dataloader_idx": False, "logger": False}, "x", "was logged by dataloader 0 and again by dataloader 1"),
    ],
)
def test_an_option_interlock_cannot_honour_is_refused_naming_the_fix(
    option: dict[str, Any], name: str, said: str, tmp_path: Path
) -> None:
    """enable_graph, a sync group, a hand-made loader suffix, a wrong metric_attribute and one name for two loaders
    with add_dataloader_idx=False fail the run with an error that says what to do (Lightning raises for the last
    three too); validation fails before anything is saved."""
    import interlock.lightning as il
    from conftest import TinyModule

    class Logs(_Logs, TinyModule):
        pass

    Logs.option, Logs.name = option, name
    trainer = il.Trainer(default_root_dir=tmp_path, **{**FLAGS, "enable_checkpointing": True})
    with pytest.raises(ValueError) as raised:
        trainer.fit(Logs(), loader(16, 8), [loader(16, 8, seed=i) for i in range(2)])
    assert said in str(raised.value)
    assert not list(tmp_path.rglob("*.ckpt"))


def test_the_same_name_from_two_loaders_without_the_index_is_an_error_in_lightning_too(tmp_path: Path) -> None:
    """Lightning refuses one add_dataloader_idx=False name logged by two loaders (the case interlock refuses)."""

    class Lit(_Logs, pl.LightningModule):  # type: ignore[misc,name-defined]
        option = {"add_dataloader_idx": False}

        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.net.parameters(), lr=0.1)

    with warnings.catch_warnings(), pytest.raises(Exception, match="twice"):
        warnings.simplefilter("ignore")
        pl.Trainer(default_root_dir=tmp_path, **FLAGS).fit(Lit(), loader(16, 8), [loader(16, 8), loader(16, 8)])


class Evaluates:
    """Mixed into both modules: evaluation logging of every kind a validate/test return value treats differently."""

    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.log("vl", loss)  # type: ignore[attr-defined]
        self.log("vs", loss, on_step=True)  # type: ignore[attr-defined]
        self.log("vp", loss * 2, prog_bar=True, logger=False)  # type: ignore[attr-defined]

    test_step = validation_step

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


@pytest.mark.parametrize("loaders", [1, 2])
def test_validate_and_test_return_what_goes_to_the_loggers_as_lightning(loaders: int, tmp_path: Path) -> None:
    """validate()/test() return, per loader, the epoch values logged for the loggers under Lightning's names: no
    logger=False value, no bare name of one logged on step and epoch."""
    import interlock.lightning as il

    Lit, Ours = twins(Evaluates)
    results = []
    for trainer_cls, module in ((pl.Trainer, Lit()), (il.Trainer, Ours())):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = trainer_cls(default_root_dir=tmp_path, **{**FLAGS, "max_epochs": 1})
            trainer.fit(module, loader(16, 8))
            data = [loader(16, 8, seed=i) for i in range(loaders)]
            got = [trainer.validate(module, data if loaders > 1 else data[0], verbose=False)]
            got.append(trainer.test(module, data if loaders > 1 else data[0], verbose=False))
        results.append([[{k: round(float(v), 5) for k, v in d.items()} for d in run] for run in got])
    assert results[1] == results[0]
    assert all("vs_epoch" in k or "vl" in k for run in results[0] for d in run for k in d)


# -- the batch size a mean is weighted by, against Lightning's extract_batch_size --------------------------------


@dataclasses.dataclass
class _Pair:
    a: object
    b: object


def _batches() -> st.SearchStrategy[object]:
    leaves = st.one_of(
        st.integers(0, 5).map(lambda n: torch.zeros(n, 2)),
        st.just(torch.tensor(3.0)),
        st.text(max_size=3),
        st.integers(),
        st.none(),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(st.sampled_from("xyz"), inner, max_size=3),
            st.builds(_Pair, inner, inner),
        ),
        max_leaves=8,
    )


@settings(max_examples=300, deadline=None)
@given(_batches())
def test_the_inferred_batch_size_is_lightnings(batch: object) -> None:
    """Any nesting of tensors, strings, numbers, lists, dicts and dataclasses: Lightning's size, or its error."""
    lightning = pytest.importorskip("pytorch_lightning.utilities.data")
    from pytorch_lightning.utilities.exceptions import MisconfigurationException

    from interlock.connectors.metrics import batch_size, logged_batch_size

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected: int | None = lightning.extract_batch_size(batch)
        except MisconfigurationException:
            expected = None
        assert batch_size(batch) == expected
        if expected is None:
            with pytest.raises(ValueError, match=r"could not infer the batch_size.*self\.log\(\.\.\., batch_size="):
                logged_batch_size(batch)
