"""Lightning's overridable module steps (optimizer_step, optimizer_zero_grad, lr_scheduler_step, backward,
configure_gradient_clipping, the batch-transfer hooks, configure_model, prepare_data): called at Lightning's
moment, with weights bitwise equal to Lightning 2.6.6's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock
from _lightning_twin import interlock_trainer, lightning_trainer, pl

LR = 0.1


def data(n: int = 48, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] - x[:, 2] > 0).long())


def loader(n: int = 48, batch_size: int = 8) -> DataLoader[Any]:
    return DataLoader(data(n), batch_size=batch_size)


class Body:
    """What both sides share: a small MLP, its loss, SGD with momentum, and a record of the calls."""

    optimizer_name = "sgd"

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        self.calls: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.calls.append(f"training_step({batch_idx})")
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        params = self.parameters()  # type: ignore[attr-defined]
        if self.optimizer_name == "lbfgs":
            return torch.optim.LBFGS(params, lr=0.5, max_iter=3)
        if self.optimizer_name == "adam":
            return torch.optim.Adam(params, lr=0.01)
        return torch.optim.SGD(params, lr=LR, momentum=0.9)


class WarmUp(Body):
    """Lightning's documented warm-up: scale the learning rate over the first steps, in optimizer_step."""

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.calls.append(f"optimizer_step({epoch},{batch_idx},{self.global_step})")
        optimizer.step(closure=optimizer_closure)
        if self.global_step < 4:  # type: ignore[attr-defined]
            scale = min(1.0, float(self.global_step + 1) / 4)  # type: ignore[attr-defined]
            for group in optimizer.param_groups:
                group["lr"] = scale * LR


class WarmUpBefore(Body):
    """A warm-up that sets the rate before the step and calls super() (the hook's default)."""

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        for group in optimizer.param_groups:
            group["lr"] = LR * min(1.0, (self.global_step + 1) / 5)  # type: ignore[attr-defined]
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)  # type: ignore[misc]


class KeepGrads(Body):
    """optimizer_zero_grad keeping zeros (set_to_none=False), recorded with its arguments."""

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self.calls.append(f"optimizer_zero_grad({epoch},{batch_idx})")
        optimizer.zero_grad(set_to_none=False)


class NoZero(Body):
    """optimizer_zero_grad that never zeroes: gradients accumulate over the whole run (Lightning honours it)."""

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self.calls.append("optimizer_zero_grad")


class HalfBackward(Body):
    """backward through half the loss (the hook gets the accumulation-divided loss)."""

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.calls.append("backward")
        (loss * 0.5).backward(*args, **kwargs)


class ClipOwn(Body):
    """configure_gradient_clipping clipping by value on even steps only, and recording the Trainer's flags."""

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None
    ) -> None:
        self.calls.append(
            f"clip({gradient_clip_val},{getattr(gradient_clip_algorithm, 'value', gradient_clip_algorithm)})"
        )
        if self.global_step % 2 == 0:  # type: ignore[attr-defined]
            value, algorithm = (
                (0.01, "value") if gradient_clip_val is None else (gradient_clip_val, gradient_clip_algorithm)
            )
            self.clip_gradients(optimizer, gradient_clip_val=value, gradient_clip_algorithm=algorithm)  # type: ignore[attr-defined]


class ClipBare(Body):
    """configure_gradient_clipping calling clip_gradients(optimizer) alone: the Trainer's value and algorithm apply."""

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None
    ) -> None:
        self.calls.append("clip")
        self.clip_gradients(optimizer)  # type: ignore[attr-defined]


class SchedOwn(Body):
    """A step-interval scheduler stepped by lr_scheduler_step only every other call."""

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=LR)  # type: ignore[attr-defined]
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.calls.append(f"lr_scheduler_step({metric})")
        if self.global_step % 2 == 1:  # type: ignore[attr-defined]
            scheduler.step()


class Lbfgs(Body):
    """LBFGS re-evaluates the closure several times per step."""

    optimizer_name = "lbfgs"


