"""Each submodule's train/eval mode, recorded and put back (a part the user froze stays frozen)."""

from __future__ import annotations

from torch import nn

__all__ = ["restore_modes", "training_modes"]


def training_modes(module: nn.Module) -> dict[nn.Module, bool]:
    """The ``training`` flag of ``module`` and of every submodule, by module."""
    return {m: m.training for m in module.modules()}


def restore_modes(modes: dict[nn.Module, bool]) -> None:
    """Set each recorded module's ``training`` flag back (as Lightning does: no ``train()``/``eval()`` calls)."""
    for m, training in modes.items():
        m.training = training
