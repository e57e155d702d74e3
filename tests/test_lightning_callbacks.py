"""Lightning callbacks in interlock: Lightning's moments and order, a read-only trainer view, state in checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader
from interlock.connectors.callbacks import CALLBACK_HOOKS, TrainerView, caller
from interlock.core.run import Run, RunPlan
from interlock.core.slots import CallbacksSlot
from interlock.lightning import Callback
from interlock.listeners import ModelCheckpoint
from interlock.plugins.checkpoint_io import TorchCheckpointIO

QUIET = {"logger": False, "enable_progress_bar": False, "enable_trace": False, "accelerator": "cpu"}
RECORDED = [h for h in CALLBACK_HOOKS if h not in ("on_save_checkpoint", "on_load_checkpoint")]


def recording_callback(log: list[str]) -> Callback:
    """A callback whose every hook appends ``cb:<hook>`` to ``log``."""

    def make(name: str) -> Any:
        def hook(self: Any, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
            log.append(f"cb:{name}")

        return hook

    return type("Recording", (Callback,), {h: make(h) for h in RECORDED})()  # type: ignore[no-any-return]


def recording_module(log: list[str], manual: bool = False) -> TinyModule:
    """A TinyModule whose Lightning hooks append ``module:<hook>`` to ``log``."""
    from interlock.loops.hooks import HOOKS

    def make(name: str) -> Any:
        def hook(self: Any, *args: Any, **kwargs: Any) -> None:
            log.append(f"module:{name}")

        return hook

    ns = {h: make(h) for h in HOOKS if "checkpoint" not in h}
    if manual:

        def training_step(self: Any, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(TinyModule.training_step(self, batch, batch_idx))
            opt.step()

        ns["training_step"] = training_step
    torch.manual_seed(0)
    module = type("Hooked", (TinyModule,), ns)()
    module.automatic_optimization = not manual
    return module  # type: ignore[no-any-return]


def fit(tmp_path: Path, callbacks: list[Any], module: Any = None, **flags: Any) -> interlock.Trainer:
    flags = {"max_epochs": 1, "enable_checkpointing": False, "default_root_dir": tmp_path, **QUIET, **flags}
    trainer = interlock.Trainer(callbacks=callbacks, **flags)
    trainer.fit(module if module is not None else TinyModule(), loader(64), loader(32))  # 4 + 2 batches
    return trainer


def test_callback_hooks_run_before_the_modules_at_every_moment(tmp_path: Path) -> None:
    """Each callback hook runs right before the module's same hook (Lightning's callbacks-then-module order)."""
    log: list[str] = []
    fit(tmp_path, [recording_callback(log)], recording_module(log), num_sanity_val_steps=1)
    for i, row in enumerate(log):
        who, hook = row.split(":")
        if who == "module":
            assert log[i - 1] == f"cb:{hook}", (i, log[i - 3 : i + 1])
    assert log[:4] == ["cb:setup", "module:setup", "cb:on_fit_start", "module:on_fit_start"]
    assert log[4:6] == ["cb:on_sanity_check_start", "cb:on_validation_start"]
    assert log[-2:] == ["cb:teardown", "module:teardown"]


@settings(max_examples=8, deadline=None)
@given(
    epochs=st.integers(1, 2),
    batches=st.integers(1, 3),
    accumulate=st.integers(1, 2),
    sanity=st.integers(0, 2),
)
def test_callback_and_module_hooks_pair_up_under_any_schedule(
    tmp_path_factory: Any, epochs: int, batches: int, accumulate: int, sanity: int
) -> None:
    """Under any epochs, batch limit, accumulation and sanity steps, every module hook follows the callback's."""
    log: list[str] = []
    tmp = tmp_path_factory.mktemp("sched")
    fit(
        tmp,
        [recording_callback(log)],
        recording_module(log),
        max_epochs=epochs,
        limit_train_batches=batches,
        accumulate_grad_batches=accumulate,
        num_sanity_val_steps=sanity,
    )
    module_rows = [r for r in log if r.startswith("module:")]
    paired = [log[i - 1] == "cb:" + r.split(":")[1] for i, r in enumerate(log) if r.startswith("module:")]
    assert all(paired) and module_rows
    assert log.count("cb:on_after_backward") == epochs * batches  # every batch, accumulating or not
    assert log.count("cb:on_train_batch_end") == epochs * batches
    assert log.count("cb:on_sanity_check_start") == (1 if sanity else 0)


