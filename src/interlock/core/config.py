"""The trainer's flags, validated once, with Lightning's names."""

from __future__ import annotations

import math
from typing import Any, Protocol

import attrs

__all__ = ["TrainerConfig"]


def _bad(flag: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"Trainer({flag}={value!r}) is invalid: {allowed}")


def _int_at_least(low: int, *, none_ok: bool = False, extra: str = "") -> Any:
    def check(_: Any, a: attrs.Attribute[Any], v: Any) -> None:
        if v is None and none_ok:
            return
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise _bad(a.name, v, f"expected an int >= {low}{extra}")

    return check


def _limit(_: Any, a: attrs.Attribute[Any], v: Any) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _bad(a.name, v, "expected an int (number of batches) or a float in [0.0, 1.0] (fraction of batches)")
    if isinstance(v, float) and not 0.0 <= v <= 1.0:
        raise _bad(a.name, v, "a float limit is a fraction of the batches and must lie in [0.0, 1.0]")
    if isinstance(v, int) and v < 0:
        raise _bad(a.name, v, "an int limit is a number of batches and must be >= 0")


def _val_interval(_: Any, a: attrs.Attribute[Any], v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _bad(
            a.name, v, "expected an int (every N training batches) or a float in (0.0, 1.0] (fraction of an epoch)"
        )
    if isinstance(v, float) and not 0.0 < v <= 1.0:
        raise _bad(a.name, v, "a float is a fraction of the training epoch and must lie in (0.0, 1.0]")
    if isinstance(v, int) and v < 1:
        raise _bad(a.name, v, "an int is a number of training batches and must be >= 1")


def _choice(*choices: Any) -> Any:
    def check(_: Any, a: attrs.Attribute[Any], v: Any) -> None:
        if v not in choices:
            raise _bad(a.name, v, f"choose one of {', '.join(repr(c) for c in choices)}")

    return check


def _clip(_: Any, a: attrs.Attribute[Any], v: Any) -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < math.inf):
        raise _bad(a.name, v, "expected None or 0 (no clipping, as in Lightning) or a finite number > 0, such as 1.0")


def _max_epochs(_: Any, a: attrs.Attribute[Any], v: Any) -> None:
    if v is None:
        return
    if not isinstance(v, int) or isinstance(v, bool) or (v < 0 and v != -1):
        raise _bad(a.name, v, "expected None, -1 (no limit) or an int >= 0")


@attrs.frozen(kw_only=True)
class TrainerConfig:
    """Every loop setting of a :class:`~interlock.Trainer`, validated."""

    max_epochs: int | None = attrs.field(default=None, validator=_max_epochs)
    max_steps: int = attrs.field(default=-1, validator=_int_at_least(-1))
    limit_train_batches: int | float | None = attrs.field(default=None, validator=_limit)
    limit_val_batches: int | float | None = attrs.field(default=None, validator=_limit)
    limit_test_batches: int | float | None = attrs.field(default=None, validator=_limit)
    limit_predict_batches: int | float | None = attrs.field(default=None, validator=_limit)
    val_check_interval: int | float = attrs.field(default=1.0, validator=_val_interval)
    check_val_every_n_epoch: int | None = attrs.field(default=1, validator=_int_at_least(1, none_ok=True))
    num_sanity_val_steps: int = attrs.field(default=2, validator=_int_at_least(-1, extra=" (-1 runs the whole set)"))
    accumulate_grad_batches: int = attrs.field(default=1, validator=_int_at_least(1))
    gradient_clip_val: float | None = attrs.field(default=None, validator=_clip)
    gradient_clip_algorithm: str = attrs.field(default="norm", validator=_choice("norm", "value"))
    fast_dev_run: bool | int = attrs.field(default=False)
    min_epochs: int | None = attrs.field(default=None, validator=_int_at_least(0, none_ok=True))
    min_steps: int | None = attrs.field(default=None, validator=_int_at_least(0, none_ok=True))
    overfit_batches: int | float = attrs.field(default=0.0, validator=_limit)
    log_every_n_steps: int = attrs.field(default=50, validator=_int_at_least(0, extra=" (0: no per-step rows)"))
    reload_dataloaders_every_n_epochs: int = attrs.field(default=0, validator=_int_at_least(0, extra=" (0: never)"))

    def __attrs_post_init__(self) -> None:
        v = self.fast_dev_run
        if not isinstance(v, bool | int) or (not isinstance(v, bool) and v < 0):
            raise _bad("fast_dev_run", v, "expected a bool or an int >= 0 (number of batches)")
        if self.check_val_every_n_epoch is None and isinstance(self.val_check_interval, float):
            raise _bad(
                "val_check_interval",
                self.val_check_interval,
                "with check_val_every_n_epoch=None validation is counted in training batches across epochs, "
                "so val_check_interval must be an int (every N batches), as in Lightning; "
                "keep check_val_every_n_epoch=1 for a fraction of an epoch",
            )

    @property
    def epochs(self) -> int | None:
        """Epoch limit: ``None`` for no limit; Lightning's 1000 when neither limit is set."""
        if self.fast_dev_run:
            return 1
        if self.max_epochs is None:
            return None if self.max_steps != -1 else 1000
        return None if self.max_epochs == -1 else self.max_epochs

    def limit(self, stage: str) -> int | float | None:
        """The batch limit of a loop (``train``, ``val``, ``test``, ``predict``)."""
        if stage in ("train", "val") and self.overfit_batches > 0:
            return self.overfit_batches  # Lightning: it wins over limit_*_batches and fast_dev_run
        if self.fast_dev_run:
            return 1 if self.fast_dev_run is True else int(self.fast_dev_run)
        limit: int | float | None = getattr(self, f"limit_{stage}_batches")
        return limit

    @property
    def clip_val(self) -> float | None:
        """The value gradients are clipped at, or None: ``gradient_clip_val`` 0 clips nothing (Lightning's rule)."""
        return self.gradient_clip_val or None

    def can_stop(self, epochs_done: int, global_step: int) -> bool:
        """Whether a stop request may end the fit now: ``min_epochs`` and ``min_steps`` are reached (Lightning)."""
        if self.min_epochs and epochs_done < self.min_epochs:
            return False
        return not (self.min_steps and global_step < self.min_steps)

    @property
    def sanity_steps(self) -> int:
        return 0 if self.fast_dev_run else self.num_sanity_val_steps


