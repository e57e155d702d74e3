"""Checks that a checkpoint's optimizer, scheduler, precision and RNG states fit the run, before anything loads.

``torch`` checks some of this itself, but only while loading: by then the module's
weights are overwritten, and a list where a dict belongs, Adam state in an SGD run or
a string where a counter belongs fails deep inside torch. Each check here raises
:class:`~interlock.CheckpointError` naming the file and the field (``optimizer_states[0].state[3]``)
and changes nothing.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from interlock.core.errors import CheckpointError

__all__ = ["check_optimizers", "check_precision", "check_rng", "check_schedulers"]

#: ``torch.optim`` optimizers whose per-parameter state is not shaped like the parameter.
_UNSHAPED_STATE = frozenset({"LBFGS", "Adafactor"})
#: Param-group keys a scheduler adds to its optimizer's groups (present in a checkpoint saved with one).
_SCHEDULER_GROUP_KEYS = frozenset({"initial_lr"})


def _fail(source: str, field: str, problem: str) -> CheckpointError:
    return CheckpointError(f"{source}: {field} {problem}; the checkpoint does not fit this run (nothing was loaded)")


def _kind(value: Any) -> str:
    return type(value).__name__


def _number(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.dtype.is_complex
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fits(own: Any, saved: Any) -> bool:
    """Whether ``saved`` can take the place of ``own`` (a value of the same kind: number, flag, list of a length).

    Where the run's own value is ``None`` (``foreach=None``: torch decides) anything is accepted.
    """
    if own is None:
        return True
    if isinstance(own, bool):
        return isinstance(saved, bool)
    if _number(own):
        return _number(saved)
    if isinstance(own, str):
        return isinstance(saved, str)
    if isinstance(own, list | tuple):
        return isinstance(saved, list | tuple) and len(saved) == len(own)
    if isinstance(own, Mapping):
        return isinstance(saved, Mapping)
    return True


def check_optimizers(saved: Any, optimizers: Sequence[torch.optim.Optimizer], source: str) -> None:
    """Each saved optimizer state is a ``torch.optim`` state dict of the same optimizer over the same parameters."""
    if not isinstance(saved, list | tuple):
        raise _fail(source, "optimizer_states", f"is a {_kind(saved)}, not a list of optimizer state dicts")
    if not optimizers:
        return
    if len(saved) != len(optimizers):
        raise CheckpointError(
            f"{source} has {len(saved)} optimizer state(s) but configure_optimizers() returned {len(optimizers)} "
            "optimizer(s)"
        )
    for i, (state, optimizer) in enumerate(zip(saved, optimizers, strict=True)):
        _check_optimizer(state, optimizer, source, f"optimizer_states[{i}]")


def _check_optimizer(saved: Any, optimizer: torch.optim.Optimizer, source: str, field: str) -> None:
    name = type(optimizer).__name__
    if not isinstance(saved, Mapping) or not isinstance(saved.get("param_groups"), list | tuple):
        raise _fail(source, field, f"is a {_kind(saved)} without a 'param_groups' list, not an optimizer state dict")
    groups, own_groups = saved["param_groups"], optimizer.param_groups
    if len(groups) != len(own_groups):
        raise _fail(
            source, f"{field}.param_groups", f"has {len(groups)} group(s) where this {name} has {len(own_groups)}"
        )
    params: dict[Any, torch.Tensor] = {}
    for g, (group, own) in enumerate(zip(groups, own_groups, strict=True)):
        where = f"{field}.param_groups[{g}]"
        if not isinstance(group, Mapping) or not isinstance(group.get("params"), list | tuple):
            raise _fail(source, where, f"is a {_kind(group)} without a 'params' list")
        if len(group["params"]) != len(own["params"]):
            raise _fail(
                source, where, f"holds {len(group['params'])} parameter(s) where this {name} has {len(own['params'])}"
            )
        foreign = sorted(set(group) - set(own) - _SCHEDULER_GROUP_KEYS - {"params"})
        if foreign:
            raise _fail(
                source,
                where,
                f"has the settings {foreign} that {name} does not have: it was saved from another optimizer "
                f"(this run's configure_optimizers() returns {name}, with {sorted(set(own) - {'params'})})",
            )
        for key in sorted(set(group) & set(own) - {"params"}):
            if not _fits(own[key], group[key]):
                raise _fail(source, f"{where}[{key!r}]", f"is {group[key]!r} where {name} has {own[key]!r}")
        for pid, param in zip(group["params"], own["params"], strict=True):
            if isinstance(pid, bool) or not isinstance(pid, int | str) or pid in params:
                raise _fail(source, f"{where}['params']", f"holds {pid!r}, not a distinct parameter id")
            params[pid] = param
    state = saved.get("state", {})
    if not isinstance(state, Mapping):
        raise _fail(source, f"{field}.state", f"is a {_kind(state)}, not a dict of per-parameter states")
    shaped = type(optimizer).__module__.startswith("torch.optim") and name not in _UNSHAPED_STATE
    for pid, entry in state.items():
        where = f"{field}.state[{pid!r}]"
        if pid not in params:
            raise _fail(source, where, "is the state of a parameter the param groups do not list")
        if not isinstance(entry, Mapping):
            raise _fail(source, where, f"is a {_kind(entry)}, not a dict")
        param = params[pid]
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                if shaped and value.dim() > 0 and value.shape != param.shape:
                    raise _fail(
                        source,
                        f"{where}[{key!r}]",
                        f"has shape {tuple(value.shape)}, its parameter {tuple(param.shape)}",
                    )
            elif shaped and not (_number(value) or value is None or isinstance(value, bool)):
                raise _fail(source, f"{where}[{key!r}]", f"is a {_kind(value)}, not a tensor or a number")


def check_schedulers(saved: Any, schedulers: Sequence[Any], source: str) -> None:
    """Each saved LR scheduler state is a dict whose values fit this run's scheduler of the same place."""
    if not isinstance(saved, list | tuple):
        raise _fail(source, "lr_schedulers", f"is a {_kind(saved)}, not a list of scheduler state dicts")
    if not schedulers:
        return
    if len(saved) != len(schedulers):
        raise CheckpointError(
            f"{source} has {len(saved)} LR scheduler state(s) but configure_optimizers() returned {len(schedulers)}"
        )
    for i, (state, sched) in enumerate(zip(saved, schedulers, strict=True)):
        where = f"lr_schedulers[{i}]"
        if not isinstance(state, Mapping) or not all(isinstance(k, str) for k in state):
            raise _fail(source, where, f"is a {_kind(state)}, not a scheduler state dict")
        own = sched.scheduler.state_dict()
        for key in sorted(set(state) & set(own)):
            if not _fits(own[key], state[key]):
                name = type(sched.scheduler).__name__
                raise _fail(source, f"{where}[{key!r}]", f"is {state[key]!r} where {name} has {own[key]!r}")


