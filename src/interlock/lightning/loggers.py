"""Lightning's ``loggers`` names: interlock's loggers, with Lightning's arguments.

``CSVLogger`` and ``TensorBoardLogger`` write where Lightning puts them: ``save_dir/name/version_N``
(the next free ``N`` when ``version`` is not given, chosen when the logger is made).
``logger.log_dir``, ``name`` and ``version`` read as in Lightning. ``MLFlowLogger`` and
``WandbLogger`` are interlock's own (they take Lightning's arguments). Comet, Neptune and
LitLogger are not here yet: importing them raises ``ImportError`` saying so.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from interlock.core.events import Listener
from interlock.lightning._refuse import missing, refuse_value
from interlock.listeners import MLFlowLogger, WandbLogger
from interlock.listeners._tracking import LoggerListener
from interlock.listeners.csv_lightning import LightningCSVLogger
from interlock.listeners.tensorboard_lightning import LightningTensorBoardLogger

__all__ = ["CSVLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]


class Logger(Listener):
    """Lightning's ``Logger`` base. In interlock a logger is a listener of the history rows (docs/listeners.md).

    A subclass written against Lightning's API (``log_metrics``, ``log_hyperparams``) is refused
    when defined, as interlock would never call those methods.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        lightning_api = [m for m in ("log_metrics", "log_hyperparams", "experiment") if m in vars(cls)]
        if lightning_api and not issubclass(cls, LoggerListener):
            raise TypeError(
                f"{cls.__name__} defines Lightning's Logger API ({', '.join(lightning_api)}), which interlock does "
                "not call: write an interlock.Listener that handles 'fit.train.epoch_end', 'fit.train.val.end' and "
                "'test.end' and reads state.history (see interlock.listeners.CSVLogger)"
            )


def _version_dir(owner: str, save_dir: Any, name: str | None, version: int | str | None) -> tuple[Path, int | str]:
    """``save_dir/name/version_N`` (Lightning's layout) and the version; ``N`` is the next free one when not given."""
    if save_dir is None:
        raise TypeError(f"{owner}() missing save_dir: pass the folder Lightning would write to, e.g. save_dir='.'")
    root = Path(save_dir) / (name or "")
    if version is None:
        taken = [int(m.group(1)) for p in root.glob("version_*") if (m := re.fullmatch(r"version_(\d+)", p.name))]
        version = max(taken, default=-1) + 1
    sub = version if isinstance(version, str) else f"version_{version}"
    return root / sub, version


class _VersionDirs:
    """``name``, ``save_dir`` and ``log_dir`` as Lightning's loggers have them (files go to ``log_dir``)."""

    folder: Path
    logger_name: str
    _save_dir: str

    def _place(self, save_dir: Any, name: str | None) -> None:
        self.root_dir = str(Path(save_dir) / (name or ""))
        self.logger_name = name or ""
        self._save_dir = str(save_dir)

    @property
    def name(self) -> str:
        """Lightning's ``logger.name``: the folder under ``save_dir``."""
        return self.logger_name

    @property
    def save_dir(self) -> str:
        """The ``save_dir`` given, as Lightning's (the files go to :attr:`log_dir` under it)."""
        return self._save_dir

    @property
    def log_dir(self) -> str:
        """``save_dir/name/version_N`` (``/sub_dir`` for TensorBoard), as Lightning's."""
        return str(self.folder)


class CSVLogger(_VersionDirs, LightningCSVLogger):  # type: ignore[misc]
    """Lightning's ``CSVLogger(save_dir, name="lightning_logs", version=None, prefix="")``.

    ``metrics.csv`` in the version dir has Lightning's rows and columns: a row every
    ``log_every_n_steps`` batches and one per epoch, validation or test end, with ``epoch`` and
    ``step`` in each; the header sorted. Rows are written as they come (Lightning flushes every
    ``flush_logs_every_n_steps``; the file ends the same).
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        if not isinstance(flush_logs_every_n_steps, int) or flush_logs_every_n_steps < 1:
            raise ValueError(f"CSVLogger(flush_logs_every_n_steps={flush_logs_every_n_steps!r}) must be an int >= 1")
        folder, self.version = _version_dir("CSVLogger", save_dir, name, version)
        super().__init__(save_dir=folder, prefix=prefix)
        self._place(save_dir, name)

    @property
    def experiment(self) -> Any:
        raise AttributeError(
            "CSVLogger.experiment (Lightning's ExperimentWriter) is not in interlock: log values with self.log, "
            "they are written to log_dir/metrics.csv"
        )


class TensorBoardLogger(_VersionDirs, LightningTensorBoardLogger):  # type: ignore[misc]
    """Lightning's ``TensorBoardLogger(save_dir, name="lightning_logs", version=None, ...)``.

    The event files hold Lightning's scalars: every value logged on step, every ``log_every_n_steps``
    batches, and every epoch, validation or test value, each with ``epoch``, at Lightning's step; the
    ``hp_metric`` placeholder and ``hparams.yaml``. ``logger.experiment`` is the ``SummaryWriter``
    once a run has started (for ``add_image`` and the like).
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        refuse_value("TensorBoardLogger", "log_graph", log_graph, (False,), "call experiment.add_graph(...) yourself")
        if kwargs:
            raise ValueError(
                f"TensorBoardLogger({', '.join(kwargs)}=...): SummaryWriter arguments are not supported by interlock; "
                "remove them"
            )
        if not isinstance(default_hp_metric, bool):
            raise ValueError(f"TensorBoardLogger(default_hp_metric={default_hp_metric!r}) must be True or False")
        folder, self.version = _version_dir("TensorBoardLogger", save_dir, name, version)
        if sub_dir is not None:
            folder = folder / sub_dir
        super().__init__(save_dir=folder, prefix=prefix, default_hp_metric=default_hp_metric)
        self._place(save_dir, name)


_LATER = "it is not in interlock yet (planned); use MLFlowLogger, WandbLogger, TensorBoardLogger or CSVLogger"
__getattr__ = missing(
    "interlock.lightning.loggers",
    {
        "CometLogger": f"Comet: {_LATER}",
        "NeptuneLogger": f"Neptune: {_LATER}",
        "LitLogger": f"LitLogger: {_LATER}",
    },
)

#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
