"""``grad_norm``: the gradient norm of each parameter and their total, as Lightning logs them."""

from __future__ import annotations

import torch

__all__ = ["grad_norm"]


def grad_norm(
    module: torch.nn.Module, norm_type: float | int | str, group_separator: str = "/"
) -> dict[str, torch.Tensor]:
    """``{"grad_2.0_norm/<param>": norm, ..., "grad_2.0_norm_total": total}`` over parameters that have a gradient.

    ``norm_type`` is a number > 0 or ``"inf"``; the total is the ``norm_type`` norm of the per-parameter norms.
    """
    norm = float(norm_type)
    if norm <= 0:
        raise ValueError(f"grad_norm(norm_type={norm_type!r}): the norm type must be > 0 (2.0, 1.0 or 'inf')")
    norms = {
        f"grad_{norm}_norm{group_separator}{name}": p.grad.data.norm(norm)
        for name, p in module.named_parameters()
        if p.grad is not None
    }
    if norms:
        norms[f"grad_{norm}_norm_total"] = torch.tensor(list(norms.values())).norm(norm)
    return norms
