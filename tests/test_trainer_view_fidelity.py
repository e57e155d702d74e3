"""What a Lightning callback reads from ``trainer`` during a fit: the same values as under Lightning, hook by hook."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from _twins import twins
from conftest import loader

pl = pytest.importorskip("pytorch_lightning")
for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
    logging.getLogger(_name).setLevel(logging.ERROR)

#: Read-only attributes callbacks use (Lightning 2.6.6's names). ``estimated_stepping_batches`` first: Lightning
#: counts the training batches when it is read (its ``num_training_batches`` is ``inf`` before, in the sanity check)
READ = (
    "estimated_stepping_batches", "current_epoch", "global_step", "num_training_batches", "num_val_batches",
    "num_sanity_val_batches", "is_last_batch", "sanity_checking", "training", "validating", "testing",
    "predicting", "max_epochs", "max_steps", "min_epochs", "min_steps", "check_val_every_n_epoch",
    "val_check_interval", "val_check_batch", "accumulate_grad_batches", "log_every_n_steps", "should_stop",
    "world_size", "global_rank", "local_rank", "node_rank", "num_devices", "num_nodes", "is_global_zero",
    "limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches", "fast_dev_run",
    "precision", "enable_validation", "gradient_clip_val", "gradient_clip_algorithm", "interrupted",
    "num_sanity_val_steps", "received_sigterm",
)  # fmt: skip


def _reader(base: type) -> Any:
    class Reader(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.seen: list[tuple[str, dict[str, Any]]] = []

        def _read(self, when: str, trainer: Any) -> None:
            row = {name: getattr(trainer, name) for name in READ}
            row["state"] = (trainer.state.fn, trainer.state.stage)  # Lightning's are str enums: equal to the names
            self.seen.append((when, row))

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self._read(f"train batch start {batch_idx}", trainer)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self._read(f"train batch end {batch_idx}", trainer)

        def on_validation_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
        ) -> None:
            self._read(f"validation batch end {batch_idx}", trainer)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self._read("train epoch end", trainer)

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            self._read("fit end", trainer)

    return Reader()


class Body:
    def _build(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("v", torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1]))  # type: ignore[attr-defined]

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("t", float(batch_idx))  # type: ignore[attr-defined]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "flags",
    [
        {"limit_train_batches": 3, "val_check_interval": 2, "num_sanity_val_steps": 1},
        {"val_check_interval": 0.5, "accumulate_grad_batches": 2, "min_steps": 2, "gradient_clip_val": 1.0},
    ],
    ids=["int-interval", "fraction-interval"],
)
def test_a_callback_reads_the_trainer_lightnings_would_at_every_hook(flags: dict[str, Any], tmp_path: Path) -> None:
    """Counters, batch counts (sanity check included), is_last_batch, val_check_batch, min_epochs, the flags, ranks,
    precision and the running stage: what a callback reads at each hook of a fit equals Lightning's."""
    import interlock.lightning as il

    Lit, Ours = twins(Body)

    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
    common = {"max_epochs": 2, "enable_model_summary": False, **quiet, **flags}
    theirs, mine = _reader(pl.Callback), _reader(il.Callback)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.Trainer(default_root_dir=tmp_path / "pl", callbacks=[theirs], **common).fit(
            Lit(), loader(24, 8), loader(16, 8)
        )
    il.Trainer(default_root_dir=tmp_path / "il", callbacks=[mine], **common).fit(Ours(), loader(24, 8), loader(16, 8))
    assert [w for w, _ in mine.seen] == [w for w, _ in theirs.seen]
    for (when, ours), (_, lightning) in zip(mine.seen, theirs.seen, strict=True):
        assert ours == lightning, (when, {k: (ours[k], lightning[k]) for k in ours if ours[k] != lightning[k]})


#: What the Trainer object itself answers between runs, as Lightning's does
AFTER = (
    "current_epoch", "global_step", "max_epochs", "max_steps", "min_epochs", "min_steps", "world_size", "global_rank",
    "local_rank", "node_rank", "num_nodes", "num_devices", "is_global_zero", "sanity_checking", "training",
    "validating", "testing", "predicting", "interrupted", "received_sigterm", "should_stop", "precision",
    "limit_train_batches", "limit_val_batches", "val_check_interval", "check_val_every_n_epoch", "log_every_n_steps",
    "accumulate_grad_batches", "fast_dev_run", "gradient_clip_val", "num_sanity_val_steps",
)  # fmt: skip


