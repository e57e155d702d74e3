"""WandbLogger: the run's metrics, hyper-parameters and checkpoints in a Weights & Biases run."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from interlock.listeners._tracking import TrackingLogger, available, require

__all__ = ["WandbLogger"]


class WandbLogger(TrackingLogger):
    """Lightning's ``WandbLogger``: one W&B run per fit, continued (same id) by a resumed fit.

    Arguments as Lightning's: ``name`` (display name), ``save_dir`` / ``dir`` (where ``wandb/`` goes),
    ``version`` / ``id`` (the run id: continue that run), ``offline`` (``WANDB_MODE=offline``: nothing
    leaves the machine; ``wandb sync`` uploads later), ``anonymous``, ``project`` (default
    ``$WANDB_PROJECT``, else ``"lightning_logs"``), ``log_model`` (``True``: the kept checkpoints at the
    end of the fit, ``"all"``: each as it lands, as ``model`` artifacts named ``checkpoint_name`` or
    ``model-<run id>`` with the ``latest``/``best`` aliases; refused with ``offline=True``, as in
    Lightning), ``prefix``, ``experiment`` (an existing ``wandb`` run to log into), and ``**kwargs`` for
    ``wandb.init`` (``entity``, ``group``, ``tags``, ...). Metrics are logged with ``trainer/global_step``
    as their step metric, at Lightning's cadence and step numbers; the module's
    ``save_hyperparameters`` go to ``run.config``. The run is finished when each stage ends (a later
    stage continues it). Needs ``wandb`` (``pip install 'interlock[wandb]'``).
    """

    extra = "wandb"
    where = "W&B"

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,  # Lightning's name
        id: str | None = None,  # Lightning's name
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Any = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: str = "mutable",
        **kwargs: Any,
    ) -> None:
        super().__init__(log_model=log_model, prefix=prefix)
        if experiment is None:
            available("wandb", "WandbLogger", "wandb")
        if offline and log_model:
            raise ValueError(
                f"WandbLogger(log_model={log_model!r}, offline=True): checkpoints cannot be uploaded offline; "
                "set offline=False or log_model=False (Lightning refuses this too)"
            )
        if add_file_policy not in ("mutable", "immutable"):
            raise ValueError(f"WandbLogger(add_file_policy={add_file_policy!r}) must be 'mutable' or 'immutable'")
        folder = save_dir if save_dir is not None else dir
        self.offline, self.checkpoint_name, self.add_file_policy = bool(offline), checkpoint_name, add_file_policy
        self._init: dict[str, Any] = {
            "name": name,
            "project": project or os.environ.get("WANDB_PROJECT", "lightning_logs"),
            "dir": os.fspath(folder) if folder is not None else None,
            "id": version or id,
            "resume": "allow",
            "anonymous": "allow" if anonymous else None,
            **kwargs,
        }
        self._run: Any = experiment
        if experiment is not None:
            self._run_id = str(experiment.id)

    # -- Lightning's attributes ----------------------------------------------------------
    @property
    def experiment(self) -> Any:
        """The ``wandb`` run (started on first use)."""
        self._begin(self._init.get("id") or self._last_id())
        return self._run

    @property
    def name(self) -> str | None:
        """The project name, as Lightning's."""
        return self._init.get("project")

    @property
    def version(self) -> str | None:
        """The run id (the given one before the run starts, the last one after it finished)."""
        return str(self._run.id) if self._run is not None else (self._init.get("id") or self._last_id())

    @property
    def save_dir(self) -> str | None:
        """Where ``wandb/`` is written."""
        return self._init.get("dir")

    # -- the run -------------------------------------------------------------------------
    def _last_id(self) -> str | None:
        return self.__dict__.get("_previous")

    def _given_run_id(self) -> str | None:
        given = self._init.get("id")
        return str(given) if given else None

    def _open(self, run_id: str | None) -> str:
        wandb = require("wandb", "WandbLogger", "wandb")
        if self._run is not None and (run_id is None or str(self._run.id) == run_id):
            return str(self._run.id)
        settings = {**self._init, "id": run_id or self._init.get("id")}
        if self.offline:
            settings["mode"] = "offline"
        if settings.get("dir"):
            Path(settings["dir"]).mkdir(parents=True, exist_ok=True)
        run = wandb.init(**{k: v for k, v in settings.items() if v is not None})
        run.define_metric("trainer/global_step")
        run.define_metric("*", step_metric="trainer/global_step", step_sync=True)
        self._run = run
        self.__dict__["_previous"] = str(run.id)
        return str(run.id)

    def _send_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log({**metrics, "trainer/global_step": step})

    def _send_params(self, params: Mapping[str, Any]) -> None:
        self._run.config.update(dict(params), allow_val_change=True)

    def _send_checkpoints(self, files: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        wandb = require("wandb", "WandbLogger", "wandb")
        for path, facts in files:
            meta = {"score": facts.get("score"), "original_filename": Path(path).name}
            artifact = wandb.Artifact(name=self.checkpoint_name or f"model-{self._run.id}", type="model", metadata=meta)
            artifact.add_file(path, name="model.ckpt", policy=self.add_file_policy)
            self._run.log_artifact(artifact, aliases=["latest", "best"] if facts.get("best") else ["latest"])

    def _close(self, status: str) -> None:
        run, self._run = self._run, None
        if run is not None:
            run.finish(exit_code=0 if status == "success" else 1)

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_run": None}
