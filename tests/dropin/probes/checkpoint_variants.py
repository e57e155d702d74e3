# ModelCheckpoint every_n_epochs, save_on_train_epoch_end, mode='max', train-step monitors, save_top_k=0, version
# counters.
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g))
    cks = [
        ModelCheckpoint(dirpath=os.path.join(root, "a"), every_n_epochs=2, save_top_k=-1),
        ModelCheckpoint(
            dirpath=os.path.join(root, "b"),
            monitor="train_loss_epoch",
            save_on_train_epoch_end=True,
            save_top_k=2,
            filename="{epoch}-{train_loss_epoch:.3f}",
        ),
        ModelCheckpoint(
            dirpath=os.path.join(root, "c"),
            monitor="val_loss",
            mode="max",
            save_top_k=2,
            every_n_epochs=1,
            filename="{step}",
            save_last=True,
        ),
        ModelCheckpoint(
            dirpath=os.path.join(root, "d"),
            monitor="train_loss_step",
            every_n_train_steps=4,
            save_top_k=1,
            filename="s{step}-{train_loss_step:.2f}",
        ),
        ModelCheckpoint(dirpath=os.path.join(root, "e"), save_top_k=0, save_last=True),
        ModelCheckpoint(
            dirpath=os.path.join(root, "f"),
            monitor="val_loss",
            save_top_k=3,
            enable_version_counter=True,
            filename="same",
        ),
    ]
    m = M()
    t = pl.Trainer(
        max_epochs=5,
        callbacks=cks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
        val_check_interval=0.5,
    )
    t.fit(m, DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=8))
    seen = []
    for ck in cks:
        files = sorted(os.listdir(ck.dirpath)) if os.path.isdir(ck.dirpath) else []
        seen.append(
            (
                os.path.basename(ck.dirpath),
                files,
                os.path.basename(ck.best_model_path),
                os.path.basename(ck.last_model_path or ""),
                None if ck.best_model_score is None else round(float(ck.best_model_score), 4),
                sorted((os.path.basename(k), round(float(v), 4)) for k, v in ck.best_k_models.items()),
            )
        )
    m.seen = seen
    return m
