# learning-rate warm-up written as Lightning's docs show it (optimizer_step overridden, reading
# self.trainer.global_step and setting param_groups' lr), a callback changing the rate in on_train_epoch_start,
# with a step scheduler on top, and a resume from the last checkpoint
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


class Halve(Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == 2:
            for group in trainer.optimizers[0].param_groups:
                group["lr"] = group["lr"] / 2


class M(pl.LightningModule):
    def __init__(self, learning_rate=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        if self.trainer.global_step < 6:
            scale = min(1.0, float(self.trainer.global_step + 1) / 6.0)
            for pg in optimizer.param_groups:
                pg["lr"] = scale * self.hparams.learning_rate
        optimizer.step(closure=optimizer_closure)
        self.seen.append((epoch, batch_idx, self.trainer.global_step, round(optimizer.param_groups[0]["lr"], 8)))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.9)]


def main(root):
    flags = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
    ck = ModelCheckpoint(dirpath=os.path.join(root, "ck"), save_last=True)
    model = M()
    pl.Trainer(max_epochs=2, callbacks=[Halve(), ck], **flags).fit(model, DataLoader(data(32, 0), batch_size=8))
    resumed = M()
    pl.Trainer(max_epochs=4, callbacks=[Halve()], **flags).fit(
        resumed, DataLoader(data(32, 0), batch_size=8), ckpt_path=os.path.join(root, "ck", "last.ckpt")
    )
    resumed.seen = model.seen + resumed.seen
    return resumed
