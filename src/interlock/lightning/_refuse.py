"""Lightning names interlock has no equivalent for: importing one raises ``ImportError`` naming the alternative."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["missing", "refuse_value"]


def missing(module: str, alternatives: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` raising ``ImportError`` for the Lightning names in ``alternatives``.

    ``from interlock.lightning.callbacks import ModelPruning`` then fails at the import line with
    what to use instead, never a silent stand-in; other unknown names stay plain ``AttributeError``.
    """

    def __getattr__(name: str) -> Any:
        if name in alternatives:
            raise ImportError(
                f"{module}.{name} (Lightning's {name}) has no interlock equivalent: {alternatives[name]}",
                name=module,
            )
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def refuse_value(owner: str, name: str, value: Any, accepted: tuple[Any, ...], instead: str) -> None:
    """Raise ``ValueError`` when Lightning's argument ``name`` is not at a value interlock honours."""
    if any(value is ok or (type(value) is type(ok) and value == ok) for ok in accepted):
        return
    raise ValueError(f"{owner}({name}={value!r}) is not supported by interlock: {instead}")