def test_the_trainer_object_answers_as_lightnings_before_and_after_each_run(tmp_path: Path) -> None:
    """Counters, limits, ranks and the running stage read from the Trainer before a fit, after it and after a test
    equal Lightning's; a figure only a run has (num_training_batches) is the last fit's after it, Lightning's before."""
    import interlock.lightning as il

    Lit, Ours = twins(Body)
    flags = {"max_epochs": 2, "enable_model_summary": False, "logger": False, "enable_checkpointing": False}
    flags |= {"enable_progress_bar": False, "limit_train_batches": 2, "min_steps": 1}
    rows: list[list[dict[str, Any]]] = []
    batches: list[int] = []
    for trainer_cls, module in ((pl.Trainer, Lit()), (il.Trainer, Ours())):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = trainer_cls(default_root_dir=tmp_path, **flags)
            seen = [{name: getattr(trainer, name) for name in AFTER}]
            trainer.fit(module, loader(24, 8), loader(16, 8))
            seen.append({name: getattr(trainer, name) for name in AFTER})
            trainer.test(module, loader(16, 8), verbose=False)
            seen.append({name: getattr(trainer, name) for name in AFTER})
        rows.append(seen)
        batches.append(trainer.num_training_batches)
    for moment, lightning, ours in zip(("before", "after fit", "after test"), *rows, strict=True):
        assert ours == lightning, (moment, {k: (ours[k], lightning[k]) for k in ours if ours[k] != lightning[k]})
    assert batches[0] == batches[1] == 2
    fresh = [il.Trainer(default_root_dir=tmp_path, **flags), pl.Trainer(default_root_dir=tmp_path, **flags)]
    for name in ("num_training_batches", "num_val_batches", "num_test_batches", "num_sanity_val_batches"):
        assert getattr(fresh[0], name) == getattr(fresh[1], name)  # the loops' figures before a run: inf, []


def _eval_reader(base: type) -> Any:
    class Reader(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.seen: list[tuple[str, dict[str, Any]]] = []

        def _read(self, when: str, trainer: Any) -> None:  # not the estimate: Lightning raises without a fit
            row = {name: getattr(trainer, name) for name in READ if name != "estimated_stepping_batches"}
            row["state"] = (trainer.state.fn, trainer.state.stage)
            self.seen.append((when, row))

        def on_validation_batch_end(self, trainer: Any, *args: Any) -> None:
            self._read("validation batch", trainer)

        def on_test_batch_end(self, trainer: Any, *args: Any) -> None:
            self._read("test batch", trainer)

        def on_predict_batch_end(self, trainer: Any, *args: Any) -> None:
            self._read("predict batch", trainer)

    return Reader()


class Evaluated(Body):
    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("t", float(batch_idx))  # type: ignore[attr-defined]

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        return self.net(batch[0])


def test_a_callback_reads_the_trainer_lightnings_would_in_validate_test_and_predict(tmp_path: Path) -> None:
    """On a trainer that never fitted, what a callback reads during validate, test (two loaders) and predict equals
    Lightning's: no training figures (inf batches, no last batch, max/min_epochs as given), the stage's loaders."""
    import interlock.lightning as il

    Lit, Ours = twins(Evaluated)
    flags = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
    flags |= {"enable_model_summary": False, "limit_test_batches": 1}
    runs = []
    for trainer_cls, module, reader in ((pl.Trainer, Lit(), _eval_reader(pl.Callback)), (il.Trainer, Ours(), None)):
        reader = reader or _eval_reader(il.Callback)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = trainer_cls(default_root_dir=tmp_path, callbacks=[reader], **flags)
            trainer.validate(module, loader(16, 8), verbose=False)
            trainer.test(module, [loader(16, 8), loader(8, 8)], verbose=False)
            trainer.predict(module, loader(8, 4))
        runs.append(reader.seen)
    assert [w for w, _ in runs[1]] == [w for w, _ in runs[0]]
    for (when, ours), (_, lightning) in zip(runs[1], runs[0], strict=True):
        assert ours == lightning, (when, {k: (ours[k], lightning[k]) for k in ours if ours[k] != lightning[k]})


def test_trainer_callbacks_are_listed_in_lightnings_order(tmp_path: Path) -> None:
    """trainer.callbacks, on the trainer and in a hook's view: what was passed in its order, then the progress bar
    and the model summary (and interlock's trace), the checkpoint callbacks last, as Lightning lists them."""
    import interlock.lightning as il

    _, Ours = twins(Body)

    def kinds(callbacks: list[Any]) -> list[str]:
        plain = {"RichProgressBar": "bar", "TQDMProgressBar": "bar", "ProgressBar": "bar"}
        plain |= {"RichModelSummary": "summary", "ModelSummary": "summary"}
        return [plain.get(type(c).__name__, type(c).__name__) for c in callbacks if type(c).__name__ != "EventTrace"]

    rows = []
    for lib in (pl, il):
        first, second = type("First", (lib.Callback,), {})(), type("Second", (lib.Callback,), {})()
        seen: list[list[str]] = []
        first.on_fit_start = lambda trainer, module, seen=seen: seen.append(kinds(trainer.callbacks))  # type: ignore[method-assign]
        stop = lib.callbacks.EarlyStopping("v")
        given = [second, lib.callbacks.ModelCheckpoint(dirpath=tmp_path / lib.__name__), first, stop]
        trainer = lib.Trainer(default_root_dir=tmp_path, callbacks=given, max_epochs=1, logger=False)
        rows.append(kinds(trainer.callbacks))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(Ours() if lib is il else twins(Body)[0](), loader(16, 8), loader(8, 8))
        rows.append(seen[0])
    assert rows[2] == rows[3] == rows[0] == rows[1]
    assert rows[2] == ["Second", "First", "EarlyStopping", "bar", "summary", "ModelCheckpoint"]


class LogsOnStep(Body):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])  # type: ignore[attr-defined]
        self.log("v", loss, on_step=True, prog_bar=True)  # type: ignore[attr-defined]


