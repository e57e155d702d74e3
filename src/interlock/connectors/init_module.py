"""``trainer.init_module()``: make a module's tensors on the run's device, in its precision's dtype (Lightning's).

Under the context, tensors are created on the device the run will use (``torch.device`` as a context)
and, for ``64-true``, ``16-true`` and ``bf16-true``, in that floating dtype (``torch.set_default_dtype``,
put back on exit); the mixed flags keep float32 parameters, so they change nothing. ``empty_init=True``
skips ``torch.nn.init``'s functions, leaving the memory uninitialised (and the RNG undrawn), for a
module whose weights a checkpoint will replace. What the run does with the module afterwards is
unchanged: the trainer still moves and casts it as it sets up, a no-op for a module made here.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from interlock.connectors.hardware_slot import HardwareSlot

__all__ = ["tensor_init_context"]


class _SkipInit(TorchFunctionMode):
    """Every ``torch.nn.init`` function returns its tensor untouched."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return kwargs["tensor"] if "tensor" in kwargs else args[0]
        return func(*args, **kwargs)


@contextlib.contextmanager
def tensor_init_context(hardware: HardwareSlot, empty_init: bool | None = None) -> Iterator[None]:
    """Create tensors on the run's device, in its ``*-true`` precision's dtype; skip init with ``empty_init``."""
    if hardware.strategy.name.startswith("fsdp"):
        warnings.warn(
            "trainer.init_module() cannot shard the module as it is made with strategy='fsdp': each process makes "
            "the whole module on its device. Make large layers in the module's configure_model() instead (the "
            "strategy shards them after it runs); Lightning warns the same",
            UserWarning,
            stacklevel=3,
        )
    precision = hardware.precision
    dtype = precision.param_dtype if precision.compute_dtype is None else None
    before = torch.get_default_dtype()
    with contextlib.ExitStack() as stack:
        if empty_init:
            stack.enter_context(_SkipInit())
        stack.enter_context(hardware.device)
        if dtype is not None and dtype is not before:
            torch.set_default_dtype(dtype)
            stack.callback(torch.set_default_dtype, before)
        yield