def test_manual_optimization_calls_backward_and_step_hooks(tmp_path: Path) -> None:
    """manual_backward runs on_before/after_backward and opt.step() on_before_optimizer_step, callbacks first."""
    log: list[str] = []
    fit(tmp_path, [recording_callback(log)], recording_module(log, manual=True), limit_train_batches=1)
    start = log.index("cb:on_train_batch_start")
    assert log[start : start + 9] == [
        "cb:on_train_batch_start", "module:on_train_batch_start",
        "cb:on_before_backward", "module:on_before_backward", "cb:on_after_backward", "module:on_after_backward",
        "cb:on_before_optimizer_step", "module:on_before_optimizer_step", "cb:on_train_batch_end",
    ]  # fmt: skip


def test_monitoring_callbacks_end_the_epoch_after_the_module(tmp_path: Path) -> None:
    """on_train_epoch_end: plain callbacks, then the module, then EarlyStopping/Checkpoint-like callbacks."""
    log: list[str] = []

    class EarlyStopping(Callback):  # Lightning's rule goes by the class: monitoring callbacks see the module's logs
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            log.append("monitor:on_train_epoch_end")

    fit(tmp_path, [EarlyStopping(), recording_callback(log)], recording_module(log))
    ends = [r for r in log if r.endswith("on_train_epoch_end")]
    assert ends == ["cb:on_train_epoch_end", "module:on_train_epoch_end", "monitor:on_train_epoch_end"]


class Viewer(Callback):
    """Reads the view at a few moments."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self.seen["sanity"] = (trainer.sanity_checking, trainer.state.stage, trainer.validating)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.seen["train"] = (trainer.sanity_checking, trainer.state.stage, trainer.training, trainer.state.fn)
        self.seen["module"] = pl_module is trainer.lightning_module
        self.seen["sizes"] = (trainer.num_training_batches, trainer.num_val_batches, trainer.estimated_stepping_batches)
        self.seen["limits"] = (trainer.max_epochs, trainer.max_steps, trainer.world_size, trainer.is_global_zero)
        self.seen["optimizers"] = [type(o).__name__ for o in trainer.optimizers]
        self.seen["dirs"] = (trainer.log_dir, trainer.default_root_dir)
        self.seen["checkpoint"] = type(trainer.checkpoint_callback).__name__

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.setdefault("steps", []).append((trainer.current_epoch, trainer.global_step, batch_idx))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.seen["metrics"] = dict(trainer.callback_metrics)


def test_the_view_reads_the_run(tmp_path: Path) -> None:
    """The view shows the run's counters, metrics (tensors), sizes, limits, optimizers and stage flags."""

    class Logs(TinyModule):
        def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
            out = super().validation_step(batch, batch_idx)
            self.log("val_loss", out["loss"])
            return out  # its loss and acc are interlock's val_loss/val_acc, not Lightning's callback_metrics

    viewer, ckpt = Viewer(), ModelCheckpoint(dirpath=tmp_path / "ck")
    fit(tmp_path, [viewer, ckpt], Logs(), max_epochs=2, limit_train_batches=3, enable_checkpointing=True)
    seen = viewer.seen
    assert seen["sanity"] == (True, "sanity_check", False)
    assert seen["train"] == (False, "train", True, "fit")
    assert seen["module"] is True
    assert seen["sizes"] == (3, [2], 6)
    assert seen["limits"] == (2, -1, 1, True)
    assert seen["optimizers"] == ["SGD"]
    assert seen["dirs"][1] == str(tmp_path) and seen["dirs"][0].startswith(str(tmp_path))
    assert seen["checkpoint"] == "ModelCheckpoint"
    assert seen["steps"] == [(0, 1, 0), (0, 2, 1), (0, 3, 2), (1, 4, 0), (1, 5, 1), (1, 6, 2)]
    assert set(seen["metrics"]) == {"val_loss"}
    assert all(isinstance(v, torch.Tensor) for v in seen["metrics"].values())


