"""One runner per framework: play a Case and return its Outcome."""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import interlock
from interlock.listeners import EarlyStopping, ModelCheckpoint
from parity.body import FETCHES, CallbackRecorder, loaders
from parity.case import Case
from parity.outcome import Outcome
from parity.port import PortData, port_module

# both sides start every run from this global RNG state (dropout, DataLoader base seeds)
GLOBAL_SEED = 123
#: INTERLOCK_PARITY_ACCELERATOR=gpu runs the whole matrix on one GPU under both frameworks, with deterministic
#: kernels (the GPU check in tools/gpu_check.py's docstring); unset, both train on the CPU as the CI does
ON_DEVICE: dict[str, Any] = (
    {"accelerator": os.environ["INTERLOCK_PARITY_ACCELERATOR"], "devices": 1, "deterministic": True}
    if os.environ.get("INTERLOCK_PARITY_ACCELERATOR", "cpu") != "cpu"
    else {}
)


def _floats(metrics: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in dict(metrics).items()}


def _results(result: Any) -> Any:
    """validate/test return values as plain floats, the shape kept (list of dicts, or a dict)."""
    if isinstance(result, list):
        return [_floats(r) for r in result]
    return _floats(result)


def _files(directory: Path) -> tuple[str, ...]:
    return tuple(sorted(p.name for p in directory.glob("*.ckpt"))) if directory.is_dir() else ()


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _resumed(case: Case, tmp: Path, session: Callable[..., Outcome]) -> Outcome:
    """Stop at ``case.resume.stop_step``, resume from its checkpoint; compare with an uninterrupted run."""
    assert case.resume is not None
    stop = case.resume.stop_step
    first = session(
        case, tmp / "stop", calls=("fit",), trainer={"max_steps": stop},
        checkpoint={"every_n_train_steps": stop, "save_top_k": -1},
    )  # fmt: skip
    files = first.checkpoints
    if first.error or len(files) != 1:
        first.error = first.error or f"expected one checkpoint at step {stop}, found {files}"
        return first
    reference = session(case, tmp / "reference")
    out = session(case, tmp / "resumed", ckpt_path=tmp / "stop" / "ckpt" / files[0])
    out.resumed_exactly = out.error is None and all(
        torch.equal(out.weights[k], reference.weights[k]) for k in out.weights
    )
    return out


# -- Lightning ------------------------------------------------------------------------------------
def run_lightning(case: Case, tmp: Path) -> Outcome:
    return _resumed(case, tmp / "pl", _lightning) if case.resume else _lightning(case, tmp / "pl")


def _lightning(
    case: Case,
    tmp: Path,
    calls: tuple[str, ...] | None = None,
    trainer: dict[str, Any] | None = None,
    checkpoint: dict[str, Any] | None = None,
    ckpt_path: Path | None = None,
) -> Outcome:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import EarlyStopping as LitEarlyStopping
    from pytorch_lightning.callbacks import ModelCheckpoint as LitModelCheckpoint

    from parity.lit import LitData, lit_module

    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)

    class Recorder(pl.Callback):
        def __init__(self) -> None:
            self.rows: list[dict[str, float]] = []

        def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            self.rows.append(_floats(trainer.callback_metrics))

    out, recorder = Outcome(), Recorder()
    hooks = type("LitCallbackRecorder", (CallbackRecorder, pl.Callback), {"rows": None})()
    hooks.rows = []
    model = lit_module(case.module)
    model.spec_fetches = case.data.log_fetches
    FETCHES.clear()
    callbacks: list[Any] = [recorder, hooks]
    es = mc = None
    if case.early_stopping is not None:
        es = LitEarlyStopping(**case.early_stopping)
        callbacks.append(es)
    ck = {**(case.checkpoint or {}), **(checkpoint or {})} if (case.checkpoint or checkpoint) is not None else None
    if ck is not None:
        mc = LitModelCheckpoint(dirpath=tmp / "ckpt", **ck)
        callbacks.append(mc)
    kwargs = {
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": mc is not None,
        "default_root_dir": tmp,
        **ON_DEVICE,
        **case.trainer,
        **(trainer or {}),
    }
    data = loaders(case.data)
    dm = LitData(case.data) if case.data.datamodule else None
    torch.manual_seed(GLOBAL_SEED)
    try:
        t = pl.Trainer(callbacks=callbacks, **kwargs)
        for call in calls or case.calls:
            if call == "fit":
                if dm is not None:
                    t.fit(model, datamodule=dm, ckpt_path=ckpt_path)
                else:
                    t.fit(model, data["train"], data["val"], ckpt_path=ckpt_path)
                out.current_epoch, out.global_step = t.current_epoch, t.global_step
                out.metrics = _floats(t.callback_metrics)
            elif call == "predict":
                preds = t.predict(model, datamodule=dm) if dm else t.predict(model, dataloaders=data["predict"])
                out.predict = torch.cat(preds)  # type: ignore[arg-type]
            else:
                run = getattr(t, call)
                loader = data["val"] if call == "validate" else data["test"]
                result = (
                    run(model, datamodule=dm, verbose=False) if dm else run(model, dataloaders=loader, verbose=False)
                )
                setattr(out, call, _results(result))
            out.last_metrics = _floats(t.callback_metrics)
    except Exception as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    out.weights, out.calls, out.hooks = _weights(model.net), dict(model.calls), tuple(model.hook_log)
    out.epoch_metrics, out.callback_hooks = recorder.rows, tuple(hooks.rows)
    out.fetches = tuple(FETCHES)
    if mc is not None:
        out.checkpoints = _files(tmp / "ckpt")
        out.best_model_path = Path(mc.best_model_path).name
        last = tmp / "ckpt" / "last.ckpt"
        out.last_step = int(torch.load(last, weights_only=False)["global_step"]) if last.is_file() else None
    if es is not None:
        out.stopped_epoch = es.stopped_epoch
    return out


