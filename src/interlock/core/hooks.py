"""The module's hooks as do-nothing defaults, so that an override's ``super().hook(...)`` works as in Lightning.

A default is marked (:func:`default_hook`): the loop calls a hook only where a class overrides it
(:func:`own_hook`), so a module pays nothing per batch for hooks it does not write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ModelHooks", "default_hook", "own_hook"]

F = TypeVar("F", bound=Callable[..., Any])


def default_hook(fn: F) -> F:
    """Mark ``fn`` as a base class's default: there to be called by ``super()``, never as an override."""
    fn.__interlock_default__ = True  # type: ignore[attr-defined]
    return fn


def own_hook(obj: Any, name: str) -> Callable[..., Any] | None:
    """The function ``obj``'s class defines for ``name``, unless absent, not callable, or a marked default."""
    fn = getattr(obj if isinstance(obj, type) else type(obj), name, None)
    if not callable(fn) or getattr(fn, "__interlock_default__", False):
        return None
    return fn  # type: ignore[no-any-return]


class ModelHooks:
    """Lightning's ``ModelHooks`` and ``CheckpointHooks``, each doing nothing; see docs/hooks.md for when each runs."""

    @default_hook
    def setup(self, stage: str) -> None:
        """At the start of each stage, after the loaders are known (``"fit"``, ``"validate"``, ...)."""

    @default_hook
    def teardown(self, stage: str) -> None:
        """At the end of each stage that ended well."""

    @default_hook
    def on_fit_start(self) -> None:
        """At the start of ``fit``."""

    @default_hook
    def on_fit_end(self) -> None:
        """At the end of ``fit``."""

    @default_hook
    def on_train_start(self) -> None:
        """When training starts, after the sanity check."""

    @default_hook
    def on_train_end(self) -> None:
        """When training ends."""

    @default_hook
    def on_train_epoch_start(self) -> None:
        """At the start of a training epoch."""

    @default_hook
    def on_train_epoch_end(self) -> None:
        """At the end of a training epoch (after its validation, as in Lightning)."""

    @default_hook
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        """Before a training batch's step; ``-1`` skips the rest of the epoch."""
        return None

    @default_hook
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After a training batch (its optimizer step, when one was due)."""

    @default_hook
    def on_before_zero_grad(self, optimizer: Any) -> None:
        """Before the gradients are zeroed."""

    @default_hook
    def on_before_backward(self, loss: Any) -> None:
        """Before the backward pass."""

    @default_hook
    def on_after_backward(self) -> None:
        """After the backward pass, before the optimizer step."""

    @default_hook
    def on_before_optimizer_step(self, optimizer: Any) -> None:
        """Before the optimizer steps (the gradients are unscaled)."""

    @default_hook
    def on_validation_start(self) -> None:
        """When validation starts."""

    @default_hook
    def on_validation_end(self) -> None:
        """When validation ends."""

    @default_hook
    def on_validation_epoch_start(self) -> None:
        """At the start of a validation epoch."""

    @default_hook
    def on_validation_epoch_end(self) -> None:
        """At the end of a validation epoch."""

    @default_hook
    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before a validation batch."""

    @default_hook
    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After a validation batch."""

    @default_hook
    def on_test_start(self) -> None:
        """When testing starts."""

    @default_hook
    def on_test_end(self) -> None:
        """When testing ends."""

    @default_hook
    def on_test_epoch_start(self) -> None:
        """At the start of a test epoch."""

    @default_hook
    def on_test_epoch_end(self) -> None:
        """At the end of a test epoch."""

    @default_hook
    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before a test batch."""

    @default_hook
    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After a test batch."""

    @default_hook
    def on_predict_start(self) -> None:
        """When prediction starts."""

    @default_hook
    def on_predict_end(self) -> None:
        """When prediction ends."""

    @default_hook
    def on_predict_epoch_start(self) -> None:
        """At the start of a prediction epoch."""

    @default_hook
    def on_predict_epoch_end(self) -> None:
        """At the end of a prediction epoch."""

    @default_hook
    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before a prediction batch."""

    @default_hook
    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After a prediction batch."""

    @default_hook
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add to (or change) a checkpoint before it is written."""

    @default_hook
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read a checkpoint before its state is restored."""
