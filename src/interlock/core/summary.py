"""A module's layer table as plain data, and Lightning's text of it (``ModelSummary``).

:func:`describe` reads a module once into a :class:`ModuleSummary` (every submodule's name,
type, parameter count and mode, the totals and the precision's bits); :meth:`ModuleSummary.table`
formats it at a ``max_depth`` as Lightning's ``ModelSummary`` prints it: the ``Name | Type |
Params | Mode`` rows (counts abbreviated ``1.2 K``), an ``other params`` row for parameters
the module holds itself, then trainable, non-trainable and total parameters, the estimated size
in MB and the modules in train and eval mode. Lightning's ``FLOPs``, ``In sizes`` and ``Out
sizes`` columns need a forward pass of ``example_input_array`` and are left out.
"""

from __future__ import annotations

import math

import attrs
from torch import nn

__all__ = ["PRECISION_BITS", "ModuleSummary", "check_max_depth", "describe", "human_count"]

#: Bits per parameter of each precision flag in the size estimate (others count 32, as Lightning's)
PRECISION_BITS = {"64-true": 64, "32-true": 32, "16-true": 16, "bf16-true": 16, "64": 64, "32": 32, "16": 16}
_UNITS = (" ", "K", "M", "B", "T")


def check_max_depth(who: str, max_depth: object) -> int:
    """``max_depth`` when it is -1 (all), 0 (none) or a depth > 0; else a ``ValueError`` naming it."""
    if not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < -1:
        raise ValueError(f"{who}(max_depth={max_depth!r}): use -1 (every module), 0 (no table) or a depth >= 1")
    return max_depth


def human_count(number: int) -> str:
    """Lightning's abbreviation: ``123  ``, ``1.2 K``, ``2.0 M``, ``400 T``."""
    digits = int(math.floor(math.log10(number)) + 1) if number > 0 else 1
    groups = min(math.ceil(digits / 3), len(_UNITS))
    scaled = number * 10 ** (-3 * (groups - 1))
    if groups < 2 or scaled >= 100:
        return f"{int(scaled):,d} {_UNITS[groups - 1]}"
    return f"{scaled:,.1f} {_UNITS[groups - 1]}"


def _count(module: nn.Module, trainable: bool = False) -> int:
    return sum(
        p.numel()
        for p in module.parameters()
        if not isinstance(p, nn.parameter.UninitializedParameter) and (p.requires_grad or not trainable)
    )


@attrs.frozen
class ModuleSummary:
    """Every submodule (``named_modules`` order, the root left out) as ``(name, type, params, training)``."""

    rows: tuple[tuple[str, str, int, bool], ...]
    total: int
    trainable: int
    bits: int = 32
    #: whether a submodule is a batch-norm layer (``torch.nn.modules.batchnorm._BatchNorm``)
    batch_norm: bool = False

    @property
    def size_mb(self) -> float:
        """The parameters' estimated size in MB at the precision's bits (Lightning's estimate)."""
        return self.total * (self.bits / 8.0) * 1e-6

    @property
    def modes(self) -> dict[str, int]:
        """How many submodules are in train and in eval mode."""
        train = sum(1 for row in self.rows if row[3])
        return {"train": train, "eval": len(self.rows) - train}

    def layers(self, max_depth: int) -> list[tuple[str, str, int, bool]]:
        """The rows down to ``max_depth`` (1: the children; -1: all; 0: none), as Lightning's table has them."""
        if max_depth == 0:
            return []
        return [row for row in self.rows if max_depth == -1 or row[0].count(".") < max_depth]

    def table(self, max_depth: int = 1) -> str:
        """Lightning's ``ModelSummary`` text at ``max_depth`` (without the FLOPs and size columns)."""
        layers = self.layers(max_depth)
        cols: list[tuple[str, list[str]]] = [
            (" ", [str(i) for i in range(len(layers))]),
            ("Name", [r[0] for r in layers]),
            ("Type", [r[1] for r in layers]),
            ("Params", [human_count(r[2]) for r in layers]),
            ("Mode", ["train" if r[3] else "eval" for r in layers]),
        ]
        leftover = self.total - sum(r[2] for r in layers)
        if leftover > 0:  # parameters held by the module itself (or below max_depth's cut of a deeper table)
            for (_, values), cell in zip(cols, [" ", "other params", "n/a", human_count(leftover), "n/a"], strict=True):
                values.append(cell)
        widths = [max([len(head), *(len(v) for v in values)]) for head, values in cols]
        rule = "-" * (sum(widths) + 3 * (len(cols) + 1))
        lines = [" | ".join(head.ljust(w) for (head, _), w in zip(cols, widths, strict=True)), rule]
        for i in range(len(cols[0][1])):
            lines.append(" | ".join(values[i].ljust(w) for (_, values), w in zip(cols, widths, strict=True)))
        modes = self.modes
        totals = [
            (human_count(self.trainable), "Trainable params"),
            (human_count(self.total - self.trainable), "Non-trainable params"),
            (human_count(self.total), "Total params"),
            (f"{self.size_mb:,.3f}", "Total estimated model params size (MB)"),
            (str(modes["train"]), "Modules in train mode"),
            (str(modes["eval"]), "Modules in eval mode"),
        ]
        lines.append(rule)
        lines.extend(value.ljust(10) + label for value, label in totals)
        return "\n".join(lines)


def describe(module: nn.Module, precision: str = "32-true") -> ModuleSummary:
    """Read ``module`` into a :class:`ModuleSummary` (parameters of a lazy layer not yet built count 0)."""
    rows = tuple((name, type(m).__name__, _count(m), bool(m.training)) for name, m in list(module.named_modules())[1:])
    return ModuleSummary(
        rows,
        _count(module),
        _count(module, trainable=True),
        PRECISION_BITS.get(precision, 32),
        any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules()),
    )
