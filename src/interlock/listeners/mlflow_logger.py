"""MLFlowLogger: the run's metrics, hyper-parameters and checkpoints in an MLflow tracking store."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from interlock.listeners._tracking import TrackingLogger, require

__all__ = ["MLFlowLogger"]

_STATUS = {"success": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
_BAD_NAME = re.compile(r"[^a-zA-Z0-9_/. -]+")


class MLFlowLogger(TrackingLogger):
    """Lightning's ``MLFlowLogger``: one MLflow run per fit, continued by a resumed fit.

    Arguments as Lightning's: ``experiment_name`` (made if missing, with ``artifact_location``),
    ``run_name`` and ``tags`` for a new run, ``tracking_uri`` (default ``$MLFLOW_TRACKING_URI``, else
    ``file:<save_dir>``), ``log_model`` (``True``: the kept checkpoints at the end of the fit,
    ``"all"``: each as it lands, under the artifact path of the file's stem), ``prefix`` (metric names
    become ``<prefix>-<name>``), ``run_id`` (log into that run), ``synchronous`` (passed to
    ``log_batch``). Metrics come at Lightning's cadence and step numbers (see
    :class:`~interlock.listeners._tracking.TrackingLogger`); parameters are the module's
    ``save_hyperparameters``, flattened with ``/``. Needs ``mlflow`` (``pip install 'interlock[mlflow]'``).
    """

    extra = "mlflow"
    where = "MLflow"

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, Any] | None = None,
        save_dir: str | os.PathLike[str] | None = "./mlruns",
        log_model: Any = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
    ) -> None:
        super().__init__(log_model=log_model, prefix=prefix)
        tracking = require("mlflow.tracking", "MLFlowLogger", "mlflow")
        if not isinstance(experiment_name, str) or not experiment_name:
            raise ValueError(f"MLFlowLogger(experiment_name={experiment_name!r}) must be a non-empty string")
        if tags is not None and not isinstance(tags, Mapping):
            raise ValueError(f"MLFlowLogger(tags={tags!r}) must be a dict of tag names to values")
        uri = tracking_uri or os.getenv("MLFLOW_TRACKING_URI") or f"file:{save_dir}"
        self.experiment_name, self.run_name, self.tags = experiment_name, run_name, dict(tags or {})
        self.tracking_uri, self.artifact_location, self.synchronous = uri, artifact_location, synchronous
        self._given = run_id
        self._last_id: str | None = None  # the run this logger opened last (continued by a later stage)
        self._experiment_id: str | None = None
        try:
            self._client: Any = tracking.MlflowClient(uri)
        except Exception as exc:
            fix = (
                "set MLFLOW_ALLOW_FILE_STORE=true to use a file store with this MLflow, or pass a database or "
                "server tracking_uri (e.g. 'sqlite:///mlflow.db')"
                if uri.startswith("file:")
                else "pass a tracking_uri MLflow accepts"
            )
            raise ValueError(f"MLFlowLogger(tracking_uri={uri!r}): {exc} ({fix})") from exc

    # -- Lightning's attributes ----------------------------------------------------------
    @property
    def experiment(self) -> Any:
        """The ``MlflowClient``; the run is opened on first use (``run_id`` names it)."""
        self._begin(self._given or self._last_id)
        return self._client

    @property
    def run_id(self) -> str | None:
        """The MLflow run id (opening the run if need be)."""
        _ = self.experiment
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        """The MLflow experiment id (opening the run if need be)."""
        _ = self.experiment
        return self._experiment_id

    @property
    def name(self) -> str | None:
        """The experiment id, as Lightning's."""
        return self.experiment_id

    @property
    def version(self) -> str | None:
        """The run id, as Lightning's."""
        return self.run_id

    @property
    def save_dir(self) -> str | None:
        """The store's directory for a ``file:`` tracking URI, else ``None``."""
        return self.tracking_uri[len("file:") :] if self.tracking_uri.startswith("file:") else None

    # -- the run -------------------------------------------------------------------------
    def _given_run_id(self) -> str | None:
        return self._given

    def _open(self, run_id: str | None) -> str:
        client = self._client
        if run_id is not None:
            run = client.get_run(run_id)
            self._experiment_id = run.info.experiment_id
            if run.info.status != "RUNNING" and self._rank_zero is not None:  # a stage continues it
                client.update_run(run_id, status="RUNNING")
            self._last_id = run_id
            return run_id
        found = client.get_experiment_by_name(self.experiment_name)
        if found is not None and found.lifecycle_stage != "deleted":
            self._experiment_id = found.experiment_id
        else:
            self._experiment_id = client.create_experiment(
                self.experiment_name, artifact_location=self.artifact_location
            )
        tags = {str(k): str(v) for k, v in self.tags.items() if k != "mlflow.runName" or self.run_name is None}
        run = client.create_run(self._experiment_id, tags=tags, run_name=self.run_name)
        self._last_id = run.info.run_id
        return str(run.info.run_id)

    def _batch(self, **items: Any) -> None:
        extra = {} if self.synchronous is None else {"synchronous": self.synchronous}
        self._client.log_batch(self._run_id, **items, **extra)

    def _send_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._batch(metrics=[Metric(_BAD_NAME.sub("", k), float(v), now, step) for k, v in metrics.items()])

    def _send_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        flat = [Param(k, str(v)[:6000]) for k, v in _flatten(params).items()]
        for i in range(0, len(flat), 100):
            self._batch(params=flat[i : i + 100])

    def _send_checkpoints(self, files: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        import yaml

        for path, facts in files:
            stem = Path(path).stem
            self._client.log_artifact(self._run_id, path, stem)
            with tempfile.TemporaryDirectory() as tmp:
                meta = {"score": facts.get("score"), "original_filename": Path(path).name}
                (Path(tmp) / "metadata.yaml").write_text(yaml.safe_dump(meta))
                aliases = ["latest", "best"] if facts.get("best") else ["latest"]
                (Path(tmp) / "aliases.txt").write_text(str(aliases))
                self._client.log_artifact(self._run_id, str(Path(tmp) / "metadata.yaml"), stem)
                self._client.log_artifact(self._run_id, str(Path(tmp) / "aliases.txt"), stem)

    def _close(self, status: str) -> None:
        self._client.set_terminated(self._run_id, _STATUS.get(status, "FINISHED"))

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_client": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._client is None:
            self._client = require("mlflow.tracking", "MLFlowLogger", "mlflow").MlflowClient(self.tracking_uri)


def _flatten(params: Mapping[str, Any], parent: str = "") -> dict[str, Any]:
    """Nested dicts as ``a/b`` keys (Lightning's ``_flatten_dict``)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent}/{key}" if parent else str(key)
        if isinstance(value, Mapping):
            out.update(_flatten(value, name))
        else:
            out[name] = value
    return out
