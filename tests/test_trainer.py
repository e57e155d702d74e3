"""The trainer end to end: the golden event order, parity with plain PyTorch, failures, flags."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader, only
from interlock import ReplaceOptimizer, SetLearningRate

GOLDEN = """
    setup->setup
    fit->fit.start
    sanity_check->fit.sanity.start
    run->fit.sanity.batch.fetch
    fetched->fit.sanity.batch.step
    stepped->fit.sanity.batch.end
    exhausted->fit.sanity.end
    train->fit.train.epoch_start
    run->fit.train.batch.fetch
    fetched->fit.train.batch.step
    backward->fit.train.batch.backward
    accumulate->fit.train.batch.end
    next->fit.train.batch.fetch
    fetched->fit.train.batch.step
    backward->fit.train.batch.backward
    optimizer_step->fit.train.batch.optimizer_step
    stepped->fit.train.batch.end
    next->fit.train.batch.fetch
    fetched->fit.train.batch.step
    backward->fit.train.batch.backward
    optimizer_step->fit.train.batch.optimizer_step
    stepped->fit.train.batch.end
    validate->fit.train.val.start
    run->fit.train.val.batch.fetch
    fetched->fit.train.val.batch.step
    stepped->fit.train.val.batch.end
    next->fit.train.val.batch.fetch
    fetched->fit.train.val.batch.step
    stepped->fit.train.val.batch.end
    exhausted->fit.train.val.end
    epoch_end->fit.train.epoch_end
    next_epoch->fit.train.epoch_start
    run->fit.train.batch.fetch
    fetched->fit.train.batch.step
    backward->fit.train.batch.backward
    accumulate->fit.train.batch.end
    next->fit.train.batch.fetch
    fetched->fit.train.batch.step
    backward->fit.train.batch.backward
    optimizer_step->fit.train.batch.optimizer_step
    stepped->fit.train.batch.end
    next->fit.train.batch.fetch
    fetched->fit.train.batch.step
    backward->fit.train.batch.backward
    optimizer_step->fit.train.batch.optimizer_step
    stepped->fit.train.batch.end
    validate->fit.train.val.start
    run->fit.train.val.batch.fetch
    fetched->fit.train.val.batch.step
    stepped->fit.train.val.batch.end
    next->fit.train.val.batch.fetch
    fetched->fit.train.val.batch.step
    stepped->fit.train.val.batch.end
    exhausted->fit.train.val.end
    epoch_end->fit.train.epoch_end
    done->fit.end
    teardown->teardown
    finish->finished
