# Not one of Lightning's examples: the idioms Lightning code uses `self.trainer` for, in one module
# (a one-cycle schedule sized by estimated_stepping_batches, a warm-up in optimizer_step, skipping work in
# the sanity check, stopping from on_validation_epoch_end, reading the data module and the flags).
import zlib

import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, TensorDataset


class Points(LightningDataModule):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        x = torch.randn(96, 8, generator=g)
        self.train_set = TensorDataset(x[:64], (x[:64].sum(1) > 0).long())
        self.val_set = TensorDataset(x[64:], (x[64:].sum(1) > 0).long())
        self.warm_steps = 5

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=8, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=16)


class Classifier(LightningModule):
    def __init__(self, stop_below=0.45):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
        self.stop_below = stop_below
        self.sanity_batches = 0
        self.seen = []

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        x, y = super().transfer_batch_to_device(batch, device, dataloader_idx)
        if self.trainer.training:  # a training-only input change
            x = x * 1.1
        return x, y

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        if self.current_epoch < self.trainer.max_epochs // 2:  # the first half trains on a smoothed target
            loss = loss + 0.1 * self.net(x).pow(2).mean()
        self.log("train_loss", loss, prog_bar=self.trainer.is_global_zero)
        self.seen.append(("train", self.trainer.current_epoch, self.trainer.global_step, self.trainer.is_last_batch))
        return loss

    def validation_step(self, batch, batch_idx):
        if self.trainer.sanity_checking:
            self.sanity_batches += 1
            return
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def on_validation_epoch_end(self):
        loss = self.trainer.callback_metrics.get("val_loss")
        if loss is not None and loss < self.stop_below:
            self.trainer.should_stop = True
        self.seen.append(("val end", self.trainer.current_epoch, self.trainer.num_val_batches, self.trainer.validating))

    def on_train_epoch_end(self):
        self.seen.append(("epoch end", len(self.trainer.datamodule.train_set), self.trainer.should_stop))

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        warm = self.trainer.datamodule.warm_steps
        if self.trainer.global_step < warm:  # a linear warm-up on top of the schedule
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * (self.trainer.global_step + 1) / warm
        optimizer.step(closure=optimizer_closure)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.trainer.model.parameters(), lr=0.1, momentum=0.9)
        total = self.trainer.estimated_stepping_batches
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.5, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def main(root):
    seed_everything(11)
    model = Classifier()
    trainer = Trainer(
        max_epochs=12,
        default_root_dir=root,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=2,
    )
    trainer.fit(model, datamodule=Points())
    assert model.sanity_batches == 2, model.sanity_batches
    assert 1 <= trainer.current_epoch < 12 and model.seen[-1][-1], "the module's stop ended the fit early"
    # what the module saw through self.trainer, compared with the weights
    model.register_buffer("seen_digest", torch.tensor(zlib.crc32(repr(model.seen).encode())))
    return model
