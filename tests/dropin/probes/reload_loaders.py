# reload_dataloaders_every_n_epochs: a curriculum data module (self.trainer.current_epoch) whose train and val loaders
# grow with the epoch (every epoch and every 2), what each epoch trained and validated on, how often the loaders were
# asked for, the batch counts, loaders passed to fit directly (never asked again)
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def on_train_epoch_start(self):
        self.seen.append(("epoch", self.current_epoch, self.trainer.num_training_batches))

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(("train", self.current_epoch, batch_idx, len(x), round(float(x[0, 0]), 5)))
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(("val", self.current_epoch, batch_idx, len(x)))
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Curriculum(pl.LightningDataModule):
    def __init__(self, log):
        super().__init__()
        self.calls = log

    def setup(self, stage):
        self.calls.append(("setup", stage, self.trainer.world_size, self.trainer.current_epoch))

    def train_dataloader(self):
        epoch = self.trainer.current_epoch
        self.calls.append(("train_dataloader", epoch))
        return DataLoader(data(8 + 4 * epoch, epoch), batch_size=4, shuffle=True)

    def val_dataloader(self):
        epoch = self.trainer.current_epoch
        self.calls.append(("val_dataloader", epoch))
        return DataLoader(data(4 + 2 * epoch, 10 + epoch), batch_size=4)


def main(root):
    model = M()
    calls = []  # in their own order (Lightning asks for the training loader after the sanity check, interlock before)
    flags = dict(
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
    )
    for every in (1, 2, 0):
        model.seen.append(("every", every))
        calls.append(("every", every))
        pl.Trainer(max_epochs=4, reload_dataloaders_every_n_epochs=every, **flags).fit(
            model, datamodule=Curriculum(calls)
        )
    pl.Trainer(max_epochs=3, reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0, **flags).fit(
        model, datamodule=Curriculum(calls)
    )
    pl.Trainer(max_epochs=2, reload_dataloaders_every_n_epochs=1, **flags).fit(
        model, DataLoader(data(8, 1), batch_size=4, shuffle=True), DataLoader(data(4, 2), batch_size=4)
    )
    model.seen.append(("calls", calls))
    return model
