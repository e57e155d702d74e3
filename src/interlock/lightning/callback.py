"""``Callback``: Lightning's callback base class, for callbacks run by interlock.

Subclass it and override the hooks you need, with Lightning's signatures. interlock calls
them at Lightning's moments, in Lightning's order relative to the module's hooks; the
``trainer`` they receive is a read-only view (:class:`interlock.connectors.callbacks.TrainerView`)
whose only writes are ``trainer.should_stop = True`` and ``trainer.save_checkpoint(path)``.
``state_dict`` / ``load_state_dict`` round-trip through checkpoints under ``state_key``.
Instances of Lightning's own ``Callback`` subclasses are accepted as they are, when they
use only what the view offers (docs/porting.md#callbacks).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Callback"]

_Trainer = Any  # the trainer view
_Module = Any


class Callback:
    """Lightning 2.6.6's ``Callback`` hooks, each a no-op until overridden (only overridden ones are called)."""

    @property
    def state_key(self) -> str:
        """Where this callback's ``state_dict`` goes in a checkpoint, unique per trainer: the class's qualified name."""
        return self.__class__.__qualname__

    def _generate_state_key(self, **kwargs: Any) -> str:
        """A state key that tells instances apart by ``kwargs`` (Lightning's helper for ``state_key``)."""
        return f"{self.__class__.__qualname__}{kwargs!r}"

    # -- stages -------------------------------------------------------------------------------
    def setup(self, trainer: _Trainer, pl_module: _Module, stage: str) -> None:
        """A stage (``fit``, ``validate``, ``test``, ``predict``) begins, before the module's ``setup``."""

    def teardown(self, trainer: _Trainer, pl_module: _Module, stage: str) -> None:
        """A stage ends."""

    def on_fit_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """Fit begins, after ``configure_optimizers``."""

    def on_fit_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """Fit ends."""

    def on_sanity_check_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The sanity check's validation begins."""

    def on_sanity_check_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The sanity check's validation ends."""

    # -- training -----------------------------------------------------------------------------
    def on_train_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """Training begins (after the sanity check)."""

    def on_train_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """Training ends."""

    def on_train_epoch_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """A training epoch begins."""

    def on_train_epoch_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """A training epoch ends (monitoring callbacks run after the module's hook, the others before)."""

    def on_train_batch_start(self, trainer: _Trainer, pl_module: _Module, batch: Any, batch_idx: int) -> None:
        """A training batch begins."""

    def on_train_batch_end(
        self, trainer: _Trainer, pl_module: _Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """A training batch ends; ``outputs`` is what ``training_step`` returned."""

    def on_before_backward(self, trainer: _Trainer, pl_module: _Module, loss: torch.Tensor) -> None:
        """Before ``loss.backward()``."""

    def on_after_backward(self, trainer: _Trainer, pl_module: _Module) -> None:
        """After ``loss.backward()``, before the optimizer step."""

    def on_before_optimizer_step(self, trainer: _Trainer, pl_module: _Module, optimizer: Any) -> None:
        """Before ``optimizer.step()`` (after gradient clipping is due, before it is applied)."""

    def on_before_zero_grad(self, trainer: _Trainer, pl_module: _Module, optimizer: Any) -> None:
        """Before ``optimizer.zero_grad()``."""

    # -- evaluation ---------------------------------------------------------------------------
    def on_validation_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The validation loop begins."""

    def on_validation_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The validation loop ends."""

    def on_validation_epoch_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The validation epoch begins."""

    def on_validation_epoch_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The validation epoch ends."""

    def on_validation_batch_start(
        self, trainer: _Trainer, pl_module: _Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """A validation batch begins."""

    def on_validation_batch_end(
        self, trainer: _Trainer, pl_module: _Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """A validation batch ends."""

    def on_test_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The test loop begins."""

    def on_test_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The test loop ends."""

    def on_test_epoch_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The test epoch begins."""

    def on_test_epoch_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The test epoch ends."""

    def on_test_batch_start(
        self, trainer: _Trainer, pl_module: _Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """A test batch begins."""

    def on_test_batch_end(
        self, trainer: _Trainer, pl_module: _Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """A test batch ends."""

    def on_predict_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The predict loop begins."""

    def on_predict_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The predict loop ends."""

    def on_predict_epoch_start(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The predict epoch begins."""

    def on_predict_epoch_end(self, trainer: _Trainer, pl_module: _Module) -> None:
        """The predict epoch ends."""

    def on_predict_batch_start(
        self, trainer: _Trainer, pl_module: _Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """A predict batch begins."""

    def on_predict_batch_end(
        self, trainer: _Trainer, pl_module: _Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """A predict batch ends."""

    # -- failures and checkpoints ---------------------------------------------------------------
    def on_exception(self, trainer: _Trainer, pl_module: _Module, exception: BaseException) -> None:
        """The stage is ending with ``exception`` (before its teardown)."""

    def state_dict(self) -> dict[str, Any]:
        """The callback's state, saved in checkpoints under :attr:`state_key` (empty: nothing saved)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (a fit resumed from a checkpoint)."""

    def on_save_checkpoint(self, trainer: _Trainer, pl_module: _Module, checkpoint: dict[str, Any]) -> None:
        """A checkpoint is being written: add to ``checkpoint`` in place."""

    def on_load_checkpoint(self, trainer: _Trainer, pl_module: _Module, checkpoint: dict[str, Any]) -> None:
        """A fit resumes from ``checkpoint`` (before :meth:`load_state_dict`)."""
