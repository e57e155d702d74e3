# A LightningDataModule's hooks in fit and test (prepare_data, setup, loaders, batch transfer, state_dict, teardown),
# its hyper-parameters in the checkpoint and DataModule.load_from_checkpoint.
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

SEEN = []


class DM(pl.LightningDataModule):
    def __init__(self, bs=4):
        super().__init__()
        self.save_hyperparameters()
        self.counter = 0

    def prepare_data(self):
        SEEN.append(("prepare",))

    def setup(self, stage):
        SEEN.append(("setup", stage))
        g = torch.Generator().manual_seed(0)
        self.ds = TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g))

    def train_dataloader(self):
        SEEN.append(("train_dl",))
        return DataLoader(self.ds, batch_size=self.hparams.bs, shuffle=True)

    def val_dataloader(self):
        SEEN.append(("val_dl",))
        return DataLoader(self.ds, batch_size=8)

    def test_dataloader(self):
        SEEN.append(("test_dl",))
        return DataLoader(self.ds, batch_size=8)

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self.counter += 1
        return [batch[0] * 2, batch[1]]

    def on_after_batch_transfer(self, batch, dataloader_idx):
        return [batch[0] + 1, batch[1]]

    def state_dict(self):
        SEEN.append(("dm_state_dict", self.counter))
        return {"counter": self.counter}

    def load_state_dict(self, state):
        SEEN.append(("dm_load", state))
        self.counter = state["counter"]

    def teardown(self, stage):
        SEEN.append(("teardown", stage))


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("vl", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        self.log("tl", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(root):
    SEEN.clear()
    dm = DM()
    model = M()
    ck = ModelCheckpoint(dirpath=os.path.join(root, "ck"), save_last=True)
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[ck],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=1,
    )
    trainer.fit(model, datamodule=dm)
    SEEN.append(("counter", dm.counter))
    r = trainer.test(model, datamodule=dm, verbose=False)
    SEEN.append(("test", {k: round(v, 5) for k, v in r[0].items()}))
    ck2 = torch.load(ck.last_model_path, weights_only=False)
    SEEN.append(("dm_hparams", ck2.get("datamodule_hyper_parameters")))
    dm3 = DM.load_from_checkpoint(ck.last_model_path)
    SEEN.append(("dm3", dict(dm3.hparams)))
    model.seen = list(SEEN)
    return model
