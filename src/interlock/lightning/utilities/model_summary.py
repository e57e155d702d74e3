"""``ModelSummary``: a module's layers, parameter counts and size (Lightning's, without the forward-pass columns).

The numbers are Lightning's (``layer_names``, ``layer_types``, ``param_nums``, ``total_parameters``,
``trainable_parameters``, ``model_size`` at 32 bits, ``training_modes``); the input/output sizes and
FLOPs, which Lightning measures with a forward pass of ``example_input_array``, are not computed.
"""

from __future__ import annotations

from torch import nn

__all__ = ["ModelSummary", "summarize"]


class ModelSummary:
    """The layers of ``model`` down to ``max_depth`` (1: its children; -1: every module; 0: none)."""

    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        if not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < -1:
            raise ValueError(f"ModelSummary(max_depth={max_depth!r}): use -1 (all), 0 (none) or a depth > 0")
        self._model, self._max_depth = model, max_depth

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
    def model_size(self) -> float:
        """Megabytes of the parameters at 32 bits each (Lightning's estimate without a trainer)."""
        return self.total_parameters * 4e-6

    def __str__(self) -> str:
        rows = [
            (str(i), name, kind, f"{n:,}", "train" if mode else "eval")
            for i, (name, kind, n, mode) in enumerate(
                zip(self.layer_names, self.layer_types, self.param_nums, self.training_modes, strict=True)
            )
        ]
        head = ("", "Name", "Type", "Params", "Mode")
        widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]
        line = lambda r: " | ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True))  # noqa: E731
        rule = "-" * len(line(head))
        modes = self.total_training_modes
        totals = [
            f"{self.trainable_parameters:,}  Trainable params",
            f"{self.total_parameters - self.trainable_parameters:,}  Non-trainable params",
            f"{self.total_parameters:,}  Total params",
            f"{self.model_size:,.3f}  Total estimated model params size (MB)",
            f"{modes['train']}  Modules in train mode",
            f"{modes['eval']}  Modules in eval mode",
        ]
        return "\n".join([line(head), rule, *(line(r) for r in rows), rule, *totals])

    def __repr__(self) -> str:
        return str(self)


def summarize(lightning_module: nn.Module, max_depth: int = 1) -> ModelSummary:
    """``ModelSummary(lightning_module, max_depth)``."""
    return ModelSummary(lightning_module, max_depth=max_depth)


def _lazy(p: nn.Parameter) -> bool:
    return isinstance(p, nn.parameter.UninitializedParameter)


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if not _lazy(p))
