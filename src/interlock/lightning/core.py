"""Lightning's ``core`` path: ``LightningModule`` and ``LightningDataModule``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar

from interlock.connectors.callbacks import TrainerView
from interlock.core.datamodule import DataModule
from interlock.core.module import Module

__all__ = ["LightningDataModule", "LightningModule"]


class LightningModule(Module):
    """:class:`interlock.Module` with Lightning's ``self.trainer``: the running stage's read-only trainer view.

    ``self.trainer`` is the view a Lightning ``Callback`` receives as ``trainer`` (the same object):
    counters, flags, batch counts, the running stage, loaders, loggers, ranks. Its two writes,
    ``self.trainer.should_stop = True`` and ``self.trainer.save_checkpoint(path)``, become updates
    taken when the step or hook that made them returns; any other assignment raises naming the
    interlock way. Before the module's first run it is Lightning's ``RuntimeError`` (not attached);
    after a run it shows how that run ended, as Lightning's trainer stays attached. The native
    :class:`interlock.Module` has no ``self.trainer`` (its runs speak through ``self.log`` and listeners).
    """

    #: the module's steps and hooks run with the trainer view open to their writes
    shows_trainer_view: ClassVar[bool] = True
    #: Lightning zeroes the gradients before backward (each window's first batch) and before validation in fit
    zero_grad_after_step: ClassVar[bool] = False
    #: Lightning's checkpoint keys of the hyper-parameters (interlock's checkpoints use the same)
    CHECKPOINT_HYPER_PARAMS_KEY: ClassVar[str] = "hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME: ClassVar[str] = "hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE: ClassVar[str] = "hparams_type"

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``self.log``; under ``Trainer(barebones=True)`` nothing is logged, with Lightning's warning."""
        if self.__dict__.get("_interlock_barebones"):
            warnings.warn(
                "You are trying to `self.log()` but `Trainer(barebones=True)` is configured. Logging can impact raw "
                "speed so it is disabled under this setting.",
                UserWarning,
                stacklevel=2,
            )
            return
        super().log(name, value, *args, **kwargs)

    @property
    def trainer(self) -> TrainerView:
        shown = self._trainer
        if shown is None:
            raise RuntimeError(
                f"{type(self).__qualname__} is not attached to a `Trainer`: interlock shows self.trainer (a "
                "read-only view of the run) once a Trainer runs this module (fit, validate, test, predict)"
            )
        return shown

    @trainer.setter
    def trainer(self, value: Any) -> None:
        raise AttributeError(
            f"{type(self).__qualname__}.trainer cannot be set: interlock attaches the trainer view itself when a "
            "Trainer runs the module (pass the module to trainer.fit/validate/test/predict)"
        )

    @property
    def _trainer(self) -> TrainerView | None:
        """The trainer view, ``None`` before the module's first run (Lightning's private attribute)."""
        view = self.__dict__.get("_interlock_view")
        if view is None or view.trainer is None:
            return None
        shown: TrainerView = view.trainer()
        return shown


class LightningDataModule(DataModule):
    """:class:`interlock.DataModule` with Lightning's ``self.trainer``: the running stage's read-only trainer view.

    Attached as a stage sets up, before ``prepare_data`` and ``setup(stage)``, so they (and the loader
    methods) can read ``self.trainer.current_epoch``, ``world_size``, ``global_rank``, ...; ``None`` before a
    Trainer runs the data module, as Lightning's. The native :class:`interlock.DataModule` has none.
    """

    def attach_trainer(self, view: Callable[[], TrainerView] | None) -> None:
        """Called by the runtime as a stage sets up: how to reach the stage's trainer view."""
        self.__dict__["_interlock_trainer"] = view

    @property
    def trainer(self) -> TrainerView | None:
        view = self.__dict__.get("_interlock_trainer")
        return None if view is None else view()

    @trainer.setter
    def trainer(self, value: Any) -> None:
        raise AttributeError(
            f"{type(self).__qualname__}.trainer cannot be set: interlock attaches the trainer view itself when a "
            "Trainer runs the data module (pass it as trainer.fit(model, datamodule=...))"
        )


#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
