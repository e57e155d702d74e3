# submodules a user keeps in eval mode (a frozen BatchNorm backbone: set in __init__, in on_train_start, in
# on_train_epoch_start): their mode in each training step across validations and epochs, their running stats, and
# Lightning's warning about modules in eval mode at the start of training
import warnings

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


class M(pl.LightningModule):
    def __init__(self, where):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
        self.head = torch.nn.Sequential(torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
        self.where = where
        self.seen = []
        if where == "init":
            self.backbone.eval()

    def on_train_start(self):
        if self.where == "train_start":
            self.backbone.eval()

    def on_train_epoch_start(self):
        if self.where == "epoch_start":
            self.backbone.eval()

    def modes(self):
        return (self.training, self.backbone.training, self.backbone[1].training, self.head.training)

    def training_step(self, batch, batch_idx):
        self.seen.append(("train", self.current_epoch, batch_idx, self.modes()))
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.backbone(x)), y)

    def validation_step(self, batch, batch_idx):
        self.seen.append(("val", self.current_epoch, batch_idx, self.modes()))
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.head(self.backbone(x)), y))

    def test_step(self, batch, batch_idx):
        self.seen.append(("test", batch_idx, self.modes()))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(root):
    seen = []
    model = None
    for where in ("init", "train_start", "epoch_start"):
        model = M(where)
        trainer = pl.Trainer(
            max_epochs=2,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
            val_check_interval=2,
            num_sanity_val_steps=1,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(model, DataLoader(data(32, 0), batch_size=8), DataLoader(data(16, 1), batch_size=8))
        model.seen.append(("warned", [str(w.message) for w in caught if "eval mode" in str(w.message)]))
        model.seen.append(("after_fit", model.modes()))
        trainer.test(model, DataLoader(data(8, 2), batch_size=8), verbose=False)
        model.seen.append(("after_test", model.modes()))
        seen.append((where, model.seen, [round(float(v), 6) for v in model.backbone[1].running_mean]))
    model.seen = seen
    return model