"""


def test_golden_event_sequence_of_a_small_fit_with_validation(trainer_factory: Any) -> None:
    """A 2-epoch fit (3 batches, accumulate 2, 2 val batches, 1 sanity step) emits exactly this order."""
    torch.manual_seed(0)
    trainer = trainer_factory(
        max_epochs=2, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=1, accumulate_grad_batches=2
    )
    seq: list[str] = []
    trainer.on("*", lambda e: seq.append(f"{e.trigger}->{e.name}"))
    trainer.fit(TinyModule(), loader(64, 8), loader(32, 8))
    assert seq == GOLDEN.split()


def plain_loop(
    model: TinyModule, data: Any, epochs: int, accumulate: int = 1, clip: float | None = None, algo: str = "norm"
) -> None:
    """The reference: zero_grad, forward, backward, (clip), step — in plain PyTorch."""
    opt = model.configure_optimizers()
    n = len(data)
    for _ in range(epochs):
        for i, batch in enumerate(data):
            loss = model.training_step(batch, i)
            (loss / accumulate if accumulate > 1 else loss).backward()
            if (i + 1) % accumulate == 0 or i + 1 == n:
                if clip is not None:
                    if algo == "norm":
                        torch.nn.utils.clip_grad_norm_(list(model.parameters()), clip)
                    else:
                        torch.nn.utils.clip_grad_value_(list(model.parameters()), clip)
                opt.step()
                opt.zero_grad()


@pytest.mark.parametrize(
    ("accumulate", "clip", "algo"),
    [(1, None, "norm"), (3, None, "norm"), (1, 0.05, "norm"), (2, 0.01, "value")],
)
def test_fit_is_bitwise_equal_to_a_plain_pytorch_loop(
    trainer_factory: Any, accumulate: int, clip: float | None, algo: str
) -> None:
    """Same seed and data: fit's weights equal a plain loop's bit for bit (shuffle and dropout on)."""
    torch.manual_seed(7)
    reference = TinyModule(dropout=0.3)
    ours = copy.deepcopy(reference)
    state = torch.get_rng_state()
    plain_loop(reference, loader(80, 8, shuffle=True), 3, accumulate, clip, algo)
    torch.set_rng_state(state)
    trainer = trainer_factory(
        max_epochs=3,
        num_sanity_val_steps=0,
        accumulate_grad_batches=accumulate,
        gradient_clip_val=clip,
        gradient_clip_algorithm=algo,
    )
    trainer.fit(ours, loader(80, 8, shuffle=True))
    for (name, a), b in zip(reference.state_dict().items(), ours.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


class Boom(TinyModule):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == self.at:
            raise ValueError("bad batch")
        return super().training_step(batch, batch_idx)


def test_user_exception_moves_to_failed_runs_teardown_and_reraises(trainer_factory: Any) -> None:
    """An exception in training_step: fail -> teardown -> failed, listeners see it, the error names the state."""
    trainer = trainer_factory(max_epochs=1)
    seen: list[tuple[str, str, Any]] = []
    trainer.on("teardown", lambda e: seen.append((e.name, e.trigger, e.payload.get("exception"))))
    trainer.on("failed", lambda e: seen.append((e.name, e.trigger, e.payload.get("exception"))))
    with pytest.raises(ValueError, match="bad batch") as info:
        trainer.fit(Boom(at=2), loader())
    assert [(n, t) for n, t, _ in seen] == [("teardown", "fail"), ("failed", "failed")]
    assert all(exc is info.value for _, _, exc in seen)
    assert "failed in state 'fit.train.batch.step'" in "".join(info.value.__notes__)
    assert trainer.state.chart == "failed" and trainer.state.status == "failed"


def test_keyboard_interrupt_moves_to_interrupted(trainer_factory: Any) -> None:
    """Ctrl-C during fit: interrupt -> teardown -> interrupted, and KeyboardInterrupt propagates."""
    trainer = trainer_factory(max_epochs=1)

    def ctrl_c(event: Any) -> None:
        raise KeyboardInterrupt

    trainer.on("fit.train.batch.end", ctrl_c, once=2)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(TinyModule(), loader())
    assert trainer.state.chart == "interrupted" and trainer.state.global_step == 2


def test_failure_in_teardown_still_ends_failed(trainer_factory: Any) -> None:
    """A listener raising during teardown moves the chart to failed without running teardown twice."""
    trainer = trainer_factory(max_epochs=1)
    calls: list[str] = []

    def explode(event: Any) -> None:
        calls.append(event.name)
        raise RuntimeError("flush failed")

    trainer.on("teardown", explode)
    with pytest.raises(RuntimeError, match="flush failed"):
        trainer.fit(TinyModule(), loader())
    assert calls == ["teardown"] and trainer.state.chart == "failed"


def test_trainer_is_reusable_after_a_failure(trainer_factory: Any) -> None:
    """After a failed fit, the same trainer can test: failed -> setup -> test ... -> finished."""
    trainer = trainer_factory(max_epochs=1)
    with pytest.raises(ValueError):
        trainer.fit(Boom(at=0), loader())
    (metrics,) = trainer.test(TinyModule(), loader(32, 8))
    assert set(metrics) == {"test_loss", "test_acc"} and trainer.state.chart == "finished"


def test_validate_test_predict_return_what_they_compute(trainer_factory: Any) -> None:
    """validate/test return size-weighted means of step scalars (one dict per loader); predict each batch's output."""
    torch.manual_seed(0)
    module = TinyModule()
    trainer = trainer_factory()
    data = loader(30, 8)
    (val,) = trainer.validate(module, data)
    losses = [(module.validation_step(b, i)["loss"].item(), len(b[0])) for i, b in enumerate(data)]
    expected = sum(v * n for v, n in losses) / 30
    assert val["val_loss"] == pytest.approx(expected, rel=1e-6)
    assert trainer.test(module, data)[0]["test_loss"] == pytest.approx(expected, rel=1e-6)
    preds = trainer.predict(module, data)
    assert len(preds) == 4 and preds[0].shape == (8, 2)
    assert trainer.state.stage == "predict" and trainer.state.chart == "finished"


