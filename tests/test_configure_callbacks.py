"""The module's configure_callbacks(): its listeners join the trainer's, replacing those of their type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import interlock
from conftest import TinyModule, loader, only
from interlock.listeners import EarlyStopping, ModelCheckpoint


class WithCallbacks(TinyModule):
    """Brings an early stop that fires at once and its own checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.stop = EarlyStopping("val_loss", patience=0, min_delta=10.0)
        self.ckpt = ModelCheckpoint(monitor="val_loss", key="module_ckpt")

    def configure_callbacks(self) -> Any:
        return [self.stop, self.ckpt]


def test_configure_callbacks_adds_and_replaces_by_type(tmp_path: Path) -> None:
    """The module's EarlyStopping stops the fit; its ModelCheckpoint replaces the trainer's and runs last."""
    default = ModelCheckpoint(save_last=True)
    trainer = interlock.Trainer(max_epochs=5, **only(default), default_root_dir=tmp_path)
    m = WithCallbacks()
    trainer.fit(m, loader(), loader(32))
    assert trainer.state.progress.epoch == 1  # stopped by patience=0 after the second epoch's validation
    assert default not in trainer.listeners and trainer.listeners[-1] is m.ckpt and m.stop in trainer.listeners
    assert m.ckpt.best_model_path(trainer.state)
    sources = {s.source for s in trainer.bus.handlers("fit.train.val.end")}
    assert default.key not in sources and "module_ckpt" in sources


def test_configure_callbacks_rejects_other_objects(tmp_path: Path) -> None:
    """Returning something that is not a listener is an error naming the method."""

    class Bad(TinyModule):
        def configure_callbacks(self) -> Any:
            return [object()]

    with pytest.raises(TypeError, match=r"Bad\.configure_callbacks\(\) returned"):
        interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path).fit(Bad(), loader())
