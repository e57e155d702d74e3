"""``ModelSummary``: a module's layers, parameter counts, size and FLOPs (Lightning's).

The numbers are Lightning's (``layer_names``, ``layer_types``, ``param_nums``, ``total_parameters``,
``trainable_parameters``, ``model_size`` at 32 bits, ``training_modes``, ``total_flops``, and with an
``example_input_array`` the ``in_sizes`` and ``out_sizes`` of a forward pass of it).
``str()`` is the table the ``ModelSummary`` listener prints (``interlock.core.summary``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from torch import nn

from interlock.core.summary import ModuleSummary, check_max_depth, describe, human_count

__all__ = ["ModelSummary", "get_human_readable_count", "summarize"]

get_human_readable_count = human_count


class ModelSummary:
    """The layers of ``model`` down to ``max_depth`` (1: its children; -1: every module; 0: none)."""

    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        self._model, self._max_depth = model, check_max_depth("ModelSummary", max_depth)

    @property
    def named_modules(self) -> list[tuple[str, nn.Module]]:
        if self._max_depth == 0:
            return []
        if self._max_depth == 1:
            return list(self._model.named_children())
        deep = list(self._model.named_modules())[1:]
        if self._max_depth == -1:
            return deep
        return [(name, m) for name, m in deep if name.count(".") < self._max_depth]

    @property
    def layer_names(self) -> list[str]:
        return [name for name, _ in self.named_modules]

    @property
    def layer_types(self) -> list[str]:
        return [type(m).__name__ for _, m in self.named_modules]

    @property
    def param_nums(self) -> list[int]:
        return [_count(m) for _, m in self.named_modules]

    @property
    def training_modes(self) -> list[bool]:
        return [m.training for _, m in self.named_modules]

    @property
    def total_training_modes(self) -> dict[str, int]:
        modes = [m.training for m in list(self._model.modules())[1:]]
        return {"train": modes.count(True), "eval": modes.count(False)}

    @property
    def total_parameters(self) -> int:
        return _count(self._model)

    @property
    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self._model.parameters() if p.requires_grad and not _lazy(p))

    @property
    def total_layer_params(self) -> int:
        return sum(self.param_nums)

    @property
    def in_sizes(self) -> list[Any]:
        """Each layer's input size in the pass of ``example_input_array`` (``"?"``: not called, or no input)."""
        return self._sizes(0)

    @property
    def out_sizes(self) -> list[Any]:
        """Each layer's output size in that pass."""
        return self._sizes(1)

    @property
    def total_flops(self) -> int:
        """The FLOPs of that pass (0 without an ``example_input_array``)."""
        return self._described.total_flops

    @cached_property
    def _described(self) -> ModuleSummary:
        """The module read once (with one pass of its ``example_input_array``), as Lightning's summary reads it."""
        return describe(self._model)

    def _sizes(self, which: int) -> list[Any]:
        described = self._described
        by_name = dict(zip((r[0] for r in described.rows), described.sizes or (), strict=False))
        return [by_name[name][which] if name in by_name else "?" for name in self.layer_names]

    @property
    def model_size(self) -> float:
        """Megabytes of the parameters at 32 bits each (Lightning's estimate without a trainer)."""
        return self.total_parameters * 4e-6

    def __str__(self) -> str:
        return self._described.table(self._max_depth)

    def __repr__(self) -> str:
        return str(self)


def summarize(lightning_module: nn.Module, max_depth: int = 1) -> ModelSummary:
    """``ModelSummary(lightning_module, max_depth)``."""
    return ModelSummary(lightning_module, max_depth=max_depth)


def _lazy(p: nn.Parameter) -> bool:
    return isinstance(p, nn.parameter.UninitializedParameter)


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if not _lazy(p))


#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
