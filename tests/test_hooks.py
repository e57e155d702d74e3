"""Lightning's module hooks: called at their chart states in Lightning's order, and what a module may see."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
from conftest import TinyModule, loader, only
from interlock.loops.hooks import HOOKS

#: The hooks of a fit of 2 training batches, 1 sanity batch and 2 validation batches (Lightning 2.6.6's order).
FIT = [
    "setup(fit)", "on_fit_start",
    "on_validation_start", "on_validation_epoch_start", "on_validation_batch_start", "on_validation_batch_end",
    "on_validation_epoch_end", "on_validation_end",
    "on_train_start", "on_train_epoch_start",
    *["on_train_batch_start", "on_before_zero_grad", "on_before_backward", "on_after_backward",
      "on_before_optimizer_step", "on_train_batch_end"] * 2,
    "on_validation_start", "on_validation_epoch_start",
    *["on_validation_batch_start", "on_validation_batch_end"] * 2,
    "on_validation_epoch_end", "on_validation_end",
    "on_train_epoch_end", "on_train_end", "on_fit_end", "teardown(fit)",
]  # fmt: skip


def recorder(base: type) -> tuple[type, list[str]]:
    """A TinyModule-like class on ``base`` whose every hook appends its name to the returned list."""
    calls: list[str] = []
    ns: dict[str, Any] = {}
    for hook in HOOKS:
        if "checkpoint" in hook:
            continue

        def record(self: Any, *args: Any, _hook: str = hook, **kwargs: Any) -> None:
            stage = kwargs.get("stage")
            calls.append(_hook if stage is None else f"{_hook}({getattr(stage, 'value', stage)})")

        ns[hook] = record

    def __init__(self: Any) -> None:
        base.__init__(self)
        self.net = torch.nn.Linear(4, 2)

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]

    def step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def predict(self: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0])  # type: ignore[no-any-return]

    def configure_optimizers(self: Any) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    ns.update(__init__=__init__, forward=forward, configure_optimizers=configure_optimizers)
    ns.update(training_step=step, validation_step=step, test_step=step, predict_step=predict)
    return type("Recorder", (base,), ns), calls


def _fit(base: type, root: Path) -> list[str]:
    cls, calls = recorder(base)
    torch.manual_seed(0)
    module = cls()
    interlock.Trainer(max_epochs=1, **only(), num_sanity_val_steps=1, default_root_dir=root).fit(
        module, loader(8, 4), loader(8, 4)
    )
    return calls


def test_fit_calls_the_hooks_in_lightnings_order(tmp_path: Path) -> None:
    """A fit calls every training and validation hook once at its moment, in the recorded Lightning order."""
    assert _fit(interlock.Module, tmp_path) == FIT


def test_hook_order_equals_lightning_running_the_same_module(tmp_path: Path) -> None:
    """Lightning 2.6.6 calls the same hooks in the same order on the same module."""
    pl = pytest.importorskip("pytorch_lightning")
    cls, calls = recorder(pl.LightningModule)
    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_epochs=1, default_root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=1,
    )  # fmt: skip
    trainer.fit(cls(), loader(8, 4), loader(8, 4))
    assert calls == FIT == _fit(interlock.Module, tmp_path / "i")


def test_test_and_predict_call_their_loop_hooks(tmp_path: Path) -> None:
    """test and predict call on_test_* / on_predict_* around their batches."""
    cls, calls = recorder(interlock.Module)
    torch.manual_seed(0)
    trainer = interlock.Trainer(**only(), default_root_dir=tmp_path)
    trainer.test(cls(), loader(4, 4))
    loop = ["start", "epoch_start", "batch_start", "batch_end", "epoch_end", "end"]
    assert calls == ["setup(test)", *(f"on_test_{w}" for w in loop), "teardown(test)"]
    calls.clear()
    trainer.predict(cls(), loader(4, 4))
    assert calls == ["setup(predict)", *(f"on_predict_{w}" for w in loop), "teardown(predict)"]


def test_accumulation_calls_on_before_zero_grad_once_a_window(tmp_path: Path) -> None:
    """With accumulate_grad_batches=2 the zero-grad and optimizer-step hooks run once per two batches."""
    cls, calls = recorder(interlock.Module)
    torch.manual_seed(0)
    trainer = interlock.Trainer(max_epochs=1, accumulate_grad_batches=2, **only(), default_root_dir=tmp_path)
    trainer.fit(cls(), loader(16, 4))
    assert calls.count("on_train_batch_start") == 4
    assert calls.count("on_before_zero_grad") == calls.count("on_before_optimizer_step") == 2


def test_hooks_see_counters_and_may_return_updates(tmp_path: Path) -> None:
    """Hooks read current_epoch/global_step as Lightning's, and a returned Stop ends the fit."""
    seen: list[tuple[int, int]] = []

    class Stopper(TinyModule):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen.append((self.current_epoch, self.global_step))

        def on_train_epoch_end(self) -> interlock.Stop | None:
            return interlock.Stop("enough") if self.current_epoch == 1 else None

    torch.manual_seed(0)
    trainer = interlock.Trainer(max_epochs=5, **only(), default_root_dir=tmp_path)
    trainer.fit(Stopper(), loader(8, 4))
    assert seen == [(0, 1), (0, 2), (1, 3), (1, 4)]
    assert trainer.state.stop_reason == "enough"