def test_what_the_sanity_check_logged_is_gone_when_training_starts(tmp_path: Path) -> None:
    """Values the sanity check logged on step (and shown on the bar) are not in the metrics, logged metrics or bar
    metrics once training starts, as Lightning resets them; the validation's later values are."""
    import interlock.lightning as il

    rows = []
    for lib, cls in ((pl, twins(LogsOnStep)[0]), (il, twins(LogsOnStep)[1])):
        seen: list[tuple[str, list[list[str]]]] = []

        def read(when: str, trainer: Any, seen: list[Any] = seen) -> None:
            metrics = (trainer.callback_metrics, trainer.logged_metrics, trainer.progress_bar_metrics)
            seen.append((when, [sorted(m) for m in metrics]))

        hooks = {
            "on_train_start": lambda self, t, m: read("train start", t),
            "on_train_batch_start": lambda self, t, m, b, i: read(f"batch {i}", t),
            "on_train_epoch_end": lambda self, t, m: read("epoch end", t),
        }
        reader = type("Reader", (lib.Callback,), hooks)()
        flags = {"max_epochs": 1, "limit_train_batches": 2, "num_sanity_val_steps": 1, "enable_model_summary": False}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = lib.Trainer(default_root_dir=tmp_path, callbacks=[reader], logger=False, **flags)
            trainer.fit(cls(), loader(16, 8), loader(8, 8))
        rows.append(seen)
    assert rows[1] == rows[0]
    assert rows[1][0] == ("train start", [[], [], []]) and "v_epoch" in rows[1][-1][1][1]


class TwoMetrics(Body):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        logits = self.net(batch[0])  # type: ignore[attr-defined]
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, batch[1]))  # type: ignore[attr-defined]
        self.log("val_acc", (logits.argmax(1) == batch[1]).float().mean())  # type: ignore[attr-defined]


def _two_checkpoints(lib: Any, root: Path) -> list[Any]:
    return [
        lib.callbacks.ModelCheckpoint(dirpath=root / "loss", monitor="val_loss", save_top_k=2),
        lib.callbacks.ModelCheckpoint(dirpath=root / "acc", monitor="val_acc", mode="max", filename="best-{epoch}"),
        lib.callbacks.ModelCheckpoint(dirpath=root / "steps", every_n_train_steps=3, save_top_k=-1),
        lib.callbacks.EarlyStopping("val_loss", patience=2),
        lib.callbacks.EarlyStopping("val_acc", mode="max", patience=3),
    ]


def test_several_checkpoint_and_early_stopping_callbacks_keep_their_own_state_as_lightnings(tmp_path: Path) -> None:
    """Three ModelCheckpoints and two EarlyStoppings of different settings each keep their own files, best path and
    wait count as Lightning's (under Lightning's state keys), through a resume; two with the same settings are
    Lightning's error."""
    import interlock.lightning as il

    flags = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "limit_train_batches": 3}
    seen = []
    for lib, cls in ((pl, twins(TwoMetrics)[0]), (il, twins(TwoMetrics)[1])):
        root = tmp_path / lib.__name__
        callbacks = _two_checkpoints(lib, root)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = lib.Trainer(max_epochs=3, default_root_dir=root, callbacks=callbacks, **flags)
            trainer.fit(cls(), loader(32, 8), loader(16, 8))
            again = _two_checkpoints(lib, root / "again")
            resumed = lib.Trainer(max_epochs=5, default_root_dir=root, callbacks=again, **flags)
            # from the last epoch's end (a resume mid-epoch differs by design: Lightning restarts the epoch)
            assert Path(callbacks[0].best_model_path).name == "epoch=2-step=9.ckpt"
            resumed.fit(cls(), loader(32, 8), loader(16, 8), ckpt_path=callbacks[0].best_model_path)
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*.ckpt") if "again" not in p.parts)
        best = [Path(c.best_model_path).name for c in (*callbacks[:3], *again[:3])]
        waits = [c.wait_count for c in (*callbacks[3:], *again[3:])]
        seen.append((files, best, waits, [c.state_key for c in callbacks]))
    assert seen[1][:3] == seen[0][:3]
    assert seen[1][3] == [c.lightning_state_key for c in _two_checkpoints(il, tmp_path)]
    with pytest.raises(RuntimeError, match="more than one stateful callback of type `ModelCheckpoint`"):
        il.Trainer(callbacks=[il.callbacks.ModelCheckpoint(monitor="v"), il.callbacks.ModelCheckpoint(monitor="v")])
