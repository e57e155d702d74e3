"""interlock: a PyTorch trainer whose training lifecycle is an explicit statechart."""

from interlock.connectors.fastfetch import fast_fetch
from interlock.connectors.rng import seed_everything
from interlock.connectors.weights import load_checkpoint, load_lightning_weights
from interlock.core.chart import Chart, load_chart
from interlock.core.combined import CombinedLoader
from interlock.core.datamodule import DataModule
from interlock.core.errors import (
    ChartError,
    ChartEvent,
    CheckpointError,
    ConflictingUpdates,
    IllegalTransition,
    InterlockError,
    Interrupted,
    Preempted,
    ReplayDivergence,
    RunDirectoryInUse,
    WeightsMismatchError,
)
from interlock.core.events import Event, Listener, listen, observe
from interlock.core.extension import Extension
from interlock.core.module import Module
from interlock.core.slots import Fill
from interlock.core.state import Progress, TrainerState
from interlock.core.updates import (
    LogMetrics,
    ReplaceOptimizer,
    RestoreState,
    SaveCheckpoint,
    SetLearningRate,
    SetListenerState,
    SetParameters,
    Stop,
    Update,
)
from interlock.trainer.replay import Replay, replay
from interlock.trainer.trainer import Trainer

__version__ = "0.1.0"

__all__ = [
    "Chart",
    "ChartError",
    "ChartEvent",
    "CheckpointError",
    "CombinedLoader",
    "ConflictingUpdates",
    "DataModule",
    "Event",
    "Extension",
    "Fill",
    "IllegalTransition",
    "InterlockError",
    "Interrupted",
    "Listener",
    "LogMetrics",
    "Module",
    "Preempted",
    "Progress",
    "ReplaceOptimizer",
    "Replay",
    "ReplayDivergence",
    "RestoreState",
    "RunDirectoryInUse",
    "SaveCheckpoint",
    "SetLearningRate",
    "SetListenerState",
    "SetParameters",
    "Stop",
    "Trainer",
    "TrainerState",
    "Update",
    "WeightsMismatchError",
    "__version__",
    "fast_fetch",
    "listen",
    "load_chart",
    "load_checkpoint",
    "load_lightning_weights",
    "observe",
    "replay",
    "seed_everything",
]
