"""A module's layer table as plain data, and Lightning's text of it (``ModelSummary``).

:func:`describe` reads a module once into a :class:`ModuleSummary` (every submodule's name,
type, parameter count and mode, the totals and the precision's bits); :meth:`ModuleSummary.table`
formats it at a ``max_depth`` as Lightning's ``ModelSummary`` prints it: the ``Name | Type |
Params | Mode`` rows (counts abbreviated ``1.2 K``), an ``other params`` row for parameters
the module holds itself, then trainable, non-trainable and total parameters, the estimated size
in MB and the modules in train and eval mode, then Lightning's ``FLOPs`` column and ``Total Flops``.
When the module has an ``example_input_array``, :func:`describe` runs it through the module once (in
eval mode, without gradients, as Lightning's summary does) to count each layer's FLOPs
(``torch.utils.flop_counter``) and record its ``In sizes`` and ``Out sizes``; without one, FLOPs are 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import attrs
import torch
from torch import nn

from interlock.core.modes import restore_modes, training_modes

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
    #: per row: its FLOPs in the pass of ``example_input_array`` (empty: no pass, every row 0)
    flops: tuple[int, ...] = ()
    #: per row: its input and output sizes in that pass (``[2, 4]``, ``"?"``; ``None``: no example input)
    sizes: tuple[tuple[Any, Any], ...] | None = None
    total_flops: int = 0

    @property
    def size_mb(self) -> float:
        """The parameters' estimated size in MB at the precision's bits (Lightning's estimate)."""
        return self.total * (self.bits / 8.0) * 1e-6

    @property
    def modes(self) -> dict[str, int]:
        """How many submodules are in train and in eval mode."""
        train = sum(1 for row in self.rows if row[3])
        return {"train": train, "eval": len(self.rows) - train}

    def _kept(self, max_depth: int) -> list[int]:
        """The indices of the rows down to ``max_depth`` (1: the children; -1: all; 0: none)."""
        if max_depth == 0:
            return []
        return [i for i, row in enumerate(self.rows) if max_depth == -1 or row[0].count(".") < max_depth]

    def layers(self, max_depth: int) -> list[tuple[str, str, int, bool]]:
        """The rows down to ``max_depth`` (1: the children; -1: all; 0: none), as Lightning's table has them."""
        return [self.rows[i] for i in self._kept(max_depth)]

    def table(self, max_depth: int = 1) -> str:
        """Lightning's ``ModelSummary`` text at ``max_depth``."""
        kept = self._kept(max_depth)
        layers = [self.rows[i] for i in kept]
        cols: list[tuple[str, list[str]]] = [
            (" ", [str(i) for i in range(len(layers))]),
            ("Name", [r[0] for r in layers]),
            ("Type", [r[1] for r in layers]),
            ("Params", [human_count(r[2]) for r in layers]),
            ("Mode", ["train" if r[3] else "eval" for r in layers]),
            ("FLOPs", [human_count(self.flops[i] if self.flops else 0) for i in kept]),
        ]
        if self.sizes is not None:
            cols.append(("In sizes", [str(self.sizes[i][0]) for i in kept]))
            cols.append(("Out sizes", [str(self.sizes[i][1]) for i in kept]))
        leftover = self.total - sum(r[2] for r in layers)
        if leftover > 0:  # parameters held by the module itself (or below max_depth's cut of a deeper table)
            cells = [" ", "other params", "n/a", human_count(leftover), "n/a", "n/a", "n/a", "n/a"]
            for (_, values), cell in zip(cols, cells, strict=False):
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
            (human_count(self.total_flops), "Total Flops"),
        ]
        lines.append(rule)
        lines.extend(value.ljust(10) + label for value, label in totals)
        return "\n".join(lines)


def describe(
    module: nn.Module,
    precision: str = "32-true",
    example: bool = True,
    prepare: Callable[[Any], Any] | None = None,
    context: Callable[[], AbstractContextManager[Any]] | None = None,
) -> ModuleSummary:
    """Read ``module`` into a :class:`ModuleSummary` (parameters of a lazy layer not yet built count 0).

    ``example``: run ``example_input_array`` through it, when it has one, for the FLOPs and sizes (a
    sharded module, whose forward needs every process, is described without). ``prepare`` moves and
    casts the input as a run's batches are (default: the module's batch-transfer hooks, to its device);
    ``context`` makes the pass's context (a precision's autocast).
    """
    named = list(module.named_modules())[1:]
    rows = tuple((name, type(m).__name__, _count(m), bool(m.training)) for name, m in named)
    flops: tuple[int, ...] = ()
    sizes: tuple[tuple[Any, Any], ...] | None = None
    total_flops = 0
    if example and getattr(module, "example_input_array", None) is not None:
        counts, total_flops, seen = _example_pass(module, named, prepare, context)
        root = type(module).__name__
        flops = tuple(sum(counts.get(f"{root}.{name}", {}).values()) for name, _ in named)
        sizes = tuple(seen.get(name, ("?", "?")) for name, _ in named)
    return ModuleSummary(
        rows,
        _count(module),
        _count(module, trainable=True),
        PRECISION_BITS.get(precision, 32),
        any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules()),
        flops,
        sizes,
        total_flops,
    )


def _shape(value: Any) -> Any:
    """Lightning's ``parse_batch_shape``: a tensor's shape as a list, nested for sequences, else ``"?"``."""
    if hasattr(value, "shape"):
        return list(value.shape)
    if isinstance(value, list | tuple):
        return [_shape(v) for v in value]
    return "?"


def _example_pass(
    module: nn.Module,
    named: list[tuple[str, nn.Module]],
    prepare: Callable[[Any], Any] | None,
    context: Callable[[], AbstractContextManager[Any]] | None,
) -> tuple[dict[str, dict[Any, int]], int, dict[str, tuple[Any, Any]]]:
    """Run ``example_input_array`` through ``module`` as Lightning's summary does; FLOPs by module, total, sizes.

    The input goes through the module's batch-transfer hooks to its device; the pass runs in eval mode
    without gradients, and every submodule's mode is put back after it.
    """
    data: Any = module.example_input_array
    if prepare is not None:
        data = prepare(data)
    else:
        params = next(module.parameters(), None)
        device = params.device if params is not None else torch.device("cpu")
        for hook, args in (
            ("on_before_batch_transfer", (0,)),
            ("transfer_batch_to_device", (device, 0)),
            ("on_after_batch_transfer", (0,)),
        ):
            fn = getattr(module, hook, None)
            if callable(fn):
                data = fn(data, *args)
    seen: dict[str, tuple[Any, Any]] = {}

    def recorder(name: str) -> Any:
        def hook(_: nn.Module, args: Any, kwargs: Any, out: Any) -> None:
            if name in seen:  # the first call only (a layer used twice keeps its first sizes, as Lightning)
                return
            inp = (*args, *kwargs.values()) if kwargs is not None else args
            seen[name] = (_shape(inp[0] if len(inp) == 1 else inp), _shape(out))

        return hook

    from torch.utils.flop_counter import FlopCounterMode  # only for a module with an example input (2 ms to import)

    handles = [m.register_forward_hook(recorder(name), with_kwargs=True) for name, m in named]
    modes = training_modes(module)
    counter = FlopCounterMode(display=False)
    try:
        module.eval()
        with torch.no_grad(), context() if context is not None else nullcontext(), counter:
            if isinstance(data, list | tuple):
                module(*data)
            elif isinstance(data, dict):
                module(**data)
            else:
                module(data)
    finally:
        for handle in handles:
            handle.remove()
        restore_modes(modes)
    return counter.get_flop_counts(), int(counter.get_total_flops()), seen
