"""The parity suite runs quietly: Lightning's warnings and info lines are filtered."""

from __future__ import annotations

import logging
import warnings

import pytest

for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
    logging.getLogger(_name).setLevel(logging.ERROR)


@pytest.fixture(autouse=True)
def _quiet() -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
