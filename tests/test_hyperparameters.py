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
