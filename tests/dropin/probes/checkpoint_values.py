# what a checkpoint file holds that users read: epoch, global_step, the scheduler's and optimizer's state, the
# hyper-parameters, for epoch-end, mid-epoch and Trainer.save_checkpoint files
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self, lr=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)]


def summary(path):
    ck = torch.load(path, weights_only=False)
    sched = ck["lr_schedulers"][0]
    opt = ck["optimizer_states"][0]
    return (
        os.path.basename(path),
        ck["epoch"],
        ck["global_step"],
        sched["last_epoch"],
        sched["_last_lr"],
        opt["param_groups"][0]["lr"],
        sorted(opt["state"]),
        dict(ck["hyper_parameters"]),
        sorted(ck["state_dict"]),
    )


def main(root):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    data = TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g))
    model = Model()
    ends = ModelCheckpoint(dirpath=os.path.join(root, "ck"), save_top_k=-1, filename="e{epoch}", save_last=True)
    steps = ModelCheckpoint(dirpath=os.path.join(root, "ck"), save_top_k=-1, every_n_train_steps=4, filename="s{step}")
    trainer = pl.Trainer(
        max_epochs=3,
        callbacks=[ends, steps],
        enable_progress_bar=False,
        logger=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer.fit(model, DataLoader(data, batch_size=8), DataLoader(data, batch_size=12))
    trainer.save_checkpoint(os.path.join(root, "after.ckpt"))
    for name in sorted(os.listdir(os.path.join(root, "ck"))):
        if name != "last.ckpt":  # Lightning writes it alongside a top-k save only (a documented difference)
            model.seen.append(summary(os.path.join(root, "ck", name)))
    model.seen.append(summary(os.path.join(root, "after.ckpt")))
    return model
