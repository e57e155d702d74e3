# an epoch-interval ReduceLROnPlateau on a validation metric when validation runs every 2 epochs (strict=False),
# twice an epoch, or at a step interval across epochs; with frequency 2; LearningRateMonitor's logged values (CSV)
import csv
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, LearningRateMonitor
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Rec(Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_train_epoch_start(self, trainer, pl_module):
        self.seen.append(("epoch_start", trainer.current_epoch, trainer.optimizers[0].param_groups[0]["lr"]))

    def on_validation_end(self, trainer, pl_module):
        self.seen.append(("val_end", trainer.global_step, trainer.optimizers[0].param_groups[0]["lr"]))

    def on_train_epoch_end(self, trainer, pl_module):
        self.seen.append(("epoch_end", trainer.current_epoch, trainer.optimizers[0].param_groups[0]["lr"]))


class M(pl.LightningModule):
    def __init__(self, frequency, strict):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.frequency, self.strict = frequency, strict

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y) + 0.01 * self.global_step)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.2)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
        return {
            "optimizer": opt,
            "lr_scheduler": {
                "scheduler": plateau,
                "monitor": "val_loss",
                "frequency": self.frequency,
                "strict": self.strict,
            },
        }


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g))
    seen = []
    model = None
    cases = [
        dict(check_val_every_n_epoch=2, strict=False),
        dict(val_check_interval=0.5),
        dict(val_check_interval=4, check_val_every_n_epoch=None),
        dict(frequency=2),
    ]
    for i, case in enumerate(cases):
        case = dict(case)
        frequency, strict = case.pop("frequency", 1), case.pop("strict", True)
        seen.append(("case", i))
        model = M(frequency, strict)
        name = f"c{i}"
        trainer = pl.Trainer(
            max_epochs=5,
            callbacks=[Rec(seen), LearningRateMonitor()],
            logger=CSVLogger(root, name=name),
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            num_sanity_val_steps=0,
            log_every_n_steps=1,
            **case,
        )
        trainer.fit(model, DataLoader(ds, batch_size=8, shuffle=True), DataLoader(ds, batch_size=20))
        with open(os.path.join(root, name, "version_0", "metrics.csv")) as f:
            rows = list(csv.reader(f))
        seen.append(
            [r for r in rows if "lr-SGD" in rows[0]][:1]
            + [[r[rows[0].index("step")], r[rows[0].index("lr-SGD")]] for r in rows[1:] if r[rows[0].index("lr-SGD")]]
        )
    model.seen = seen
    return model
