"""What a LightningModule reads from itself (``self.current_epoch``, ...) and its loading flags, as in Lightning."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from _twins import twins
from conftest import loader

pl = pytest.importorskip("pytorch_lightning")
for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
    logging.getLogger(_name).setLevel(logging.ERROR)

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


class Reads:
    """Mixed into both modules: what the module reads of itself at each hook."""

    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        self.seen: list[tuple[str, int, int]] = []

    def _read(self, when: str) -> None:
        self.seen.append((when, self.current_epoch, self.global_step))  # type: ignore[attr-defined]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._read(f"train {batch_idx}")
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._read(f"val {batch_idx}")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._read(f"test {batch_idx}")

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        self._read(f"predict {batch_idx}")
        return self.net(batch[0])

    def on_train_epoch_end(self) -> None:
        self._read("train epoch end")

    def on_train_end(self) -> None:
        self._read("train end")

    def on_fit_end(self) -> None:
        self._read("fit end")

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


def test_the_modules_current_epoch_counts_the_trained_epochs_once_training_ends_as_lightning(tmp_path: Path) -> None:
    """self.current_epoch / global_step at every step and hook of a fit, then a test and a predict, equal Lightning's
    (after training: the number of epochs trained, not the last epoch's index)."""
    import interlock.lightning as il

    Lit, Ours = twins(Reads)

    runs = []
    for trainer_cls, module in ((pl.Trainer, Lit()), (il.Trainer, Ours())):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = trainer_cls(default_root_dir=tmp_path, max_epochs=2, num_sanity_val_steps=0, **QUIET)
            trainer.fit(module, loader(16, 8), loader(8, 8))
            trainer.test(module, loader(8, 8), verbose=False)
            trainer.predict(module, loader(8, 8))
        runs.append(module.seen)
    assert runs[1] == runs[0]
    assert ("test 0", 2, 4) in runs[0]


class Frozen(torch.nn.Module):
    """A tiny model; ``extra`` is a buffer a newer version of it added (not in older checkpoints)."""

    def __init__(self, extra: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)
        if extra:
            self.register_buffer("extra", torch.ones(1))


def _module(extra: bool, strict: bool) -> Any:
    import interlock.lightning as il

    class M(il.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.model = Frozen(extra)
            self.strict_loading = strict

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self.model.net(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.model.parameters(), lr=0.1)

    return M()


def test_strict_loading_false_resumes_and_loads_a_checkpoint_without_every_weight(tmp_path: Path) -> None:
    """A module with strict_loading = False resumes (and load_from_checkpoint builds) from a checkpoint that lacks
    one of its weights, as in Lightning; with the default True the same resume is an error naming the weight."""
    import interlock.lightning as il

    flags = {"default_root_dir": tmp_path, **{**QUIET, "enable_checkpointing": True}}
    first = il.Trainer(max_epochs=1, **flags)
    first.fit(_module(extra=False, strict=True), loader(16, 8))
    last = next(tmp_path.rglob("last.ckpt"))
    with pytest.raises(Exception, match="extra"):
        il.Trainer(max_epochs=2, **flags).fit(_module(extra=True, strict=True), loader(16, 8), ckpt_path=last)
    resumed = _module(extra=True, strict=False)
    il.Trainer(max_epochs=2, **flags).fit(resumed, loader(16, 8), ckpt_path=last)
    assert resumed.current_epoch == 2 and float(resumed.model.extra) == 1.0
    loaded = type(_module(extra=True, strict=False)).load_from_checkpoint(last)
    assert loaded.strict_loading is False and float(loaded.model.extra) == 1.0
