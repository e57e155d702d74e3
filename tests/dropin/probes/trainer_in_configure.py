# what configure_optimizers reads from self.trainer to size a schedule: the data module and its loader's length,
# max_epochs, max_steps, accumulate_grad_batches, estimated_stepping_batches, num_devices
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


class DM(pl.LightningDataModule):
    def __init__(self):
        super().__init__()
        self.train_set = None

    def setup(self, stage):
        self.train_set = data(44, 0)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=8)

    def val_dataloader(self):
        return DataLoader(data(16, 1), batch_size=8)


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def configure_optimizers(self):
        t = self.trainer
        per_epoch = len(t.datamodule.train_dataloader())
        self.seen.append(
            (
                per_epoch,
                t.max_epochs,
                t.max_steps,
                t.accumulate_grad_batches,
                t.num_devices,
                t.estimated_stepping_batches,
                t.current_epoch,
                t.global_step,
            )
        )
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        steps = t.max_epochs * -(-per_epoch // t.accumulate_grad_batches)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.3, total_steps=steps)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def main(root):
    model = None
    seen = []
    for flags in (
        {"max_epochs": 3},
        {"max_epochs": 2, "accumulate_grad_batches": 2},
        {"max_epochs": 2, "limit_train_batches": 3},
    ):
        model = M()
        trainer = pl.Trainer(
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
            **flags,
        )
        trainer.fit(model, datamodule=DM())
        seen.append((flags, model.seen, round(trainer.optimizers[0].param_groups[0]["lr"], 8)))
    model.seen = seen
    return model