def test_should_stop_becomes_a_stop(tmp_path: Path) -> None:
    """trainer.should_stop = True in a callback stops the fit at the next boundary, as a Stop update."""

    class StopAtStep2(Callback):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == 2:
                trainer.should_stop = True
                assert trainer.should_stop

    trainer = fit(tmp_path, [StopAtStep2()], max_epochs=5)
    assert trainer.state.global_step == 2
    assert trainer.state.should_stop and "callback" in trainer.state.stop_reason


def test_save_checkpoint_becomes_a_save(tmp_path: Path) -> None:
    """trainer.save_checkpoint(path) writes a checkpoint at the next checkpointable state."""
    target = tmp_path / "mine.ckpt"

    class Saver(Callback):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            trainer.save_checkpoint(target)

    trainer = fit(tmp_path, [Saver()])
    assert target.is_file()
    saved = TorchCheckpointIO().load_checkpoint(target)
    assert saved["state"]["progress"]["global_step"] == trainer.state.global_step


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("current_epoch", 3, "chart's transitions"),
        ("optimizers", [], "ReplaceOptimizer"),
        ("lr", 0.1, "Listener"),
        ("should_stop", "yes", "only ask the run to stop"),
    ],
)
def test_other_writes_raise_naming_the_interlock_way(tmp_path: Path, name: str, value: Any, says: str) -> None:
    """Setting anything but should_stop=True raises an AttributeError naming the interlock way."""

    class Writer(Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            setattr(trainer, name, value)

    with pytest.raises(AttributeError, match=says):
        fit(tmp_path, [Writer()])


def test_unknown_reads_raise_listing_what_the_view_offers(tmp_path: Path) -> None:
    """Reading an attribute the view lacks names it and lists what the view offers."""

    class Reader(Callback):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            trainer.fit_loop  # noqa: B018

    with pytest.raises(AttributeError, match=r"no 'fit_loop'.*current_epoch"):
        fit(tmp_path, [Reader()])


def test_on_exception_receives_the_error(tmp_path: Path) -> None:
    """A failing fit calls on_exception with the exception before the stage ends."""
    seen: list[BaseException] = []

    class Watch(Callback):
        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            seen.append(exception)

    class Broken(TinyModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, [Watch()], Broken())
    assert len(seen) == 1 and str(seen[0]) == "boom"


class Counter(Callback):
    """A stateful callback: counts batches and keeps a running sum of the first weight."""

    def __init__(self) -> None:
        self.batches = 0
        self.total = torch.zeros(())

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batches += 1
        self.total = self.total + pl_module.net[0].weight.detach().sum()

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "total": self.total.clone()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.batches, self.total = state_dict["batches"], state_dict["total"]


def test_callback_state_resumes_bitwise(tmp_path: Path) -> None:
    """A stateful callback's state_dict is saved under its state_key and restored: resume equals a straight run."""
    straight = Counter()
    torch.manual_seed(0)
    module = TinyModule()
    interlock.Trainer(callbacks=[straight], max_epochs=2, default_root_dir=tmp_path / "a", **QUIET).fit(
        module, loader(64), loader(32)
    )

    torch.manual_seed(0)
    first = Counter()
    ck = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=3, save_top_k=-1)
    interlock.Trainer(callbacks=[first, ck], max_steps=3, default_root_dir=tmp_path / "b", **QUIET).fit(
        TinyModule(), loader(64), loader(32)
    )
    (path,) = sorted((tmp_path / "ck").glob("*step=3*.ckpt"))
    saved = TorchCheckpointIO().load_checkpoint(path)
    assert saved["callbacks"]["Counter"]["batches"] == 3  # its on_train_batch_end ran before the step save

    resumed = Counter()
    torch.manual_seed(0)
    again = TinyModule()
    interlock.Trainer(callbacks=[resumed], max_epochs=2, default_root_dir=tmp_path / "c", **QUIET).fit(
        again, loader(64), loader(32), ckpt_path=path
    )
    assert resumed.batches == straight.batches == 8
    assert torch.equal(resumed.total, straight.total)
    assert all(
        torch.equal(a, b) for a, b in zip(again.state_dict().values(), module.state_dict().values(), strict=True)
    )