def twins(body: type) -> tuple[Any, Any]:
    lit = type(f"Lit{body.__name__}", (body, pl.LightningModule), {})
    port = type(f"Port{body.__name__}", (body, interlock.Module), {})
    return lit(), port()


def fit_both(body: type, tmp_path: Path, **flags: Any) -> tuple[Any, Any]:
    lit, port = twins(body)
    lightning_trainer(tmp_path / "pl", max_epochs=2, num_sanity_val_steps=0, **flags).fit(lit, loader())
    interlock_trainer(tmp_path / "il", max_epochs=2, **flags).fit(port, loader())
    return lit, port


def assert_same_weights(lit: Any, port: Any) -> None:
    mine, theirs = port.state_dict(), lit.state_dict()
    assert mine.keys() == theirs.keys()
    for key in mine:
        assert torch.equal(mine[key], theirs[key]), key


CASES = {
    "warm-up-after-step": (WarmUp, {}),
    "warm-up-before-step-super": (WarmUpBefore, {}),
    "warm-up-accumulate-3": (WarmUp, {"accumulate_grad_batches": 3}),
    "warm-up-clip-norm": (WarmUp, {"gradient_clip_val": 0.05}),
    "zero-grad-keep-zeros-accumulate-2": (KeepGrads, {"accumulate_grad_batches": 2}),
    "zero-grad-never": (NoZero, {}),
    "backward-half": (HalfBackward, {"accumulate_grad_batches": 2}),
    "clip-own": (ClipOwn, {}),
    "clip-own-with-flags": (ClipOwn, {"gradient_clip_val": 0.05, "gradient_clip_algorithm": "norm"}),
    "clip-own-adam-accumulate-2": (
        type("ClipAdam", (ClipOwn,), {"optimizer_name": "adam"}),
        {"accumulate_grad_batches": 2},
    ),
    "clip-bare-trainer-norm": (ClipBare, {"gradient_clip_val": 0.05}),
    "clip-bare-trainer-value": (ClipBare, {"gradient_clip_val": 0.05, "gradient_clip_algorithm": "value"}),
    "clip-bare-no-flags": (ClipBare, {}),
    "clip-flag-zero": (WarmUp, {"gradient_clip_val": 0.0}),
    "clip-flag-zero-int": (Body, {"gradient_clip_val": 0}),
    "lr-scheduler-step-own": (SchedOwn, {}),
    "lbfgs": (Lbfgs, {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_override_trains_bitwise_as_lightning(case: str, tmp_path: Path) -> None:
    """Each override is called where Lightning calls it: the weights and the calls match Lightning's exactly."""
    body, flags = CASES[case]
    lit, port = fit_both(body, tmp_path, **flags)
    assert_same_weights(lit, port)
    assert port.calls == lightning_order_in_interlock(lit.calls)


def lightning_order_in_interlock(calls: list[str]) -> list[str]:
    """Lightning's calls as interlock makes them: optimizer_step after the training step it steps.

    Lightning runs training_step inside optimizer_step (the closure); interlock runs it in the chart's
    step state, before the optimizer_step state (docs/porting.md, the deliberate differences).
    """
    out, i = list(calls), 0
    while i < len(out) - 1:
        if out[i].startswith("optimizer_step(") and out[i + 1].startswith("training_step("):
            out[i], out[i + 1] = out[i + 1], out[i]
            i += 1
        i += 1
    return out


def test_optimizer_step_that_skips_the_closure_is_an_error(tmp_path: Path) -> None:
    """An optimizer_step that never calls optimizer.step(closure) raises naming the fix (Lightning raises too)."""

    class Skip(Body, interlock.Module):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            pass

    with pytest.raises(RuntimeError, match=r"optimizer\.step\(closure=optimizer_closure\)"):
        interlock_trainer(tmp_path, max_epochs=1).fit(Skip(), loader())


def test_manual_backward_goes_through_the_modules_backward(tmp_path: Path) -> None:
    """Under manual optimization self.manual_backward calls the module's backward (Lightning's path)."""

    class Manual(HalfBackward):
        automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:  # type: ignore[override]
            opt = self.optimizers()  # type: ignore[attr-defined]
            opt.zero_grad()
            self.manual_backward(super().training_step(batch, batch_idx))  # type: ignore[attr-defined]
            opt.step()

    lit = type("LitManual", (Manual, pl.LightningModule), {})()
    port = type("PortManual", (Manual, interlock.Module), {})()
    lightning_trainer(tmp_path / "pl", max_epochs=1, num_sanity_val_steps=0).fit(lit, loader())
    interlock_trainer(tmp_path / "il", max_epochs=1).fit(port, loader())
    assert_same_weights(lit, port)
    assert port.calls.count("backward") == 6 and port.calls == lit.calls


class ManualClip(Body):
    """Manual optimization clipping in training_step with clip_gradients(opt, value, algorithm)."""

    automatic_optimization = False
    clip: tuple[Any, Any] = (0.01, "value")

    def training_step(self, batch: Any, batch_idx: int) -> None:  # type: ignore[override]
        opt = self.optimizers()  # type: ignore[attr-defined]
        opt.zero_grad()
        self.manual_backward(super().training_step(batch, batch_idx))  # type: ignore[attr-defined]
        value, algorithm = self.clip
        self.clip_gradients(opt, gradient_clip_val=value, gradient_clip_algorithm=algorithm)  # type: ignore[attr-defined]
        opt.step()


@pytest.mark.parametrize("clip", [(0.01, "Value"), (0.01, "NORM"), (0, None), (0.0, "value"), (None, None)])
def test_clip_gradients_follows_lightnings_rules(clip: tuple[Any, Any], tmp_path: Path) -> None:
    """clip_gradients: the algorithm in any case, 0 or no value clips nothing; weights bitwise as Lightning's."""
    body = type("Clip", (ManualClip,), {"clip": clip})
    lit, port = twins(body)
    lightning_trainer(tmp_path / "pl", max_epochs=1, num_sanity_val_steps=0).fit(lit, loader())
    interlock_trainer(tmp_path / "il", max_epochs=1).fit(port, loader())
    assert_same_weights(lit, port)


@pytest.mark.parametrize(
    ("flags", "call", "match"),
    [
        ({"gradient_clip_val": 0.5}, {"gradient_clip_val": 0.01}, "gradient_clip_val"),
        ({"gradient_clip_algorithm": "value"}, {"gradient_clip_algorithm": "norm"}, "gradient_clip_algorithm"),
        ({}, {"gradient_clip_val": "0.5"}, "int or a float"),
    ],
)
def test_clip_gradients_refuses_what_lightning_refuses(
    flags: dict[str, Any], call: dict[str, Any], match: str, tmp_path: Path
) -> None:
    """A value or algorithm the Trainer sets differently, or a value that is not a number: an error, as in Lightning."""

    class Conflict(Body):
        def configure_gradient_clipping(self, optimizer: Any, *args: Any, **kwargs: Any) -> None:
            self.clip_gradients(optimizer, **call)  # type: ignore[attr-defined]

    lit, port = twins(Conflict)
    with pytest.raises(Exception, match=match) as lightning_error:
        lightning_trainer(tmp_path / "pl", max_epochs=1, num_sanity_val_steps=0, **flags).fit(lit, loader())
    expected = TypeError if isinstance(lightning_error.value, TypeError) else ValueError
    with pytest.raises(expected, match=match):
        interlock_trainer(tmp_path / "il", max_epochs=1, **flags).fit(port, loader())


def test_negative_gradient_clip_val_is_refused() -> None:
    """A negative gradient_clip_val is an error naming None or 0 for no clipping (Lightning ignores it silently)."""
    with pytest.raises(ValueError, match=r"None or 0 \(no clipping"):
        interlock.Trainer(gradient_clip_val=-1.0)
