"""What a training step returns, as Lightning treats it: None skips the backward, on_train_batch_end gets a dict
whose loss is detached (and divided by the accumulation), on_before_backward gets the divided loss."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock
from _together import run_script
from conftest import TinyModule, loader, only

pl = pytest.importorskip("pytorch_lightning")


def _data(n: int = 16, seed: int = 0) -> DataLoader[Any]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=4)


def _described(outputs: Any) -> Any:
    if not isinstance(outputs, dict):
        return type(outputs).__name__
    return {k: (float(v), v.requires_grad) if isinstance(v, torch.Tensor) else v for k, v in outputs.items()}


class Recording:
    """The hooks that see the step's outputs and loss; each step class below adds training_step."""

    def _build(self: Any) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 3)
        self.rec: list[tuple[Any, ...]] = []

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def configure_optimizers(self: Any) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def _loss(self: Any, batch: Any) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

    def on_train_batch_end(self: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.rec.append(("on_train_batch_end", batch_idx, _described(outputs)))

    def on_before_backward(self: Any, loss: torch.Tensor) -> None:
        self.rec.append(("on_before_backward", float(loss), loss.requires_grad))

    def on_after_backward(self: Any) -> None:
        self.rec.append(("on_after_backward",))

    def on_before_optimizer_step(self: Any, optimizer: Any) -> None:
        self.rec.append(("on_before_optimizer_step",))


class ReturnsNone(Recording):
    def training_step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor | None:
        return None if batch_idx % 2 else self._loss(batch)


class ReturnsTensor(Recording):
    def training_step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._loss(batch)  # type: ignore[no-any-return]


class ReturnsDict(Recording):
    def training_step(self: Any, batch: Any, batch_idx: int) -> dict[str, Any]:
        return {"loss": self._loss(batch), "extra": torch.tensor(float(batch_idx)), "tag": "x"}


class Manual(Recording):
    def _build(self: Any) -> None:
        super()._build()
        self.automatic_optimization = False

    def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
        opt = self.optimizers()
        loss = self._loss(batch)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return {"loss": loss, "n": 3} if batch_idx % 2 else loss


def _fit(make: Any, cls: Any, callback_base: type, root: Path, accumulate: int) -> tuple[Any, ...]:
    seen: list[Any] = []

    class Callback(callback_base):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen.append(_described(outputs))

    module = cls()
    trainer = make(
        max_epochs=2, accumulate_grad_batches=accumulate, callbacks=[Callback()], logger=False,
        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False, accelerator="cpu",
        default_root_dir=root,
    )  # fmt: skip
    trainer.fit(module, _data())
    return module.rec, seen, trainer.global_step, [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize(
    ("step", "accumulate"),
    [(ReturnsNone, 1), (ReturnsNone, 2), (ReturnsTensor, 1), (ReturnsTensor, 2), (ReturnsDict, 2), (Manual, 1)],
)
def test_step_outputs_reach_the_hooks_as_in_lightning(tmp_path: Path, step: type, accumulate: int) -> None:
    """The module's and a callback's hooks see the same outputs and losses, in the same order, and the weights and
    global_step end equal, under both frameworks."""
    import interlock.lightning as il
    from _twins import twins

    warnings.filterwarnings("ignore", module="pytorch_lightning")
    lit, ours = twins(step)
    theirs = _fit(pl.Trainer, lit, pl.Callback, tmp_path / "pl", accumulate)
    mine = _fit(il.Trainer, ours, il.Callback, tmp_path / "il", accumulate)
    assert mine[:3] == theirs[:3]
    assert all(torch.equal(a, b) for a, b in zip(mine[3], theirs[3], strict=True))


def test_a_step_returning_none_under_16_mixed_skips_the_scaler_step(tmp_path: Path) -> None:
    """With loss scaling, a step that returned None leaves the weights and the scale as they were (no inf check)."""

    class Skips(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:  # type: ignore[override]
            return None if batch_idx == 1 else super().training_step(batch, batch_idx)

    torch.manual_seed(0)
    module = Skips()
    trainer = interlock.Trainer(max_steps=1, precision="16-mixed", **only(), default_root_dir=tmp_path / "a")
    trainer.fit(module, loader())
    after_one = [p.detach().clone() for p in module.parameters()]
    scale = trainer.hardware.precision.scaler.get_scale()  # type: ignore[union-attr]
    trainer = interlock.Trainer(max_steps=2, precision="16-mixed", **only(), default_root_dir=tmp_path / "b")
    torch.manual_seed(0)
    module = Skips()
    trainer.fit(module, loader())
    assert trainer.state.global_step == 2
    assert all(torch.equal(a, b) for a, b in zip(after_one, module.parameters(), strict=True))
    assert trainer.hardware.precision.scaler.get_scale() == scale  # type: ignore[union-attr]


SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    import interlock

    class Skips(interlock.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return None if batch_idx == 1 else self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    if __name__ == "__main__":
        data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
        trainer = interlock.Trainer(
            accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1, num_sanity_val_steps=0,
            logger=False, enable_trace=False, enable_progress_bar=False, enable_checkpointing=False,
            default_root_dir=sys.argv[1],
        )
        trainer.fit(Skips(), data)
    """
)


def test_a_step_returning_none_under_ddp_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """Two processes: training_step returning None is Lightning's RuntimeError naming the fix, not a wait forever."""
    done = run_script(tmp_path, SCRIPT)
    assert done.returncode != 0
    assert "training_step returned None" in done.stderr and "multiply it by 0" in done.stderr, done.stderr[-2000:]
