"""trainer.fit(torch.compile(model)): the module inside is trained through its compiled forward and steps."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

import interlock
from conftest import TinyModule, loader, only


def test_a_compiled_module_trains_as_the_plain_one_through_the_compiled_callables(tmp_path: Path) -> None:
    """Weights equal the uncompiled run's bitwise (eager backend), the backend compiled graphs, and test runs."""
    graphs: list[Any] = []

    def backend(gm: torch.fx.GraphModule, inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch.manual_seed(0)
    plain = TinyModule()
    torch.manual_seed(0)
    inner = TinyModule()
    interlock.Trainer(max_epochs=2, **only(), default_root_dir=tmp_path / "a").fit(plain, loader(), loader(32))
    trainer = interlock.Trainer(max_epochs=2, **only(), default_root_dir=tmp_path / "b")
    compiled = torch.compile(inner, backend=backend)
    trainer.fit(compiled, loader(), loader(32))
    assert graphs
    for (k, a), b in zip(plain.state_dict().items(), inner.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    assert trainer.test(compiled, loader(), verbose=False) == trainer.test(plain, loader(), verbose=False)
    assert not hasattr(copy.deepcopy(inner).__dict__.get("forward"), "__wrapped__")  # a copy is the plain module
