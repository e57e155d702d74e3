"""The learning-rate finder: Lightning's sweep and suggestion, the weights restored, a plot in the run directory."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from _lightning_twin import LitTwin, Twin, lightning_trainer, loader
from interlock.cli.main import main
from interlock.tuner import lr_find

pl = pytest.importorskip("pytorch_lightning")


def ours_and_theirs(tmp_path: Path, **sweep: Any) -> tuple[Any, Any]:
    """The same sweep by interlock.tuner.lr_find and by Lightning's Tuner.lr_find (same seed, model, data)."""
    trainer = interlock.Trainer(max_epochs=50, default_root_dir=tmp_path / "ours", accelerator="cpu")
    ours = lr_find(trainer, Twin(), loader(40, batch_size=4), **sweep)
    from pytorch_lightning.tuner import Tuner

    theirs = Tuner(lightning_trainer(tmp_path / "pl", max_epochs=50)).lr_find(
        LitTwin(), loader(40, batch_size=4), update_attr=False, **sweep
    )
    return ours, theirs


@pytest.mark.parametrize(
    "sweep",
    [
        {"num_training": 60},
        {"num_training": 40, "mode": "linear", "max_lr": 0.5},
        {"num_training": 80, "min_lr": 1e-4, "max_lr": 50.0},  # the loss diverges: the sweep stops early
        {"num_training": 30, "early_stop_threshold": None, "max_lr": 50.0},
    ],
)
def test_rates_losses_and_suggestion_equal_lightnings(tmp_path: Path, sweep: dict[str, Any]) -> None:
    """Every rate tried, every smoothed loss and the suggested rate equal Lightning's exactly."""
    ours, theirs = ours_and_theirs(tmp_path, **sweep)
    assert ours.results["lr"] == theirs.results["lr"]
    assert [round(x, 12) for x in ours.results["loss"]] == [round(x, 12) for x in theirs.results["loss"]]
    assert ours.suggestion() == theirs.suggestion()
    if sweep.get("max_lr") == 50.0 and sweep.get("early_stop_threshold", 4.0) is not None:
        assert len(ours.results["lr"]) < sweep["num_training"]


def test_the_module_is_unchanged_and_the_plot_is_written(tmp_path: Path) -> None:
    """After the sweep the weights and each part's training mode are as before; lr_find.svg marks the suggestion."""
    module = Twin()
    module.layer.eval()  # a frozen part, the module itself training
    before = {k: v.clone() for k, v in module.state_dict().items()}
    trainer = interlock.Trainer(max_epochs=50, default_root_dir=tmp_path, accelerator="cpu")
    finder = lr_find(trainer, module, loader(40, batch_size=4), num_training=50)
    assert finder is not None
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    assert module.training and not module.layer.training
    svg = ET.parse(Path(finder.run_dir) / "lr_find.svg").getroot()
    ns = "{http://www.w3.org/2000/svg}"
    points = svg.find(f"{ns}polyline").get("points").split()  # type: ignore[union-attr]
    assert len(points) == sum(math.isfinite(x) for x in finder.results["loss"])
    assert "suggested lr" in svg.find(f"{ns}circle/{ns}title").text  # type: ignore[union-attr,operator]
    # the trainer given is untouched: its own fit starts at step 0 with its own listeners
    trainer.fit(module, loader(8, batch_size=4))
    assert trainer.state.global_step == 50 * 2


class WithLr(Twin):
    def __init__(self) -> None:
        super().__init__()
        self.lr = 0.1

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def test_update_attr_sets_the_modules_rate(tmp_path: Path) -> None:
    """update_attr=True writes the suggestion to module.lr; without such an attribute it is an error naming it."""
    module = WithLr()
    finder = lr_find(
        {"max_epochs": 50, "default_root_dir": tmp_path}, module, loader(40, batch_size=4), update_attr=True
    )
    assert finder is not None and module.lr == finder.suggestion() != 0.1
    with pytest.raises(AttributeError, match="'lr' or 'learning_rate'"):
        lr_find({"default_root_dir": tmp_path}, Twin(), loader(8, batch_size=4), update_attr=True)


def test_lightnings_tuner_name(tmp_path: Path) -> None:
    """interlock.lightning.tuner.Tuner(trainer).lr_find(model, loader) sweeps and updates model.lr by default."""
    from interlock.lightning import Trainer
    from interlock.lightning.tuner import Tuner

    module = WithLr()
    trainer = Trainer(max_epochs=50, default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    finder = Tuner(trainer).lr_find(module, loader(40, batch_size=4), num_training=40)
    assert finder is not None and module.lr == finder.suggestion()
    with pytest.raises(ValueError, match="method='validate'"):
        Tuner(trainer).lr_find(module, loader(40, batch_size=4), method="validate")
    with pytest.raises(NotImplementedError, match="batch-size finder"):
        Tuner(trainer).scale_batch_size(module)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"mode": "cosine"}, "mode='cosine'"),
        ({"min_lr": 1.0, "max_lr": 0.1}, "min_lr must be below max_lr"),
        ({"num_training": 0}, "num_training=0"),
        ({"min_lr": -1.0}, "min_lr=-1.0"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, kwargs: dict[str, Any], says: str) -> None:
    """A bad sweep argument raises before anything runs, naming it."""
    with pytest.raises(ValueError, match=says):
        lr_find({"default_root_dir": tmp_path}, Twin(), loader(8, batch_size=4), **kwargs)
    assert not (tmp_path / "runs").exists()


def test_fast_dev_run_skips_the_sweep(tmp_path: Path) -> None:
    """As Lightning: under fast_dev_run the finder warns and returns None."""
    with pytest.warns(UserWarning, match="fast_dev_run"):
        assert lr_find({"fast_dev_run": True, "default_root_dir": tmp_path}, Twin(), loader(8, batch_size=4)) is None


def test_the_cli_command_prints_the_suggestion(tmp_path: Path, capsys: Any) -> None:
    """`interlock lr-find` sweeps the configured model and prints the suggested rate and the plot's path."""
    args = ["lr-find", "--num_training", "20", "--trainer.max_epochs", "2", "--trainer.default_root_dir", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "suggested learning rate: " in out
    plot = Path(out.split("plot: ")[1].strip())
    assert plot.is_file() and plot.parent.parent == tmp_path / "runs"
