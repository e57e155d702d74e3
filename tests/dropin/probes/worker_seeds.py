# random draws inside dataset workers (torch, numpy, random) with seed_everything(workers=True) and without, two
# workers, two epochs: the values the steps see
import random

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([float(i), torch.rand(1).item(), float(np.random.rand()), random.random()])


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append([[round(v, 6) for v in row.tolist()] for row in batch])
        return self.lin(batch).sum() * 0.0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    seen = []
    for workers in (True, False):
        pl.seed_everything(7, workers=workers)
        model = Model()
        loader = DataLoader(Noisy(), batch_size=4, num_workers=2, shuffle=True)
        pl.Trainer(
            max_epochs=2,
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
            enable_checkpointing=False,
            default_root_dir=root,
        ).fit(model, loader)
        seen.append((workers, model.seen))
    model.seen = seen
    return model
