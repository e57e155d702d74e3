"""Checkpoints outside the trainer: load_checkpoint, save_hyperparameters/load_from_checkpoint, convert, Lightning."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interlock
from conftest import loader, only
from interlock.cli.main import main
from interlock.listeners import ModelCheckpoint

PL_SCRIPT = """
import argparse, sys
import torch
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset


class PLNet(pl.LightningModule):
    def __init__(self, hidden=8, lr=0.1, opts=None):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


out = sys.argv[1]
torch.manual_seed(0)
x = torch.randn(32, 4)
y = (x[:, 0] > 0).long()
for name, opts in (("plain", None), ("namespace", argparse.Namespace(depth=2))):
    model = PLNet(hidden=6, opts=opts)
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=out, accelerator="cpu")
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=8))
    trainer.save_checkpoint(f"{out}/{name}.ckpt")
    torch.save(model.state_dict(), f"{out}/{name}.weights.pt")
"""


class Net(interlock.Module):
    """The interlock port of PLNet: same layer names, plain hyper-parameters."""

    def __init__(self, hidden: int = 8, lr: float = 0.1, opts: Any = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


@pytest.fixture(scope="module")
def lightning_ckpts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Checkpoints written by pytorch-lightning itself (a plain one and one whose hparams hold a Namespace)."""
    pytest.importorskip("pytorch_lightning")
    out = tmp_path_factory.mktemp("pl")
    script = out / "make.py"
    script.write_text(textwrap.dedent(PL_SCRIPT), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Net, interlock.Trainer]:
    """One short interlock fit of Net(hidden=5, lr=0.2), its last.ckpt, module and trainer."""
    root = tmp_path_factory.mktemp("fit")
    torch.manual_seed(0)
    module = Net(hidden=5, lr=0.2)
    trainer = interlock.Trainer(
        max_epochs=2, accelerator="cpu", default_root_dir=root, **only(ModelCheckpoint(save_last=True))
    )
    trainer.fit(module, loader())
    return next(root.rglob("last.ckpt")), module, trainer


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=30, deadline=None)
@given(value=plain)
def test_save_hyperparameters_records_plain_init_arguments(value: Any) -> None:
    """Every plain __init__ argument is recorded (a copy), readable as a key and an attribute."""
    module = Net(hidden=3, opts=value)
    assert module.hparams == {"hidden": 3, "lr": 0.1, "opts": value}
    assert module.hparams.hidden == 3


def test_save_hyperparameters_names_ignore_and_refusals() -> None:
    """`names` keep some, `ignore` drops some; an object is refused by name with the ignore=[...] fix."""

    class Pick(interlock.Module):
        def __init__(self, a: int = 1, b: Any = None, **extra: Any) -> None:
            super().__init__()
            self.save_hyperparameters(ignore=["b"])

    assert Pick(b=torch.nn.Linear(1, 1), c=3).hparams == {"a": 1, "c": 3}
    with pytest.raises(ValueError, match=r"argument 'opts' holds a torch.nn.modules.linear.Linear.*ignore=\['opts'\]"):
        Net(opts=torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match="argument 'opts' holds a dict with the non-str key 1"):
        Net(opts={1: 2})
    assert interlock.Module().hparams == {}


def test_load_checkpoint_returns_a_plain_dict_with_lightning_names(
    trained: tuple[Path, Net, interlock.Trainer],
) -> None:
    """Weights under state_dict, hyper-parameters, epoch, global_step and the trainer state, as plain data."""
    path, module, trainer = trained
    ckpt = interlock.load_checkpoint(path)
    assert _equal(ckpt["state_dict"], module.state_dict())
    assert ckpt["hyper_parameters"] == {"hidden": 5, "lr": 0.2, "opts": None}
    assert (ckpt["epoch"], ckpt["global_step"]) == (trainer.state.epoch, trainer.state.global_step) == (1, 8)
    assert ckpt["trainer_state"]["progress"]["global_step"] == 8 and len(ckpt["optimizer_states"]) == 1
    assert type(ckpt) is dict


def test_load_checkpoint_errors_name_the_file(tmp_path: Path, trained: tuple[Path, Net, interlock.Trainer]) -> None:
    """Missing, corrupt and foreign files are a CheckpointError that names the file."""
    missing = tmp_path / "missing.ckpt"
    with pytest.raises(interlock.CheckpointError, match=f"no checkpoint at {missing}"):
        interlock.load_checkpoint(missing)
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(trained[0].read_bytes()[:-10])
    with pytest.raises(interlock.CheckpointError, match=f"{cut} is truncated"):
        interlock.load_checkpoint(cut)
    plain = tmp_path / "plain.pt"
    torch.save({"w": torch.zeros(1)}, plain)
    with pytest.raises(interlock.CheckpointError, match=f"{plain} is not an interlock checkpoint"):
        interlock.load_checkpoint(plain)


