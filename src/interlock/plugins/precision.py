"""Precision plugins: parameter dtype, input casting, autocast and gradient scaling.

Hardware-agnostic: nothing here asks which accelerator is present. The caller
passes the device type (``"cpu"``, ``"cuda"``, ``"mps"``) to :meth:`Precision.setup`
and :meth:`Precision.autocast`.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import torch

from interlock.core.run import Step
from interlock.plugins import grads

__all__ = [
    "PRECISION_ALIASES",
    "PRECISION_FLAGS",
    "Precision",
    "apply_to_tensors",
    "precision_plugin",
]

#: Canonical flag -> (parameter dtype, autocast dtype or None).
PRECISION_FLAGS: dict[str, tuple[torch.dtype, torch.dtype | None]] = {
    "32-true": (torch.float32, None),
    "64-true": (torch.float64, None),
    "16-true": (torch.float16, None),
    "bf16-true": (torch.bfloat16, None),
    "16-mixed": (torch.float32, torch.float16),
    "bf16-mixed": (torch.float32, torch.bfloat16),
}

#: Short spellings accepted for compatibility, mapped to their canonical flag.
PRECISION_ALIASES: dict[int | str, str] = {
    32: "32-true",
    "32": "32-true",
    64: "64-true",
    "64": "64-true",
    16: "16-mixed",
    "16": "16-mixed",
    "bf16": "bf16-mixed",
}


def apply_to_tensors(data: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor in nested mappings, lists, tuples and namedtuples.

    Containers are rebuilt with their own type where possible; any other object is
    returned unchanged.
    """
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, Mapping):
        items = {k: apply_to_tensors(v, fn) for k, v in data.items()}
        if isinstance(data, defaultdict):
            return defaultdict(data.default_factory, items)
        try:
            rebuild: Any = type(data)
            return rebuild(items)
        except TypeError:
            return items
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(apply_to_tensors(v, fn) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(apply_to_tensors(v, fn) for v in data)
    return data


def _canonical_flag(flag: object) -> str:
    if isinstance(flag, bool) or not isinstance(flag, (int, str)):
        flag_repr = repr(flag)
    else:
        key = flag.strip().lower() if isinstance(flag, str) else flag
        if key in PRECISION_FLAGS:
            return str(key)
        if key in PRECISION_ALIASES:
            return PRECISION_ALIASES[key]
        flag_repr = repr(flag)
    allowed = ", ".join(repr(f) for f in PRECISION_FLAGS)
    raise ValueError(
        f"precision={flag_repr} is not supported; choose one of {allowed} "
        "(aliases: 32, 64, 16 -> '16-mixed', 'bf16' -> 'bf16-mixed')"
    )


_NO_AUTOCAST = contextlib.nullcontext()


class Precision:
    """What one precision flag means for modules, inputs, autocast and optimizer steps.

    ``*-true`` flags cast parameters and floating inputs to ``param_dtype``;
    ``*-mixed`` flags keep float32 parameters and run the forward under autocast
    with ``compute_dtype``. ``16-mixed`` also scales the loss with a
    :class:`torch.amp.GradScaler` created for the device type given to :meth:`setup`.
    """

    def __init__(self, flag: int | str = "32-true") -> None:
        self.flag: str = _canonical_flag(flag)
        self.param_dtype: torch.dtype
        self.compute_dtype: torch.dtype | None
        self.param_dtype, self.compute_dtype = PRECISION_FLAGS[self.flag]
        self.device_type: str | None = None
        self._scaler: torch.amp.GradScaler | None = None
        self._pending_state: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.flag!r})"

    @property
    def uses_scaler(self) -> bool:
        """Whether this flag scales the loss (only ``16-mixed``)."""
        return self.flag == "16-mixed"

    @property
    def is_plain(self) -> bool:
        """Whether this precision leaves the training step alone: inputs as given, no autocast, no loss scaling.

        Its bound actions (:meth:`backward_action`, :meth:`step_action`) then call ``loss.backward()`` and
        ``optimizer.step()`` directly. False for a subclass that overrides any of the methods involved.
        """
        cls = type(self)
        untouched = all(
            getattr(cls, name) is getattr(Precision, name)
            for name in ("convert_input", "autocast", "backward", "optimizer_step", "uses_scaler")
        )
        return untouched and self.compute_dtype is None and self.param_dtype is torch.float32 and not self.uses_scaler

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The gradient scaler, once created; ``None`` for flags without one."""
        return self._scaler

    def setup(self, device_type: str) -> None:
        """Bind to a device type; creates the gradient scaler for ``16-mixed``."""
        if not isinstance(device_type, str) or not device_type:
            raise ValueError(f"device_type={device_type!r} is not a device type; pass e.g. 'cpu', 'cuda' or 'mps'")
        if self._scaler is not None and device_type != self.device_type:
            self._pending_state = self.state_dict()
            self._scaler = None
        self.device_type = device_type
        if self.uses_scaler:
            self._ensure_scaler(device_type)

    def _ensure_scaler(self, device_type: str) -> torch.amp.GradScaler:
        if self._scaler is None:
            self.device_type = device_type
            self._scaler = torch.amp.GradScaler(device_type)
            if self._pending_state:
                self._scaler.load_state_dict(self._pending_state)
                self._pending_state = {}
        return self._scaler

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast floating parameters and buffers to ``param_dtype`` for ``*-true``; mixed leaves them."""
        if self.compute_dtype is None:
            return module.to(dtype=self.param_dtype)
        return module

    def convert_input(self, batch: Any) -> Any:
        """Cast floating tensors in ``batch`` to ``param_dtype`` for ``*-true``; mixed leaves them."""
        if self.compute_dtype is not None or self.param_dtype is torch.float32:
            return batch  # mixed precision autocasts; 32-true leaves inputs as the user made them
        dtype = self.param_dtype
        return apply_to_tensors(batch, lambda t: t.to(dtype) if t.is_floating_point() else t)

    def autocast(self, device_type: str) -> contextlib.AbstractContextManager[Any]:
        """Context for the forward pass: ``torch.autocast`` for mixed flags, a no-op otherwise."""
        if self.compute_dtype is None:
            return _NO_AUTOCAST
        return torch.autocast(device_type=device_type, dtype=self.compute_dtype)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate ``loss``; scaled first for ``16-mixed``. ``kwargs`` go to ``Tensor.backward``."""
        if self.uses_scaler:
            scaler = self._ensure_scaler(self.device_type or loss.device.type)
            scaler.scale(loss).backward(**kwargs)
        else:
            loss.backward(**kwargs)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide gradients by the loss scale; call once per step before clipping. No-op without a scaler."""
        if self._scaler is not None:
            self._scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        """Step ``optimizer``; returns False when the scaler skipped the step for inf/NaN gradients."""
        if self._scaler is None:
            if closure is None:
                optimizer.step()
            else:
                optimizer.step(closure)
            return True
        if closure is not None:
            raise ValueError(
                f"optimizer_step(closure=...) is not supported with precision={self.flag!r}: the gradient scaler "
                "cannot re-evaluate a closure; use precision='bf16-mixed' or '32-true' for closure optimizers"
            )
        scale_before = self._scaler.get_scale()
        self._scaler.step(optimizer)
        self._scaler.update()
        # GradScaler requires backoff_factor < 1, so the scale drops exactly when the step was skipped.
        return self._scaler.get_scale() >= scale_before

    # -- what the chart's actions dispatch to: bound once per stage ---------------------------
    def forward(self, step: Callable[..., Any], device_type: str) -> Callable[..., Any]:
        """``step`` run under :meth:`autocast` (``step`` itself when there is nothing to do)."""
        if self.is_plain or (type(self).autocast is Precision.autocast and self.compute_dtype is None):
            return step

        def run(*args: Any) -> Any:
            with self.autocast(device_type):
                return step(*args)

        return run

    def input_converter(self) -> Callable[[Any], Any] | None:
        """:meth:`convert_input`, or ``None`` when it leaves batches as they are."""
        if type(self).convert_input is Precision.convert_input and (
            self.compute_dtype is not None or self.param_dtype is torch.float32
        ):
            return None
        return self.convert_input

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` multiplied by the gradient scaler's scale (``16-mixed``), else ``loss`` itself."""
        if not self.uses_scaler:
            return loss
        return self._ensure_scaler(self.device_type or loss.device.type).scale(loss)

    def backward_action(
        self, step: Step, accumulate: int | Callable[[], int], backward: Callable[..., None] | None = None
    ) -> Callable[[], None]:
        """The chart's ``precision.backward``: backpropagate ``step.loss``, divided by ``accumulate``.

        ``backward(loss)`` (the module's own ``backward``) replaces ``loss.backward()``; it gets the scaled loss.
        ``accumulate`` may be a function read at each batch (an accumulation a listener schedules).
        """
        if callable(accumulate):
            factor, by_factor = accumulate, dict[int, Callable[[], None]]()

            def act_scheduled() -> None:
                n = factor()
                act = by_factor.get(n)
                if act is None:
                    act = by_factor[n] = self.backward_action(step, n, backward)
                act()

            return act_scheduled
        plain = self.is_plain
        if backward is not None:
            custom = backward

            def act_custom() -> None:
                loss: Any = step.loss
                if loss is not None:  # None: the training step returned None (Lightning skips its backward)
                    custom(self.scale(loss / accumulate if accumulate > 1 else loss))

            return act_custom

        if plain and accumulate == 1:

            def act_plain() -> None:
                loss = step.loss
                if loss is not None:  # None: the training step returned None (Lightning skips its backward)
                    loss.backward()

            return act_plain

        def act() -> None:
            loss: Any = step.loss
            if loss is None:  # the training step returned None (Lightning skips its backward)
                return
            if accumulate > 1:
                loss = loss / accumulate
            if plain:
                loss.backward()
            else:
                self.backward(loss)

        return act

    def step_action(
        self, optimizers: list[torch.optim.Optimizer], clip: float | None, by_norm: bool, zero: bool = True
    ) -> Callable[[], None]:
        """The optimizer step of the chart's ``optim.step``: unscale and clip (when ``clip``), step, zero the grads.

        ``zero=False``: the gradients are left for the next window's ``module.optimizer_zero_grad`` (Lightning's).
        """
        if self.is_plain and clip is None:
            if not zero:

                def plain_kept() -> None:
                    for optimizer in optimizers:
                        optimizer.step()

                return plain_kept

            def plain() -> None:
                for optimizer in optimizers:
                    optimizer.step()
                    grads.zero_grad(optimizer)

            return plain

        def act() -> None:
            for optimizer in optimizers:
                if clip is not None:
                    self.unscale_gradients(optimizer)
                    params = [p for group in optimizer.param_groups for p in group["params"]]
                    if by_norm:
                        torch.nn.utils.clip_grad_norm_(params, clip)
                    else:
                        torch.nn.utils.clip_grad_value_(params, clip)
                self.optimizer_step(optimizer)
                if zero:
                    grads.zero_grad(optimizer)

        return act

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state as plain data; empty when there is no scaler."""
        if self._scaler is not None:
            return dict(self._scaler.state_dict())
        return dict(self._pending_state)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore scaler state; applied when the scaler is created. Ignored by flags without a scaler."""
        if not state or not self.uses_scaler:
            return
        if self._scaler is not None:
            self._scaler.load_state_dict(dict(state))
        else:
            self._pending_state = dict(state)


def precision_plugin(flag: int | str | Precision) -> Precision:
    """Build the :class:`Precision` for a flag such as ``"bf16-mixed"``, ``16`` or ``"32"``."""
    if isinstance(flag, Precision):
        return flag
    return Precision(flag)
