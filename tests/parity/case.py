"""One configuration of the matrix: a small declarative record both runners read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModuleSpec:
    """Which port of the module runs, and what ``configure_optimizers`` returns."""

    style: str = "return"  # "return": the port per docs/porting.md; "log", "log_epoch", "log_dict": self.log
    optimizer: str = "sgd"  # "sgd" (momentum 0.9), "adam", "adamw", "two" (one SGD per layer)
    lr: float = 0.1
    weight_decay: float = 0.0
    scheduler: str | None = None  # "step" (StepLR 0.5), "exp" (ExponentialLR 0.9), "plateau"
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    dropout: float = 0.0
    hooks: bool = False  # the module defines Lightning's hooks and records their order
    manual: bool = False  # automatic_optimization = False
    #: Lightning overrides the module defines (``parity.body.OVERRIDES``): "warmup" (optimizer_step), "zero_grad"
    #: (optimizer_zero_grad keeping zeros), "clip" (configure_gradient_clipping), "sched" (lr_scheduler_step)
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataSpec:
    """Deterministic tensors: 4 features, 2 classes; loaders built fresh for each framework."""

    n_train: int = 64
    n_val: int = 32
    n_test: int = 32
    batch_size: int = 16
    shuffle: bool = False
    val_loaders: int = 1  # 0: no validation data; 2+: several loaders
    datamodule: bool = False
    log_fetches: bool = False  # the training set records each batch it serves, between the training steps
    iterable: bool = False  # with log_fetches: the training set is an IterableDataset (a loader without a length)


@dataclass(frozen=True)
class Resume:
    """Stop after ``stop_step`` optimizer steps, checkpoint, then fit again from that file."""

    stop_step: int


@dataclass(frozen=True)
class Case:
    """One configuration: what to run and what the comparison must find.

    ``expected_difference`` names a deliberate difference (docs/porting.md) and ``differs``
    the Outcome fields it shows in; ``known_issue`` names a bug another branch is fixing
    (the case is a strict xfail until it matches). ``requires`` names feature probes
    (``parity.probes``): the case is skipped while one is absent.
    """

    id: str
    trainer: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: Mapping[str, Any] | None = None
    early_stopping: Mapping[str, Any] | None = None
    module: ModuleSpec = ModuleSpec()
    data: DataSpec = DataSpec()
    calls: tuple[str, ...] = ("fit",)
    resume: Resume | None = None
    requires: tuple[str, ...] = ()
    expected_difference: str | None = None
    differs: tuple[str, ...] = ()
    known_issue: str | None = None

    def __post_init__(self) -> None:
        if (self.expected_difference is None) != (not self.differs):
            raise ValueError(f"case {self.id}: expected_difference and differs go together")
        bad = set(self.calls) - {"fit", "validate", "test", "predict"}
        if bad:
            raise ValueError(f"case {self.id}: unknown calls {sorted(bad)}")
