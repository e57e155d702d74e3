"""Trainer flags that choose listeners, and Lightning Trainer arguments interlock spells differently.

Lightning keeps its default callbacks when you add one; so does interlock: the
defaults (progress bar, model summary, CSV logger, event trace, ``ModelCheckpoint(save_last=True)``)
are always installed unless ``enable_progress_bar=False``, ``enable_model_summary=False``, ``logger=False``,
``enable_trace=False`` (interlock's own) or ``enable_checkpointing=False`` removes
them, and a listener you pass of a default's kind (a ``ModelCheckpoint``, a ``ProgressBar``) replaces that default.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from interlock.connectors.callbacks import check_callback, is_callback, order_callbacks
from interlock.core.config import TrainerConfig
from interlock.core.events import Listener

__all__ = ["LIGHTNING_ONLY", "check_lightning_flags", "check_model_summary", "resolve_listeners", "split_callbacks"]

#: Lightning Trainer arguments interlock has no flag for: the value that means "off" in
#: Lightning (accepted, as it changes nothing) and what to do in interlock instead.
LIGHTNING_ONLY: Mapping[str, tuple[tuple[Any, ...], str]] = {
    "gpus": ((None,), "use accelerator='gpu', devices=N (Lightning 2 removed gpus= as well)"),
    "tpu_cores": ((None,), "interlock has no TPU accelerator; use accelerator='cpu'|'cuda'|'mps'"),
    "auto_lr_find": ((False,), "Lightning 2 removed it (Tuner): call interlock.tuner.lr_find(trainer, module, ...)"),
    "auto_scale_batch_size": ((False,), "Lightning 2 removed it (Tuner); interlock has no batch-size finder"),
    "resume_from_checkpoint": ((None,), "use trainer.fit(module, ..., ckpt_path=PATH)"),
    "profiler": (
        (None,),
        "add the Profiler listener (callbacks=[interlock.listeners.Profiler()]: time per chart state), or wrap "
        "trainer.fit in torch.profiler.profile(...)",
    ),
    "sync_batchnorm": ((False,), "convert first: module = torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)"),
    "num_nodes": ((1,), "interlock runs on one node; launch with torchrun for several (see docs/distributed.md)"),
    "plugins": ((None,), "use precision=... and strategy=... (interlock's plugins are chosen by name)"),
    "barebones": (
        (False,),
        "use enable_checkpointing=False, enable_progress_bar=False, logger=False, enable_model_summary=False, "
        "enable_trace=False (interlock.lightning.Trainer takes barebones=True, as Lightning's)",
    ),
    # interlock evaluates under torch.no_grad(): Lightning's inference_mode=False; True (Lightning's
    # torch.inference_mode) is accepted too: its results are the same, and its outputs may join autograd later
    "inference_mode": ((True, False), ""),
    "use_distributed_sampler": (
        (True,),
        "interlock always shards loaders across processes as DistributedSampler does",
    ),
    "max_time": ((None,), "add the Timer listener: Timer(duration='00:12:00:00')"),
    "track_grad_norm": ((-1,), "Lightning 2 removed it; log torch.nn.utils.get_total_norm of the gradients yourself"),
    "move_metrics_to_cpu": ((False,), "metrics are Python floats in interlock's state already"),
}


def check_lightning_flags(extra: Mapping[str, Any], init: Callable[..., Any]) -> None:
    """Refuse keyword arguments Trainer does not take, naming interlock's equivalent.

    A Lightning argument in :data:`LIGHTNING_ONLY` passed at its "off" value is accepted.
    """
    for name, value in extra.items():
        if name in LIGHTNING_ONLY:
            offs, instead = LIGHTNING_ONLY[name]
            if any(value is off or (type(value) is type(off) and value == off) for off in offs):
                continue
            raise TypeError(f"Trainer({name}={value!r}) is a Lightning argument interlock does not take: {instead}")
        params = inspect.signature(init).parameters.values()
        known = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]}=?" if close else ""
        raise TypeError(f"Trainer() got an unexpected keyword argument {name!r}{hint}")


def check_model_summary(value: Any) -> bool:
    """``enable_model_summary``: ``None`` means ``True`` (Lightning's default); anything but a bool is an error."""
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"Trainer(enable_model_summary={value!r}) is invalid: expected True, False or None")
    return value is not False


