"""What a checkpoint holds, and restoring one: returns the saved state.

``dump`` gathers the serialized state (chart position, counters, listener
states, data position), the module, optimizers, schedulers, precision plugin
state and RNG states into plain data. ``restore`` checks that the *whole*
checkpoint fits the run (weights, optimizer, scheduler, precision and RNG states,
counters) *before* changing anything, loads the tensors in place, and returns
the saved :class:`TrainerState`, which the trainer applies as a ``RestoreState``
update.

Paths in a checkpoint never decide where a resumed run writes: it continues in the
run directory the checkpoint *file* lives in (``RUN/checkpoints/x.ckpt`` -> ``RUN``),
and the listeners' stored paths are checked against that directory
(:meth:`~interlock.Listener.check_restored`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from interlock.connectors.callbacks import has_load_hooks, load_callbacks, save_callbacks
from interlock.connectors.data import (
    generator_state,
    load_datamodule_state,
    reposition,
    with_datamodule_state,
)
from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.history import HistoryLog, fingerprint_of, read_history
from interlock.connectors.metrics import scalars
from interlock.connectors.optim import Scheduler, window_closed
from interlock.connectors.replayto import check_record, follow
from interlock.connectors.resume_check import check_optimizers, check_precision, check_rng, check_schedulers
from interlock.connectors.rng import RestoreRNG, get_rng_states
from interlock.connectors.rundir import check_run_dir, continued_run_dir
from interlock.connectors.signals import SignalsSlot
from interlock.core.config import TrainerConfig
from interlock.core.errors import CheckpointError, Interrupted, Preempted
from interlock.core.logging import refuse_logs
from interlock.core.registry import Action, Registry
from interlock.core.run import Run
from interlock.core.slots import CallbacksSlot
from interlock.core.state import TrainerState
from interlock.core.updates import Interrupt, RestoreState, SaveCheckpoint, SetRunInfo, Update
from interlock.plugins.checkpoint_io import TorchCheckpointIO, is_sharded
from interlock.plugins.strategy import Strategy

__all__ = [
    "CHECKPOINT_FORMAT",
    "READABLE_FORMATS",
    "check_ckpt_path",
    "check_fits",
    "check_resumable",
    "dump",
    "nothing_to_train",
    "register",
    "resolve_ckpt_path",
    "restore",
    "upgrade",
    "write_checkpoint",
]

CHECKPOINT_FORMAT = "interlock.checkpoint/2"
#: Format 1 named the weights, optimizer and scheduler states ``model``, ``optimizers`` and ``schedulers``;
#: format 2 uses Lightning's names, so ``torch.load(path)["state_dict"]`` reads the weights as from a Lightning file.
_FORMAT_1 = "interlock.checkpoint/1"
_RENAMED = {"model": "state_dict", "optimizers": "optimizer_states", "schedulers": "lr_schedulers"}


#: The payload formats this interlock reads (the first is the one it writes).
READABLE_FORMATS = (CHECKPOINT_FORMAT, _FORMAT_1)


def upgrade(ckpt: dict[str, Any]) -> dict[str, Any]:
    """``ckpt`` in the current format: a format-1 checkpoint's keys get their format-2 (Lightning's) names."""
    if ckpt.get("format") != _FORMAT_1:
        return ckpt
    return {**{_RENAMED.get(k, k): v for k, v in ckpt.items()}, "format": CHECKPOINT_FORMAT}


def dump(
    state: TrainerState,
    module: torch.nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    schedulers: Sequence[Scheduler],
    precision_state: Mapping[str, Any],
    data_state: Any = None,
    strategy: Strategy | None = None,
    callbacks: Callable[[dict[str, Any]], None] | None = None,
    history: Mapping[str, Any] | None = None,
    rng: Mapping[str, Any] | None = None,
    datamodule: Any = None,
) -> dict[str, Any]:
    """Everything needed to continue the run, as plain data and tensors.

    ``callbacks`` adds the Lightning callbacks' state and runs their on_save_checkpoint, before the module's.
    ``history``: the fingerprint of the history rows written to the run directory
    (:mod:`interlock.connectors.history`); the checkpoint then holds it instead of the rows.
    ``rng``: the RNG states to keep (default: the global ones now). ``datamodule``: its
    hyper-parameters are kept (``datamodule_hyper_parameters``, Lightning's key).
    ``strategy`` gathers the model and optimizer state (full, even when sharded);
    with it this is a collective call: every rank must make it. In one process the
    gradients are kept too, for a save between the batches of one accumulation
    window (``accumulate_grad_batches > 1``).
    """
    strategy = strategy if strategy is not None else Strategy()
    state_dict = (state if history is None else state.replace(history=())).to_dict()
    if data_state is not None:
        state_dict["data"] = {**state_dict["data"], "dataset": data_state}
    hparams = getattr(module, "hparams", None)  # Module.save_hyperparameters: plain data, checked when recorded
    dm_hparams = getattr(datamodule, "hparams", None)  # the data module's, as Lightning keeps them
    dm_held = getattr(datamodule, "__dict__", {}).get("_hparams_name")
    payload = {
        "format": CHECKPOINT_FORMAT,
        "epoch": state.current_epoch,  # Lightning's keys and values (torch.load(path)["epoch"])
        "global_step": state.global_step,
        # Lightning's names: the __init__ argument that held them, "kwargs" when they were its arguments
        **({"hyper_parameters": dict(hparams)} if hparams else {}),
        **({"hparams_name": module.__dict__.get("_hparams_name")} if hparams else {}),
        **({"datamodule_hyper_parameters": dict(dm_hparams)} if dm_hparams else {}),
        **({"datamodule_hparams_name": dm_held} if dm_hparams else {}),
        "state": state_dict,
        **({"history": dict(history)} if history is not None else {}),
        "state_dict": strategy.model_state_dict(module),
        "optimizer_states": [strategy.optimizer_state_dict(module, o) for o in optimizers],
        "lr_schedulers": [s.scheduler.state_dict() for s in schedulers],
        "precision": dict(precision_state),
        "rng": dict(rng) if rng is not None else get_rng_states(),
        "grads": (
            {name: p.grad for name, p in module.named_parameters() if p.grad is not None}
            if strategy.world_size == 1
            else {}
        ),
    }
    if callbacks is not None:
        callbacks(payload)
    hook = getattr(module, "on_save_checkpoint", None)
    if callable(hook):  # Lightning's module hook: it may add its own keys (plain data and tensors) in place
        hook(payload)
        refuse_logs(module, "on_save_checkpoint")
    return payload


def check_fits(ckpt: Mapping[str, Any], module: torch.nn.Module, source: str) -> None:
    """Raise :class:`CheckpointError` unless the checkpoint's weights fit ``module`` exactly."""
    for key in ("format", "state", "state_dict"):
        if key not in ckpt:
            raise CheckpointError(f"{source} is not an interlock checkpoint: it has no {key!r} entry")
    if ckpt["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{source} has format {ckpt['format']!r}; this interlock reads {CHECKPOINT_FORMAT!r} and {_FORMAT_1!r}"
        )
    saved, own = ckpt["state_dict"], module.state_dict()
    if not isinstance(saved, Mapping) or not all(isinstance(k, str) for k in saved):
        raise CheckpointError(f"{source}: state_dict is a {type(saved).__name__}, not a state dict of named tensors")
    strict = getattr(module, "strict_loading", True)  # False: names may differ (Lightning's strict_loading)
    missing = sorted(set(own) - set(saved)) if strict else []
    unexpected = sorted(set(saved) - set(own)) if strict else []
    misshapen = sorted(
        f"{k}: checkpoint {tuple(saved[k].shape)} vs model {tuple(own[k].shape)}"
        if isinstance(saved[k], torch.Tensor)
        else f"{k}: checkpoint {type(saved[k]).__name__} vs model tensor {tuple(own[k].shape)}"
        for k in set(own) & set(saved)
        if isinstance(own[k], torch.Tensor)
        and (not isinstance(saved[k], torch.Tensor) or saved[k].shape != own[k].shape)
    )
    if missing or unexpected or misshapen:
        parts = [
            f"{name}: {', '.join(v[:10])}{' ...' if len(v) > 10 else ''}"
            for name, v in (("missing keys", missing), ("unexpected keys", unexpected), ("misshapen", misshapen))
            if v
        ]
        fix = "; set strict_loading = False on the module to load the names both have" if missing or unexpected else ""
        raise CheckpointError(
            f"{source} was saved from a different model ({type(module).__name__} does not match): "
            + "; ".join(parts)
            + fix
        )


def saved_state(ckpt: Mapping[str, Any], source: str) -> TrainerState:
    """The trainer state a checkpoint holds; :class:`CheckpointError` when it is not a valid one."""
    try:
        state = TrainerState.from_dict(ckpt["state"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source} holds an invalid trainer state: {exc}") from None
    data = state.data
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise CheckpointError(f"{source}: state 'data'['seed'] is {seed!r:.80}, not an int or None (a shuffle seed)")
    if not isinstance(data.get("exhausted", False), bool):
        raise CheckpointError(f"{source}: state 'data'['exhausted'] is {data['exhausted']!r:.80}, not a bool")
    return state


def check_loaded(ckpt: Mapping[str, Any], module: torch.nn.Module, source: str) -> TrainerState:
    """Check everything of ``ckpt`` that does not need the optimizers: weights, state, RNG, precision, gradients."""
    check_fits(ckpt, module, source)
    if ckpt.get("weights_only"):
        raise CheckpointError(
            f"{source} was saved with ModelCheckpoint(save_weights_only=True): it holds the weights only, so a fit "
            "cannot continue from it (Lightning refuses too); pass it to validate/test/predict(ckpt_path=...), or "
            "resume from a full checkpoint such as last.ckpt"
        )
    state = saved_state(ckpt, source)
    check_rng(ckpt.get("rng"), source)
    check_precision(ckpt.get("precision", {}), source)
    grads = ckpt.get("grads") or {}
    if not isinstance(grads, Mapping):
        raise CheckpointError(f"{source}: grads is a {type(grads).__name__}, not a dict of gradients by parameter")
    params = dict(module.named_parameters())
    for name, grad in grads.items():
        if name not in params or not isinstance(grad, torch.Tensor) or grad.shape != params[name].shape:
            raise CheckpointError(f"{source} holds a gradient for {name!r}, which does not fit this model")
    return state


def check_resumable(
    ckpt: Mapping[str, Any],
    module: torch.nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    schedulers: Sequence[Scheduler],
    source: str,
) -> TrainerState:
    """Raise :class:`CheckpointError` unless a fit can continue from ``ckpt``; return its saved state.

    Checks all that :func:`restore` loads and changes nothing, so a bad checkpoint is
    refused before the module's weights are touched: the weights; the trainer state
    (counters and event counts are ints, metrics numbers); each optimizer's state (the
    same optimizer class, param groups holding the same number of parameters, state
    tensors shaped like their parameters); each scheduler's state (a dict whose values
    fit this run's scheduler); the precision state (a dict); the RNG states (what
    :func:`~interlock.connectors.rng.get_rng_states` produces); the gradients.
    """
    state = check_loaded(ckpt, module, source)
    check_optimizers(ckpt.get("optimizer_states", []), optimizers, source)
    check_schedulers(ckpt.get("lr_schedulers", []), schedulers, source)
    return state


def restore(
    ckpt: Mapping[str, Any],
    module: torch.nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    schedulers: Sequence[Scheduler],
    source: str,
    strategy: Strategy | None = None,
    weights: bool = True,
) -> TrainerState:
    """Load weights, gradients, optimizer and scheduler states in place (through ``strategy``); return the state.

    ``weights=False``: the weights are in the module already (:func:`load_module_weights`, as a fit reads the file).
    """
    strategy = strategy if strategy is not None else Strategy()
    sharded = ckpt.get("sharded")
    state = check_resumable(ckpt, module, [] if sharded else optimizers, schedulers, source)
    if sharded:  # a directory: DCP loads model and optimizer state in place, resharded to this run
        strategy.load_sharded(sharded, module, optimizers)
    elif weights:
        load_module_weights(ckpt, module, strategy)
    saved_grads = ckpt.get("grads") or {}
    for name, param in module.named_parameters():
        grad = saved_grads.get(name)
        param.grad = None if grad is None else grad.to(device=param.device, dtype=param.dtype)
    for optimizer, saved in zip([] if sharded else optimizers, ckpt.get("optimizer_states", []), strict=False):
        strategy.load_optimizer_state_dict(module, optimizer, saved)
    for optimizer in optimizers:
        if state.global_step > 0:  # it has stepped in this run: torch need not warn "scheduler before optimizer"
            optimizer._opt_called = True  # type: ignore[attr-defined]
    for sched, saved in zip(schedulers, ckpt.get("lr_schedulers", []), strict=False):
        sched.scheduler.load_state_dict(saved)
    return state


def load_module_weights(ckpt: Mapping[str, Any], module: torch.nn.Module, strategy: Strategy) -> None:
    """The checkpoint's ``state_dict`` into the module (``strict_loading``: Lightning's flag on the module)."""
    strategy.load_model_state_dict(module, ckpt["state_dict"], strict=getattr(module, "strict_loading", True))


def call_load_hook(module: torch.nn.Module, ckpt: Mapping[str, Any]) -> None:
    """Lightning's ``on_load_checkpoint(checkpoint)``: at set-up, before the optimizers exist and the weights load.

    Every stage calls it when it loads a checkpoint (``ckpt_path=`` of fit, validate, test, predict,
    ``"best"`` included); the module may change the dict before its weights are read from it.
    """
    hook = getattr(module, "on_load_checkpoint", None)
    if callable(hook):
        hook(ckpt)
        refuse_logs(module, "on_load_checkpoint")


def check_ckpt_path(ckpt_path: Any, method: str = "fit") -> None:
    """``TypeError`` naming the value unless ``ckpt_path`` is ``None``, ``"last"`` or a path."""
    if ckpt_path is None:
        return
    if isinstance(ckpt_path, bool) or not isinstance(ckpt_path, str | os.PathLike):
        raise TypeError(
            f"Trainer.{method}(ckpt_path={ckpt_path!r}) is invalid: pass the path of a .ckpt file (a str or "
            "os.PathLike), 'last' (the newest last.ckpt of the run), or None to start fresh"
        )


def _newest_last(root: Path) -> Path | None:
    runs = root / "runs"
    found = [p for p in runs.glob("*/checkpoints/last.ckpt") if p.is_file() or is_sharded(p)]
    return max(found, key=lambda p: (p.stat().st_mtime_ns, str(p))) if found else None


def resolve_ckpt_path(ckpt_path: str | os.PathLike[str], root: Path, run_dir: str = "") -> Path:
    """``"last"`` is the ``last.ckpt`` of the run being continued; anything else is a path.

    A trainer that already has a run directory (``run_dir``, from an earlier stage)
    continues that run: ``RUN/checkpoints/last.ckpt``. Otherwise ``"last"`` is the
    most recently written ``runs/*/checkpoints/last.ckpt`` under ``root``.
    """
    check_ckpt_path(ckpt_path)
    if str(ckpt_path) != "last":
        return Path(ckpt_path)
    if run_dir:
        last = Path(run_dir) / "checkpoints" / "last.ckpt"
        if not (last.is_file() or is_sharded(last)):
            raise CheckpointError(
                f"ckpt_path='last' resumes this trainer's run {run_dir}, but there is no last.ckpt in it "
                f"({last}); pass a checkpoint path, or resume with a new Trainer to pick the newest run under {root}"
            )
        return last
    found = _newest_last(root)
    if found is None:
        raise CheckpointError(
            f"ckpt_path='last' but there is no last.ckpt in any run under {root} (runs/*/checkpoints/last.ckpt); "
            "pass a checkpoint path"
        )
    return found


def nothing_to_train(state: TrainerState, config: TrainerConfig, at_epoch_end: bool) -> str:
    """Why a fit resumed from ``state`` would train nothing under ``config`` (``""``: it trains).

    ``at_epoch_end``: it resumes in a state tagged ``epoch_end`` (a finished run's ``resume_at``).
    """
    if config.max_steps != -1 and state.global_step >= config.max_steps:
        return (
            f"global step {state.global_step} has reached max_steps={config.max_steps}; "
            "raise max_steps to train further"
        )
    if not at_epoch_end:
        return ""
    if state.should_stop:
        reason = state.stop_reason or "a stop was requested"
        return (
            f"the run had stopped ({reason}) and stays stopped; to train its model further, start a new fit from "
            "its weights (Module.load_from_checkpoint(path))"
        )
    epochs = config.epochs
    if epochs is not None and state.epoch + 1 >= epochs:
        return f"epoch {state.epoch} was the last of max_epochs={epochs}; raise max_epochs to train further"
    return ""


def _say(run: Run, line: str) -> None:
    if run.slot(HardwareSlot).strategy.is_global_zero:
        print(line, file=sys.stderr, flush=True)


def _continue(run: Run) -> Update | None:
    """A second fit of one trainer: continue its state from the end of the epoch its last fit was in.

    The next epoch starts (the previous fit's epoch is not run past its length); with the
    limits already reached the fit ends at once, and says so. Optimizers and schedulers are
    the fresh ones ``configure_optimizers`` just built, as in Lightning.
    """
    state = run.state
    if (state.progress.train_batches == 0 and state.epoch == 0) or run.chart is None:
        return None
    resume_at = run.chart.resume_at
    if resume_at is None:
        raise ValueError(
            f"this trainer has fitted before, and chart {run.chart.source!r} declares no `resume_at` on its final "
            'checkpoint state, so a second fit does not know where to continue; add `resume_at: "#<epoch end '
            'state>"` to the final state (statecharts/trainer.yaml: `finished`), or use a new Trainer'
        )
    why = nothing_to_train(state, run.config, "epoch_end" in run.chart.tags.get(resume_at, ()))
    _say(
        run,
        f"interlock: this trainer has fitted before (epoch {state.epoch}, global step {state.global_step}): "
        f"fit continues in {state.run_dir} with the next epoch" + (f"; nothing to train: {why}" if why else ""),
    )
    _trained_through(run, state.epoch)  # its epoch is over: the sanity check and on_train_start see the next
    # nothing to train: restored in place, so the chart goes on from the stage's start (sanity check, then its end)
    return RestoreState(state.replace(chart=run.state.chart if why else resume_at))


def _trained_through(run: Run, epoch: int) -> None:
    """Tell the callbacks' view that ``epoch``'s training has ended (its ``current_epoch`` counts it done)."""
    slot = run.slots.get(CallbacksSlot)
    if slot is not None:
        slot.trained_through = epoch


def write_checkpoint(run: Run, path: str, weights_only: bool = False, rng: Mapping[str, Any] | None = None) -> None:
    """Write a full checkpoint of ``run`` as it is now, its metric history inside the file; wait until it is durable.

    What a replay's ``save`` and ``Trainer.save_checkpoint`` after a fit write: the file stands alone
    (no ``history.jsonl`` beside it is needed). ``rng``: the RNG states to keep (default: the global
    ones now). A collective under DDP/FSDP, as every save.
    """
    _write(run, path, weights_only, embed_history=True, rng=rng)
    run.checkpoint.io.wait()


def _write(
    run: Run,
    path: str,
    weights_only: bool = False,
    embed_history: bool = False,
    rng: Mapping[str, Any] | None = None,
) -> None:
    """Gather the checkpoint (a collective under DDP/FSDP) and write it on rank 0 (the weights and state only)."""
    state = run.state
    train = run.feeds.get("train")
    if train is not None and train.last_outputs is not None:  # the epoch's train metrics, if resumed mid-way
        state = state.replace(data={**state.data, "last_train": scalars(train.last_outputs, "train")})
    state = with_datamodule_state(run, state)
    own = train.data.generator if train is not None else None
    if own is not None:  # the loader's own shuffling generator, as it is now (its next epoch draws from it)
        state = state.replace(data={**state.data, "generator": generator_state(own)})
    strategy = run.slot(HardwareSlot).strategy
    history = None if embed_history else _history(run, state)
    if strategy.sharded_checkpoint:
        _write_sharded(run, path, state, train.data.data_state() if train is not None else None, history)
        return
    payload = dump(
        state,
        run.module,
        run.optimizers,
        run.schedulers,
        run.slot(HardwareSlot).precision.state_dict(),
        train.data.data_state() if train is not None else None,
        strategy,
        None if weights_only else (lambda payload: save_callbacks(run, payload, state)),
        history,
        rng,
        run.plan.datamodule,
    )
    if weights_only:  # Lightning's save_weights_only: no optimizer, scheduler or gradient state
        payload.update(optimizer_states=[], lr_schedulers=[], grads={}, weights_only=True)
    elif payload["grads"] and window_closed(run)():  # kept past the step (a LightningModule): never used again
        payload["grads"] = {}
    if strategy.is_global_zero:
        check_run_dir(run)  # a deleted run directory is not silently recreated by the save
        run.checkpoint.io.save_checkpoint(payload, path)
    strategy.barrier()


@contextlib.contextmanager
def _naming_a_vanished_run_dir(run: Run) -> Iterator[None]:
    """A file missing under a save because the run directory was deleted meanwhile: the error that says so.

    The check before each save (:func:`check_run_dir`) cannot see a deletion that lands while a
    background save is writing its temporary file; that save then fails with a bare ``ENOENT``
    (raised by the next save or by ``checkpoint.wait``).
    """
    try:
        yield
    except Exception as exc:
        cause: BaseException | None = exc
        while cause is not None and not (isinstance(cause, OSError) and cause.errno == errno.ENOENT):
            cause = cause.__cause__ or cause.__context__  # the IO plugin wraps a write's OSError in CheckpointError
        if cause is not None:
            check_run_dir(run)  # raises the OutputError naming the deleted directory (this error as its context)
        raise


def _sio() -> Any:
    """:mod:`interlock.plugins.sharded_io`, imported on demand (torch.distributed.checkpoint is slow to import)."""
    from interlock.plugins import sharded_io

    return sharded_io


def _history(run: Run, state: TrainerState) -> dict[str, Any]:
    """Append the new history rows to ``RUN/history.jsonl`` (rank 0); their fingerprint, for the checkpoint.

    Other ranks write nothing; their fingerprint is empty (only rank 0's checkpoint is written).
    """
    if not run.slot(HardwareSlot).strategy.is_global_zero:
        return {}
    check_run_dir(run)  # a deleted run directory is not silently recreated by the history either
    slot = run.checkpoint
    if slot.history is None:
        slot.history = HistoryLog()
    log: HistoryLog = slot.history
    return log.sync(state.history, state.run_dir or run.plan.run_dir)


def _write_sharded(
    run: Run, path: str, state: TrainerState, data_state: Any, history: Mapping[str, Any] | None
) -> None:
    """Every rank writes its shards (no gather) and RNG states; rank 0 the trainer state and the manifest."""
    strategy = run.slot(HardwareSlot).strategy
    state_dict = (state if history is None else state.replace(history=())).to_dict()
    if data_state is not None:
        state_dict["data"] = {**state_dict["data"], "dataset": data_state}
    rng = get_rng_states()
    meta = {
        "format": CHECKPOINT_FORMAT,
        "state": state_dict,
        **({"history": dict(history)} if history is not None else {}),
        "lr_schedulers": [s.scheduler.state_dict() for s in run.schedulers],
        "precision": dict(run.slot(HardwareSlot).precision.state_dict()),
        "rng": rng,
    }
    save_callbacks(run, meta, state)
    strategy.sharded_io().save(path, strategy.sharded_state(run.module, run.optimizers), meta, {"rng": rng})


def read_checkpoint(io: TorchCheckpointIO, path: Path, map_location: Any, rank: int = 0) -> dict[str, Any]:
    """A checkpoint file, or a sharded directory's plain part (all its files hash-checked first).

    For a directory, ``model`` holds empty (meta-device) tensors of the saved shapes, for the
    checks; ``sharded`` names the directory the tensors are loaded from; ``rng`` is this rank's.
    """
    if not is_sharded(path):  # a file (a directory without a manifest is refused as not a file)
        return upgrade(io.load_checkpoint(path, map_location=map_location))
    sio = _sio()
    manifest = sio.read_manifest(path)
    ckpt: dict[str, Any] = upgrade(io.load_checkpoint(path / sio.META, map_location=map_location))
    saved_ranks = manifest.get("world_size", 1)
    ckpt["rng"] = io.load_checkpoint(sio.rank_file(path, rank, saved_ranks))["rng"]
    ckpt["state_dict"] = {
        key.removeprefix("model."): spec for key, spec in sio.tensor_specs(path).items() if key.startswith("model.")
    }
    ckpt["sharded"] = str(path)
    return ckpt


def register(reg: Registry) -> None:
    """``checkpoint.*`` actions and the ``SaveCheckpoint`` effect (the writer)."""

    @reg.action("checkpoint.load", reads=("hardware",))
    def load(run: Run, params: Mapping[str, Any]) -> Action:
        """Read ckpt_path and check it against the module; a resumed fit continues in the run the file is in."""

        def act() -> Update | None:
            if run.plan.ckpt_path is None:
                return None
            path = resolve_ckpt_path(run.plan.ckpt_path, Path(run.plan.root), run.plan.run_dir)
            ckpt = read_checkpoint(run.checkpoint.io, path, run.device, run.slot(HardwareSlot).strategy.global_rank)
            source = str(path)
            if run.stage != "fit":
                check_fits(ckpt, run.module, source)
                call_load_hook(run.module, ckpt)
                run.checkpoint.loaded = (ckpt, source, None)
                return None
            saved = check_loaded(ckpt, run.module, source)
            continued = continued_run_dir(path)  # where the file is, never what it says
            run_dir = str(continued) if continued is not None else run.plan.run_dir
            fingerprint = fingerprint_of(ckpt, source)
            if fingerprint is not None:  # the rows are in the run directory: read them back, checked
                file, data, rows = read_history(fingerprint, path, continued)
                saved = saved.replace(history=rows)
                log = run.checkpoint.history = HistoryLog()
                log.adopt(file, len(rows), data)
            if "replay_to" in ckpt:  # saved by a replay between checkpoint states: followed to its target on resume
                check_record(ckpt["replay_to"], run.chart, source)
            try:
                if run.chart is not None:
                    run.chart.resume_point(saved.chart)
                for check in run.checkpoint.restore_checks:
                    saved = check(saved, run_dir)
            except ValueError as exc:
                raise CheckpointError(f"{source}: {exc}") from None
            call_load_hook(run.module, ckpt)  # Lightning: before configure_optimizers (fit's optim.configure)
            run.checkpoint.loaded = (ckpt, source, saved)
            run.checkpoint.resumed = source
            if not ckpt.get("sharded") and has_load_hooks(run):  # Lightning's restore_model, then the callbacks,
                # which may change the weights (WeightAveraging puts the module's own back); the module's weights
                # are kept to be put back if the optimizers' or schedulers' states are refused later
                run.checkpoint.kept_weights = {
                    k: v.detach().to("cpu", copy=True) for k, v in run.module.state_dict().items()
                }
                load_module_weights(ckpt, run.module, run.slot(HardwareSlot).strategy)
            load_callbacks(run, ckpt)  # Lightning restores callbacks with the module, before configure_optimizers
            return SetRunInfo(run_dir=run_dir) if continued is not None else None

        return act

    @reg.action("checkpoint.load_weights", reads=("hardware",))
    def load_weights(run: Run, params: Mapping[str, Any]) -> Action:
        """Load the checkpoint's weights into the module (validate/test/predict with ckpt_path)."""

        def act() -> None:
            loaded, run.checkpoint.loaded = run.checkpoint.loaded, None
            if loaded is not None and loaded[0].get("sharded"):
                run.slot(HardwareSlot).strategy.load_sharded(loaded[0]["sharded"], run.module, [])
            elif loaded is not None:
                load_module_weights(loaded[0], run.module, run.slot(HardwareSlot).strategy)

        return act

    @reg.action("checkpoint.restore", reads=("hardware",))
    def restore_(run: Run, params: Mapping[str, Any]) -> Action:
        """Resume: check the whole checkpoint, load it, return its state; a second fit continues with the next epoch."""

        def act() -> list[Update] | Update | None:
            loaded, run.checkpoint.loaded = run.checkpoint.loaded, None
            if loaded is None:
                return _continue(run)
            ckpt, source, saved = loaded
            strategy = run.slot(HardwareSlot).strategy
            kept, run.checkpoint.kept_weights = run.checkpoint.kept_weights, None
            try:
                restore(ckpt, run.module, run.optimizers, run.schedulers, source, strategy, weights=kept is None)
            except CheckpointError:
                if kept is not None:  # a refused checkpoint leaves the module's weights as they were
                    run.module.load_state_dict(kept)
                raise
            run.slot(HardwareSlot).precision.load_state_dict(ckpt.get("precision", {}))
            load_datamodule_state(run, saved)
            now = run.state  # this process's rank and run directory, not the saving process's
            train = run.feeds.get("train")
            if train is not None:  # the loaders' own generators (the epoch's order is drawn again from its start); the
                train.data.restore_generator(saved.data)  # position is global samples: continue it on this world size
                data, batch_idx = reposition(saved.data, saved.progress.batch_idx, now.world_size, train.data.loader)
                saved = saved.replace(data=data, progress=attrs.evolve(saved.progress, batch_idx=batch_idx))
            restored = saved.replace(
                stage="fit",
                status="running",
                global_rank=now.global_rank,
                world_size=now.world_size,
                run_dir=now.run_dir,
            )
            resume_at = run.chart.resume_point(saved.chart) if run.chart is not None else saved.chart
            at_end = run.chart is not None and "epoch_end" in run.chart.tags.get(resume_at, ())
            why = nothing_to_train(saved, run.config, at_end)
            _say(
                run,
                f"interlock: resuming {source} in {now.run_dir}: state {saved.chart}, epoch {saved.epoch}, "
                f"global step {saved.global_step}" + (f"; nothing to train: {why}" if why else ""),
            )
            rec = ckpt.get("replay_to")
            if rec is not None and run.checkpoint.bus is not None:  # checked at load: re-execute to its target
                follow(rec, run, run.checkpoint.bus, source, strategy.world_size == 1)
                _say(run, f"interlock: {source} re-executes transitions {rec['from'] + 1} to {rec['to']} of its replay")
            if why:  # restored in place: the chart goes on from the stage's start (sanity check, then its end)
                restored = restored.replace(chart=run.state.chart)
            elif at_end:  # resumed at an epoch's end: on_train_start sees the next epoch, as Lightning's
                _trained_through(run, saved.epoch)
            updates: list[Update] = [RestoreState(restored)]
            if ckpt.get("rng") is not None:
                updates.append(RestoreRNG(ckpt["rng"]))
            return updates

        return act

    @reg.action("checkpoint.save_preempted", reads=("signals",))
    def save_preempted(run: Run, params: Mapping[str, Any]) -> Action:
        """Save ``last.ckpt`` here (a batch boundary); end the fit as interrupted by the signal (or Ctrl-C)."""

        def act() -> list[Update]:
            path = str(Path(run.state.run_dir or run.plan.run_dir) / "checkpoints" / "last.ckpt")
            signum = run.slot(SignalsSlot).signum
            stop: BaseException = Interrupted(path) if signum == signal.SIGINT else Preempted(signum)
            return [SaveCheckpoint(path, "preempted"), Interrupt(stop)]

        return act

    @reg.action("checkpoint.wait", reads=("hardware",))
    def wait(run: Run, params: Mapping[str, Any]) -> Action:
        """Wait until every checkpoint of the stage (file or sharded) is durable; raise the first failure."""

        def act() -> None:
            try:
                with _naming_a_vanished_run_dir(run):
                    run.checkpoint.io.wait()
            finally:
                run.slot(HardwareSlot).strategy.wait_for_checkpoints()

        return act

    @reg.effect(SaveCheckpoint)
    def writer(run: Run) -> Callable[[Any], None]:
        """Write the checkpoint, then delete the files it replaces once it is in place."""

        def save(request: SaveCheckpoint) -> None:
            with _naming_a_vanished_run_dir(run):  # a background save of an earlier request may fail here
                _write(run, request.path, request.weights_only)
            if run.slot(HardwareSlot).strategy.is_global_zero:
                for old in request.replaces:
                    if is_sharded(old):
                        run.slot(HardwareSlot).strategy.sharded_io().remove(old, replaced_by=request.path)
                    else:
                        run.checkpoint.io.remove_checkpoint(old, replaced_by=request.path)

        return save
