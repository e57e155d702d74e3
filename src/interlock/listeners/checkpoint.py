"""ModelCheckpoint: save checkpoints during fit, keep the best k (Lightning's names and rules).

The listener decides; it never writes a checkpoint itself. At a save point it
returns :class:`~interlock.SaveCheckpoint` updates (the trainer writes the file
atomically at that checkpointable state) and stores its bookkeeping (the top-k
paths and scores, the last path, when it last saved) in the trainer state, so a
resumed run continues it. Stored paths are relative to the run directory (to
``dirpath`` when one is given) and are resolved against the directory the run
continues in: a checkpoint cannot make a resumed run write or delete anywhere
else (:meth:`ModelCheckpoint.check_restored` refuses a path that leads outside).
A file that falls out of the top k is named in the ``replaces`` of the save that
pushed it out: the trainer deletes it once that checkpoint is in place, and keeps it if the save fails.

Save points:

- ``fit.train.batch.end``: every ``every_n_train_steps`` optimizer steps, or when
  ``train_time_interval`` has passed since the last save; the step's returned scalars
  (``train_loss``, ...) rank and name the save with this step's values, as Lightning's
  ``self.log`` on step has them in ``callback_metrics`` (they reach ``state.metrics`` only
  at the epoch end);
- ``fit.train.val.end`` / ``fit.train.epoch_end``: in the epochs ``every_n_epochs``
  selects (default every epoch), where Lightning's ``save_on_train_epoch_end`` says:
  ``True`` at the training epoch end, ``False`` after each validation, ``None`` at the
  epoch end when ``check_val_every_n_epoch=1`` and either ``val_check_interval=1.0`` or
  no validation ran in the epoch (so a training-metric monitor scores the current epoch);
  and ``last.ckpt`` is rewritten at every epoch end when ``save_last``.

ModelCheckpoint handles the same events as EarlyStopping and relies on the
default listener order (the Trainer installs it last): by the time it
saves, the other listeners' updates for the event are in the state it saves.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import posixpath
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from interlock.core.config import TrainerConfig
from interlock.core.events import Event, Handler, Listener
from interlock.core.logging import scalars
from interlock.core.state import TrainerState
from interlock.core.updates import SaveCheckpoint, Update

__all__ = ["ModelCheckpoint"]

_log = logging.getLogger(__name__)
_PLACEHOLDER = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")


def _int_or_none(name: str, value: Any, low: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"ModelCheckpoint({name}={value!r}) must be None or an int >= {low}")
    return value


class ModelCheckpoint(Listener):
    """Save checkpoints during fit; keep the ``save_top_k`` best by ``monitor``.

    Args:
        dirpath: where files go; default ``<state.run_dir>/checkpoints``.
        filename: name template without extension; ``{epoch}``, ``{step}`` (the
            global step) and any metric (``{val_loss:.3f}``) are filled in; a
            placeholder not already written as ``name={name}`` gets ``name=`` put
            in front, as in Lightning. Default ``"epoch={epoch}-step={step}"``.
        monitor: metric that ranks checkpoints; ``None`` keeps the latest.
        mode: ``"min"`` or ``"max"``: which direction of ``monitor`` is better.
        save_top_k: files to keep (``-1``: all, ``0``: none besides ``last.ckpt``).
        save_last: also write ``last.ckpt`` at every save point and epoch end.
        every_n_train_steps: save every N optimizer steps.
        every_n_epochs: save in every N-th epoch (default 1 when no other trigger is set).
        train_time_interval: save when this much wall time has passed (timedelta or seconds).
        key: name of this listener's state; give two instances different keys.
        verbose: log each save decision (Lightning's messages).
        auto_insert_metric_name: ``False``: fill placeholders without the ``name=`` prefix.
        save_on_train_epoch_end: save at the training epoch end (``True``), after validation
            (``False``), or as Lightning decides (``None``, see the module docstring).
        enable_version_counter: ``False``: overwrite a kept file of the same name instead of ``-v1``.
        save_weights_only: leave the optimizer, scheduler and gradient state out (cannot resume a fit).

    """

    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        mode: str = "min",
        save_top_k: int = 1,
        save_last: bool | None = None,
        every_n_train_steps: int | None = None,
        every_n_epochs: int | None = None,
        train_time_interval: datetime.timedelta | float | None = None,
        key: str | None = None,
        verbose: bool = False,
        auto_insert_metric_name: bool = True,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
        save_weights_only: bool = False,
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"ModelCheckpoint(mode={mode!r}); choose 'min' (lower is better) or 'max'")
        if not isinstance(save_top_k, int) or isinstance(save_top_k, bool) or save_top_k < -1:
            raise ValueError(f"ModelCheckpoint(save_top_k={save_top_k!r}) must be an int >= -1 (-1 keeps all)")
        if monitor is None and save_top_k not in (-1, 0, 1):
            raise ValueError(
                f"ModelCheckpoint(save_top_k={save_top_k}) needs a monitor to rank checkpoints; "
                "pass monitor='val_loss' (for example), or save_top_k=-1 to keep every checkpoint"
            )
        if monitor is not None and (not isinstance(monitor, str) or not monitor):
            raise ValueError(f"ModelCheckpoint(monitor={monitor!r}) must be None or a metric name such as 'val_loss'")
        if save_last not in (None, True, False):
            raise ValueError(f"ModelCheckpoint(save_last={save_last!r}) must be None, True or False")
        if filename is not None and (not isinstance(filename, str) or not filename):
            raise ValueError(f"ModelCheckpoint(filename={filename!r}) must be a non-empty template string")
        steps = _int_or_none("every_n_train_steps", every_n_train_steps, 0)
        epochs = _int_or_none("every_n_epochs", every_n_epochs, 0)
        interval = train_time_interval
        if isinstance(interval, datetime.timedelta):
            interval = interval.total_seconds()
        bad = isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0
        if interval is not None and bad:
            raise ValueError(
                f"ModelCheckpoint(train_time_interval={train_time_interval!r}) must be None, "
                "a datetime.timedelta or a number of seconds > 0"
            )
        if bool(steps) + bool(epochs) + (interval is not None) > 1:
            raise ValueError(
                f"ModelCheckpoint: every_n_train_steps={every_n_train_steps!r}, every_n_epochs={every_n_epochs!r} "
                f"and train_time_interval={train_time_interval!r} are mutually exclusive; set at most one"
            )
        if save_on_train_epoch_end not in (None, True, False):
            raise ValueError(
                f"ModelCheckpoint(save_on_train_epoch_end={save_on_train_epoch_end!r}) must be None (decide at "
                "set-up, as Lightning), True (at the training epoch end) or False (after validation)"
            )
        if steps is None and epochs is None and interval is None:
            epochs = 1
        self.dirpath = None if dirpath is None else Path(dirpath)
        self.filename = filename if filename is not None else "epoch={epoch}-step={step}"
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = bool(save_last)
        self.every_n_train_steps = steps or 0
        self.every_n_epochs = epochs or 0
        self.train_time_interval: float | None = None if interval is None else float(interval)
        self.verbose = bool(verbose)
        self.auto_insert_metric_name = bool(auto_insert_metric_name)
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.enable_version_counter = bool(enable_version_counter)
        self.save_weights_only = bool(save_weights_only)
        self._at_epoch_end: bool | None = save_on_train_epoch_end  # None: decided per epoch (no trainer config)
        self._interval_is_epoch = True
        self._skip = False
        if key is not None:
            self.key = key

    def configure(self, config: TrainerConfig) -> None:
        """Resolve ``save_on_train_epoch_end=None`` against the trainer's validation schedule (Lightning's rule)."""
        if self.save_on_train_epoch_end is None:
            self._at_epoch_end = False if config.check_val_every_n_epoch != 1 else None
            self._interval_is_epoch = config.val_check_interval == 1.0
        self._skip = bool(config.fast_dev_run)

    def _saves_at_epoch_end(self, state: TrainerState) -> bool:
        """Lightning's ``_should_save_on_train_epoch_end``: the flag, else every-epoch validation, else none ran."""
        if self._at_epoch_end is not None:
            return self._at_epoch_end
        return self._interval_is_epoch or not _validated_in_epoch(state)

    # -- events --------------------------------------------------------------------------
    def subscriptions(self) -> Iterator[tuple[str, Handler, int | None, bool | int]]:
        yield "#fit#stage_start", self.on_fit_start, None, False
        if self.every_n_train_steps or self.train_time_interval is not None:
            yield "#train_batch_end", self.on_train_batch_end, None, False
        if self.every_n_epochs:
            yield "#fit#val#eval_end", self.on_validation_end, None, False
        yield "#epoch_end", self.on_train_epoch_end, None, False

    def bind_tags(self, tags: Mapping[str, frozenset[str]]) -> None:
        """Learn the events that end a validation loop inside fit (their counts say validation ran)."""
        self._val_ends = tuple(n for n, t in tags.items() if {"fit", "val", "eval_end"} <= t)

    def on_fit_start(self, event: Event, state: TrainerState) -> list[Update] | None:
        """Note the checkpoint files already in the directory: a name they hold gets ``-v1``, as Lightning's.

        A resumed run then gets the list its first run noted (restored with the rest of this state),
        so it names its files as that run did.
        """
        folder = self._base(state) / self._subdir
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(self.FILE_EXTENSION))
        except FileNotFoundError:
            names = []
        found = [posixpath.join(self._subdir, n) for n in names]
        return [self.store(state, existing=found)] if found or "existing" in self.stored(state) else None

    def on_train_batch_end(self, event: Event, state: TrainerState) -> list[Update] | None:
        stored = self.stored(state)
        step = state.global_step
        if step == stored.get("last_step", 0):
            return None
        if self.every_n_train_steps:
            if step % self.every_n_train_steps == 0:
                return self._save(state, top_k=True, latest=_returned(event))
            return None
        last_time = stored.get("last_time")
        now = time.time()
        if last_time is None:  # the clock starts at the first batch of the run
            return [self.store(state, last_time=now)]
        if now - last_time >= (self.train_time_interval or 0.0):
            return self._save(state, top_k=True, latest=_returned(event), last_time=now)
        return None

    def on_validation_end(self, event: Event, state: TrainerState) -> list[Update] | None:
        if self._skip or self._at_epoch_end or (self._at_epoch_end is None and self._interval_is_epoch):
            return None
        if self._epoch_due(state) and state.global_step != self.stored(state).get("last_step", 0):
            return self._save(state, top_k=True)
        return None

    def on_train_epoch_end(self, event: Event, state: TrainerState) -> list[Update] | None:
        if self._skip:
            return None
        self._check_monitor(state)
        top_k = (
            self._saves_at_epoch_end(state)
            and self._epoch_due(state)
            and state.global_step != self.stored(state).get("last_step", 0)
        )
        if top_k or self.save_last:
            return self._save(state, top_k=top_k)
        return None

    # -- what is stored -------------------------------------------------------------------
    def best_k_models(self, state: TrainerState) -> dict[str, float | None]:
        """The kept checkpoints ranked by ``monitor``: path -> score (empty without a monitor, as in Lightning)."""
        if self.monitor is None:
            return {}
        base = self._base(state)
        return {self._resolve(base, p): score for p, score in self.stored(state).get("best_k", {}).items()}

    def best_model_path(self, state: TrainerState) -> str:
        """The best checkpoint so far (the latest one without a monitor); ``""`` before any."""
        best = str(self.stored(state).get("best", ""))
        return self._resolve(self._base(state), best) if best else ""

    def best_model_score(self, state: TrainerState) -> float | None:
        """The monitored value of :meth:`best_model_path`."""
        return self.stored(state).get("best_score")

    def last_model_path(self, state: TrainerState) -> str:
        """The ``last.ckpt`` path once written (``save_last``); ``""`` before."""
        last = str(self.stored(state).get("last", ""))
        return self._resolve(self._base(state), last) if last else ""

    # -- paths: stored relative to the base, resolved inside it ---------------------------
    def _base(self, state: TrainerState) -> Path:
        """What stored paths are relative to: ``dirpath`` when given, else the run directory."""
        if self.dirpath is not None:
            return self.dirpath
        if not state.run_dir:
            raise RuntimeError("ModelCheckpoint has no directory: state.run_dir is empty; pass dirpath=...")
        return Path(state.run_dir)

    @property
    def _subdir(self) -> str:
        """Where files go, relative to the base."""
        return "" if self.dirpath is not None else "checkpoints"

    def _resolve(self, base: Path, stored: str) -> str:
        """The file a stored path names, under ``base``; ``ValueError`` when it leads outside."""
        return os.path.join(base, _relative(stored, str(base), self))

    def check_restored(self, stored: Mapping[str, Any], run_dir: str) -> Mapping[str, Any]:
        """Refuse kept paths that lead outside the run directory (or ``dirpath``); make old absolute ones relative.

        Checkpoints of earlier versions stored absolute paths: they are accepted when they lie
        inside the directory the run continues in, and stored relative to it from then on.
        """
        base = str(self.dirpath) if self.dirpath is not None else run_dir
        out = dict(stored)
        best_k = stored.get("best_k", {})
        if not isinstance(best_k, Mapping):
            raise ValueError(
                f"ModelCheckpoint(key={self.key!r}) state 'best_k' is a {type(best_k).__name__}, not a dict"
            )
        kept: dict[str, Any] = {}
        for path, score in best_k.items():
            if score is not None and not _number(score):
                raise ValueError(
                    f"ModelCheckpoint(key={self.key!r}) keeps {path!r} with the score {score!r}, not a number"
                )
            kept[_relative(path, base, self)] = score
        out["best_k"] = kept
        for name in ("best", "last"):
            value = stored.get(name, "")
            if value:
                out[name] = _relative(value, base, self)
        existing = stored.get("existing", [])
        if not isinstance(existing, list | tuple):
            raise ValueError(f"ModelCheckpoint(key={self.key!r}) state 'existing' is {existing!r:.80}, not a list")
        if existing:
            out["existing"] = [_relative(p, base, self) for p in existing]
        for name, ok in (
            ("best_score", lambda v: v is None or _number(v)),
            ("last_step", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
            ("last_time", lambda v: v is None or _number(v)),
        ):
            if name in stored and not ok(stored[name]):
                raise ValueError(f"ModelCheckpoint(key={self.key!r}) state {name!r} is {stored[name]!r:.80}")
        return out

    def format_checkpoint_name(
        self,
        state: TrainerState,
        ver: int | None = None,
        latest: Mapping[str, float] | None = None,
        filename: str | None = None,
    ) -> str:
        """The file name the template ``filename`` (default: the ``filename`` flag) gives at ``state``.

        With ``-v<ver>`` when given. ``latest``: metric values newer than ``state.metrics`` (the
        step's returned scalars).
        """
        values = _candidates(state, latest)
        template = self.filename if filename is None else filename

        def fill(match: re.Match[str]) -> str:
            name, spec = match.group(1), match.group(2) or ""
            text = format(values.get(name, 0), spec)
            named = template[: match.start()].endswith(f"{name}=")
            return text if named or not self.auto_insert_metric_name else f"{name}={text}"

        name = _PLACEHOLDER.sub(fill, template)
        return f"{name}{'' if ver is None else f'-v{ver}'}{self.FILE_EXTENSION}"

    # -- deciding ---------------------------------------------------------------------------
    def _epoch_due(self, state: TrainerState) -> bool:
        return bool(self.every_n_epochs) and (state.epoch + 1) % self.every_n_epochs == 0

    def _score(self, state: TrainerState, latest: Mapping[str, float] | None) -> tuple[bool, float | None]:
        """Whether a top-k save can be ranked now, and the score (``None`` without a monitor)."""
        if self.monitor is None:
            return True, None
        value = _candidates(state, latest).get(self.monitor)
        if value is None:
            return False, None
        value = float(value)
        if math.isnan(value):  # never better than a real value
            value = math.inf if self.mode == "min" else -math.inf
        return True, value

    def _check_monitor(self, state: TrainerState) -> None:
        """At an epoch end every metric has appeared once validation ran: a missing monitor is a mistake."""
        if self.monitor is None or self.monitor in _candidates(state):
            return
        validated = any(state.counts.get(n, 0) for n in getattr(self, "_val_ends", ()))
        if validated or self.monitor.startswith("train_"):
            raise self._missing_monitor(state)

    def _missing_monitor(self, state: TrainerState) -> Exception:
        """The error for a monitor no metric has, once one should (validation ran, or a ``train_`` name)."""
        return KeyError(
            f"ModelCheckpoint(monitor={self.monitor!r}) found no such metric; the metrics are "
            f"{sorted(state.metrics)}: return it from a step or fix 'monitor'"
        )

    def _better(self, a: float | None, b: float | None) -> bool:
        if a is None or b is None:
            return True
        return a < b if self.mode == "min" else a > b

    def _save(
        self, state: TrainerState, top_k: bool, latest: Mapping[str, float] | None = None, **extra: Any
    ) -> list[Update]:
        """Updates that save at this point: the top-k file when it qualifies, and ``last.ckpt``.

        ``latest``: metric values newer than ``state.metrics`` (a step save's returned scalars).

        The bookkeeping stores paths relative to the base (``checkpoints/epoch=0-step=8.ckpt``);
        the requests name the files under this run's base.
        """
        stored = self.stored(state)
        base = self._base(state)
        best_k: dict[str, float | None] = dict(stored.get("best_k", {}))
        replaced: list[str] = []
        saves: list[Update] = []
        values: dict[str, Any] = {"last_step": state.global_step, **extra}
        ranked, score = self._score(state, latest) if top_k and self.save_top_k != 0 else (False, None)
        if ranked:
            dropped: list[str] = []
            if self.monitor is None:
                dropped = list(best_k) if self.save_top_k == 1 else []
            elif self.save_top_k != -1 and len(best_k) >= self.save_top_k:
                worst = max(best_k, key=lambda p: _rank(best_k[p], self.mode))
                dropped = [worst] if self._better(score, best_k[worst]) else []
                ranked = bool(dropped)
            if ranked:
                path = self._free_path(state, best_k, dropped, stored.get("last", ""), latest)
                for old in dropped:
                    del best_k[old]
                    if old != path:
                        replaced.append(self._resolve(base, old))
                best_k[path] = score
                best = path if self.monitor is None else min(best_k, key=lambda p: _rank(best_k[p], self.mode))
                if self.verbose and self.monitor is not None:
                    _log.info(
                        "Epoch %d, global step %d: %r reached %.5f (best %.5f), saving model to %r as top %d",
                        state.epoch,
                        state.global_step,
                        self.monitor,
                        score,
                        best_k[best],
                        path,
                        self.save_top_k,
                    )
                values.update(best_k=best_k, best=best, best_score=best_k[best])
                saves.append(
                    SaveCheckpoint(
                        self._resolve(base, path), "top_k", tuple(replaced), weights_only=self.save_weights_only
                    )
                )
            elif self.verbose:
                _log.info(
                    "Epoch %d, global step %d: %r was not in top %d",
                    state.epoch,
                    state.global_step,
                    self.monitor,
                    self.save_top_k,
                )
        if self.save_last:
            last = self._last_path(state, latest)
            previous = str(stored.get("last", ""))
            gone = (self._resolve(base, previous),) if previous and previous != last and previous not in best_k else ()
            values["last"] = last
            saves.append(SaveCheckpoint(self._resolve(base, last), "last", gone, weights_only=self.save_weights_only))
        return [self.store(state, **values), *saves]

    def _last_path(self, state: TrainerState, latest: Mapping[str, float] | None) -> str:
        """``CHECKPOINT_NAME_LAST`` filled in (a template, as Lightning's), versioned past a file found at the start."""
        existing, previous = set(self.stored(state).get("existing", ())), self.stored(state).get("last", "")
        ver = 0
        while True:
            name = self.format_checkpoint_name(state, ver or None, latest, self.CHECKPOINT_NAME_LAST)
            path = posixpath.join(self._subdir, name)
            if not self.enable_version_counter or path not in existing or path == previous:
                return path
            ver += 1

    def _free_path(
        self,
        state: TrainerState,
        best_k: Mapping[str, Any],
        dropped: list[str],
        last: str,
        latest: Mapping[str, float] | None = None,
    ) -> str:
        """The formatted path (relative to the base), versioned (``-v1``...) when a kept checkpoint has it.

        ``enable_version_counter=False`` overwrites instead; without a monitor the latest file is
        overwritten, as Lightning does.
        """
        found = set(self.stored(state).get("existing", ()))  # files in the directory when the fit started
        taken = ((set(best_k) | found) - set(dropped)) | {last}
        if self.monitor is None:  # Lightning overwrites the latest file of the same name rather than version it
            taken.discard(self.stored(state).get("best", ""))
        path, ver = posixpath.join(self._subdir, self.format_checkpoint_name(state, latest=latest)), 0
        while path in taken and self.enable_version_counter:
            ver += 1
            path = posixpath.join(self._subdir, self.format_checkpoint_name(state, ver, latest))
        return path


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _relative(path: Any, base: str, owner: ModelCheckpoint) -> str:
    """``path`` as a normalised path relative to ``base``; ``ValueError`` when it leads outside ``base``.

    A relative path is resolved against ``base``; an absolute one (older checkpoints) must
    lie inside it. ``base`` is ``""`` when the run's directory is not known yet (a new run
    directory): then only a relative path that does not climb out (``../``) is kept.
    """
    who = f"ModelCheckpoint(key={owner.key!r})"
    if not isinstance(path, str) or not path:
        raise ValueError(f"{who} keeps the path {path!r}, which is not a non-empty str")
    root = os.path.abspath(base) if base else ""
    if root:
        full = os.path.normpath(os.path.join(root, path))
        if os.path.commonpath([root, full]) == root and full != root:
            return os.path.relpath(full, root).replace(os.sep, "/")
    else:
        full = posixpath.normpath(path.replace(os.sep, "/"))
        if not os.path.isabs(path) and full not in (".", "..") and not full.startswith("../"):
            return full
    where = f"the run directory it continues in ({base})" if base else "the new run directory it starts"
    kind = "absolute path" if os.path.isabs(path) else "path"
    raise ValueError(
        f"{who} keeps the {kind} {path!r}, which resolves to {full!r}, outside {where}; interlock writes and "
        "deletes only inside the run. Resume the checkpoint from inside the run that wrote it (RUN/checkpoints/), "
        "or give this ModelCheckpoint another key= to start its bookkeeping afresh"
    )


def _candidates(state: TrainerState, latest: Mapping[str, float] | None = None) -> dict[str, Any]:
    """What a monitor or a filename can name: the metrics, ``epoch`` and ``step`` (Lightning's monitor candidates).

    ``latest`` (the step's returned scalars) overrides ``state.metrics``, whose training values are the last epoch's.
    """
    return {"epoch": state.epoch, "step": state.global_step, **state.metrics, **(latest or {})}


def _returned(event: Event) -> dict[str, float]:
    """The scalars the training step returned (``train_loss``, ...): their values at this step.

    Lightning's ``self.log`` on step puts them in ``callback_metrics`` at once; interlock's
    ``state.metrics`` gets them at the epoch end. Read only at a save point (one device sync).
    """
    return scalars(event.payload.get("outputs"), "train")


def _validated_in_epoch(state: TrainerState) -> bool:
    """Whether validation ran in the current epoch (its rows are the history's latest)."""
    for row in reversed(state.history):
        if row.get("epoch") != state.epoch:
            return False
        if row.get("stage") == "val":
            return True
    return False


def _rank(score: float | None, mode: str) -> float:
    """Lower is better, whatever the mode."""
    if score is None:
        return math.inf
    return score if mode == "min" else -score
