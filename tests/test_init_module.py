"""trainer.init_module() makes tensors in the run's dtype and device, skips init on request, restores the default."""

from __future__ import annotations

import pytest
import torch

import interlock
from conftest import TinyModule, loader

QUIET = {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False}


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [
        ("64-true", torch.float64),
        ("bf16-true", torch.bfloat16),
        ("32-true", torch.float32),
        ("bf16-mixed", torch.float32),
    ],
)
def test_a_module_is_made_in_the_precisions_dtype(precision: str, dtype: torch.dtype) -> None:
    """Parameters are made in a *-true flag's dtype (mixed flags keep float32), and the default dtype comes back."""
    trainer = interlock.Trainer(precision=precision, accelerator="cpu", **QUIET)
    with trainer.init_module():
        made = torch.nn.Linear(4, 2)
        inside = torch.get_default_dtype()
    assert made.weight.dtype == dtype and made.weight.device.type == "cpu"
    assert inside == (dtype if dtype.is_floating_point else torch.float32)
    assert torch.get_default_dtype() == torch.float32


def test_the_initial_weights_are_drawn_in_that_dtype() -> None:
    """Made under 64-true, the weights are drawn in float64: not the float32 draw cast up."""
    torch.manual_seed(0)
    with interlock.Trainer(precision="64-true", accelerator="cpu", **QUIET).init_module():
        wide = torch.nn.Linear(64, 64).weight.detach()
    torch.manual_seed(0)
    narrow = torch.nn.Linear(64, 64).weight.detach()
    assert wide.dtype == torch.float64 and not torch.equal(wide, narrow.double())  # float64's own draw, as Lightning's


def test_empty_init_draws_nothing_and_the_module_trains_after_loading() -> None:
    """With empty_init=True no torch.nn.init runs (the RNG is where it was); loaded weights then train as usual."""
    trainer = interlock.Trainer(max_epochs=1, accelerator="cpu", **QUIET)
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    with trainer.init_module(empty_init=True):
        empty = TinyModule()
    assert torch.equal(torch.rand(3), expected)  # a module made without it draws its weights first
    torch.manual_seed(0)
    source = TinyModule()
    empty.load_state_dict(source.state_dict())
    trainer.fit(empty, loader())
    torch.manual_seed(0)
    reference = TinyModule()
    interlock.Trainer(max_epochs=1, accelerator="cpu", **QUIET).fit(reference, loader())
    for a, b in zip(empty.state_dict().values(), reference.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_the_default_dtype_comes_back_after_an_error() -> None:
    """An exception inside the block still restores the default dtype."""
    trainer = interlock.Trainer(precision="64-true", accelerator="cpu", **QUIET)
    with pytest.raises(RuntimeError, match="inside"), trainer.init_module():
        raise RuntimeError("inside")
    assert torch.get_default_dtype() == torch.float32


def test_fsdp_warns_that_the_module_is_made_whole() -> None:
    """Under strategy='fsdp' the block warns, naming configure_model, as Lightning does."""
    trainer = interlock.Trainer(strategy="fsdp", devices=2, accelerator="cpu", **QUIET)
    with pytest.warns(UserWarning, match="configure_model"), trainer.init_module():
        torch.nn.Linear(2, 2)