#: TrainerConfig fields Lightning's Trainer has as attributes of the same name.
LIGHTNING_FIELDS = frozenset(
    {
        "max_steps", "val_check_interval", "check_val_every_n_epoch", "num_sanity_val_steps", "accumulate_grad_batches",
        "gradient_clip_val", "gradient_clip_algorithm", "fast_dev_run", "min_epochs", "min_steps", "overfit_batches",
        "log_every_n_steps", "reload_dataloaders_every_n_epochs",
    }
)  # fmt: skip

#: What Lightning's attributes read under ``fast_dev_run`` (its ``_init_debugging_flags``).
_FAST_DEV_RUN: dict[str, Any] = {"val_check_interval": 1.0, "check_val_every_n_epoch": 1, "fast_dev_run": None}


def lightning_flag(config: TrainerConfig, name: str, clip_algorithm: str | None) -> Any:
    """Lightning's ``trainer.<name>`` for a flag (``limit_val_batches``, ``num_sanity_val_steps``, ...), as it reads.

    ``clip_algorithm`` is what the user passed as ``gradient_clip_algorithm`` (Lightning keeps ``None``).
    Raises ``AttributeError`` for a name that is not one.
    """
    if name.startswith("limit_") and name.endswith("_batches") and name != "limit_batches":
        limit = config.limit(name[len("limit_") : -len("_batches")])
        return 1.0 if limit is None else limit
    if name == "num_sanity_val_steps":
        steps = config.sanity_steps
        return float("inf") if steps == -1 else steps
    fast = config.fast_dev_run
    if fast and name in _FAST_DEV_RUN:
        if name == "fast_dev_run":
            return True if fast == 1 else fast
        return _FAST_DEV_RUN[name]
    if name == "gradient_clip_algorithm":
        return clip_algorithm
    if name in LIGHTNING_FIELDS:
        return getattr(config, name)
    raise AttributeError(name)


def filled_min_epochs(config: TrainerConfig) -> int:
    """``min_epochs`` as Lightning fills it for a fit: the flag, else 1 with ``min_steps``, else 0."""
    if config.min_epochs is not None:
        return config.min_epochs
    return 1 if config.min_steps is not None else 0


class _Ranks(Protocol):
    @property
    def world_size(self) -> int: ...
    @property
    def global_rank(self) -> int: ...
    @property
    def num_devices(self) -> int: ...


class NodeLayout:
    """``num_nodes`` and ``node_rank`` from ``world_size``, ``global_rank`` and ``num_devices`` (devices per node)."""

    __slots__ = ()

    @property
    def num_nodes(self: _Ranks) -> int:
        return max(1, self.world_size // max(1, self.num_devices))

    @property
    def node_rank(self: _Ranks) -> int:
        return self.global_rank // max(1, self.num_devices)
