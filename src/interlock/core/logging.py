"""``self.log``: what a module logs, Lightning's per-hook defaults, and the updates it becomes.

The module buffers :class:`LogEntry` values; the action that called the step or hook
takes them (:func:`take`) and returns updates: a :class:`~interlock.core.updates.LogMetrics`
for step-level values and an :class:`AddLogged` for epoch-level ones, whose running
reductions live in ``state.logged`` (so a run saved mid-epoch resumes them exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import attrs
import torch

from interlock.core import reduce32
from interlock.core.state import TrainerState, freeze
from interlock.core.updates import Change, LogMetrics, Update

__all__ = [
    "DEFAULTS", "AddLogged", "EpochLogged", "LogEntry", "RestoreMetrics", "check_reduce", "epoch_values",
    "is_metric", "is_metric_collection", "refuse_logs", "scalars", "take",
]  # fmt: skip

_REDUCE = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}
_TORCH_REDUCE = {torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min"}

_STEP = (True, False)  # default on_step, on_epoch
_EPOCH = (False, True)
_EPOCH_ONLY = (False, True, True)  # on_step not allowed
#: Lightning 2.6.6's defaults per hook (``_FxValidator``): (on_step, on_epoch[, epoch only]); absent: no logging.
DEFAULTS: dict[str, tuple[bool, ...]] = {
    **dict.fromkeys(
        ("training_step", "on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward",
         "on_before_optimizer_step", "on_before_zero_grad"), _STEP,
    ),
    **dict.fromkeys(
        ("validation_step", "test_step", "on_validation_batch_start", "on_validation_batch_end",
         "on_test_batch_start", "on_test_batch_end"), _EPOCH,
    ),
    **dict.fromkeys(
        ("on_train_start", "on_train_epoch_start", "on_train_epoch_end", "on_validation_start",
         "on_validation_epoch_start", "on_validation_epoch_end", "on_test_start", "on_test_epoch_start",
         "on_test_epoch_end"), _EPOCH_ONLY,
    ),
}  # fmt: skip


def check_reduce(name: str, reduce_fx: str | Callable[..., Any]) -> str:
    """``"mean"``, ``"sum"``, ``"max"`` or ``"min"`` for ``reduce_fx`` (a name or ``torch.mean``...)."""
    if isinstance(reduce_fx, str) and reduce_fx.lower() in _REDUCE:
        return _REDUCE[reduce_fx.lower()]
    if callable(reduce_fx) and reduce_fx in _TORCH_REDUCE:
        return _TORCH_REDUCE[reduce_fx]
    raise ValueError(
        f"self.log({name!r}, reduce_fx={reduce_fx!r}): only 'mean', 'sum', 'max', 'min' (or torch.mean, torch.sum, "
        "torch.max, torch.min) are supported, as in Lightning"
    )


@attrs.define(slots=True)
class LogEntry:
    """One ``self.log`` call, as buffered on the module."""

    name: str
    value: Any
    on_step: bool | None
    on_epoch: bool | None
    reduce: str
    prog_bar: bool
    logger: bool
    sync_dist: bool
    batch_size: int | None
    #: add Lightning's ``/dataloader_idx_N`` with several evaluation loaders (``add_dataloader_idx``)
    add_idx: bool = True


def check_log_options(
    module: Any, name: str, value: Any, enable_graph: bool, group: Any, add_idx: bool, attribute: str | None
) -> None:
    """Refuse the ``self.log`` options interlock cannot honour, naming what to do instead (as Lightning's checks)."""
    if enable_graph:
        raise ValueError(
            f"self.log({name!r}, enable_graph=True): interlock reads a logged value as a number when the step "
            "returns, so no graph is kept; keep the tensor yourself (e.g. self.last_value = value) to use its graph"
        )
    if group is not None:
        raise ValueError(
            f"self.log({name!r}, sync_dist_group=...): sync_dist averages over every process; for a subgroup, "
            "reduce the value first (torch.distributed.all_reduce(value, group=group)) and log it without sync_dist"
        )
    if add_idx and "/dataloader_idx_" in name:
        raise ValueError(
            f"self.log({name!r}): the name must not contain '/dataloader_idx_' with add_dataloader_idx=True (the "
            "default adds it); log the bare name, or pass add_dataloader_idx=False to keep yours (as in Lightning)"
        )
    if attribute is not None:
        found = [n for n, m in module.named_modules() if is_metric(m)]
        if not is_metric(value) or getattr(module, attribute, None) is not value:
            raise ValueError(
                f"self.log({name!r}, metric_attribute={attribute!r}) names the module attribute holding the logged "
                f"torchmetrics Metric; the module's metrics are {found}"
            )


@attrs.frozen
class RestoreMetrics(Change):
    """Put back the metrics and where each goes as they were (what the sanity check logged is dropped, Lightning's)."""

    metrics: Mapping[str, float] = attrs.field(converter=freeze)
    prog_bar: Mapping[str, bool] = attrs.field(converter=freeze)
    to_loggers: Mapping[str, bool] = attrs.field(converter=freeze)
    to_callbacks: Mapping[str, bool] = attrs.field(converter=freeze)

    @classmethod
    def of(cls, state: TrainerState) -> RestoreMetrics:
        """The update that restores ``state``'s metrics."""
        return cls(state.metrics, state.prog_bar, state.to_loggers, state.to_callbacks)

    def changes(self, state: TrainerState) -> dict[str, Any]:
        return {
            "metrics": self.metrics,
            "prog_bar": self.prog_bar,
            "to_loggers": self.to_loggers,
            "to_callbacks": self.to_callbacks,
        }


@attrs.frozen
class AddLogged(Change):
    """Fold epoch-level logged values into ``state.logged`` (``items`` empty and ``clear``: drop a loop's).

    ``keep_every``: the clear keeps what the evaluation's epoch hooks logged (it belongs to every loader).
    """

    items: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    clear: str = ""
    keep_every: bool = False

    def changes(self, state: TrainerState) -> dict[str, Any]:
        logged = dict(state.logged)
        if self.clear:
            prefix, keep = f"{self.clear}/", self.keep_every
            logged = {k: v for k, v in logged.items() if not k.startswith(prefix) or (keep and v.get("every_loader"))}
        for key, new in self.items:
            old = logged.get(key)
            if old is None:
                logged[key] = new
                continue
            value, weight, how = old["value"], old["weight"], new["reduce"]
            if how == "metric":
                continue  # the metric object accumulates itself
            if how in {"mean", "sum"}:
                value = reduce32.add(value, new["value"], bool(new.get("f64")))
            elif how == "max":
                value = max(value, new["value"])
            else:
                value = min(value, new["value"])
            logged[key] = {**new, "value": value, "weight": weight + new["weight"]}
        return {"logged": logged}


def _float(name: str, value: Any) -> float:
    return float(value.item()) if isinstance(value, torch.Tensor) else float(value)


def is_metric(value: Any) -> bool:
    """A torchmetrics ``Metric`` (told by its protocol: ``update``/``compute``/``reset`` and a forward cache)."""
    return all(hasattr(value, a) for a in ("update", "compute", "reset", "_forward_cache"))


def is_metric_collection(value: Any) -> bool:
    """A torchmetrics ``MetricCollection`` (named metrics; ``log_dict`` logs each)."""
    return type(value).__name__ == "MetricCollection" and callable(getattr(value, "items", None))


def _step_value(name: str, metric: Any) -> float:
    cached = metric._forward_cache
    if cached is None:
        raise ValueError(
            f"self.log({name!r}, metric) on step logs the metric's value for the batch, but it was not called on one: "
            "call it (metric(preds, target)) before logging it, or log it with on_step=False (compute() at epoch end)"
        )
    return _float(name, cached)


def refuse_logs(module: Any, fx: str) -> None:
    """Raise, as :func:`take` does, when ``fx`` (a method no loop takes logs from) called ``self.log``.

    ``configure_optimizers``, ``on_save_checkpoint``, ``on_load_checkpoint``: Lightning refuses ``self.log``
    there; left in the buffer, the values would be taken by the next step or hook under its name.
    """
    logs = getattr(module, "__dict__", {}).get("_interlock_logs")
    if logs:
        names = sorted({e.name for e in logs})
        logs.clear()
        raise _not_here(fx, names)


def _not_here(fx: str, names: Sequence[str] = ()) -> RuntimeError:
    """Lightning's refusal of ``self.log`` inside ``fx`` (``names``: what was logged there)."""
    return RuntimeError(
        f"self.log({', '.join(map(repr, names))}) inside {fx} is not supported (as in Lightning); log from a step "
        "or an epoch hook instead"
    )


def _check_repeats(entries: Sequence[LogEntry], fx: str) -> None:
    """Lightning's error for one name logged twice in one call of ``fx`` with different options (values may differ)."""
    options: dict[str, tuple[Any, ...]] = {}
    for e in entries:
        mine = (e.on_step, e.on_epoch, e.reduce, e.prog_bar, e.logger, e.sync_dist, e.add_idx)
        if options.setdefault(e.name, mine) != mine:
            raise ValueError(
                f"You called `self.log({e.name}, ...)` twice in `{fx}` with different arguments. This is not allowed "
                "(as in Lightning): log it once, or under two names"
            )


def take(
    logs: list[LogEntry],
    fx: str,
    loop: str,
    infer: Callable[[], int] | None = None,
    sink: dict[str, float] | None = None,
    suffix: str = "",
) -> list[Update]:
    """The updates for what was logged in ``fx`` (``loop``: ``train`` or ``eval``); empties ``logs``.

    ``infer`` gives the batch size of the batch in flight (a mean's weight when ``batch_size`` is not given).
    ``sink``, when given, receives the step-level values meant for the loggers (``logger=True``) under the
    names Lightning's loggers get (``<name>_step`` when also logged on epoch). ``suffix`` ends every step-level
    name (``/dataloader_idx_N`` in an evaluation loop with several loaders, as Lightning names them).
    """
    entries, logs[:] = list(logs), []
    defaults = DEFAULTS.get(fx)
    if defaults is None:
        raise _not_here(fx, sorted({e.name for e in entries}))
    if len(entries) > 1:
        _check_repeats(entries, fx)
    step_metrics: dict[str, float] = {}
    shown: dict[str, bool] = {}
    loggers: dict[str, bool] = {}
    items: list[tuple[str, Mapping[str, Any]]] = []
    inferred: int | None = None
    for e in entries:
        on_step = defaults[0] if e.on_step is None else e.on_step
        on_epoch = defaults[1] if e.on_epoch is None else e.on_epoch
        if on_step and len(defaults) > 2:
            raise ValueError(f"self.log({e.name!r}, on_step=True) is not allowed in {fx}; it runs once an epoch")
        metric = is_metric(e.value)
        f64 = isinstance(e.value, torch.Tensor) and e.value.dtype == torch.float64  # else float32, as Lightning
        if metric:
            value = _step_value(e.name, e.value) if on_step else 0.0
        else:
            value = reduce32.cast(_float(e.name, e.value), f64)
        tail = suffix if e.add_idx else ""
        if on_step:
            key = (f"{e.name}_step" if on_epoch else e.name) + tail
            step_metrics[key], shown[key], loggers[key] = value, e.prog_bar, e.logger
            if sink is not None and e.logger:
                sink[key] = value
            if on_epoch:  # Lightning's callback_metrics: the bare name is the latest value (not a bar's or a logger's)
                bare = e.name + tail
                step_metrics[bare], shown[bare], loggers[bare] = value, False, False
        if on_epoch and metric:  # the epoch value is the metric's compute() at the epoch end, then reset()
            row = {
                "name": f"{e.name}_epoch" if on_step else e.name, "reduce": "metric", "value": 0.0, "weight": 0.0,
                "sync_dist": False, "prog_bar": e.prog_bar, "logger": e.logger, "forked": e.name if on_step else None,
                "metric": e.name,
            }  # fmt: skip
        elif metric:  # logged on step only: still reset at the epoch end (Lightning's)
            row = {
                "name": e.name, "reduce": "metric", "value": 0.0, "weight": 0.0, "sync_dist": False,
                "prog_bar": e.prog_bar, "logger": e.logger, "forked": None, "metric": e.name, "step_only": True,
            }  # fmt: skip
        elif on_epoch:
            n = e.batch_size
            if n is None and e.reduce == "mean":
                if inferred is None:
                    inferred = infer() if infer is not None else 1
                n = inferred
            weight = float(n or 1)
            row = {
                "name": f"{e.name}_epoch" if on_step else e.name,
                "reduce": e.reduce,
                "value": reduce32.mul(value, weight, f64) if e.reduce == "mean" else value,
                "weight": weight,
                "f64": f64,
                "sync_dist": e.sync_dist,
                "prog_bar": e.prog_bar,
                "logger": e.logger,
                "forked": e.name if on_step else None,
            }
        else:
            continue
        if loop == "eval" and len(defaults) > 2:  # an evaluation's epoch hook: every loader's (Lightning's)
            row = {**row, "add_idx": False, "every_loader": True}
        elif not e.add_idx:
            row = {**row, "add_idx": False}
        items.append((f"{loop}/{e.name}", row))
    out: list[Update] = []
    if step_metrics:  # an evaluation's step values go to the bar and the loggers, not to callbacks (Lightning's)
        callbacks = dict.fromkeys(step_metrics, False) if loop == "eval" else {}
        out.append(LogMetrics(step_metrics, shown, loggers, callbacks))
    if items:
        out.append(AddLogged(tuple(items)))
    return out


class EpochLogged(NamedTuple):
    """A loop's epoch-level logged values, by name, and what each name is for."""

    values: dict[str, float]
    #: the names to average over processes (``sync_dist=True``)
    sync: set[str]
    #: the names kept from the loggers (``logger=False``, and the bare name of one logged on step and epoch)
    hidden: set[str]
    #: whether the progress bar shows each name (``prog_bar``; the bare name of a forked one: no)
    shown: dict[str, bool]
    #: the names that get no ``/dataloader_idx_N`` with several loaders (``add_dataloader_idx=False``)
    plain: frozenset[str] = frozenset()
    #: the names logged in an evaluation's epoch hook: no loader's, so in every loader's results (Lightning's)
    every: frozenset[str] = frozenset()

    def loader_name(self, name: str, idx: int) -> str:
        """``name`` as logged for evaluation loader ``idx`` of several: Lightning's ``/dataloader_idx_N`` added."""
        return name if name in self.plain else f"{name}/dataloader_idx_{idx}"

    def for_loader(self, idx: int) -> EpochLogged:
        """These values named for evaluation loader ``idx`` of several (:meth:`loader_name`)."""
        values = {self.loader_name(k, idx): v for k, v in self.values.items()}
        hidden = {self.loader_name(k, idx) for k in self.hidden}
        shown = {self.loader_name(k, idx): v for k, v in self.shown.items()}
        return self._replace(values=values, hidden=hidden, shown=shown)

    @property
    def to_loggers(self) -> dict[str, bool]:
        """Whether the loggers get each name (``state.to_loggers``)."""
        return {k: k not in self.hidden for k in self.values}

    def returned(self, metrics: Mapping[str, float], state: TrainerState) -> dict[str, bool]:
        """``{name: False}`` for the names in ``metrics`` the module never logged (scalars a step returned).

        Lightning's ``callback_metrics`` leave those out (``LogMetrics(to_callbacks=...)``); a name logged
        on step is in ``state.to_loggers``, one logged on epoch in :attr:`values`.
        """
        return {k: False for k in metrics if k not in self.values and k not in state.to_loggers}


def epoch_values(state: TrainerState, loop: str, computed: Mapping[str, float] | None = None) -> EpochLogged:
    """``loop``'s epoch-level logged values, with the names to sync, keep from loggers and show on the bar.

    ``computed`` holds the epoch values of logged torchmetrics metrics (their ``compute()``), by logged name.
    """
    values: dict[str, float] = {}
    sync: set[str] = set()
    hidden: set[str] = set()
    shown: dict[str, bool] = {}
    plain: set[str] = set()
    every: set[str] = set()
    prefix = f"{loop}/"
    for key, row in state.logged.items():
        if not key.startswith(prefix):
            continue
        name = str(row["name"])
        value = float(row["value"])
        if row["reduce"] == "metric":
            if row.get("step_only") or computed is None or row["metric"] not in computed:
                continue
            value = computed[row["metric"]]
        elif row["reduce"] == "mean":
            value = reduce32.div(value, float(row["weight"]), bool(row.get("f64")))
        values[name], shown[name] = value, bool(row["prog_bar"])
        if row.get("add_idx") is False:
            plain.update((name, str(row.get("forked") or name)))
        if row.get("every_loader"):
            every.add(name)
        if row["sync_dist"]:
            sync.add(name)
        if not row["logger"]:
            hidden.add(name)
        forked = row.get("forked")
        if forked:  # logged on step and epoch: at the epoch end the bare name is the epoch value (not a logger row)
            values[str(forked)], shown[str(forked)] = value, False
            hidden.add(str(forked))
            if row["sync_dist"]:
                sync.add(str(forked))
    return EpochLogged(values, sync, hidden, shown, frozenset(plain), frozenset(every))


def scalars(outputs: Any, prefix: str) -> dict[str, float]:
    """Every scalar in a step's outputs as a float metric named ``<prefix>_<key>``.

    This syncs with the device (``.item()``): the loops call it once per epoch for
    training and once per batch for evaluation, never per training step (ModelCheckpoint
    calls it at its step save points only).
    """
    if outputs is None:
        return {}
    items = {"loss": outputs} if isinstance(outputs, torch.Tensor) else dict(outputs)
    out: dict[str, float] = {}
    for key, value in items.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            value = value.detach().item()
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        name = key if key.startswith(f"{prefix}_") else f"{prefix}_{key}"
        out[name] = float(value)
    return out
