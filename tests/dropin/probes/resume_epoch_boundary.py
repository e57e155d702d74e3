# resumed from checkpoints saved at an epoch's end and mid-epoch: what on_train_start, the epoch hooks and a
# callback see (current_epoch, global_step, the learning rate), and the weights after an epoch-end resume (no sanity
# check: Lightning runs one after an epoch-end checkpoint, interlock does not, a documented difference)
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Watch(Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_train_start(self, trainer, pl_module):
        self.seen.append(("cb train_start", trainer.current_epoch, trainer.global_step))

    def on_train_epoch_start(self, trainer, pl_module):
        self.seen.append(("cb epoch_start", trainer.current_epoch, trainer.global_step))


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def on_train_start(self):
        lr = self.optimizers().param_groups[0]["lr"]
        self.seen.append(("train_start", self.current_epoch, self.global_step, round(lr, 6)))

    def on_train_epoch_end(self):
        self.seen.append(("epoch_end", self.current_epoch, self.global_step))

    def on_train_end(self):
        self.seen.append(("train_end", self.current_epoch, self.global_step))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)]


def main(root):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    data = TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g))
    train, val = DataLoader(data, batch_size=8), DataLoader(data, batch_size=12)
    kw = dict(enable_progress_bar=False, enable_model_summary=False, logger=False, num_sanity_val_steps=0)
    first = Model()
    every = ModelCheckpoint(dirpath=os.path.join(root, "ck"), save_top_k=-1, every_n_train_steps=2, filename="s{step}")
    ends = ModelCheckpoint(dirpath=os.path.join(root, "ck"), save_top_k=-1, filename="e{epoch}")
    pl.Trainer(max_epochs=2, callbacks=[every, ends], default_root_dir=root, **kw).fit(first, train, val)
    seen = list(first.seen)
    for name in ("eepoch=0", "sstep=4"):
        model = Model()
        torch.manual_seed(1)
        trainer = pl.Trainer(
            max_epochs=3,
            callbacks=[Watch(model.seen)],
            default_root_dir=os.path.join(root, name),
            enable_checkpointing=False,
            **kw,
        )
        trainer.fit(model, train, val, ckpt_path=os.path.join(root, "ck", f"{name}.ckpt"))
        seen += [name, *model.seen, ("after", trainer.current_epoch, trainer.global_step)]
        if name.startswith("e"):  # mid-epoch, Lightning reads the epoch's data from its start again (interlock goes on)
            seen.append([round(float(p), 6) for p in model.lin.weight.flatten()])
    first.seen = seen
    return first
