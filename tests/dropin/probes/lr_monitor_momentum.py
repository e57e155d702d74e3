# LearningRateMonitor(logging_interval, log_momentum, log_weight_decay): SGD with two param groups and a named
# step scheduler, Adam (betas) and Adagrad (no momentum: 0 and a warning); the CSV logger's file
import os
import warnings

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import LearningRateMonitor
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self, kind="sgd"):
        super().__init__()
        self.kind = kind
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.b(self.a(batch[0])), batch[1])

    def configure_optimizers(self):
        if self.kind == "adam":
            return torch.optim.Adam(self.parameters(), lr=0.01, betas=(0.8, 0.99), weight_decay=1e-4)
        if self.kind == "adagrad":
            return torch.optim.Adagrad(self.parameters(), lr=0.01)
        opt = torch.optim.SGD(
            [{"params": self.a.parameters(), "weight_decay": 0.01}, {"params": self.b.parameters(), "lr": 0.05}],
            lr=0.1,
            momentum=0.9,
        )
        sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "name": "mine"}}


def main(root):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    data = DataLoader(TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g)), batch_size=4)
    model = Model()
    for interval in ("step", "epoch", None):
        logger = CSVLogger(root, name=f"lr_{interval}")
        monitor = LearningRateMonitor(logging_interval=interval, log_momentum=True, log_weight_decay=True)
        trainer = pl.Trainer(
            max_epochs=2,
            logger=logger,
            callbacks=[monitor],
            log_every_n_steps=2,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
        )
        trainer.fit(model, data)
        with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
            model.seen.append((interval, f.read()))
    for kind in ("adam", "adagrad"):
        other = Model(kind)
        logger = CSVLogger(root, name=kind)
        monitor = LearningRateMonitor(log_momentum=True, log_weight_decay=True)
        trainer = pl.Trainer(
            max_epochs=1,
            logger=logger,
            callbacks=[monitor],
            log_every_n_steps=2,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(other, data)
        with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
            model.seen.append((kind, f.read(), any("log_momentum=True" in str(w.message) for w in caught)))
    return model
