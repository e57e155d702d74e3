"""The user's model: a ``torch.nn.Module`` with Lightning's step names, hyper-parameters and loading."""

from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import torch

__all__ = ["AttributeDict", "Module", "StepOutput", "provide_checkpoint_loader"]

StepOutput = torch.Tensor | Mapping[str, Any] | None
M = TypeVar("M", bound="Module")
_PLAIN = (type(None), bool, int, float, str)
_loader: list[Callable[..., Any]] = []  # filled by the layer that reads checkpoints (connectors.weights)


def provide_checkpoint_loader(loader: Callable[..., Any]) -> None:
    """Install ``loader(cls, path, map_location, strict, init_args)``, what :meth:`Module.load_from_checkpoint` calls.

    The reader of checkpoint files lives in a higher layer than the module; it installs itself
    when ``interlock`` is imported.
    """
    _loader[:] = [loader]


class AttributeDict(dict[str, Any]):
    """A dict whose keys are also attributes (``self.hparams.lr``), as Lightning's ``hparams``."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"no hyper-parameter {key!r}; saved: {sorted(self)}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


def _plain_error(value: Any) -> str:
    """Why ``value`` is not plain data (``""`` when it is): JSON-like values, lists, tuples, str-keyed dicts."""
    if type(value) in _PLAIN:
        return ""
    if type(value) in (list, tuple):
        return next((why for why in map(_plain_error, value) if why), "")
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                return f"a dict with the non-str key {key!r:.40}"
            why = _plain_error(item)
            if why:
                return why
        return ""
    return f"a {type(value).__module__}.{type(value).__qualname__}"


class Module(torch.nn.Module):
    """Subclass and implement the steps you use.

    A step returns a loss tensor or a dict with ``"loss"`` and other scalars;
    every returned scalar becomes a metric (``train_<name>``, ``val_<name>``,
    ``test_<name>``). There is no ``self.log`` and no ``self.trainer``: the module
    never sees the trainer. ``metric_modes`` says which metrics are better when
    higher (``"max"``); by default names containing ``loss`` or ``err`` are
    ``"min"`` and all others ``"max"``.
    """

    metric_modes: ClassVar[Mapping[str, str]] = {}

    @property
    def hparams(self) -> AttributeDict:
        """What :meth:`save_hyperparameters` recorded (empty before): saved in every checkpoint."""
        saved = self.__dict__.get("_hparams")
        if saved is None:
            saved = AttributeDict()
            object.__setattr__(self, "_hparams", saved)
        return saved

    def save_hyperparameters(self, *names: str, ignore: str | Sequence[str] | None = None) -> None:
        """Record the calling ``__init__``'s arguments in :attr:`hparams` (Lightning's meaning).

        ``names`` keeps only those arguments; ``ignore`` drops some. Checkpoints store them and
        :meth:`load_from_checkpoint` rebuilds the module from them, so only plain data is
        accepted (None, bool, int, float, str and lists, tuples and str-keyed dicts of them):
        loading then never runs code. Anything else is an error naming the argument: pass
        ``ignore=[name]`` and give it again to ``load_from_checkpoint(path, name=...)``.
        """
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        if caller is None or caller.f_code.co_name != "__init__":
            raise RuntimeError(f"{type(self).__name__}.save_hyperparameters() must be called from __init__")
        code, local = caller.f_code, caller.f_locals
        count = code.co_argcount + code.co_kwonlyargcount
        args = {name: local[name] for name in code.co_varnames[1:count] if name in local}
        if code.co_flags & inspect.CO_VARKEYWORDS:
            args.update(local.get(code.co_varnames[count + bool(code.co_flags & inspect.CO_VARARGS)], {}))
        unknown = sorted(set(names) - set(args))
        if unknown:
            raise ValueError(f"save_hyperparameters{tuple(unknown)}: no such __init__ argument; it has {sorted(args)}")
        dropped = {ignore} if isinstance(ignore, str) else set(ignore or ())
        for name, value in args.items():
            if (names and name not in names) or name in dropped:
                continue
            why = _plain_error(value)
            if why:
                raise ValueError(
                    f"save_hyperparameters(): argument {name!r} holds {why}, which a checkpoint cannot store as "
                    f"plain data (loading must never run code); pass save_hyperparameters(ignore=[{name!r}]) and "
                    f"give it again when loading: load_from_checkpoint(path, {name}=...)"
                )
            self.hparams[name] = copy.deepcopy(value)

    @classmethod
    def load_from_checkpoint(
        cls: type[M],
        checkpoint_path: str | os.PathLike[str],
        map_location: Any = None,
        strict: bool = True,
        **init_args: Any,
    ) -> M:
        """A module built from the checkpoint's hyper-parameters (``init_args`` override them), with its weights.

        Lightning's meaning, for inference: returned in eval mode, on ``map_location`` (default:
        the CPU). Reads an interlock checkpoint or a Lightning ``.ckpt``, without running code in
        it. ``strict=False`` ignores missing and unexpected weight names.
        """
        if not _loader:
            raise RuntimeError("import interlock before loading a checkpoint (it installs the checkpoint reader)")
        return _loader[0](cls, checkpoint_path, map_location, strict, init_args)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> StepOutput:
        raise NotImplementedError(f"{type(self).__name__} must implement training_step(batch, batch_idx) to fit")

    def validation_step(self, batch: Any, batch_idx: int) -> StepOutput:
        raise NotImplementedError(
            f"{type(self).__name__} has no validation_step(batch, batch_idx); implement it or pass no val_dataloaders"
        )

    def test_step(self, batch: Any, batch_idx: int) -> StepOutput:
        raise NotImplementedError(f"{type(self).__name__} must implement test_step(batch, batch_idx) to test")

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """Default: the forward pass on the batch (its first element for tuples)."""
        if isinstance(batch, list | tuple):
            batch = batch[0]
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return an optimizer, a list of them, or a dict with ``optimizer`` and ``lr_scheduler``."""
        raise NotImplementedError(f"{type(self).__name__} must implement configure_optimizers() to fit")

    def mode_of(self, metric: str) -> str:
        """``"min"`` or ``"max"``: which direction is better for ``metric``."""
        if metric in self.metric_modes:
            return self.metric_modes[metric]
        lowered = metric.lower()
        return "min" if ("loss" in lowered or "err" in lowered) else "max"