def check_precision(saved: Any, source: str) -> None:
    """The precision plugin's state (a gradient scaler's) is a dict."""
    if not isinstance(saved, Mapping) or not all(isinstance(k, str) for k in saved):
        raise _fail(source, "precision", f"is a {_kind(saved)}, not a dict")


def _tensor_like(value: Any, like: torch.Tensor) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == like.dtype and value.shape == like.shape


def check_rng(saved: Any, source: str) -> None:
    """The RNG states have the structure :func:`~interlock.connectors.rng.get_rng_states` produces."""
    if saved is None:
        return
    if not isinstance(saved, Mapping):
        raise _fail(source, "rng", f"is a {_kind(saved)}, not a dict of RNG states")
    unknown = sorted(set(saved) - {"python", "torch", "numpy", "cuda"})
    if unknown:
        raise _fail(source, "rng", f"has the unknown entries {unknown}; expected python, torch, numpy, cuda")
    if "python" not in saved or "torch" not in saved:
        raise _fail(source, "rng", "lacks the 'python' or 'torch' state")
    own_version, own_internal, _ = random.getstate()
    python = saved["python"]
    ok = isinstance(python, list | tuple) and len(python) == 3
    if ok:
        version, internal, gauss = python
        ok = (
            version == own_version
            and isinstance(internal, list | tuple)
            and len(internal) == len(own_internal)
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**32 for x in internal)
            and internal[-1] <= len(internal) - 1
            and (gauss is None or isinstance(gauss, float))
        )
    if not ok:
        raise _fail(source, "rng['python']", "is not a state of Python's random module ([version, 625 ints, gauss])")
    own_torch = torch.get_rng_state()
    if not _tensor_like(saved["torch"], own_torch):
        raise _fail(
            source, "rng['torch']", f"is not a torch RNG state (a uint8 tensor of shape {tuple(own_torch.shape)})"
        )
    if "numpy" in saved:
        _check_numpy(saved["numpy"], source)
    if "cuda" in saved:
        cuda = saved["cuda"]
        if not isinstance(cuda, list | tuple) or not all(
            isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1 for t in cuda
        ):
            raise _fail(source, "rng['cuda']", "is not a list of CUDA RNG states (uint8 tensors)")


def _check_numpy(value: Any, source: str) -> None:
    ok = isinstance(value, list | tuple) and len(value) == 5
    if ok:
        kind, keys, pos, has_gauss, cached = value
        ok = (
            kind == "MT19937"
            and isinstance(keys, torch.Tensor)
            and keys.shape == (624,)
            and not keys.dtype.is_floating_point
            and isinstance(pos, int)
            and 0 <= pos <= 624
            and isinstance(has_gauss, int)
            and _number(cached)
        )
    if not ok:
        raise _fail(
            source, "rng['numpy']", "is not a NumPy RNG state (['MT19937', 624 keys, pos, has_gauss, cached_gaussian])"
        )
