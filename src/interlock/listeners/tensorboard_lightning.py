"""TensorBoard event files in Lightning's layout: what ``interlock.lightning.loggers.TensorBoardLogger`` writes.

Lightning's ``TensorBoardLogger`` writes, as scalars, every value a batch logged on step every
``log_every_n_steps`` batches and every epoch, validation or test value, each with ``epoch``, at
the step Lightning counts (the batches stepped before); at each stage start it logs the
hyper-parameters (the ``hp_metric`` placeholder, ``-1`` at step 0, unless
``default_hp_metric=False``) and writes ``hparams.yaml``. The rows come from the same moments as
the tracking loggers' (:class:`TrackingLogger`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from interlock.listeners._tracking import TrackingLogger
from interlock.listeners.tensorboard import summary_writer

__all__ = ["LightningTensorBoardLogger"]


class LightningTensorBoardLogger(TrackingLogger):
    """Scalars, hyper-parameters and ``hparams.yaml`` in ``save_dir``, as Lightning's ``TensorBoardLogger`` writes them.

    ``experiment`` is the ``SummaryWriter`` (made on first use, rank 0 only). Needs the ``tensorboard`` package.
    """

    where = "TensorBoard"

    def __init__(self, save_dir: str | os.PathLike[str], prefix: str = "", default_hp_metric: bool = True) -> None:
        super().__init__(log_model=False, prefix=prefix)
        self.folder = Path(save_dir)  # where the files go
        self.default_hp_metric = default_hp_metric
        self._writer: Any = None
        self._params: dict[str, Any] = {}  # what hparams.yaml holds
        self._yaml_written = False  # hparams.yaml is written once (the first save), as Lightning's

    @property
    def save_dir(self) -> Path:
        """The folder the files go to."""
        return self.folder

    @property
    def experiment(self) -> Any:
        """The ``SummaryWriter`` (Lightning's ``logger.experiment``): ``add_image``, ``add_histogram``, ..."""
        if self._rank_zero is False:
            raise RuntimeError(
                "TensorBoardLogger.experiment is written by rank 0 only; guard the call with global_rank"
            )
        if self._writer is None:
            self._writer = summary_writer(self.folder)
        return self._writer

    # -- TrackingLogger ------------------------------------------------------------------
    def _safely(self, what: str, call: Callable[[], Any]) -> bool:
        """A local writer: its failure fails the run, as Lightning's does (no warning and skip)."""
        call()
        return True

    def _begin(self, run_id: str | None) -> None:
        """Log the hyper-parameters at every stage start once ``save_hyperparameters`` was called (Lightning's).

        Also when it recorded none: the ``hp_metric`` placeholder.
        """
        if self._run_id is None:
            self._run_id = self._open(run_id)
            if self._hparams is not None:
                self._send_params(self._hparams)

    def _open(self, run_id: str | None) -> str:
        self.experiment  # noqa: B018 - the writer is made now, in the stage's directory
        return str(self.folder)

    def _send_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        writer = self.experiment
        for name, value in metrics.items():
            writer.add_scalar(name, value, step)
        self._save_yaml()

    def _send_params(self, params: Mapping[str, Any]) -> None:
        from torch.utils.tensorboard.summary import hparams

        self._params.update(params)
        metrics = {self._name("hp_metric"): -1} if self.default_hp_metric else {}
        if metrics:
            self._send_metrics(metrics, 0)
            shown = {k: v if isinstance(v, bool | int | float | str) else str(v) for k, v in params.items()}
            file_writer = self.experiment._get_file_writer()
            for summary in hparams(shown, metrics):
                file_writer.add_summary(summary)
        self._save_yaml()

    def _save_yaml(self) -> None:
        """``hparams.yaml`` with the hyper-parameters logged so far, once (Lightning's ``save()``: ``{}`` if none)."""
        if self._yaml_written:
            return
        self._yaml_written = True
        yaml_file = self.folder / "hparams.yaml"
        if not yaml_file.is_file():  # a resumed run's is there already
            import yaml

            self.folder.mkdir(parents=True, exist_ok=True)
            with yaml_file.open("w", newline="") as f:
                yaml.dump(dict(self._params), f)

    def _send_checkpoints(self, files: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """TensorBoard holds no checkpoints (``log_model`` is off)."""

    def _close(self, status: str) -> None:
        self._save_yaml()
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_writer": None}
