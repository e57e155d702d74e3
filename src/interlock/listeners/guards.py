"""Guards: listeners that fail the run when training goes wrong."""

from __future__ import annotations

import torch

from interlock.core.events import Event, Listener, listen
from interlock.listeners._util import loss_tensor

__all__ = ["FiniteGuard"]


class FiniteGuard(Listener):
    """Fail the run when a training loss is NaN or infinite, before its backward pass.

    On every state tagged ``backward`` (``fit.train.batch.backward``) it checks ``torch.isfinite(loss).all()``.
    That is one small device op and **one host sync per batch** (reading the
    boolean), but no ``.item()`` of the loss. A non-finite loss raises
    ``FloatingPointError`` naming the epoch, global step and batch index; the run
    then ends through the chart's ``fail`` transition.
    """

    @listen("#backward")
    def on_backward(self, event: Event) -> None:
        loss = loss_tensor(event.payload.get("outputs"))
        if loss is None or bool(torch.isfinite(loss.detach()).all()):
            return
        batch_idx = event.payload.get("batch_idx", event.batch_idx)
        raise FloatingPointError(
            f"non-finite training loss {loss.detach().cpu().tolist()} at epoch {event.epoch}, "
            f"global step {event.global_step}, batch {batch_idx}; lower the learning rate, clip gradients "
            "(gradient_clip_val) or check the inputs of that batch"
        )
