"""The learning-rate finder: Lightning's ``Tuner.lr_find`` sweep on a copy of the trainer, weights restored.

:func:`lr_find` fits the module for ``num_training`` optimizer steps on a trainer made from the
given one's flags, with the :class:`~interlock.listeners.lr_finder.LRSweep` listener alone (no
checkpoints, loggers, bar or sanity check, as Lightning's finder runs). It then puts back the
module's weights (and training mode): the optimizers are made again by the next ``fit``, so
nothing of the sweep remains. The rates and smoothed losses are returned in an :class:`LRFinder`
and plotted to ``lr_find.svg`` in the sweep's run directory (with matplotlib when it is
installed, else as an SVG written here).
"""

from __future__ import annotations

import json
import logging
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from interlock.core.config import TrainerConfig
from interlock.core.modes import restore_modes, training_modes
from interlock.listeners.lr_finder import LRSweep
from interlock.trainer.trainer import Trainer

__all__ = ["LRFinder", "lr_find", "set_lr_attr"]

_log = logging.getLogger(__name__)
PLOT = "lr_find.svg"


class LRFinder:
    """What a sweep found: ``results`` (``{"lr": [...], "loss": [...]}``) and :meth:`suggestion`."""

    def __init__(
        self, mode: str, min_lr: float, max_lr: float, num_training: int, results: dict[str, list[float]], run_dir: str
    ) -> None:
        self.mode, self.lr_min, self.lr_max, self.num_training = mode, min_lr, max_lr, num_training
        self.results = results
        self.run_dir = run_dir
        self._optimal_idx: int | None = None

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The rate where the smoothed loss falls fastest (Lightning's: the steepest negative gradient).

        ``skip_begin``/``skip_end`` points at either end are left out; ``None`` (and an error logged) when
        fewer than two finite losses remain.
        """
        losses = torch.tensor(self.results["loss"][skip_begin:-skip_end])
        lrs = torch.tensor(self.results["lr"][skip_begin:-skip_end])
        finite = torch.isfinite(losses)
        losses, lrs = losses[finite], lrs[finite]
        if len(losses) < 2:
            _log.error(
                "the learning-rate finder has too few points for a suggestion; raise num_training or give more "
                "training batches (limit_train_batches, max_epochs)"
            )
            self._optimal_idx = None
            return None
        gradients = torch.gradient(losses, spacing=[lrs])[0]
        steepest = int(torch.argmin(gradients).item())
        kept = torch.arange(len(self.results["loss"]))[skip_begin:-skip_end][finite]
        self._optimal_idx = int(kept[steepest].item())
        return self.results["lr"][self._optimal_idx]

    def plot(self, path: str | os.PathLike[str] | None = None, suggest: bool = True) -> Path:
        """Draw loss against rate (log scale when exponential) to ``path`` (default: the run's ``lr_find.svg``)."""
        target = Path(path) if path is not None else Path(self.run_dir) / PLOT
        target.parent.mkdir(parents=True, exist_ok=True)
        best = self.suggestion() if suggest else None
        try:
            import matplotlib  # type: ignore[import-not-found,unused-ignore]

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            target.write_text(_svg(self.results, self.mode == "exponential", self._optimal_idx if best else None))
            return target
        fig, ax = plt.subplots()
        ax.plot(self.results["lr"], self.results["loss"])
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if best is not None and self._optimal_idx is not None:
            i = self._optimal_idx
            ax.plot(self.results["lr"][i], self.results["loss"][i], markersize=10, marker="o", color="red")
        fig.savefig(target)
        plt.close(fig)
        return target


def _svg(results: Mapping[str, list[float]], log_x: bool, mark: int | None) -> str:
    """A plain SVG line plot of the finite (rate, loss) points, the suggestion marked in red."""
    points = [
        (lr, loss)
        for lr, loss in zip(results["lr"], results["loss"], strict=True)
        if math.isfinite(loss) and lr > 0 and (not log_x or lr > 0)
    ]
    width, height, pad = 640, 400, 60
    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">'
    if not points:
        return head + f'<text x="{pad}" y="{height / 2}">no finite loss to plot</text></svg>\n'

    def fx(lr: float) -> float:
        return math.log10(lr) if log_x else lr

    xs, ys = [fx(p[0]) for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = (width - 2 * pad) / ((x1 - x0) or 1.0)
    sy = (height - 2 * pad) / ((y1 - y0) or 1.0)

    def at(lr: float, loss: float) -> tuple[float, float]:
        return pad + (fx(lr) - x0) * sx, height - pad - (loss - y0) * sy

    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (at(*p) for p in points))
    scale = "log" if log_x else "linear"
    parts = [
        head,
        f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" fill="none" stroke="#999"/>',
        f'<polyline points="{line}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>',
        f'<text x="{width / 2}" y="{height - 15}" text-anchor="middle">Learning rate ({scale})</text>',
        f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" text-anchor="middle">Loss</text>',
        f'<text x="{pad}" y="{height - pad + 16}" font-size="11">{points[0][0]:.3g}</text>',
        f'<text x="{width - pad}" y="{height - pad + 16}" font-size="11" text-anchor="end">{points[-1][0]:.3g}</text>',
        f'<text x="{pad - 4}" y="{pad + 4}" font-size="11" text-anchor="end">{y1:.3g}</text>',
        f'<text x="{pad - 4}" y="{height - pad}" font-size="11" text-anchor="end">{y0:.3g}</text>',
    ]
    if mark is not None:
        lr, loss = results["lr"][mark], results["loss"][mark]
        x, y = at(lr, loss)
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="red"><title>suggested lr {lr:.3g}</title></circle>'
        )
    parts.append("</svg>\n")
    return "\n".join(parts)


def _flags(source: Trainer | TrainerConfig | Mapping[str, Any]) -> dict[str, Any]:
    """Trainer keyword arguments that rebuild ``source``'s loop flags, hardware, seed and root."""
    if isinstance(source, Trainer):
        hw = source.hardware
        return {
            **attrs.asdict(source.config),
            "accelerator": hw.accelerator.name,
            "devices": list(hw.devices),
            "strategy": hw.strategy.name,
            "precision": hw.precision.flag,
            "seed": source.seed,
            "default_root_dir": source.root,
        }
    if isinstance(source, TrainerConfig):
        return attrs.asdict(source)
    if isinstance(source, Mapping):
        return dict(source)
    raise TypeError(
        f"lr_find(trainer_or_config={source!r:.80}): pass an interlock.Trainer, a TrainerConfig or a mapping of "
        "Trainer arguments"
    )


def _lr_attr(module: Any, attr_name: str) -> str:
    """Lightning's choice of the attribute to update: ``attr_name``, else ``lr`` or ``learning_rate``."""
    hparams = getattr(module, "hparams", None) or {}
    names = [attr_name] if attr_name else ["lr", "learning_rate"]
    for name in names:
        if hasattr(module, name) or name in hparams:
            return name
    raise AttributeError(
        f"lr_find(update_attr=True) found no {' or '.join(repr(n) for n in names)} attribute in "
        f"{type(module).__name__} or its hparams; add one, or pass attr_name= (or update_attr=False)"
    )


def lr_find(
    trainer_or_config: Trainer | TrainerConfig | Mapping[str, Any],
    module: Any,
    train_dataloaders: Any = None,
    val_dataloaders: Any = None,
    datamodule: Any = None,
    *,
    min_lr: float = 1e-8,
    max_lr: float = 1.0,
    num_training: int = 100,
    mode: str = "exponential",
    early_stop_threshold: float | None = 4.0,
    update_attr: bool = False,
    attr_name: str = "",
) -> LRFinder | None:
    """Sweep the learning rate from ``min_lr`` to ``max_lr`` over ``num_training`` steps (Lightning's algorithm).

    Returns an :class:`LRFinder` (``.results``, ``.suggestion()``, ``.plot()``; the plot is already
    written to ``lr_find.svg`` in ``.run_dir``), or ``None`` under ``fast_dev_run`` (as Lightning). The
    module's weights and training mode are restored afterwards. ``update_attr=True`` sets the module's
    ``lr``/``learning_rate`` (or ``attr_name``) to the suggestion.
    """
    flags = _flags(trainer_or_config)
    sweep = LRSweep(
        min_lr, max_lr, num_training, mode, early_stop_threshold, int(flags.get("accumulate_grad_batches", 1))
    )
    if flags.get("fast_dev_run"):
        warnings.warn("the learning-rate finder is skipped under fast_dev_run (as in Lightning)", stacklevel=2)
        return None
    name = _lr_attr(module, attr_name) if update_attr else ""
    flags.update(
        max_steps=num_training,
        limit_val_batches=num_training,
        num_sanity_val_steps=0,
        listeners=[sweep],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_trace=False,
    )
    trainer = Trainer(**flags)
    saved = {k: v.detach().clone() for k, v in module.state_dict().items()}
    modes = training_modes(module)  # each part's own mode: a frozen backbone stays frozen
    try:
        trainer.fit(module, train_dataloaders, val_dataloaders, datamodule=datamodule)
    finally:
        module.load_state_dict(saved)
        restore_modes(modes)
    state = trainer.state
    if state.global_step != num_training:
        _log.info("the learning-rate finder stopped after %d steps: the loss diverged", state.global_step)
    finder = LRFinder(mode, min_lr, max_lr, num_training, sweep.results(state), state.run_dir)
    if state.run_dir:
        finder.plot()
        (Path(state.run_dir) / "lr_find.json").write_text(
            json.dumps({**finder.results, "suggestion": finder.suggestion()}, allow_nan=True) + "\n"
        )
    if name:
        lr = finder.suggestion()
        if lr is not None:
            set_lr_attr(module, name, lr)
    return finder


def set_lr_attr(module: Any, name: str, lr: float) -> None:
    """Set the module's attribute ``name`` (else its ``hparams[name]``) to ``lr``, as Lightning's finder does."""
    if hasattr(module, name):
        setattr(module, name, lr)
    else:
        module.hparams[name] = lr
    _log.info("learning rate set to %s", lr)
