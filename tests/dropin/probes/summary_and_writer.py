# ModelSummary text with an example_input_array at depths 1, 2, -1, and a BasePredictionWriter's calls.
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import BasePredictionWriter
from pytorch_lightning.utilities.model_summary import ModelSummary as MS
from torch.utils.data import DataLoader, TensorDataset


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x):
        return self.bn(self.a(x)) * self.scale


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(4, 8)
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(8, 1)
        self.frozen = torch.nn.Linear(8, 8)
        for p in self.frozen.parameters():
            p.requires_grad = False
        self.example_input_array = torch.zeros(2, 4)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self(batch[0]), batch[1])

    def predict_step(self, batch, batch_idx):
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Writer(BasePredictionWriter):
    def __init__(self, seen):
        super().__init__(write_interval="batch_and_epoch")
        self.seen = seen

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.seen.append(("wb", batch_idx, list(batch_indices), tuple(prediction.shape)))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        self.seen.append(
            (
                "we",
                len(predictions),
                [list(b) for b in batch_indices[0]]
                if batch_indices
                and isinstance(batch_indices[0], list)
                and batch_indices[0]
                and isinstance(batch_indices[0][0], list)
                else [list(b) for b in batch_indices],
            )
        )


def main(root):
    seen = []
    m = M()
    for depth in (1, 2, -1):
        seen.append(("summary", depth, str(MS(m, max_depth=depth)).splitlines()))
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(12, 4, generator=g), torch.randn(12, 1, generator=g))
    t = pl.Trainer(
        max_epochs=1,
        callbacks=[Writer(seen)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    t.predict(m, DataLoader(ds, batch_size=5, shuffle=True), return_predictions=False)
    m.seen = seen
    return m
