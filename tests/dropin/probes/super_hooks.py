# super() in a LightningModule's and a LightningDataModule's hook overrides (Lightning's defaults exist: setup,
# on_train_epoch_end, on_save_checkpoint, transfer_batch_to_device, ...)
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class DM(pl.LightningDataModule):
    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self.seen.append(("transfer", dataloader_idx))
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_before_batch_transfer(self, batch, dataloader_idx):
        x, y = super().on_before_batch_transfer(batch, dataloader_idx)
        return x * 2, y


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def setup(self, stage):
        super().setup(stage)
        self.seen.append(("setup", stage))

    def on_train_epoch_end(self):
        super().on_train_epoch_end()
        self.seen.append(("epoch_end", self.current_epoch))

    def on_train_batch_end(self, outputs, batch, batch_idx):
        super().on_train_batch_end(outputs, batch, batch_idx)

    def on_save_checkpoint(self, checkpoint):
        super().on_save_checkpoint(checkpoint)
        checkpoint["mine"] = 1

    def on_before_optimizer_step(self, optimizer):
        super().on_before_optimizer_step(optimizer)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    torch.manual_seed(0)
    m = M()
    dm = DM()
    dm.seen = m.seen
    t = pl.Trainer(
        max_epochs=2, default_root_dir=root, enable_progress_bar=False, logger=False, enable_model_summary=False
    )
    t.fit(m, datamodule=dm)
    ck = torch.load(t.checkpoint_callback.best_model_path, weights_only=False)
    m.seen.append(ck.get("mine"))
    return m
