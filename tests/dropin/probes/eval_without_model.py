# test() and validate() after fit with no module (the best checkpoint), then test(model).
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.3)


def main(root):
    seen = []
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g))
    m = M()
    ck = ModelCheckpoint(dirpath=os.path.join(root, "ck"), monitor="val_loss", save_top_k=1)
    t = pl.Trainer(
        max_epochs=4,
        callbacks=[ck],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    t.fit(m, DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=16))
    seen.append(("best", os.path.basename(ck.best_model_path)))
    r = t.test(dataloaders=DataLoader(ds, batch_size=16), verbose=False)
    seen.append(("test_nomodel", {k: round(v, 5) for k, v in r[0].items()}))
    r = t.validate(dataloaders=DataLoader(ds, batch_size=16), verbose=False)
    seen.append(("val_nomodel", {k: round(v, 5) for k, v in r[0].items()}))
    r = t.test(m, DataLoader(ds, batch_size=16), verbose=False)
    seen.append(("test_model", {k: round(v, 5) for k, v in r[0].items()}))
    m.seen = seen
    return m
