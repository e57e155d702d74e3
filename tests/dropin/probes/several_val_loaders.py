# Two val loaders, values logged at the loop's start and end, ModelCheckpoint on the end's value, Lightning's
# CSVLogger rows.
import csv
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


def R(x):
    if isinstance(x, dict):
        return {k: R(v) for k, v in sorted(x.items())}
    if isinstance(x, (list, tuple)):
        return [R(v) for v in x]
    if isinstance(x, torch.Tensor):
        return round(float(x), 5)
    if isinstance(x, float):
        return round(x, 5)
    return x


class Rec(pl.Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_validation_end(self, trainer, pl_module):
        self.seen.append(
            ("ve", R(trainer.callback_metrics), R(trainer.logged_metrics), R(trainer.progress_bar_metrics))
        )


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.acc = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def on_validation_epoch_start(self):
        self.log("start_val", 2.0)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.acc.append(loss)
        self.log("vl", loss)

    def on_validation_epoch_end(self):
        self.log("val_mean", torch.stack(self.acc).mean(), prog_bar=True)
        self.acc.clear()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(20, 4, generator=g), torch.randn(20, 1, generator=g))
    seen = []
    model = M()
    ck = ModelCheckpoint(
        dirpath=os.path.join(root, "ck"), monitor="val_mean", save_top_k=1, filename="{epoch}-{val_mean:.3f}"
    )
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[ck, Rec(seen)],
        logger=CSVLogger(root, name="csv"),
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, DataLoader(ds, batch_size=4), [DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=10)])
    seen.append(("best", os.path.basename(ck.best_model_path)))
    seen.append(
        (
            "validate",
            R(trainer.validate(model, [DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=10)], verbose=False)),
        )
    )
    with open(os.path.join(trainer.logger.log_dir, "metrics.csv")) as f:
        rows = list(csv.reader(f))
    seen.append(("csv_header", rows[0]))
    seen.append(("csv_rows", [[c[:7] for c in r] for r in rows[1:]]))
    model.seen = seen
    return model
