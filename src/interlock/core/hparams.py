"""Hyper-parameters: ``save_hyperparameters()`` and ``hparams``, for modules and data modules (Lightning's meaning)."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

__all__ = ["AttributeDict", "HyperparametersMixin", "logged_hparams", "plain_error"]

_PLAIN = (type(None), bool, int, float, str)


class AttributeDict(dict[str, Any]):
    """A dict whose keys are also attributes (``self.hparams.lr``), as Lightning's ``hparams``."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"no hyper-parameter {key!r}; saved: {sorted(self)}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


def plain_error(value: Any) -> str:
    """Why ``value`` is not plain data (``""`` when it is): JSON-like values, lists, tuples, str-keyed dicts."""
    if type(value) in _PLAIN:
        return ""
    if type(value) in (list, tuple):
        return next((why for why in map(plain_error, value) if why), "")
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                return f"a dict with the non-str key {key!r:.40}"
            why = plain_error(item)
            if why:
                return why
        return ""
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def _caller() -> FrameType:
    """The frame that called the function calling this (``save_hyperparameters``' caller)."""
    frame = inspect.currentframe()
    caller = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    if caller is None:
        raise RuntimeError("save_hyperparameters() needs its caller's frame; pass frame=inspect.currentframe()")
    return caller


def _init_args(module: Any, frame: FrameType) -> dict[str, Any]:
    """The arguments of the ``__init__`` running for ``module``, found from ``frame`` up (Lightning's search)."""
    seen: FrameType | None = frame
    chain: list[dict[str, Any]] = []  # the __init__ running for the module, then those of its subclasses calling it
    for _ in range(64):
        if seen is None:
            break
        code = seen.f_code
        mine = (
            code.co_name == "__init__" and bool(code.co_varnames) and seen.f_locals.get(code.co_varnames[0]) is module
        )
        if mine:
            local = seen.f_locals
            count = code.co_argcount + code.co_kwonlyargcount
            found = {name: local[name] for name in code.co_varnames[1:count] if name in local}
            if code.co_flags & inspect.CO_VARKEYWORDS:
                found.update(local.get(code.co_varnames[count + bool(code.co_flags & inspect.CO_VARARGS)], {}))
            chain.append(found)
        elif chain:
            break
        seen = seen.f_back
    if chain:
        return {k: v for found in chain for k, v in found.items()}  # the most derived class's value wins
    raise RuntimeError(
        f"{type(module).__name__}.save_hyperparameters() found no __init__ of the module among its callers: call it "
        "from __init__ (or a method __init__ calls), or pass the values: save_hyperparameters({'lr': 0.1})"
    )


class HyperparametersMixin:
    """``save_hyperparameters()``, ``hparams``, ``hparams_initial``: what a checkpoint keeps to rebuild the object."""

    @property
    def hparams(self) -> AttributeDict:
        """What :meth:`save_hyperparameters` recorded (empty before): saved in every checkpoint."""
        saved = self.__dict__.get("_hparams")
        if saved is None:
            saved = AttributeDict()
            object.__setattr__(self, "_hparams", saved)
        return saved

    def save_hyperparameters(
        self,
        *args: Any,
        ignore: str | Sequence[str] | None = None,
        frame: FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """Record hyper-parameters in :attr:`hparams` (Lightning's meaning and arguments).

        With no ``args``: the arguments of the module's ``__init__`` (found from ``frame``, by default
        the caller's, walking up to the ``__init__`` running for this module); string ``args`` keep only
        those arguments; one dict or ``argparse.Namespace`` records its items (``load_from_checkpoint``
        then passes it back as the ``__init__`` argument that held it). ``ignore`` drops names;
        ``logger=False`` keeps them from the loggers. Checkpoints store them and ``load_from_checkpoint``
        rebuilds the module from them, so only plain data is accepted (None, bool, int, float, str and
        lists, tuples and str-keyed dicts of them): loading then never runs code. Anything else is an
        error naming the argument: pass ``ignore=[name]`` and give it again to
        ``load_from_checkpoint(path, name=...)``.
        """
        if len(args) == 1 and not isinstance(args[0], str) and not args[0]:
            return  # an empty container: nothing (Lightning's)
        objects = [a for a in args if not isinstance(a, str)]
        where = frame if frame is not None else _caller()
        try:
            init = _init_args(self, where)
        except RuntimeError:
            if not objects:
                raise
            init = {}  # values given: no __init__ needed (Lightning's)
        name: str | None = None
        if objects:
            if len(objects) > 1 or len(args) > 1:
                raise ValueError("save_hyperparameters() takes one dict/Namespace, or names of __init__ arguments")
            given = objects[0]
            hp = dict(given) if isinstance(given, Mapping) else dict(vars(given))
            name = next((k for k, v in init.items() if v is given), None)
        else:
            unknown = sorted(set(args) - set(init))
            if unknown:
                raise ValueError(
                    f"save_hyperparameters{tuple(unknown)}: no such __init__ argument; it has {sorted(init)}"
                )
            hp = {k: v for k, v in init.items() if not args or k in args}
            name = "kwargs"  # Lightning's name for the __init__ arguments themselves
        dropped = {ignore} if isinstance(ignore, str) else set(ignore or ())
        self.hparams.clear()  # each call records anew (Lightning's), less what it ignores
        for key, value in hp.items():
            if key in dropped:
                continue
            why = plain_error(value)
            if why:
                raise ValueError(
                    f"save_hyperparameters(): argument {key!r} holds {why}, which a checkpoint cannot store as "
                    f"plain data (loading must never run code); pass save_hyperparameters(ignore=[{key!r}]) and "
                    f"give it again when loading: load_from_checkpoint(path, {key}=...)"
                )
            self.hparams[key] = copy.deepcopy(value)
        self.__dict__["_hparams_name"] = name
        self.__dict__["_log_hyperparams"] = bool(logger)

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of :attr:`hparams` (Lightning's ``hparams_initial``; interlock records them once, at init)."""
        return AttributeDict(copy.deepcopy(dict(self.hparams)))


def logged_hparams(module: Any, datamodule: Any = None) -> dict[str, Any] | None:
    """What the loggers log: the module's hyper-parameters, then the data module's (Lightning's merge).

    Only a side that called ``save_hyperparameters()`` (with ``logger=True``, the default) is logged;
    ``None`` when neither did: the loggers then log no hyper-parameters at all, as Lightning's. A
    name both record with different values (or types) is a ``RuntimeError``, as in Lightning.
    """

    def of(owner: Any) -> dict[str, Any] | None:
        logged = owner is not None and getattr(owner, "__dict__", {}).get("_log_hyperparams", False)
        return dict(getattr(owner, "hparams", None) or {}) if logged else None

    mine, data = of(module), of(datamodule)
    if mine is None or data is None:
        return mine if data is None else data
    clash = sorted(k for k in mine.keys() & data.keys() if type(mine[k]) is not type(data[k]) or mine[k] != data[k])
    if clash:
        raise RuntimeError(
            f"the hyper-parameters {clash} are recorded by both {type(module).__name__} and "
            f"{type(datamodule).__name__} with different values, so the loggers cannot log one of each name: "
            "rename one, or pass save_hyperparameters(ignore=[...]) on one side"
        )
    return {**mine, **data}
