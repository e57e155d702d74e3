"""Lightning's ``WeightAveraging`` and ``EMAWeightAveraging`` callbacks, on Lightning's ``Callback`` hooks.

An ``AveragedModel`` (torch's ``swa_utils``) of the module is made as a fit sets up; it is updated after
the optimizer steps and epochs that ``should_update`` names; validation runs with the averaged values in
the module (swapped in for each validation epoch, back after it), and training ends with them copied in.
A checkpoint holds the averaged weights under ``state_dict`` (what ``load_from_checkpoint`` and ``test``
read), the module's own under ``current_model_state`` and the averager's count under ``averaging_state``;
a fit resumed from it puts each back. The same keys, hooks and moments as Lightning's, so a run and
its resume train bit for bit as Lightning's do.
"""

from __future__ import annotations

import itertools
import logging
import warnings
from copy import deepcopy
from typing import Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn

from interlock.core.module import overrides
from interlock.lightning.callback import Callback

__all__ = ["EMAWeightAveraging", "WeightAveraging"]

log = logging.getLogger(__name__)


def _pairs(average: torch.nn.Module, current: torch.nn.Module) -> Any:
    """The averaged copy's parameters and buffers beside the module's, in the same order."""
    return zip(
        itertools.chain(average.parameters(), average.buffers()),
        itertools.chain(current.parameters(), current.buffers()),
        strict=False,
    )


class WeightAveraging(Callback):
    """Keep an ``AveragedModel`` of the module, updated after each optimizer step ``should_update`` accepts.

    ``device``: where the averaged copy lives (default: the module's device); ``use_buffers``: average the
    buffers too (the default, unlike ``AveragedModel``); other keyword arguments go to ``AveragedModel``
    (``avg_fn``, ``multi_avg_fn``; none: the equal-weight average of stochastic weight averaging).
    """

    def __init__(self, device: torch.device | str | int | None = None, use_buffers: bool = True, **kwargs: Any) -> None:
        self._device = torch.device(device) if isinstance(device, str) else device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._average_model: AveragedModel | None = None
        self._latest_update_step = 0
        self._latest_update_epoch = -1

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update the average after optimizer step ``step_idx`` or epoch ``epoch_idx`` (0-based, one given).

        The default: after every optimizer step, never at an epoch's end.
        """
        return step_idx is not None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """As a fit sets up: the averaged copy of the module (after its ``configure_model``, not sharded here)."""
        if stage != "fit":
            return
        device = self._device or pl_module.device
        if overrides(pl_module, "configure_model"):
            warnings.warn(
                "You're using the WeightAveraging callback with a model that overrides the configure_model "
                "callback. WeightAveraging doesn't support sharding model layers, so you may run out of memory.",
                UserWarning,
                stacklevel=2,
            )
            pl_module.configure_model()
        self._average_model = AveragedModel(
            model=pl_module, device=device, use_buffers=self._use_buffers, **self._kwargs
        )

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After a batch whose optimizer stepped: update the average if ``should_update(step_idx=global_step - 1)``."""
        step = trainer.global_step
        if step > self._latest_update_step and self.should_update(step_idx=step - 1):
            self._model().update_parameters(pl_module)
            self._latest_update_step = step

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """At an epoch's end: update the average if ``should_update(epoch_idx=current_epoch)`` (once per epoch)."""
        epoch = trainer.current_epoch
        if epoch > self._latest_update_epoch and self.should_update(epoch_idx=epoch):
            self._model().update_parameters(pl_module)
            self._latest_update_epoch = epoch

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Training is over: the module takes the averaged values."""
        for average, current in _pairs(self._model().module, pl_module):
            current.data.copy_(average.data)

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        """Validate the averaged values: swap them into the module (none before a fit sets up)."""
        if self._average_model is not None:
            self._swap(pl_module)

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Swap the module's own values back after validation."""
        if self._average_model is not None:
            self._swap(pl_module)

    def state_dict(self) -> dict[str, Any]:
        """The callback's entry in a checkpoint: the global step of the last update."""
        return {"latest_update_step": self._latest_update_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Put the last update's step back from a checkpoint's entry."""
        self._latest_update_step = state_dict["latest_update_step"]

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """``state_dict``: the average; ``current_model_state``: the module's own; ``averaging_state``: the rest."""
        if self._average_model is None:
            log.info(
                "You're using the WeightAveraging callback, but saving a checkpoint outside the 'fit' stage. The state "
                "of the WeightAveraging callback won't be saved in the checkpoint. If training has finished, the "
                "average model parameters will be saved to the state_dict in the checkpoint."
            )
            return
        averaged = self._average_model.state_dict()
        checkpoint["current_model_state"] = checkpoint["state_dict"]
        checkpoint["state_dict"] = {k[len("module.") :]: v for k, v in averaged.items() if k.startswith("module.")}
        checkpoint["averaging_state"] = {k: v for k, v in averaged.items() if not k.startswith("module.")}

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """Resume both: the average from ``state_dict`` and ``averaging_state``, the module from its own state.

        A checkpoint saved without this callback starts the average at its weights.
        """
        if self._average_model is None:
            warnings.warn(
                "You're using the WeightAveraging callback, but loading a checkpoint outside the 'fit' stage. The "
                "WeightAveraging state cannot be restored. If you're using the checkpoint for prediction or testing, "
                "you can ignore this warning. To disable the warning, remove the WeightAveraging callback.",
                UserWarning,
                stacklevel=2,
            )
        elif "current_model_state" in checkpoint and "averaging_state" in checkpoint:
            log.info("Found current_model_state in the checkpoint. This will be used to initialize the model.")
            averaged = {"module." + k: v for k, v in checkpoint["state_dict"].items()}
            self._average_model.load_state_dict({**averaged, **checkpoint["averaging_state"]})
            pl_module.load_state_dict(checkpoint["current_model_state"])
        else:
            warnings.warn(
                "The checkpoint was not created with WeightAveraging. Both the current and the average model will be "
                "initialized with state_dict.",
                UserWarning,
                stacklevel=2,
            )
            self._average_model.module.load_state_dict(deepcopy(checkpoint["state_dict"]), strict=False)

    def _model(self) -> AveragedModel:
        if self._average_model is None:
            raise RuntimeError(
                f"{type(self).__name__} has no averaged model: it is made as a fit sets up (setup(stage='fit'))"
            )
        return self._average_model

    def _swap(self, pl_module: Any) -> None:
        for average, current in _pairs(self._model().module, pl_module):
            kept = average.data.clone()
            average.data.copy_(current.data)
            current.data.copy_(kept)


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights (``decay``), updated every ``update_every_n_steps`` steps.

    Updates start at step ``update_starting_at_step`` (default: the first); with ``update_starting_at_epoch``
    the average is also updated at the end of that epoch and every later one.
    """

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(device=device, use_buffers=use_buffers, **kwargs, avg_fn=get_ema_avg_fn(decay=decay))
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Every ``update_every_n_steps``-th step from ``update_starting_at_step``; epochs from that epoch on."""
        if step_idx is not None:
            started = self.update_starting_at_step is None or step_idx >= self.update_starting_at_step
            if started and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0:
                return True
        start = self.update_starting_at_epoch
        return epoch_idx is not None and start is not None and epoch_idx >= start
