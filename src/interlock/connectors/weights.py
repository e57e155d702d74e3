"""Checkpoints outside the trainer: read one as a dict, build a module from one, take a Lightning ``.ckpt``'s weights.

Nothing here runs code from a file. interlock checkpoints are read by
:class:`~interlock.plugins.checkpoint_io.TorchCheckpointIO` (verified, ``weights_only``);
Lightning checkpoints with ``torch.load(weights_only=True)``, where a hyper-parameter that is
not plain data (an ``argparse.Namespace``, an enum, a path) is loaded as a :class:`Withheld`
marker naming its type instead of being rebuilt.
"""

from __future__ import annotations

import inspect
import os
import pickle
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from interlock.connectors.checkpoint import CHECKPOINT_FORMAT, upgrade
from interlock.core.datamodule import DataModule, provide_datamodule_loader
from interlock.core.errors import CheckpointError, WeightsMismatchError
from interlock.core.module import Module, provide_checkpoint_loader
from interlock.core.state import thaw
from interlock.plugins.checkpoint_io import TorchCheckpointIO, is_lightning_checkpoint

__all__ = [
    "Withheld",
    "datamodule_from_checkpoint",
    "load_checkpoint",
    "load_lightning_weights",
    "module_from_checkpoint",
    "read_state_dict",
]

T = TypeVar("T")


class Withheld:
    """Stands for a value of a Lightning checkpoint that is not plain data: only its type's name is kept."""

    type_name: str = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> Withheld:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __repr__(self) -> str:
        return f"Withheld({self.type_name!r})"


def _stand_in(name: str) -> tuple[type, str]:
    return type("Withheld", (Withheld,), {"type_name": name}), name


def _check_file(path: Path) -> None:
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: the file does not exist; check the path")
    if not path.is_file():
        raise CheckpointError(f"{path} is not a regular file; pass the path of a .ckpt file")