def test_load_from_checkpoint_rebuilds_from_hparams_in_training_mode(
    trained: tuple[Path, Net, interlock.Trainer],
) -> None:
    """The module comes back with the saved hyper-parameters (init_args override), its weights, in training mode."""
    path, module, _ = trained
    loaded = Net.load_from_checkpoint(path)
    assert loaded.training and loaded.hparams.hidden == 5  # as Lightning's: .eval() is the caller's
    loaded.eval()
    assert _equal(loaded.state_dict(), module.state_dict())
    x = torch.randn(3, 4)
    assert torch.equal(loaded(x), module.eval()(x))
    assert Net.load_from_checkpoint(path, lr=0.5, map_location="cpu").hparams.lr == 0.5
    with pytest.raises(interlock.CheckpointError, match="do not fit Net"):
        Net.load_from_checkpoint(path, hidden=7)
    with pytest.raises(RuntimeError, match="do not fit Net"):  # what torch (and so Lightning) raises: caught alike
        Net.load_from_checkpoint(path, hidden=7)
    with pytest.raises(interlock.CheckpointError, match="cannot build Net"):
        Net.load_from_checkpoint(path, nope=1)


def test_convert_writes_a_plain_weights_file(
    trained: tuple[Path, Net, interlock.Trainer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`interlock convert CKPT OUT` writes the bare state dict that torch.load(weights_only=True) reads."""
    path, module, _ = trained
    out = tmp_path / "deep" / "weights.pt"
    assert main(["convert", str(path), str(out)]) == 0
    assert "load_state_dict" in capsys.readouterr().out
    fresh = Net(hidden=5)
    fresh.load_state_dict(torch.load(out, weights_only=True))
    assert _equal(fresh.state_dict(), module.state_dict())
    assert main(["convert", str(path), str(out), "--to", "dcp"]) == 2
    assert main(["convert", str(tmp_path / "none.ckpt"), str(out)]) == 2
    assert "no checkpoint at" in capsys.readouterr().err


def test_fit_with_a_lightning_checkpoint_says_what_to_use(lightning_ckpts: Path, tmp_path: Path) -> None:
    """ckpt_path=<Lightning .ckpt> is refused with the weights-only way to use it."""
    trainer = interlock.Trainer(max_epochs=1, accelerator="cpu", default_root_dir=tmp_path, **only())
    with pytest.raises(interlock.CheckpointError, match=r"PyTorch Lightning checkpoint.*load_lightning_weights"):
        trainer.fit(Net(hidden=6), loader(), ckpt_path=lightning_ckpts / "plain.ckpt")


@pytest.mark.parametrize("name", ["plain", "namespace"])
def test_lightning_weights_load_without_running_code(lightning_ckpts: Path, name: str, tmp_path: Path) -> None:
    """A Lightning checkpoint's weights load bitwise (hparams holding objects too), with a warning; training works."""
    module = Net(hidden=6)
    with pytest.warns(UserWarning, match="do not carry over"):
        assert interlock.load_lightning_weights(module, lightning_ckpts / f"{name}.ckpt") is module
    expected = torch.load(lightning_ckpts / f"{name}.weights.pt", weights_only=True)
    assert _equal(module.state_dict(), expected)
    trainer = interlock.Trainer(max_steps=2, accelerator="cpu", default_root_dir=tmp_path, **only())
    trainer.fit(module, loader())
    assert trainer.state.global_step == 2


def test_load_from_checkpoint_reads_lightning_hparams(lightning_ckpts: Path, tmp_path: Path) -> None:
    """load_from_checkpoint takes a Lightning .ckpt; an hparam that is an object must be given again."""
    loaded = Net.load_from_checkpoint(lightning_ckpts / "plain.ckpt")
    assert loaded.hparams.hidden == 6 and loaded.training
    with pytest.raises(interlock.CheckpointError, match=r"\['opts'\].*load_from_checkpoint\(path, opts=\.\.\.\)"):
        Net.load_from_checkpoint(lightning_ckpts / "namespace.ckpt")
    assert Net.load_from_checkpoint(lightning_ckpts / "namespace.ckpt", opts=None).hparams.hidden == 6
    out = tmp_path / "w.pt"
    assert main(["convert", str(lightning_ckpts / "plain.ckpt"), str(out)]) == 0
    expected = torch.load(lightning_ckpts / "plain.weights.pt", weights_only=True)
    assert _equal(torch.load(out, weights_only=True), expected)


def test_lightning_weights_refuse_other_files(tmp_path: Path) -> None:
    """A file that is not a Lightning checkpoint is refused by name."""
    plain = tmp_path / "plain.pt"
    torch.save({"w": torch.zeros(1)}, plain)
    with pytest.raises(interlock.CheckpointError, match=f"{plain} is not a PyTorch Lightning checkpoint"):
        interlock.load_lightning_weights(Net(), plain)
    with pytest.raises(interlock.CheckpointError, match="no checkpoint at"):
        interlock.load_lightning_weights(Net(), tmp_path / "none.ckpt")
