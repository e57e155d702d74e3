"""A fit that has finished, kept so its checkpoint can be written after it.

Lightning users call ``trainer.save_checkpoint(path)`` once ``trainer.fit`` has returned. The
chart has torn the run down by then, so the session keeps what a checkpoint needs (the run's
module, optimizers, schedulers, data position and callbacks) with the state and the RNG states
as the fit ended. :meth:`FinishedFit.save` writes the same checkpoint a save at the chart's
``finished`` state would, except that the module's weights are read when it is called (as
Lightning's are): ``fit(ckpt_path=path)`` with a larger ``max_epochs`` continues it exactly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from interlock.connectors.checkpoint import write_checkpoint
from interlock.connectors.rng import get_rng_states
from interlock.core.run import Run
from interlock.core.state import TrainerState
from interlock.plugins.strategy import Strategy

__all__ = ["NO_FIT", "FinishedFit", "keep_ended", "keep_finished"]

#: Why there is nothing to save before any fit.
NO_FIT = (
    "no fit has finished on this trainer, so there is no training state to save; call it after trainer.fit(...), "
    "or save the weights alone with torch.save(module.state_dict(), path)"
)


@attrs.frozen
class FinishedFit:
    """The run of a fit that finished, with its final state and RNG states."""

    run: Run
    state: TrainerState
    rng: dict[str, Any]

    def save(self, filepath: str | os.PathLike[str], weights_only: bool = False) -> Path:
        """Write the fit's checkpoint to ``filepath`` (its folder is made); wait until it is durable."""
        path = Path(filepath).expanduser()
        if path.is_dir():
            raise IsADirectoryError(f"trainer.save_checkpoint({str(filepath)!r}): it is a directory; pass a file path")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_checkpoint(self.run, str(path), weights_only=weights_only, rng=self.rng)
        return path


def keep_ended(run: Run, state: TrainerState, strategy: Strategy) -> Run | None:
    """``run`` kept to be read after its stage as it ended (its state is ``state`` from now on).

    Lightning's trainer answers ``num_training_batches`` and the like after a call; the kept run's
    trainer view does here. ``None`` over several processes: the run's wrappers go with its stage.
    """
    if strategy.world_size > 1 or strategy.launches_processes:
        return None
    run.state_ref = run.facts_ref = lambda: state  # later stages change the trainer's state, not this run's
    return run


def keep_finished(run: Run | None, state: TrainerState, strategy: Strategy) -> FinishedFit | str:
    """``run`` kept for :meth:`FinishedFit.save`, or why a checkpoint cannot be written after this fit.

    ``run`` is what :func:`keep_ended` kept (its state fixed as the fit ended); ``None`` when it kept
    nothing, the fit having run over several processes.
    """
    if run is None:
        return (
            f"a fit over {strategy.world_size} processes has torn its process group down when fit() returns; save "
            "during fit instead: ModelCheckpoint(save_last=True) writes last.ckpt, which fit(ckpt_path='last') "
            "continues, or a listener returns interlock.SaveCheckpoint(path) at the moment to save"
        )
    if state.status != "finished":
        return (
            f"the last fit ended {state.status} (in state {state.failed_in or state.chart!r}), so it has no end to "
            "save; resume from a checkpoint it wrote during the run (fit(ckpt_path='last') finds ModelCheckpoint's "
            "last.ckpt)"
        )
    return FinishedFit(run, state, get_rng_states())