def _read_lightning(path: Path, map_location: Any) -> dict[str, Any]:
    """A Lightning checkpoint, loaded ``weights_only``; values that are not plain data become :class:`Withheld`."""
    _check_file(path)
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        with torch.serialization.safe_globals([_stand_in(name) for name in unsafe]):
            ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, ValueError, OSError) as exc:
        raise CheckpointError(f"cannot read Lightning checkpoint {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(ckpt, Mapping) or not isinstance(ckpt.get("state_dict"), Mapping):
        raise CheckpointError(f"Lightning checkpoint {path} has no 'state_dict' of weights")
    return dict(ckpt)


def _is_lightning(path: Path) -> bool:
    return path.is_file() and is_lightning_checkpoint(path)


def load_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """An interlock checkpoint as a plain dict, loaded without running code.

    Keys (Lightning's names where Lightning has one): ``state_dict`` (the weights),
    ``hyper_parameters`` (what ``save_hyperparameters`` recorded; ``{}`` if nothing),
    ``epoch`` (Lightning's ``current_epoch`` when it was saved: the 0-based epoch during a fit, the
    epochs trained once one has ended), ``global_step``, ``optimizer_states``,
    ``lr_schedulers``, ``trainer_state`` (the whole :class:`~interlock.TrainerState` as plain
    data) and ``format``. :class:`~interlock.CheckpointError` names the file when it is missing,
    damaged or not an interlock checkpoint (a Lightning one: use :func:`load_lightning_weights`).
    """
    target = Path(path)
    ckpt = upgrade(TorchCheckpointIO().load_checkpoint(target, map_location=map_location))
    if ckpt.get("format") != CHECKPOINT_FORMAT or not isinstance(ckpt.get("state_dict"), Mapping):
        raise CheckpointError(
            f"{target} is an interlock file but not a trainer checkpoint (format {ckpt.get('format')!r:.40}, "
            f"expected {CHECKPOINT_FORMAT!r} with the weights under 'state_dict')"
        )
    state: Mapping[str, Any] = ckpt["state"] if isinstance(ckpt.get("state"), Mapping) else {}
    progress: Mapping[str, Any] = state["progress"] if isinstance(state.get("progress"), Mapping) else {}
    internal = {"format", "state", "state_dict", "optimizer_states", "lr_schedulers", "precision", "rng", "grads"}
    internal |= {"epoch", "global_step"}
    internal |= {"hyper_parameters", "hparams_name", "datamodule_hyper_parameters", "datamodule_hparams_name"}
    return {
        **{k: v for k, v in ckpt.items() if k not in internal},  # what the module's on_save_checkpoint added
        "format": ckpt["format"],
        "state_dict": dict(ckpt["state_dict"]),
        "hyper_parameters": dict(ckpt.get("hyper_parameters") or {}),
        "hparams_name": ckpt.get("hparams_name") if isinstance(ckpt.get("hparams_name"), str) else None,
        "datamodule_hyper_parameters": dict(ckpt.get("datamodule_hyper_parameters") or {}),
        "datamodule_hparams_name": (
            ckpt["datamodule_hparams_name"] if isinstance(ckpt.get("datamodule_hparams_name"), str) else None
        ),
        "epoch": ckpt.get("epoch", progress.get("epoch", 0)),  # Lightning's current_epoch (format 1: the cursor)
        "global_step": ckpt.get("global_step", progress.get("global_step", 0)),
        "optimizer_states": list(ckpt.get("optimizer_states", [])),
        "lr_schedulers": list(ckpt.get("lr_schedulers", [])),
        "trainer_state": dict(state),
    }


def read_state_dict(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """The weights of an interlock checkpoint or a Lightning ``.ckpt``, loaded without running code."""
    target = Path(path)
    if _is_lightning(target):
        return dict(_read_lightning(target, map_location)["state_dict"])
    return load_checkpoint(target, map_location)["state_dict"]  # type: ignore[no-any-return]


def _load_weights(module: torch.nn.Module, weights: Mapping[str, Any], strict: bool, source: str) -> None:
    try:
        module.load_state_dict(weights, strict=strict)
    except RuntimeError as exc:
        raise WeightsMismatchError(
            f"the weights in {source} do not fit {type(module).__name__}: {exc}; build the module with the "
            "checkpoint's hyper-parameters, or pass strict=False to skip missing and unexpected names"
        ) from None


def load_lightning_weights(
    module: torch.nn.Module, path: str | os.PathLike[str], strict: bool = True
) -> torch.nn.Module:
    """Load a PyTorch Lightning ``.ckpt``'s weights (its ``state_dict``) into ``module``; return ``module``.

    Weights only, read with ``torch.load(weights_only=True)``: nothing in the file runs. The
    optimizer, scheduler, epoch, step and RNG states do not carry over (a warning says so): a
    fit after this starts at epoch 0, step 0, with fresh optimizers.
    """
    target = Path(path)
    if not _is_lightning(target):
        _check_file(target)
        raise CheckpointError(
            f"{target} is not a PyTorch Lightning checkpoint (no 'pytorch-lightning_version' in it); "
            "for an interlock checkpoint use Module.load_from_checkpoint or Trainer.fit(ckpt_path=...)"
        )
    ckpt = _read_lightning(target, "cpu")
    _load_weights(module, ckpt["state_dict"], strict, str(target))
    warnings.warn(
        f"loaded only the weights of Lightning checkpoint {target} (epoch {ckpt.get('epoch')}, global step "
        f"{ckpt.get('global_step')}); its optimizer, scheduler, epoch, step and RNG states do not carry over: "
        "a fit starts at epoch 0 with fresh optimizers",
        stacklevel=2,
    )
    return module


def module_from_checkpoint(
    cls: type[Module],
    path: str | os.PathLike[str],
    map_location: Any,
    strict: bool | None,
    init_args: Mapping[str, Any],
) -> Module:
    """What :meth:`Module.load_from_checkpoint` does: build ``cls`` from the hparams and ``init_args``; load weights."""
    target = Path(path)
    where = "cpu" if map_location is None else map_location
    loaded = _read_lightning(target, where) if _is_lightning(target) else load_checkpoint(target, where)
    weights, hparams = loaded["state_dict"], dict(loaded.get("hyper_parameters") or {})
    module = _build(cls, target, hparams, loaded.get("hparams_name"), init_args)
    _load_weights(module, weights, module.strict_loading if strict is None else strict, str(target))
    if isinstance(map_location, str | torch.device):  # a dict or function only maps the loaded tensors
        module.to(torch.device(map_location))
    return module  # in training mode, as constructed (Lightning's): call .eval() for inference


def _build(cls: type[T], target: Path, hparams: dict[str, Any], held: Any, init_args: Mapping[str, Any]) -> T:
    """``cls`` built from a checkpoint's hyper-parameters, ``init_args`` overriding them.

    ``held``: the ``__init__`` argument that held them (``save_hyperparameters(obj)``), else ``None``.
    """
    if isinstance(held, str) and held != "kwargs" and held in inspect.signature(cls.__init__).parameters:
        kwargs = {held: hparams, **init_args}
    else:
        kwargs = {**hparams, **init_args}
    withheld = sorted(k for k, v in kwargs.items() if isinstance(v, Withheld))
    if withheld:
        raise CheckpointError(
            f"{target} saved the hyper-parameters {withheld} as objects that are not plain data, which are not "
            f"loaded (they could run code); pass them: {cls.__name__}.load_from_checkpoint(path, "
            + ", ".join(f"{k}=..." for k in withheld)
            + ")"
        )
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise CheckpointError(
            f"cannot build {cls.__name__} from the hyper-parameters of {target} ({sorted(hparams)}) and "
            f"init_args ({sorted(init_args)}): {exc}"
        ) from None


def datamodule_from_checkpoint(
    cls: type[DataModule], path: str | os.PathLike[str], map_location: Any, init_args: Mapping[str, Any]
) -> DataModule:
    """What :meth:`DataModule.load_from_checkpoint` does: build ``cls`` from the checkpoint; give it its state back.

    An interlock checkpoint keeps the data module's ``state_dict()`` in the trainer state, a
    Lightning one under the class's qualified name.
    """
    target = Path(path)
    where = "cpu" if map_location is None else map_location
    if _is_lightning(target):
        ckpt = _read_lightning(target, where)
        saved = ckpt.get(cls.__qualname__)
    else:
        ckpt = load_checkpoint(target, where)
        data = ckpt["trainer_state"].get("data")
        saved = data.get("datamodule") if isinstance(data, Mapping) else None
    hparams = dict(ckpt.get("datamodule_hyper_parameters") or {})
    datamodule = _build(cls, target, hparams, ckpt.get("datamodule_hparams_name"), init_args)
    if saved is not None:
        datamodule.load_state_dict(thaw(saved))
    return datamodule


provide_checkpoint_loader(module_from_checkpoint)
provide_datamodule_loader(datamodule_from_checkpoint)
