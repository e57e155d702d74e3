"""ModelSummary: the layer table printed at the start of a fit, against Lightning's."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

import interlock
from conftest import TinyModule, loader, only
from interlock.core.events import Event
from interlock.core.state import TrainerState
from interlock.core.summary import describe, human_count
from interlock.listeners import ModelSummary

pl = pytest.importorskip("pytorch_lightning")


def build(module: torch.nn.Module) -> torch.nn.Module:
    """Give ``module`` nested layers, a frozen weight, a layer in eval mode and a parameter of its own."""
    torch.manual_seed(0)
    module.net = torch.nn.Sequential(  # type: ignore[assignment]
        torch.nn.Linear(4, 64),
        torch.nn.BatchNorm1d(64),
        torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(64, 40)),
        torch.nn.Linear(40, 2),
    )
    module.head = torch.nn.Linear(2, 2)
    module.head.weight.requires_grad_(False)
    module.drop = torch.nn.Dropout(0.1)
    module.drop.eval()
    module.scale = torch.nn.Parameter(torch.ones(3))
    return module


class Ours(interlock.Module):
    def __init__(self) -> None:
        super().__init__()
        build(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.net(x))  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Theirs(pl.LightningModule):  # type: ignore[misc,name-defined]
    def __init__(self) -> None:
        super().__init__()
        build(self)

    forward = Ours.forward


def parse(table: str) -> tuple[list[tuple[str, ...]], dict[str, str]]:
    """The rows (index, name, type, params, mode) and the totals (label -> value) of a summary table."""
    rows, totals = [], {}
    for line in table.strip().splitlines():
        if line.startswith("-") or "| Name" in line:
            continue
        if "|" in line:
            rows.append(tuple(cell.strip() for cell in line.split("|"))[:5])
        else:
            value, label = re.match(r"(\S+(?: [KMBT])?)\s+(.*)", line).groups()  # type: ignore[union-attr]
            totals[label] = value
    return rows, totals


@pytest.mark.parametrize("example", [False, True])
@pytest.mark.parametrize("depth", [1, 2, -1])
def test_the_printed_table_equals_lightnings(tmp_path: Any, capsys: Any, depth: int, example: bool) -> None:
    """A fit prints Lightning's table byte for byte: rows, FLOPs and sizes of example_input_array, totals."""
    trainer = interlock.Trainer(
        max_epochs=1, limit_train_batches=1, default_root_dir=tmp_path, **only(ModelSummary(max_depth=depth))
    )
    module, twin = Ours(), Theirs()
    if example:
        module.example_input_array = twin.example_input_array = torch.zeros(3, 4)
    trainer.fit(module, loader(16, 8))
    ours = capsys.readouterr().out
    theirs = str(pl.utilities.model_summary.ModelSummary(twin, max_depth=depth))
    assert ours == theirs + "\n"
    assert ("In sizes" in ours) is example and ("Total Flops" in ours)
    rows, totals = parse(ours)
    assert totals["Total params"] == human_count(sum(p.numel() for p in Ours().parameters()))
    assert ("other params" in [r[1] for r in rows]) is (depth == 1)  # the module's own `scale`


@pytest.mark.parametrize("n", [0, 7, 999, 1000, 1234, 99_999, 100_000, 2_000_000, 3 * 10**9, 4 * 10**14, 5 * 10**15])
def test_counts_are_abbreviated_as_lightnings(n: int) -> None:
    """Parameter counts read 123, 1.2 K, 2.0 M, 400 T, 5,000 T as in Lightning."""
    from pytorch_lightning.utilities.model_summary.model_summary import get_human_readable_count

    assert human_count(n) == get_human_readable_count(n)


def test_the_default_trainer_prints_one_table_and_false_prints_none(tmp_path: Any, capsys: Any) -> None:
    """enable_model_summary defaults to True; False prints nothing; a ModelSummary passed replaces the default."""
    quiet = {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False, "enable_trace": False}
    for flags, tables in (({}, 1), ({"enable_model_summary": False}, 0), ({"listeners": [ModelSummary(-1)]}, 1)):
        trainer = interlock.Trainer(max_epochs=1, limit_train_batches=1, default_root_dir=tmp_path, **quiet, **flags)
        trainer.fit(TinyModule(), loader(16, 8))
        out = capsys.readouterr().out
        assert out.count("Trainable params") == tables, flags
        assert [type(x).__name__ for x in trainer.listeners].count("ModelSummary") == tables
    assert "net.0" in out  # the deep table of the listener passed, not the default's depth 1


def test_max_depth_zero_and_other_ranks_print_nothing(capsys: Any) -> None:
    """max_depth=0 prints no table, and neither does a process that is not rank 0."""
    summary = describe(TinyModule())
    event = Event("fit.start", "fit", "setup", 1, 0, 0, 0, {"summary": summary})
    ModelSummary(max_depth=0).on_fit_start(event, TrainerState())
    ModelSummary().on_fit_start(event, TrainerState(global_rank=1, world_size=2))
    assert capsys.readouterr().out == ""
    ModelSummary().on_fit_start(event, TrainerState())
    assert "Trainable params" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [-2, 1.5, True, "1"])
def test_bad_arguments_are_refused(bad: Any) -> None:
    """A max_depth below -1 or not an int, and an enable_model_summary not a bool, raise naming the value."""
    with pytest.raises(ValueError, match=re.escape(f"max_depth={bad!r}")):
        ModelSummary(max_depth=bad)
    if not isinstance(bad, bool):
        with pytest.raises(ValueError, match=re.escape(f"enable_model_summary={bad!r}")):
            interlock.Trainer(enable_model_summary=bad)


def test_sixteen_bit_weights_halve_the_estimated_size() -> None:
    """The size estimate counts the precision's bits per parameter, as Lightning's (16-true: 2 bytes)."""
    module = TinyModule()
    n = sum(p.numel() for p in module.parameters())
    assert describe(module, "16-true").size_mb == pytest.approx(n * 2e-6)
    assert describe(module, "16-mixed").size_mb == pytest.approx(n * 4e-6)


def test_the_example_pass_puts_every_mode_back_and_a_sharded_module_is_described_without_it() -> None:
    """describe() runs example_input_array in eval mode and restores each submodule's mode; example=False skips it."""
    module = Ours()
    module.example_input_array = torch.zeros(3, 4)
    modes = [m.training for m in module.modules()]
    summary = describe(module)
    assert [m.training for m in module.modules()] == modes and not module.drop.training
    assert summary.total_flops > 0 and summary.sizes is not None
    assert summary.sizes[0] == ([3, 4], [3, 2]) and summary.sizes[-1] == ("?", "?")  # net; drop is never called
    bare = describe(module, example=False)
    assert (bare.total_flops, bare.sizes, bare.flops) == (0, None, ())