def test_a_resumed_fit_does_not_rerun_the_batch_end_it_was_saved_in(tmp_path: Path) -> None:
    """Resuming from a step checkpoint starts with the next batch: no on_train_batch_end for the saved one."""
    ck = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=2, save_top_k=-1)
    fit(tmp_path / "a", [ck], max_steps=2, enable_checkpointing=True)
    (path,) = sorted((tmp_path / "ck").glob("*.ckpt"))
    log: list[str] = []
    trainer = interlock.Trainer(callbacks=[recording_callback(log)], max_epochs=1, default_root_dir=tmp_path, **QUIET)
    trainer.fit(recording_module(log), loader(64), loader(32), ckpt_path=path)
    assert log.count("cb:on_train_batch_end") == 2 and log.count("module:on_train_batch_end") == 2  # batches 2, 3
    assert log.count("cb:on_train_batch_start") == 2


def test_a_trainer_without_callbacks_binds_none() -> None:
    """With no callbacks, or none overriding a hook, the hook's callback part is not bound at all."""
    plan = RunPlan("fit", interlock.Trainer(**QUIET).config, {}, "", ".")
    run = Run(plan=plan, module=TinyModule(), slots={CallbacksSlot: CallbacksSlot()})
    assert all(caller(run, hook, "train") is None for hook in CALLBACK_HOOKS)
    run.slots[CallbacksSlot] = CallbacksSlot(callbacks=(Callback(), Viewer()))
    assert caller(run, "on_fit_start", "train") is None
    assert caller(run, "on_train_start", "train") is not None


def test_the_view_is_not_the_modules(tmp_path: Path) -> None:
    """The module never holds a trainer: callbacks get the view, the module keeps no reference to it."""
    seen: list[Any] = []

    class Keep(Callback):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            seen.append(trainer)

    module = TinyModule()
    fit(tmp_path, [Keep()], module)
    assert isinstance(seen[0], TrainerView)
    assert not any(isinstance(v, TrainerView) for v in vars(module).values())
    assert getattr(module, "trainer", None) is None


def test_callbacks_mix_with_listeners_and_lightning_builtins_are_refused(tmp_path: Path) -> None:
    """Callbacks and listeners share callbacks=[...]; Lightning's own ModelCheckpoint is refused naming interlock's."""
    log: list[str] = []
    trainer = fit(
        tmp_path, [recording_callback(log), ModelCheckpoint(dirpath=tmp_path / "c")], enable_checkpointing=True
    )
    assert log and any(isinstance(x, ModelCheckpoint) for x in trainer.listeners)
    pl = pytest.importorskip("pytorch_lightning")
    with pytest.raises(TypeError, match=r"interlock.lightning.callbacks import ModelCheckpoint"):
        interlock.Trainer(callbacks=[pl.callbacks.ModelCheckpoint()], **QUIET)


