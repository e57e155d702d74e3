"""Built-in listeners: progress, loggers, event trace, early stopping, timing and guards.

Each is an :class:`~interlock.core.events.Listener`: it reacts to chart events,
keeps its run state in the trainer state and returns updates; none holds a
trainer. Outputs go to ``state.run_dir`` unless a directory is given.
"""

from __future__ import annotations

from interlock.core.events import Listener
from interlock.listeners.csv_logger import CSVLogger
from interlock.listeners.early_stopping import EarlyStopping
from interlock.listeners.guards import FiniteGuard
from interlock.listeners.lr_monitor import LearningRateMonitor
from interlock.listeners.progress import ProgressBar
from interlock.listeners.tensorboard import TensorBoardLogger
from interlock.listeners.timer import Timer
from interlock.listeners.trace import EventTrace

__all__ = [
    "CSVLogger",
    "EarlyStopping",
    "EventTrace",
    "FiniteGuard",
    "LearningRateMonitor",
    "ProgressBar",
    "TensorBoardLogger",
    "Timer",
    "default_listeners",
]


def default_listeners() -> list[Listener]:
    """The listeners a Trainer gets when none are passed.

    ``ProgressBar()``, ``CSVLogger()``, ``EventTrace()`` and, last, ``ModelCheckpoint(save_last=True)``
    (when ``interlock.listeners.checkpoint`` is available).
    """
    listeners: list[Listener] = [ProgressBar(), CSVLogger(), EventTrace()]
    try:
        from interlock.listeners.checkpoint import ModelCheckpoint
    except ModuleNotFoundError as exc:  # not written yet; a broken module still raises
        if exc.name != "interlock.listeners.checkpoint":
            raise
        return listeners
    listeners.append(ModelCheckpoint(save_last=True))
    return listeners