def test_fit_returns_metrics_and_records_history(trainer_factory: Any) -> None:
    """fit returns the latest metrics; history has one val row and one train row per epoch, in order."""
    trainer = trainer_factory(max_epochs=2, num_sanity_val_steps=0)
    metrics = trainer.fit(TinyModule(), loader(), loader(32, 8))
    assert set(metrics) == {"train_loss", "val_loss", "val_acc"}
    assert [(h["stage"], h["epoch"]) for h in trainer.state.history] == [
        ("val", 0),
        ("train", 0),
        ("val", 1),
        ("train", 1),
    ]
    assert trainer.state.best_metrics["val_loss"] == min(
        h["val_loss"] for h in trainer.state.history if "val_loss" in h
    )


@pytest.mark.parametrize(
    ("kwargs", "steps", "val_runs"),
    [
        ({"max_steps": 5}, 5, 1),
        ({"max_epochs": 2, "limit_train_batches": 2}, 4, 2),
        ({"max_epochs": 2, "limit_train_batches": 0.5}, 4, 2),
        ({"max_epochs": 1, "val_check_interval": 2}, 4, 2),
        ({"max_epochs": 1, "val_check_interval": 0.25}, 4, 4),
        ({"max_epochs": 2, "check_val_every_n_epoch": 2}, 8, 1),
        ({"fast_dev_run": True}, 1, 1),
        ({"max_epochs": 1, "limit_val_batches": 0}, 4, 0),
    ],
)
def test_loop_limits_and_validation_schedule(
    trainer_factory: Any, kwargs: dict[str, Any], steps: int, val_runs: int
) -> None:
    """max_steps, limits, val_check_interval and check_val_every_n_epoch behave as in Lightning."""
    kwargs.setdefault("num_sanity_val_steps", 0)
    trainer = trainer_factory(**kwargs)
    runs: list[int] = []
    trainer.on("fit.train.val.end", lambda e: runs.append(e.global_step))
    trainer.fit(TinyModule(), loader(64, 16), loader(32, 16))
    assert trainer.state.global_step == steps
    assert len(runs) == val_runs


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("max_epochs", -3, "Trainer(max_epochs=-3)"),
        ("max_steps", 1.5, "Trainer(max_steps=1.5)"),
        ("limit_train_batches", 1.5, "must lie in [0.0, 1.0]"),
        ("limit_val_batches", "all", "Trainer(limit_val_batches='all')"),
        ("val_check_interval", 0, "must be >= 1"),
        ("accumulate_grad_batches", 0, "Trainer(accumulate_grad_batches=0)"),
        ("gradient_clip_val", -1.0, "Trainer(gradient_clip_val=-1.0)"),
        ("gradient_clip_algorithm", "l2", "choose one of 'norm', 'value'"),
        ("num_sanity_val_steps", -2, "Trainer(num_sanity_val_steps=-2)"),
        ("accelerator", "tpu", "accelerator='tpu'"),
        ("precision", "8-bit", "precision='8-bit'"),
        ("strategy", "horovod", "strategy='horovod'"),
        ("devices", 0, "devices=0"),
        ("fast_dev_run", -1, "Trainer(fast_dev_run=-1)"),
    ],
)
def test_invalid_flags_raise_value_error_naming_flag_and_value(flag: str, value: Any, message: str) -> None:
    """A bad flag raises ValueError at construction naming the flag, the value and what is allowed."""
    with pytest.raises(ValueError) as info:
        interlock.Trainer(**{flag: value}, **only())
    assert message in str(info.value)


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.integers(max_value=-2), st.floats(allow_nan=True), st.text(max_size=3), st.booleans()))
def test_max_epochs_accepts_only_ints_at_least_minus_one(value: Any) -> None:
    """Any max_epochs that is not None, -1 or an int >= 0 is rejected with the flag named."""
    with pytest.raises(ValueError, match="max_epochs"):
        interlock.Trainer(max_epochs=value, **only())