def test_a_pytorch_lightning_callback_runs_as_it_is(tmp_path: Path) -> None:
    """An instance of a pytorch_lightning.Callback subclass that uses only the view runs unchanged."""
    pl = pytest.importorskip("pytorch_lightning")
    steps: list[int] = []

    class Steps(pl.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            steps.append(trainer.global_step)

    fit(tmp_path, [Steps()])
    assert steps == [1, 2, 3, 4]


def test_estimated_stepping_batches_follows_lightnings_rule(tmp_path: Path) -> None:
    """estimated_stepping_batches: ceil(batches / accumulate) * epochs, capped by max_steps; inf without limits."""
    seen: list[Any] = []

    class Est(Callback):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            seen.append(trainer.estimated_stepping_batches)

    fit(tmp_path, [Est()], max_epochs=3, accumulate_grad_batches=3)  # 4 batches -> 2 steps an epoch
    fit(tmp_path, [Est()], max_epochs=3, max_steps=5)
    fit(tmp_path, [Est()], max_epochs=-1, max_steps=3)
    assert seen == [6, 5, 3]


def test_a_plain_fit_binds_no_callback_work(tmp_path: Path) -> None:
    """Without callbacks the per-batch states run exactly the module's work: no callback action is bound."""
    seen: dict[str, tuple[Any, ...]] = {}
    trainer = interlock.Trainer(max_epochs=1, default_root_dir=tmp_path, enable_checkpointing=False, **QUIET)

    @trainer.on("fit.train.batch.step", once=True)
    def look(event: Any) -> None:
        nodes = trainer.runtime._nodes
        for leaf in ("fit.train.batch.step", "fit.train.batch.end", "teardown"):
            seen[leaf] = nodes[leaf].entry

    trainer.fit(TinyModule(), loader(64), loader(32))
    assert len(seen["fit.train.batch.step"]) == 1  # training_step only: no hook, no callbacks.flush
    assert len(seen["fit.train.batch.end"]) == 1  # signals.vote only
    assert not trainer.bus.handlers("fit.train.batch.end")
    assert trainer.lightning_callbacks == ()


def test_save_checkpoint_outside_fit_raises_naming_the_alternative(tmp_path: Path) -> None:
    """trainer.save_checkpoint during validate is refused (checkpoints are fit's), naming torch.save of the weights."""

    class Saver(Callback):
        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            trainer.save_checkpoint(tmp_path / "v.ckpt")

    trainer = interlock.Trainer(callbacks=[Saver()], default_root_dir=tmp_path, **QUIET)
    with pytest.raises(RuntimeError, match=r"during validate.*torch.save"):
        trainer.validate(TinyModule(), loader(32))
    assert not (tmp_path / "v.ckpt").exists()


def test_objects_without_callback_hooks_are_not_callbacks(tmp_path: Path) -> None:
    """An object with only a setup method is not taken for a callback: it is refused as a listener would be."""

    class NotACallback:
        def setup(self, stage: str) -> None: ...

    with pytest.raises(TypeError, match="not a Listener"):
        interlock.Trainer(callbacks=[NotACallback()], **QUIET)


def test_a_checkpoint_holds_lightnings_callback_entries_except_a_weights_only_one(tmp_path: Path) -> None:
    """Full files carry Lightning's ModelCheckpoint/EarlyStopping entries as they stood; weights-only files none."""
    from interlock.lightning.callbacks import EarlyStopping
    from interlock.lightning.callbacks import ModelCheckpoint as LitCheckpoint

    full = LitCheckpoint(dirpath=tmp_path / "full", monitor="val_loss", save_top_k=-1)
    light = LitCheckpoint(dirpath=tmp_path / "light", save_weights_only=True, every_n_epochs=1)
    stop = EarlyStopping(monitor="val_loss", patience=5)
    trainer = interlock.lightning.Trainer(max_epochs=3, callbacks=[full, light, stop], **QUIET)
    trainer.fit(TinyModule(), loader(16, batch_size=8), loader(8, batch_size=8))
    files = sorted((tmp_path / "full").glob("*.ckpt"), key=lambda p: p.stat().st_mtime_ns)
    scores = []
    for path in files:
        entry = torch.load(path, weights_only=False)["callbacks"][full.state_key]
        scores.append(float(entry["current_score"]))
        assert entry["best_model_path"] == str(min(entry["best_k_models"], key=lambda p: entry["best_k_models"][p]))
        assert str(path) in entry["best_k_models"] and entry["dirpath"] == str(tmp_path / "full")
    assert scores == [float(full.best_k_models[str(p)]) for p in files] and len(files) == 3
    last = torch.load(files[-1], weights_only=False)["callbacks"][stop.state_key]
    assert last["wait_count"] == stop.wait_count and float(last["best_score"]) == float(stop.best_score)
    for path in (tmp_path / "light").glob("*.ckpt"):
        assert "callbacks" not in torch.load(path, weights_only=False)
