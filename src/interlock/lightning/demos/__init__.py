"""Lightning's demo models and data (``lightning.pytorch.demos``), as interlock modules.

The architectures and the order parameters are created in are Lightning's, so a seeded
model starts from the same weights under both.
"""

from __future__ import annotations

from interlock.lightning.demos.boring_classes import BoringDataModule, BoringModel, DemoModel
from interlock.lightning.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
from interlock.lightning.demos.transformer import LightningTransformer, Transformer, WikiText2

__all__ = [
    "BoringDataModule",
    "BoringModel",
    "DemoModel",
    "LightningLSTM",
    "LightningTransformer",
    "SequenceSampler",
    "SimpleLSTM",
    "Transformer",
    "WikiText2",
]
