"""torchmetrics Metric and MetricCollection values in self.log / self.log_dict, with Lightning 2.6.6's semantics:
the batch value (the metric's forward) on step, compute() then reset() at the epoch end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from _lightning_twin import interlock_trainer, lightning_trainer, pl
from conftest import loader

torchmetrics = pytest.importorskip("torchmetrics")


class Body:
    """Accuracy on step and epoch in training, on epoch in validation; a collection in test."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        self.train_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=2, average="micro")
        self.val_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=2, average="micro")
        self.test_metrics = torchmetrics.MetricCollection(
            {
                "acc": torchmetrics.classification.MulticlassAccuracy(num_classes=2, average="micro"),
                "f1": torchmetrics.classification.MulticlassF1Score(num_classes=2, average="macro"),
            },
            prefix="test_",
        )
        self.steps: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        self.steps.append(float(self.train_acc(logits, y)))
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        return torch.nn.functional.cross_entropy(logits, y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.val_acc.update(self(x), y)
        self.log("val_acc", self.val_acc)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.test_metrics.update(self(x), y)
        self.log_dict(self.test_metrics)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)  # type: ignore[attr-defined]


def test_metric_values_match_lightning(tmp_path: Path) -> None:
    """Step values, epoch compute() values, resets between epochs and a logged collection: all as Lightning."""
    lit = type("Lit", (Body, pl.LightningModule), {})()
    port = type("Port", (Body, interlock.Module), {})()
    lt = lightning_trainer(tmp_path / "pl", max_epochs=3, num_sanity_val_steps=0)
    lt.fit(lit, loader(64, 8, shuffle=False), loader(32, 8, seed=1))
    it = interlock_trainer(tmp_path / "il", max_epochs=3)
    it.fit(port, loader(64, 8, shuffle=False), loader(32, 8, seed=1))
    theirs = {k: float(v) for k, v in lt.callback_metrics.items()}
    mine = {k: it.state.metrics[k] for k in theirs}
    assert mine == pytest.approx(theirs, abs=1e-7)
    assert {"train_acc_step", "train_acc_epoch", "val_acc"} <= set(theirs)
    assert port.steps == lit.steps
    epochs = [row["val_acc"] for row in it.state.history if "val_acc" in row]
    assert len(epochs) == 3 and len(set(epochs)) > 1  # reset each epoch: the values are each epoch's own
    assert it.test(port, loader(32, 8, seed=2), verbose=False) == [
        pytest.approx({k: float(v) for k, v in lt.test(lit, loader(32, 8, seed=2), verbose=False)[0].items()})
    ]
    assert not port.test_metrics["acc"]._update_count  # reset after the test epoch


def test_a_metric_updated_in_the_sanity_check_starts_validation_afresh_as_lightning(tmp_path: Path) -> None:
    """The sanity check resets the metric objects it logged: each validation's value is its own, as Lightning's."""
    seen: list[float] = []

    class Record(pl.Callback):  # type: ignore[misc,name-defined]
        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if not trainer.sanity_checking:
                seen.append(float(trainer.callback_metrics["val_acc"]))

    lit = type("Lit", (Body, pl.LightningModule), {})()
    port = type("Port", (Body, interlock.Module), {})()
    lt = lightning_trainer(tmp_path / "pl", max_epochs=2, num_sanity_val_steps=2, callbacks=[Record()])
    lt.fit(lit, loader(64, 8, shuffle=False), loader(32, 8, seed=1))
    it = interlock_trainer(tmp_path / "il", max_epochs=2, num_sanity_val_steps=2)
    it.fit(port, loader(64, 8, shuffle=False), loader(32, 8, seed=1))
    mine = [row["val_acc"] for row in it.state.history if "val_acc" in row]
    assert len(seen) == 2 and mine == pytest.approx(seen, abs=1e-7)


def test_a_collection_in_self_log_names_log_dict() -> None:
    """self.log(name, MetricCollection) is refused naming log_dict (Lightning refuses it too)."""
    m = interlock.Module()
    with pytest.raises(TypeError, match="log_dict"):
        m.log("all", torchmetrics.MetricCollection([torchmetrics.MeanMetric()]))


def test_a_metric_logged_on_step_before_being_called_names_the_fix(tmp_path: Path) -> None:
    """Logging a metric on step that was only updated (no batch value) raises naming on_step=False."""

    class Port(Body, interlock.Module):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            self.train_acc.update(self(x), y)
            self.log("train_acc", self.train_acc)
            return self(x).sum()

    with pytest.raises(ValueError, match="on_step=False"):
        interlock_trainer(tmp_path, max_epochs=1).fit(Port(), loader())


def test_a_callback_reads_the_epochs_metric_values_in_epoch_end_hooks_as_lightning(tmp_path: Path) -> None:
    """In on_validation_epoch_end / on_train_epoch_end a callback's callback_metrics hold the epoch's compute()."""
    import interlock.lightning as il

    def reader(base: type) -> Any:
        class Reader(base):  # type: ignore[misc,valid-type]
            def __init__(self) -> None:
                self.seen: list[tuple[str, dict[str, float]]] = []

            def _read(self, when: str, trainer: Any) -> None:
                wanted = ("train_acc_epoch", "val_acc")
                self.seen.append((when, {k: float(v) for k, v in trainer.callback_metrics.items() if k in wanted}))

            def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
                self._read("validation end", trainer)

            def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
                self._read("epoch end", trainer)

        return Reader()

    theirs, mine = reader(pl.Callback), reader(il.Callback)
    lt = lightning_trainer(tmp_path / "pl", max_epochs=2, num_sanity_val_steps=0, callbacks=[theirs])
    lt.fit(type("Lit", (Body, pl.LightningModule), {})(), loader(64, 8), loader(32, 8, seed=1))
    it = interlock_trainer(tmp_path / "il", max_epochs=2, num_sanity_val_steps=0, listeners=[mine])
    it.fit(type("Port", (Body, interlock.Module), {})(), loader(64, 8), loader(32, 8, seed=1))
    assert [w for w, _ in mine.seen] == [w for w, _ in theirs.seen]
    for (when, got), (_, want) in zip(mine.seen, theirs.seen, strict=True):
        assert got == pytest.approx(want, abs=1e-7), when
    assert set(theirs.seen[0][1]) == {"val_acc"} and set(theirs.seen[1][1]) == {"val_acc", "train_acc_epoch"}
