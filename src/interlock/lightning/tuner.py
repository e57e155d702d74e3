"""Lightning's ``tuner``: ``Tuner(trainer).lr_find(model, ...)``; the batch-size finder is not in interlock."""

from __future__ import annotations

from typing import Any

from interlock.lightning._refuse import refuse_value
from interlock.trainer.lr_find import LRFinder, lr_find
from interlock.trainer.trainer import Trainer

__all__ = ["LRFinder", "Tuner"]


class Tuner:
    """Lightning's ``Tuner(trainer)``: :meth:`lr_find` sweeps on a copy of the trainer's flags."""

    def __init__(self, trainer: Trainer) -> None:
        if not isinstance(trainer, Trainer):
            raise TypeError(f"Tuner(trainer={trainer!r:.80}) needs an interlock Trainer")
        self._trainer = trainer

    def lr_find(
        self,
        model: Any,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1.0,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder | None:
        """Lightning's ``Tuner.lr_find`` (``update_attr=True`` by default, as there); only ``method="fit"``."""
        refuse_value("Tuner.lr_find", "method", method, ("fit",), "interlock's finder sweeps a fit only")
        refuse_value("Tuner.lr_find", "dataloaders", dataloaders, (None,), "pass train_dataloaders (method='fit')")
        return lr_find(
            self._trainer,
            model,
            train_dataloaders,
            val_dataloaders,
            datamodule,
            min_lr=min_lr,
            max_lr=max_lr,
            num_training=num_training,
            mode=mode,
            early_stop_threshold=early_stop_threshold,
            update_attr=update_attr,
            attr_name=attr_name,
        )

    def scale_batch_size(self, *args: Any, **kwargs: Any) -> int | None:
        """Not in interlock: raises, naming what to do instead."""
        raise NotImplementedError(
            "interlock has no batch-size finder (Tuner.scale_batch_size); choose the batch size with a short sweep "
            "of fits (fast_dev_run=N) at growing sizes"
        )


#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
