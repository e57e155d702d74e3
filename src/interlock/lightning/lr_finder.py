"""Lightning's ``LearningRateFinder`` callback: the learning-rate range test as a fit starts.

Lightning runs the sweep inside the fit, in this callback's ``on_fit_start``, under ``isolate_rng``, and
then puts the module, optimizers and RNG back as they were. interlock's ``Trainer.fit`` runs the same
sweep (:func:`interlock.tuner.lr_find`, Lightning's numbers) just before the fit, with the RNG isolated
the same way, so the fit starts from the same weights, data order and RNG; at ``on_fit_start`` this
callback then does what Lightning's does after its sweep: with ``update_attr`` it sets the module's
``lr`` (or ``attr_name``) and every optimizer's param groups to the suggestion. ``optimal_lr`` holds the
finder (``.results``, ``.suggestion()``, ``.plot()``). The one difference: the sweep is a fit of its
own, so the module's ``setup``, ``configure_optimizers`` and ``on_fit_start`` run for it too.

A sweep elsewhere than as the fit starts (a subclass calling ``lr_find`` from another hook, as
Lightning's milestones example does) is refused, naming ``Tuner.lr_find`` between fits.
"""

from __future__ import annotations

from typing import Any

from interlock.lightning.callback import Callback
from interlock.lightning.utilities import MisconfigurationException

__all__ = ["LearningRateFinder"]


class LearningRateFinder(Callback):
    """Sweep the learning rate from ``min_lr`` to ``max_lr`` over ``num_training_steps`` steps as the fit starts."""

    SUPPORTED_MODES = ("linear", "exponential")

    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training_steps: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise MisconfigurationException(f"`mode` should be either of {self.SUPPORTED_MODES}")
        self._min_lr, self._max_lr, self._num_training_steps = min_lr, max_lr, num_training_steps
        self._mode, self._early_stop_threshold = mode, early_stop_threshold
        self._update_attr, self._attr_name = update_attr, attr_name
        self._early_exit = False
        self.optimal_lr: Any = None
        self._swept: tuple[Any, str] | None = None  # (the finder, the attribute to set), as the trainer swept

    def sweep(self, trainer: Any, model: Any, train: Any, val: Any, datamodule: Any) -> bool:
        """Run the range test for ``trainer.fit(model, ...)`` (called by the trainer before the fit starts).

        Returns whether it swept (not under ``fast_dev_run``).
        """
        from interlock.lightning.utilities.seed import isolate_rng
        from interlock.trainer.lr_find import _lr_attr, lr_find

        name = _lr_attr(model, self._attr_name) if self._update_attr else ""
        with isolate_rng():
            finder = lr_find(
                trainer,
                model,
                train,
                val,
                datamodule,
                min_lr=self._min_lr,
                max_lr=self._max_lr,
                num_training=self._num_training_steps,
                mode=self._mode,
                early_stop_threshold=self._early_stop_threshold,
            )
        self._swept = (finder, name)
        return finder is not None

    def lr_find(self, trainer: Any, pl_module: Any) -> None:
        """Apply the sweep made as this fit started: ``optimal_lr``, and the suggestion with ``update_attr``."""
        if self._swept is None:
            raise NotImplementedError(
                f"{type(self).__name__}.lr_find() here would sweep inside a running fit, which interlock does not "
                "do: the range test runs as the fit starts (LearningRateFinder's default on_fit_start). To sweep "
                "again later (at milestones), stop the fit there and run interlock.lightning.tuner.Tuner(trainer)"
                ".lr_find(model, ...) between fits"
            )
        from interlock.trainer.lr_find import set_lr_attr

        finder, name = self._swept
        self._swept = None
        self.optimal_lr = finder
        lr = finder.suggestion() if finder is not None and name else None
        if lr is None:
            return
        set_lr_attr(pl_module, name, lr)
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = lr

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Lightning's moment: after ``configure_optimizers``, before the sanity check."""
        self.lr_find(trainer, pl_module)
