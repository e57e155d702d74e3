# a fit with nothing left to train: the same trainer fitted again, and a finished run's last.ckpt resumed with
# the same max_epochs (hooks, sanity check, counters, the global RNG after, weights)
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append(("train", self.current_epoch, batch_idx))
        return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.seen.append(("val", self.trainer.sanity_checking, self.current_epoch, batch_idx))
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def on_fit_start(self):
        self.seen.append(("fit_start", self.current_epoch, self.global_step))

    def on_train_start(self):
        self.seen.append(("train_start", self.current_epoch, self.global_step))

    def on_train_end(self):
        self.seen.append(("train_end", self.current_epoch, self.global_step))

    def on_fit_end(self):
        self.seen.append(("fit_end", self.current_epoch, self.global_step))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(root):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    data = TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g))
    train, val = DataLoader(data, batch_size=8, shuffle=True), DataLoader(data, batch_size=12)
    kw = dict(enable_progress_bar=False, enable_model_summary=False, logger=False)
    model = Model()
    ckpt = ModelCheckpoint(dirpath=os.path.join(root, "ck"), save_last=True)
    trainer = pl.Trainer(max_epochs=2, callbacks=[ckpt], default_root_dir=root, **kw)
    trainer.fit(model, train, val)
    model.seen.append("--- again")
    trainer.fit(model, train, val)
    model.seen.append(("after", trainer.current_epoch, trainer.global_step, torch.randint(1000, (1,)).item()))
    model.seen.append("--- resumed")
    other = Model()
    t2 = pl.Trainer(max_epochs=2, default_root_dir=os.path.join(root, "b"), enable_checkpointing=False, **kw)
    t2.fit(other, train, val, ckpt_path=ckpt.last_model_path)
    model.seen += other.seen
    model.seen.append(("after", t2.current_epoch, t2.global_step, torch.randint(1000, (1,)).item()))
    for limits in (dict(max_epochs=0), dict(max_steps=0), dict(max_epochs=1, limit_train_batches=0)):
        zero = Model()
        pl.Trainer(default_root_dir=os.path.join(root, "z"), enable_checkpointing=False, **limits, **kw).fit(
            zero, train, val
        )
        model.seen += [*zero.seen, ("after", sorted(limits.items()), torch.randint(1000, (1,)).item())]
    return model