def test_listener_can_change_learning_rate_and_replace_optimizer(trainer_factory: Any) -> None:
    """SetLearningRate and ReplaceOptimizer returned by handlers change the optimizers the loop uses."""
    trainer = trainer_factory(max_epochs=2, num_sanity_val_steps=0)
    module = TinyModule()
    made: list[torch.optim.Optimizer] = [module.configure_optimizers()]
    module.configure_optimizers = lambda: made[0]  # type: ignore[method-assign]

    def adam(params: Any) -> torch.optim.Optimizer:
        made.append(torch.optim.Adam(params, lr=0.01))
        return made[-1]

    trainer.on("fit.train.epoch_start", lambda e, s: SetLearningRate(0.5) if s.epoch == 1 else None)
    trainer.on("fit.train.batch.end", lambda e: ReplaceOptimizer(adam), once=6)
    trainer.fit(module, loader())
    sgd = made[0]
    assert sgd.param_groups[0]["lr"] == 0.5
    assert len(made) == 2 and isinstance(made[1], torch.optim.Adam)
    first = next(iter(module.parameters()))
    assert float(made[1].state[first]["step"]) == 2  # swapped after batch 6 of 8: Adam took the last 2 steps


def test_learning_rate_update_outside_fit_is_rejected(trainer_factory: Any) -> None:
    """SetLearningRate during validate (no optimizer) fails the run with a clear message."""
    trainer = trainer_factory()
    trainer.on("validate.start", lambda e: SetLearningRate(0.1))
    with pytest.raises(RuntimeError, match="outside a fit"):
        trainer.validate(TinyModule(), loader())


def test_missing_step_is_an_early_error(trainer_factory: Any) -> None:
    """A module without test_step fails in setup, before any batch is fetched."""

    class NoTest(interlock.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    trainer = trainer_factory()
    fetched: list[str] = []
    trainer.on("*.fetch", lambda e: fetched.append(e.name))
    with pytest.raises(NotImplementedError, match="must implement test_step") as info:
        trainer.test(NoTest(), loader())
    assert fetched == []
    assert "failed in state 'setup'" in "".join(info.value.__notes__)


def test_fit_without_val_data_needs_no_validation_step(trainer_factory: Any) -> None:
    """A module with only training_step fits when no val_dataloaders are given, and fails early otherwise."""

    class TrainOnly(interlock.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self.lin(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = trainer_factory(max_epochs=1)
    trainer.fit(TrainOnly(), loader())
    with pytest.raises(NotImplementedError, match="validation_step"):
        trainer.fit(TrainOnly(), loader(), loader())


@pytest.mark.parametrize("loop", ["train", "val"])
def test_a_fraction_rounding_to_no_batch_is_an_error_naming_the_smallest(trainer_factory: Any, loop: str) -> None:
    """limit_*_batches=0.1 of 4 batches rounds to 0: an error at set-up naming 0.25 (Lightning raises too)."""
    module = TinyModule()
    before = copy.deepcopy(module.state_dict())
    trainer = trainer_factory(max_epochs=1, **{f"limit_{loop}_batches": 0.1})
    with pytest.raises(ValueError, match=rf"limit_{loop}_batches\)=0.1 of a loader of 4 batches.*at least .*=0.25"):
        trainer.fit(module, loader(64, 16), loader(64, 16))
    assert all(torch.equal(a, b) for a, b in zip(before.values(), module.state_dict().values(), strict=True))
    assert trainer.state.global_step == 0


@pytest.mark.parametrize(
    "flags", [{"max_epochs": 0}, {"max_steps": 0}, {"limit_train_batches": 0}, {"limit_train_batches": 0.0}]
)
def test_a_fit_with_nothing_to_train_trains_nothing(trainer_factory: Any, flags: dict[str, Any]) -> None:
    """max_epochs=0, max_steps=0 or a batch limit of 0 skips training (Lightning's meaning), after the sanity check."""
    torch.manual_seed(0)
    module = TinyModule()
    before = copy.deepcopy(module.state_dict())
    trainer = trainer_factory(num_sanity_val_steps=1, **flags)
    seen: list[str] = []
    trainer.on("*", lambda e: seen.append(e.name))
    trainer.fit(module, loader(64, 16), loader(32, 16))
    assert all(torch.equal(a, b) for a, b in zip(before.values(), module.state_dict().values(), strict=True))
    assert trainer.state.global_step == 0 and trainer.state.status == "finished"
    assert "fit.sanity.end" in seen and not any(n.startswith("fit.train.") for n in seen)
    assert seen[seen.index("fit.sanity.end") + 1] == "fit.end"
