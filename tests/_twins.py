"""A mixin as a pytorch-lightning module and as its interlock.lightning port, for differential tests."""

from __future__ import annotations

from typing import Any


def twins(mixin: type) -> tuple[Any, Any]:
    """(Lightning's class, interlock's): ``mixin`` on each LightningModule, with an ``__init__`` calling ``_build``."""
    import pytorch_lightning as pl

    import interlock.lightning as il

    made = []
    for base, tag in ((pl.LightningModule, "Lit"), (il.LightningModule, "Ours")):

        def __init__(self: Any, _base: type = base) -> None:
            _base.__init__(self)
            self._build()

        made.append(type(f"{mixin.__name__}{tag}", (mixin, base), {"__init__": __init__}))
    return made[0], made[1]
