"""Built-in listeners: progress, loggers, event trace, early stopping, timing and guards.

Each is an :class:`~interlock.core.events.Listener`: it reacts to chart events,
keeps its run state in the trainer state and returns updates; none holds a
trainer. Outputs go to ``state.run_dir`` unless a directory is given.
"""

from __future__ import annotations

from interlock.core.events import Listener
from interlock.listeners.accumulation import GradientAccumulationScheduler
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.listeners.csv_logger import CSVLogger
from interlock.listeners.device_stats import DeviceStatsMonitor
from interlock.listeners.early_stopping import EarlyStopping
from interlock.listeners.guards import FiniteGuard
from interlock.listeners.lr_monitor import LearningRateMonitor
from interlock.listeners.mlflow_logger import MLFlowLogger
from interlock.listeners.profiler import Profiler
from interlock.listeners.progress import ProgressBar
from interlock.listeners.rich_progress import RichProgressBar
from interlock.listeners.summary import ModelSummary
from interlock.listeners.swa import StochasticWeightAveraging
from interlock.listeners.tensorboard import TensorBoardLogger
from interlock.listeners.timer import Timer
from interlock.listeners.trace import EventTrace
from interlock.listeners.wandb_logger import WandbLogger

__all__ = [
    "CSVLogger",
    "DeviceStatsMonitor",
    "EarlyStopping",
    "EventTrace",
    "FiniteGuard",
    "GradientAccumulationScheduler",
    "LearningRateMonitor",
    "MLFlowLogger",
    "ModelCheckpoint",
    "ModelSummary",
    "Profiler",
    "ProgressBar",
    "RichProgressBar",
    "StochasticWeightAveraging",
    "TensorBoardLogger",
    "Timer",
    "WandbLogger",
    "default_listeners",
]


def default_listeners() -> list[Listener]:
    """The listeners a Trainer gets when none are passed.

    ``ProgressBar()``, ``ModelSummary()``, ``CSVLogger()``, ``EventTrace()`` and, last,
    ``ModelCheckpoint(save_last=True)``.
    """
    return [ProgressBar(), ModelSummary(), CSVLogger(), EventTrace(), ModelCheckpoint(save_last=True)]
