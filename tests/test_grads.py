"""interlock's zero_grad releases exactly the gradients torch's zero_grad(set_to_none=True) releases, span and all."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader
from interlock.plugins import grads

QUIET: dict[str, Any] = {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False}
SPAN = "Optimizer.zero_grad#"


def _params(shapes: list[int], with_grad: list[bool]) -> list[torch.nn.Parameter]:
    out = []
    for i, (n, g) in enumerate(zip(shapes, with_grad, strict=True)):
        p = torch.nn.Parameter(torch.full((n,), float(i)))
        if g:
            p.grad = torch.full((n,), float(i) + 0.5)
        out.append(p)
    return out


@st.composite
def setups(draw: st.DrawFn) -> tuple[list[int], list[int], list[bool], int]:
    """Shapes of 1-8 parameters, their split into 1-3 param groups, which have a gradient, and how many stay out."""
    n = draw(st.integers(1, 8))
    shapes = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    with_grad = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    outside = draw(st.integers(0, n - 1))
    cuts = sorted(draw(st.lists(st.integers(1, max(n - outside, 1)), max_size=2)))
    return shapes, cuts, with_grad, outside


def _optimizer(params: list[torch.nn.Parameter], cuts: list[int], outside: int, kind: str) -> torch.optim.Optimizer:
    inside = params[outside:]
    bounds = [0, *[c for c in cuts if 0 < c < len(inside)], len(inside)]
    groups = [{"params": inside[a:b]} for a, b in itertools.pairwise(bounds) if b > a]
    return torch.optim.SGD(groups, lr=0.1) if kind == "sgd" else torch.optim.Adam(groups, lr=0.1)


@settings(max_examples=60, deadline=None)
@given(setups(), st.sampled_from(["sgd", "adam"]))
def test_it_releases_what_torch_releases(setup: tuple[list[int], list[int], list[bool], int], kind: str) -> None:
    """Over drawn param groups, interlock's zero_grad leaves every .grad as torch's set_to_none=True leaves it."""
    shapes, cuts, with_grad, outside = setup
    ours, theirs = _params(shapes, with_grad), _params(shapes, with_grad)
    grads.zero_grad(_optimizer(ours, cuts, outside, kind))
    _optimizer(theirs, cuts, outside, kind).zero_grad(set_to_none=True)
    for a, b in zip(ours, theirs, strict=True):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            assert torch.equal(a.grad, b.grad)  # a parameter outside the optimizer keeps its gradient
    assert any(p.grad is not None for p in ours) == any(g for g in with_grad[:outside])


def _count_spans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the names of torch's record_function spans opened from now on."""
    opened: list[str] = []
    real = torch.autograd.profiler.record_function

    def counting(name: str, *args: Any) -> Any:
        opened.append(name)
        return real(name, *args)

    monkeypatch.setattr(torch.autograd.profiler, "record_function", counting)
    return opened


def test_without_a_profiler_no_span_is_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no profiler on, the gradients are released without torch's per-call span (the point of it)."""
    opened = _count_spans(monkeypatch)
    (p,) = _params([3], [True])
    opt = torch.optim.SGD([p], lr=0.1)
    grads.zero_grad(opt)
    assert p.grad is None and opened == []
    opt.zero_grad()  # the check can fail: torch's own call opens its span
    assert [n for n in opened if n.startswith(SPAN)] == ["Optimizer.zero_grad#SGD.zero_grad"]


def test_an_overriding_optimizer_runs_its_own_zero_grad() -> None:
    """An optimizer class with its own zero_grad, or an instance given one, is called with set_to_none=True."""
    calls: list[Any] = []

    class Mine(torch.optim.SGD):
        def zero_grad(self, set_to_none: bool = True) -> None:
            calls.append(("class", set_to_none))

    (p,) = _params([2], [True])
    grads.zero_grad(Mine([p], lr=0.1))
    assert calls == [("class", True)] and p.grad is not None
    opt = torch.optim.SGD([p], lr=0.1)
    opt.zero_grad = lambda set_to_none=True: calls.append(("instance", set_to_none))  # type: ignore[method-assign]
    grads.zero_grad(opt)
    assert calls[-1] == ("instance", True) and p.grad is not None


def test_under_a_profiler_torch_zero_grad_runs_with_its_span() -> None:
    """Under torch.profiler the optimizer's own zero_grad runs, so its span is in the trace as before."""
    (p,) = _params([2], [True])
    opt = torch.optim.SGD([p], lr=0.1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        grads.zero_grad(opt)
    assert p.grad is None
    assert any(e.name == "Optimizer.zero_grad#SGD.zero_grad" for e in prof.events())


def test_it_follows_param_groups_rebound_by_load_state_dict() -> None:
    """After load_state_dict rebinds param_groups, and after add_param_group, every group's gradients go."""
    a, b = _params([2, 2], [True, True])
    opt = torch.optim.SGD([a], lr=0.1)
    opt.load_state_dict(torch.optim.SGD([a], lr=0.5).state_dict())
    opt.add_param_group({"params": [b]})
    grads.zero_grad(opt)
    assert a.grad is None and b.grad is None


@pytest.mark.parametrize("lightning", [False, True])
def test_a_fit_under_the_profiler_shows_each_zero_grad(lightning: bool) -> None:
    """A fit run under torch.profiler has one zero_grad span per optimizer step, native or LightningModule."""
    if lightning:
        import interlock.lightning as il

        class Lit(il.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.layer = torch.nn.Linear(4, 2)

            def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
                x, y = batch
                return torch.nn.functional.cross_entropy(self.layer(x), y)

            def configure_optimizers(self) -> Any:
                return torch.optim.SGD(self.parameters(), lr=0.1)

        module: Any = Lit()
        trainer: Any = il.Trainer(max_steps=3, num_sanity_val_steps=0, **QUIET)
    else:
        module = TinyModule()
        trainer = interlock.Trainer(max_steps=3, num_sanity_val_steps=0, **QUIET)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        trainer.fit(module, loader())
    spans = [e for e in prof.events() if e.name.startswith(SPAN)]
    # native: zeroed after each of the 3 steps; a LightningModule: before each of the 3 backwards (Lightning's order)
    assert len(spans) == 3