# -- interlock ------------------------------------------------------------------------------------
class Recorder(interlock.Listener):
    """The epoch-end metrics, as Lightning's callback sees them in ``on_train_epoch_end``."""

    key = "ParityRecorder"

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    @interlock.listen("fit.train.epoch_end")
    def on_epoch_end(self, event: Any, state: Any) -> None:
        self.rows.append(_floats(state.metrics))


def current_epoch(trainer: interlock.Trainer) -> int:
    """What porting.md maps Lightning's ``trainer.current_epoch`` to."""
    for owner in (trainer, trainer.state):
        value = getattr(owner, "current_epoch", None)
        if value is not None:
            return int(value)
    return trainer.state.epoch


def run_interlock(case: Case, tmp: Path) -> Outcome:
    return _resumed(case, tmp / "il", _interlock) if case.resume else _interlock(case, tmp / "il")


def _interlock(
    case: Case,
    tmp: Path,
    calls: tuple[str, ...] | None = None,
    trainer: dict[str, Any] | None = None,
    checkpoint: dict[str, Any] | None = None,
    ckpt_path: Path | None = None,
) -> Outcome:
    from interlock.lightning import Callback

    out, recorder = Outcome(), Recorder()
    hooks = type("PortCallbackRecorder", (CallbackRecorder, Callback), {"rows": None})()
    hooks.rows = []
    module = port_module(case.module)
    module.spec_fetches = case.data.log_fetches
    FETCHES.clear()
    listeners: list[Any] = [recorder, hooks]
    es = mc = None
    if case.early_stopping is not None:
        es = EarlyStopping(**case.early_stopping)
        listeners.append(es)
    ck = {**(case.checkpoint or {}), **(checkpoint or {})} if (case.checkpoint or checkpoint) is not None else None
    if ck is not None:
        mc = ModelCheckpoint(dirpath=tmp / "ckpt", **ck)
        listeners.append(mc)
    flags = inspect.signature(interlock.Trainer).parameters
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    kwargs = {k: v for k, v in quiet.items() if k in flags}
    if "enable_checkpointing" in flags:
        kwargs["enable_checkpointing"] = mc is not None
    kwargs.update(default_root_dir=tmp, listeners=listeners, **ON_DEVICE, **case.trainer, **(trainer or {}))
    data = loaders(case.data)
    dm = PortData(case.data) if case.data.datamodule else None
    torch.manual_seed(GLOBAL_SEED)
    t = None
    try:
        t = interlock.Trainer(**kwargs)
        for call in calls or case.calls:
            if call == "fit":
                if dm is not None:
                    t.fit(module, datamodule=dm, ckpt_path=ckpt_path)  # type: ignore[call-arg]
                else:
                    t.fit(module, data["train"], data["val"], ckpt_path=ckpt_path)
                out.current_epoch, out.global_step = current_epoch(t), t.state.global_step
                out.metrics = _floats(t.state.metrics)
            elif call == "predict":
                preds = t.predict(module, datamodule=dm) if dm else t.predict(module, data["predict"])  # type: ignore[call-arg]
                out.predict = torch.cat(preds)
            else:
                run = getattr(t, call)
                loader = data["val"] if call == "validate" else data["test"]
                result = run(module, datamodule=dm) if dm else run(module, loader)
                setattr(out, call, _results(result))
            out.last_metrics = _floats(t.state.metrics)
    except Exception as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    out.weights, out.calls, out.hooks = _weights(module.net), dict(module.calls), tuple(module.hook_log)
    out.epoch_metrics, out.callback_hooks = recorder.rows, tuple(hooks.rows)
    out.fetches = tuple(FETCHES)
    if t is not None and mc is not None:
        out.checkpoints = _files(tmp / "ckpt")
        last = tmp / "ckpt" / "last.ckpt"
        out.last_step = int(interlock.load_checkpoint(last)["global_step"]) if last.is_file() else None
        best = mc.best_model_path
        best = best(t.state) if callable(best) else best
        out.best_model_path = Path(best).name if best else ""
    if t is not None and es is not None:
        counters = getattr(es, "counters", None)
        out.stopped_epoch = counters(t.state)["stopped_epoch"] if counters else es.stopped_epoch
    return out