def split_callbacks(name: str, value: Any) -> tuple[Any, list[Any]]:
    """``value`` without its Lightning-style callbacks, and those callbacks (in Lightning's order).

    A Lightning ``Callback`` (``interlock.lightning.Callback``, or Lightning's own base class
    subclassed) is recognised by its hook methods; Lightning's built-in callbacks are refused,
    naming interlock's.
    """
    if value is None or isinstance(value, Listener | str | bytes | Mapping):
        return value, []
    if is_callback(value):
        check_callback(value)
        return [], [value]
    if not isinstance(value, Iterable):
        return value, []
    items = list(value)
    found = [x for x in items if not isinstance(x, Listener) and is_callback(x)]
    for callback in found:
        check_callback(callback)
    return [x for x in items if not any(x is c for c in found)], list(order_callbacks(found))


def _as_list(name: str, value: Any) -> list[Listener]:
    if isinstance(value, Listener):
        return [value]
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise TypeError(
            f"Trainer({name}={value!r:.80}) is invalid: expected a list of Listener objects "
            "(such as [EarlyStopping('val_loss')])"
        )
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, Listener):
            raise TypeError(
                f"Trainer({name}=...) item {i} is {item!r:.80}, not a Listener: pass instances of "
                "interlock.Listener subclasses (ModelCheckpoint(), CSVLogger(), ... or your own) or of "
                "interlock.lightning.Callback, not classes or other objects"
            )
    return items


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"Trainer({name}={value!r}) is invalid: expected True or False")
    return value


def resolve_listeners(
    listeners: Sequence[Listener] | None,
    callbacks: Sequence[Listener] | None,
    logger: bool | Listener | Sequence[Listener] | None,
    enable_checkpointing: bool,
    enable_progress_bar: bool,
    enable_trace: bool,
    config: TrainerConfig,
    enable_model_summary: bool = False,
) -> list[Listener]:
    """The listeners a Trainer installs: the defaults the flags keep, then the given ones, configured.

    ``callbacks`` is Lightning's name for ``listeners`` (pass one of them). ``logger``:
    ``True``/``None`` keeps the default ``CSVLogger``; ``False`` drops it; a listener or a
    list of them replaces it. A ``ProgressBar``, ``CSVLogger``, ``EventTrace`` or
    ``ModelCheckpoint`` among the given listeners replaces the default of its kind.
    ``enable_model_summary`` adds ``ModelSummary()`` after the progress bar unless one is given.
    """
    from interlock.listeners import CSVLogger, EventTrace, ModelCheckpoint, ModelSummary, ProgressBar

    if listeners is not None and callbacks is not None:
        raise TypeError("Trainer(listeners=..., callbacks=...): callbacks is Lightning's name for listeners; pass one")
    given = _as_list("listeners" if callbacks is None else "callbacks", callbacks or listeners or [])
    enable_checkpointing = _flag("enable_checkpointing", enable_checkpointing)
    enable_progress_bar = _flag("enable_progress_bar", enable_progress_bar)
    enable_trace = _flag("enable_trace", enable_trace)
    if logger is None or logger is True:
        loggers: list[Listener] = [] if any(isinstance(x, CSVLogger) for x in given) else [CSVLogger()]
    elif logger is False:
        loggers = []
    else:
        loggers = _as_list("logger", logger)
    if not enable_checkpointing and any(isinstance(x, ModelCheckpoint) for x in given + loggers):
        raise ValueError(
            "Trainer(enable_checkpointing=False) with a ModelCheckpoint in listeners: remove the ModelCheckpoint "
            "or set enable_checkpointing=True (Lightning refuses this too)"
        )
    if not enable_progress_bar and any(isinstance(x, ProgressBar) for x in given):
        raise ValueError(
            "Trainer(enable_progress_bar=False) with a ProgressBar in listeners: remove the ProgressBar "
            "or set enable_progress_bar=True (Lightning refuses this too)"
        )
    chosen = loggers + given
    defaults: list[Listener] = []
    if enable_progress_bar and not any(isinstance(x, ProgressBar) for x in chosen):
        defaults.append(ProgressBar())
    if enable_model_summary and not any(isinstance(x, ModelSummary) for x in chosen):
        defaults.append(ModelSummary())
    out = defaults + loggers
    if enable_trace and not any(isinstance(x, EventTrace) for x in chosen):
        out.append(EventTrace())
    out += given
    if enable_checkpointing and not any(isinstance(x, ModelCheckpoint) for x in chosen):
        out.append(ModelCheckpoint(save_last=True))
    for listener in out:
        listener.configure(config)
    return out
