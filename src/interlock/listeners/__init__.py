"""Built-in listeners."""

from __future__ import annotations

from interlock.core.events import Listener

__all__ = ["default_listeners"]


def default_listeners() -> list[Listener]:
    """The listeners a Trainer gets when none are passed."""
    return []
