"""The user's model: a ``torch.nn.Module`` with Lightning's step names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

__all__ = ["Module", "StepOutput"]

StepOutput = torch.Tensor | Mapping[str, Any] | None


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
