"""What the experiment-tracking loggers (MLflow, W&B) share: cadence, rows, run id, checkpoints, failures.

A subclass says how to open a run, send metrics, parameters and a checkpoint file, and close the
run; this base decides when, with Lightning's step numbers, and keeps the run id in the listener's
stored state so that a resumed fit continues the same run. A failing tracking call warns once and
switches the logger off until the next stage: logging never fails the run or costs a checkpoint.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from pathlib import Path
from typing import Any, Literal

from interlock.core.config import TrainerConfig
from interlock.core.events import Event, Handler, Listener, listen
from interlock.core.state import TrainerState
from interlock.core.updates import SetListenerState
from interlock.listeners._util import ROW_KEYS, is_rank_zero, row_metrics, stage_starts

__all__ = ["LoggerListener", "TrackingLogger", "available", "require"]


class LoggerListener(Listener):
    """A listener that is a logger: the module sees it in ``self.loggers`` (and the first as ``self.logger``)."""

    @property
    def experiment(self) -> Any:
        """The library object behind the logger (Lightning's ``logger.experiment``)."""
        raise AttributeError(f"{type(self).__name__} has no experiment object")


def require(module: str, who: str, extra: str) -> Any:
    """Import ``module`` or raise ``ImportError`` naming the pip command that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{who} needs the {module} package: pip install 'interlock[{extra}]'") from exc


def available(module: str, who: str, extra: str) -> None:
    """Raise ``ImportError`` naming the pip command unless ``module`` can be imported (it is not imported)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ImportError(f"{who} needs the {module} package: pip install 'interlock[{extra}]'")


LogModel = bool | Literal["all"]


def check_log_model(who: str, log_model: Any) -> LogModel:
    """``log_model`` as Lightning takes it: ``False``, ``True`` (at the end of the fit) or ``"all"`` (as saved)."""
    if log_model is True or log_model is False or log_model == "all":
        return log_model  # type: ignore[no-any-return]
    raise ValueError(f"{who}(log_model={log_model!r}) must be False, True (at the end) or 'all' (each checkpoint)")


class TrackingLogger(LoggerListener):
    """Metrics, hyper-parameters and checkpoints to a tracking run, at Lightning's moments.

    - a **step row** every ``log_every_n_steps`` training batches that stepped (the Trainer's flag): what
      the batch logged on step with ``logger=True`` (``<name>_step`` when also logged on epoch) and
      ``epoch``, at Lightning's step number (the batches stepped before this one);
    - an **epoch row** for each history row (training epoch end, validation, ``validate``, ``test``): its
      metrics and ``epoch``, at the step Lightning uses (in a fit, the batches stepped less one);
    - the module's ``save_hyperparameters`` once, when the run opens;
    - checkpoints (``log_model``): ``"all"`` uploads each file ``ModelCheckpoint`` keeps once its atomic
      write has landed (seen at the next epoch or validation boundary), ``True`` those kept at the end.

    Only rank 0 logs. The run opens at the first epoch start or evaluation end, so a resumed fit sees its
    restored state and continues the same run (its id is in the stored state); rows already sent before
    the checkpoint are not sent again.
    """

    #: names of the package's extra and what the warnings call the store
    extra = ""
    where = "the tracking store"

    def __init__(self, log_model: Any = False, prefix: str = "") -> None:
        self._rank_zero: bool | None = None  # this process's rank is 0 (None: not in a stage yet)
        self.log_model = check_log_model(type(self).__name__, log_model)
        if not isinstance(prefix, str):
            raise ValueError(f"{type(self).__name__}(prefix={prefix!r}) must be a string")
        self.prefix = prefix
        self.log_every_n_steps = 50
        self._hparams: dict[str, Any] | None = None  # None: no save_hyperparameters, nothing is logged
        self._checkpoints: tuple[Any, ...] = ()
        self._lr_monitors: tuple[Any, ...] = ()  # LearningRateMonitor listeners whose rates are rows here
        self._run_id: str | None = None  # the open run (None: not opened in this process)
        self._off = False  # a tracking call failed: nothing more is sent this stage
        self._warned = False
        self._manual = False  # manual optimization: Lightning counts every batch as one that stepped
        self._stage_starts: frozenset[str] = frozenset()
        self._step_names: set[str] = set()  # names the module logged on step this stage (never in an epoch row)
        self._names_epoch = -1  # the epoch whose first batch end taught _step_names

    # -- what the Trainer hands over -----------------------------------------------------
    def bind_tags(self, tags: Mapping[str, frozenset[str]]) -> None:
        """Learn which events start a stage (where this process's rank is read)."""
        self._stage_starts = stage_starts(tags)

    def configure(self, config: TrainerConfig) -> None:
        """Take the Trainer's ``log_every_n_steps`` (0: no step rows)."""
        self.log_every_n_steps = config.log_every_n_steps

    def bind_hyperparameters(self, hparams: Mapping[str, Any] | None) -> None:
        """What ``save_hyperparameters`` recorded (plain data), logged when the run opens; ``None``: nothing."""
        self._hparams = None if hparams is None else dict(hparams)

    def bind_checkpoints(self, checkpoints: Sequence[Any]) -> None:
        """The run's ``ModelCheckpoint`` listeners, whose kept files ``log_model`` uploads."""
        self._checkpoints = tuple(checkpoints)

    def bind_lr_monitors(self, monitors: Sequence[Any]) -> None:
        """The run's ``LearningRateMonitor`` listeners: their rates are rows here, as Lightning's writes them."""
        self._lr_monitors = tuple(monitors)

    def subscriptions(self) -> Iterator[tuple[str, Handler, int | None, bool | int]]:
        """The declared handlers, less the per-batch ones when ``log_every_n_steps`` is 0 or no monitor is bound."""
        for pattern, handler, every, once in super().subscriptions():
            name = getattr(handler, "__name__", "")
            if name == "on_train_batch_end" and not self.log_every_n_steps:
                continue
            if name in ("on_rates_at_batch_start", "on_rates_at_epoch_start") and not self._lr_monitors:
                continue
            yield pattern, handler, every, once

    # -- Lightning's Logger methods, for a module's own calls (self.logger.log_metrics(...)) --
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Log ``metrics`` (numbers or one-element tensors) at ``step`` now (rank 0 only), as Lightning's."""
        if self._rank_zero is False:
            return
        values = {self._name(k): v.item() if hasattr(v, "item") else v for k, v in metrics.items()}
        if self._run_id is None:
            self._safely(f"open a run in {self.where}", lambda: self._begin(None))
        self._safely(f"log metrics to {self.where}", lambda: self._send_metrics(values, 0 if step is None else step))

    def log_hyperparams(self, params: Any, metrics: Any = None) -> None:
        """Add ``params`` (a dict or ``argparse.Namespace``) to the logged hyper-parameters (rank 0 only).

        ``metrics``: values to log at step 0 with them (one number is ``hp_metric``), as Lightning's.
        """
        if self._rank_zero is False:
            return
        given = params if isinstance(params, Mapping) else vars(params)
        hparams = self._hparams = {**(self._hparams or {}), **given}
        if self._run_id is None:
            self._safely(f"open a run in {self.where}", lambda: self._begin(None))
        else:
            self._safely("log the hyper-parameters", lambda: self._send_params(hparams))
        if metrics is not None:
            self.log_metrics(metrics if isinstance(metrics, Mapping) else {"hp_metric": metrics}, 0)

    def save(self) -> None:
        """Lightning's ``logger.save()``: nothing to do, every row is written (or sent) as it comes."""

    # -- what a subclass implements ------------------------------------------------------
    def _open(self, run_id: str | None) -> str:
        """Open (``run_id`` given: continue) the run; return its id."""
        raise NotImplementedError

    def _send_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def _send_params(self, params: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _send_checkpoints(self, files: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Upload checkpoint files, each with its facts (``score``, ``best``, ``last``)."""
        raise NotImplementedError

    def _close(self, status: str) -> None:
        """Close the run (``status``: ``success``, ``failed`` or ``interrupted``); it may be continued later."""
        raise NotImplementedError

    # -- failures ------------------------------------------------------------------------
    def _safely(self, what: str, call: Callable[[], Any]) -> bool:
        """Run a tracking call; on failure warn once, switch off for this stage and return False."""
        if self._off:
            return False
        try:
            call()
        except Exception as exc:
            self._off = True
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"{type(self).__name__} could not {what} ({type(exc).__name__}: {exc}); it logs nothing more "
                    f"this stage and the run goes on (the metrics are still in state.history and the CSV log)",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return False
        return True

    # -- the run ---------------------------------------------------------------------------
    def _ensure(self, state: TrainerState) -> SetListenerState | None:
        """Open the run if need be (continuing the stored one); the update that stores its id."""
        stored = self.stored(state).get("run_id")
        if self._run_id is None and not self._off:
            wanted = self._given_run_id() or (str(stored) if stored else None)
            self._safely(f"open a run in {self.where}", lambda: self._begin(wanted))
        if self._run_id is None or stored == self._run_id:
            return None
        return self.store(state, run_id=self._run_id)

    def _begin(self, run_id: str | None) -> None:
        """Open the run (``run_id``: continue it) unless open, and log the hyper-parameters."""
        if self._run_id is None:
            self._run_id = self._open(run_id)
            hparams = self._hparams
            if hparams:
                self._safely("log the hyper-parameters", lambda: self._send_params(hparams))

    def _given_run_id(self) -> str | None:
        """A run id the user passed (continue that run)."""
        return None

    def _epoch_value(self, epoch: int) -> float:
        """The ``epoch`` value a row carries (a float for the tracking stores)."""
        return float(epoch)

    def _name(self, name: str) -> str:
        return f"{self.prefix}-{name}" if self.prefix else name

    # -- handlers --------------------------------------------------------------------------
    @listen("#stage_start")
    def on_stage_start(self, event: Event, state: TrainerState) -> SetListenerState | None:
        if event.name in self._stage_starts:
            self._rank_zero = state.is_global_zero
            self._off = self._warned = False
            self._manual = False
            self._step_names, self._names_epoch = set(), -1
        return None

    @listen("#epoch_start")
    def on_epoch_start(self, event: Event, state: TrainerState) -> SetListenerState | None:
        if not is_rank_zero(self._rank_zero, state):
            return None
        update = self._ensure(state)
        if self.log_model == "all":
            update = self._upload(_with(state, update)) or update
        return update

    @listen("#train_batch_end")
    def on_train_batch_end(self, event: Event) -> None:
        if self._run_id is None or self._off or self._rank_zero is False:
            return
        if event.epoch != self._names_epoch:  # what the module logs on step, learnt once an epoch
            self._names_epoch = event.epoch
            self._step_names.update(event.payload.get("logged") or ())
        n = self.log_every_n_steps
        # Lightning logs when (batches stepped before this one + 1) % n == 0, at the count before this one;
        # under manual optimization every batch counts as one that stepped (event.count: all batch ends)
        if event.trigger == "stepped":
            if event.global_step % n == 0:
                self._step_row(event, event.global_step - 1)
        elif event.trigger == "manual":
            self._manual = True
            if event.count % n == 0:
                self._step_row(event, event.count - 1)

    @listen("#train_batch_start")
    def on_rates_at_batch_start(self, event: Event, state: TrainerState) -> None:
        """Lightning's monitor: the rates at a batch start when the loggers are due, at the batches stepped."""
        if self._run_id is None or self._off or self._rank_zero is False:
            return
        stepped = event.count - 1 if state.manual_optimization else event.global_step
        if ((stepped + 1) % self.log_every_n_steps if self.log_every_n_steps else 1) and not state.should_stop:
            return
        self._rates(event, "step", stepped)

    @listen("#epoch_start")
    def on_rates_at_epoch_start(self, event: Event, state: TrainerState) -> None:
        if self._run_id is None or self._off or self._rank_zero is False:
            return
        self._rates(event, "epoch", state.progress.train_batches if state.manual_optimization else event.global_step)

    def _rates(self, event: Event, moment: str, step: int) -> None:
        rates: dict[str, float] = {}
        for monitor in self._lr_monitors:
            if monitor.logging_interval in (None, moment):
                rates.update(monitor.rates(event, moment))
        if rates:
            metrics = {self._name(k): v for k, v in rates.items()}
            self._safely(f"log metrics to {self.where}", lambda: self._send_metrics(metrics, step))

    def _step_row(self, event: Event, step: int) -> None:
        logged = event.payload.get("logged") or {}
        if logged:
            metrics = {self._name(k): float(v) for k, v in logged.items()}
            metrics[self._name("epoch")] = self._epoch_value(event.epoch)
            self._safely(f"log metrics to {self.where}", lambda: self._send_metrics(metrics, step))

    @listen("#epoch_end")
    @listen("#eval_end")
    def on_rows(self, event: Event, state: TrainerState) -> SetListenerState | None:
        if not is_rank_zero(self._rank_zero, state):
            return None
        update = self._ensure(state)
        state = _with(state, update)
        written = int(self.stored(state).get("rows", 0))
        rows = state.history[written:]
        if rows and self._run_id is not None and not self._off:
            stepped = state.progress.train_batches if self._manual else state.global_step
            step = max(stepped - 1, 0) if state.stage == "fit" else stepped
            epoch = None if state.stage == "fit" else state.current_epoch  # Lightning's, after a fit: epochs trained
            # Lightning's epoch rows hold what the module logged on epoch: not a scalar a step only returned
            # (to_callbacks False), nor the latest value of a name logged on step only
            skip = self._step_names | {k for k, shown in state.to_callbacks.items() if not shown}
            merged = _one_per_loop(rows)
            batches = [m for m in (self._row(row, epoch, skip) for row in merged) if set(m) - {self._name("epoch")}]

            def send() -> None:
                for metrics in batches:
                    self._send_metrics(metrics, step)

            if self._safely(f"log metrics to {self.where}", send):
                update = self.store(state, rows=len(state.history))
                state = _with(state, update)
        if self.log_model == "all":
            update = self._upload(state) or update
        return update

    def _row(self, row: Mapping[str, Any], epoch: int | None = None, skip: Set[str] = frozenset()) -> dict[str, float]:
        """A history row's metrics but ``skip``, and its ``epoch`` (``epoch`` given: Lightning's ``current_epoch``)."""
        metrics = {self._name(k): v for k, v in row_metrics(row).items() if k not in skip}
        if "epoch" in row:
            metrics[self._name("epoch")] = self._epoch_value(int(row["epoch"] if epoch is None else epoch))
        return metrics

    @listen("finished")
    @listen("failed")
    @listen("interrupted")
    def on_end(self, event: Event, state: TrainerState) -> SetListenerState | None:
        if self._run_id is None or not is_rank_zero(self._rank_zero, state):
            return None
        update = self._upload(state) if self.log_model else None
        status = {"finished": "success"}.get(event.name, event.name)
        self._safely(f"close the run in {self.where}", lambda: self._close(status))
        self._run_id, self._rank_zero = None, None
        return update

    # -- checkpoints ---------------------------------------------------------------------
    def _upload(self, state: TrainerState) -> SetListenerState | None:
        """Upload the kept checkpoint files not uploaded yet (by path and modification time)."""
        if self._run_id is None or self._off or not self._checkpoints:
            return None
        sent = dict(self.stored(state).get("models", {}))
        files: list[tuple[str, Mapping[str, Any]]] = []
        for ckpt in self._checkpoints:
            try:
                kept = dict(ckpt.best_k_models(state))
                best, last = ckpt.best_model_path(state), ckpt.last_model_path(state)
            except (RuntimeError, ValueError):
                continue
            for path in [*kept, best, last]:
                if not path or any(path == f for f, _ in files) or not os.path.isfile(path):
                    continue
                stamp = f"{os.stat(path).st_mtime_ns}"
                key = _relative(path, state.run_dir)
                if sent.get(key) == stamp:
                    continue
                facts = {"score": kept.get(path), "best": path == best, "last": path == last}
                files.append((path, facts))
                sent[key] = stamp
        if not files or not self._safely(f"upload checkpoints to {self.where}", lambda: self._send_checkpoints(files)):
            return None
        return self.store(state, models=sent)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_run_id": None}


def _one_per_loop(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows as Lightning's loggers get them: an evaluation's loaders in one row (one ``log_metrics`` call).

    interlock's history keeps a row per evaluation loader; consecutive evaluation rows of one stage at one
    position (its loaders, one after the other) are merged. Training rows stay as they are.
    """
    out: list[Mapping[str, Any]] = []
    for row in rows:
        last = out[-1] if out else None
        same = last is not None and all(last.get(k) == row.get(k) for k in ROW_KEYS)
        if same and row.get("stage") != "train":
            assert last is not None
            out[-1] = {**last, **row}
        else:
            out.append(row)
    return out


def _relative(path: str, run_dir: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(run_dir).resolve())) if run_dir else path
    except ValueError:
        return path


def _with(state: TrainerState, update: SetListenerState | None) -> TrainerState:
    """``state`` with ``update``'s stored value in place (to build the next update of the same event on it)."""
    if update is None:
        return state
    return state.replace(listeners={**state.listeners, update.key: update.value})
