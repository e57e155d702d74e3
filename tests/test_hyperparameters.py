"""``save_hyperparameters`` in each of Lightning's forms records what Lightning records, and loads back."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import loader

pl = pytest.importorskip("pytorch_lightning")


class Forms:
    """Mixed into a Lightning module and its port: every way Lightning code calls save_hyperparameters."""

    def _save(self, form: str, lr: float, width: int, config: Any) -> None:
        if form == "all":
            self.save_hyperparameters()  # type: ignore[attr-defined]
        elif form == "names":
            self.save_hyperparameters("lr", "width")  # type: ignore[attr-defined]
        elif form == "ignore":
            self.save_hyperparameters(ignore=["config"], logger=False)  # type: ignore[attr-defined]
        elif form == "dict":
            self.save_hyperparameters(config)  # type: ignore[attr-defined]
        elif form == "namespace":
            self.save_hyperparameters(argparse.Namespace(lr=lr, width=width))  # type: ignore[attr-defined]
        elif form == "helper":  # from a method __init__ calls
            self.setup_hparams()

    def setup_hparams(self) -> None:
        self.save_hyperparameters()  # type: ignore[attr-defined]

    def _net(self, width: int) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Linear(width, 2))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


class Base:
    """A base class that records its own arguments, as a Lightning base module may."""

    def _base(self, depth: int) -> None:
        self.save_hyperparameters()  # type: ignore[attr-defined]


FORMS = ["all", "names", "ignore", "dict", "namespace", "helper", "inherited"]


def _classes(form: str) -> tuple[type, type]:
    import interlock.lightning as il

    made = []
    for framework in (pl.LightningModule, il.LightningModule):

        class Made(Forms, Base, framework):  # type: ignore[misc,valid-type]
            def __init__(self, lr: float = 0.01, width: int = 3, config: Any = None, depth: int = 2) -> None:
                super().__init__()
                config = {"lr": lr, "hidden": width} if config is None else config  # keys that are no arguments
                if form == "inherited":
                    self._base(depth)
                else:
                    self._save(form, lr, width, config)
                self._net(config["hidden"] if form == "dict" else width)  # a module given a dict reads it

        made.append(Made)
    return made[0], made[1]


@pytest.mark.parametrize("form", FORMS)
def test_each_form_records_lightnings_hparams_and_loads_back(form: str, tmp_path: Path) -> None:
    """all, names, ignore (with logger=False), a dict, a Namespace, from a helper and from a base class's __init__:
    hparams equal Lightning's; a saved checkpoint rebuilds the module with them (the dict as the argument it was)."""
    import interlock.lightning as il

    lit_cls, our_cls = _classes(form)
    theirs, ours = lit_cls(lr=0.5, width=5), our_cls(lr=0.5, width=5)
    assert dict(ours.hparams) == dict(theirs.hparams), form
    flags = {"max_epochs": 1, "logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = il.Trainer(default_root_dir=tmp_path, **flags)
        trainer.fit(ours, loader(16, 8))
    last = next(tmp_path.rglob("last.ckpt"))
    loaded = our_cls.load_from_checkpoint(last)
    assert dict(loaded.hparams) == dict(ours.hparams)
    assert loaded.net[0].out_features == 5  # built from the recorded width
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.Trainer(default_root_dir=tmp_path / "pl", **flags).fit(theirs, loader(16, 8))
    keys = [il.LightningModule.CHECKPOINT_HYPER_PARAMS_KEY, il.LightningModule.CHECKPOINT_HYPER_PARAMS_NAME]
    assert keys == [pl.LightningModule.CHECKPOINT_HYPER_PARAMS_KEY, pl.LightningModule.CHECKPOINT_HYPER_PARAMS_NAME]
    mine, lightning = (torch.load(next(p.rglob("*.ckpt")), weights_only=False) for p in (last.parent, tmp_path / "pl"))
    assert [mine.get(k) for k in keys] == [lightning.get(k) for k in keys]  # the argument that held them, or "kwargs"


def _data_module(base: type) -> type:
    class Data(base):  # type: ignore[misc,valid-type]
        def __init__(self, batch_size: int = 8, n: int = 32, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.seen = 0

        def train_dataloader(self) -> Any:
            return loader(self.hparams.n, self.hparams.batch_size)

        def state_dict(self) -> dict[str, Any]:
            return {"seen": 7}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.seen = state_dict["seen"]

    return Data


def _module(base: type) -> type:
    class Net(base):  # type: ignore[misc,valid-type]
        def __init__(self, lr: float = 0.1, width: int = 3) -> None:
            super().__init__()
            self.save_hyperparameters()
            torch.manual_seed(0)
            self.net = torch.nn.Linear(4, 2)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    return Net


def test_a_data_modules_hyperparameters_are_saved_logged_and_loaded_as_lightnings(tmp_path: Path) -> None:
    """LightningDataModule.save_hyperparameters: hparams, the checkpoint's key, hparams.yaml, load_from_checkpoint."""
    import interlock.lightning as il

    seen = []
    for lib, root in ((pl, tmp_path / "pl"), (il, tmp_path / "il")):
        Data, Net = _data_module(lib.LightningDataModule), _module(lib.LightningModule)
        data = Data(batch_size=4, n=16)
        logger = lib.loggers.CSVLogger(root, name="x", version=0)
        quiet = {"enable_progress_bar": False, "enable_checkpointing": False, "enable_model_summary": False}
        trainer = lib.Trainer(max_epochs=1, logger=logger, **quiet)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(Net(), datamodule=data)
        trainer.save_checkpoint(root / "m.ckpt")
        saved = torch.load(root / "m.ckpt", weights_only=False)
        loaded = Data.load_from_checkpoint(root / "m.ckpt", n=24)
        seen.append(
            (
                dict(data.hparams),
                dict(saved["datamodule_hyper_parameters"]),
                saved.get("datamodule_hparams_name"),
                (root / "x" / "version_0" / "hparams.yaml").read_text(),
                dict(loaded.hparams),
                loaded.seen,
            )
        )
        clash = Data(batch_size=4, n=16, lr=0.5)  # the module records lr=0.1: the loggers cannot log both
        trainer = lib.Trainer(max_epochs=1, logger=lib.loggers.CSVLogger(root, name="y"), enable_progress_bar=False)
        with pytest.raises(RuntimeError, match=r"\['lr'\]"):
            trainer.fit(Net(), datamodule=clash)
    assert seen[0] == seen[1]
    assert seen[1][4] == {"batch_size": 4, "n": 24, "lr": 0.1} and seen[1][5] == 7 and seen[1][2] == "kwargs"
    assert "batch_size: 4" in seen[1][3] and "lr: 0.1" in seen[1][3]