def test_misnamed_hook_warns_with_the_nearest_real_one(tmp_path: Path) -> None:
    """A method named like a hook that is not one gets a warning naming the hook it resembles."""

    class Typo(TinyModule):
        def on_validation_end_epoch(self) -> None: ...

        def on_train_epoch_ends(self) -> None: ...

    torch.manual_seed(0)
    trainer = interlock.Trainer(max_epochs=1, **only(), default_root_dir=tmp_path)
    with pytest.warns(UserWarning) as record:
        trainer.fit(Typo(), loader(8, 4))
    text = " ".join(str(w.message) for w in record)
    assert "on_train_epoch_ends" in text and "did you mean on_train_epoch_end?" in text
    assert "on_validation_end_epoch" in text and "did you mean on_validation_epoch_end?" in text


def test_module_has_no_trainer_and_says_what_to_use() -> None:
    """self.trainer is an AttributeError explaining the difference and the alternatives."""
    module = TinyModule()
    with pytest.raises(AttributeError, match="never holds the trainer.*self.current_epoch"):
        _ = module.trainer
    assert module.current_epoch == 0 and module.global_step == 0
    with pytest.raises(RuntimeError, match="only available while a Trainer runs"):
        module.optimizers()


class Keeps(TinyModule):
    """A module that keeps its own counter in the checkpoint through the checkpoint hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = 0
        self.loaded: dict[str, Any] = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.counted += 1
        return super().training_step(batch, batch_idx)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["counted"] = self.counted

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.loaded = {"counted": checkpoint["counted"], "weights_loaded_yet": bool(self.counted)}
        self.counted = checkpoint["counted"]


def test_checkpoint_hooks_add_keys_on_save_and_read_them_on_load(tmp_path: Path) -> None:
    """on_save_checkpoint adds a key to the file; on_load_checkpoint reads it on resume, before training goes on."""
    from interlock.listeners import ModelCheckpoint

    first = Keeps()
    trainer = interlock.Trainer(max_epochs=1, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path)
    trainer.fit(first, loader(64, 16))
    last = trainer.run_dir / "checkpoints" / "last.ckpt"
    assert interlock.load_checkpoint(last)["counted"] == 4
    again = Keeps()
    resumed = interlock.Trainer(max_epochs=2, **only(ModelCheckpoint(save_last=True)), default_root_dir=tmp_path)
    resumed.fit(again, loader(64, 16), ckpt_path=last)
    assert again.loaded == {"counted": 4, "weights_loaded_yet": False}
    assert again.counted == 8
