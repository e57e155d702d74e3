# a module that still builds its layers in Lightning's deprecated configure_sharded_model (renamed configure_model in
# 2.1): Lightning warns and calls it at every stage's set-up; the layers train the same. Defining both is its error
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.seen = []
        self.head = None

    def configure_sharded_model(self):
        self.seen.append(("configure_sharded_model", self.head is None))
        if self.head is None:
            self.head = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(x), y)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.head(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g))
    model = M()
    trainer = pl.Trainer(
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
    )
    trainer.fit(model, DataLoader(ds, batch_size=8))
    result = trainer.test(model, DataLoader(ds, batch_size=8), verbose=False)
    model.seen.append(("test", round(result[0]["test_loss"], 6)))
    try:
        trainer.fit(Both(), DataLoader(ds, batch_size=8))
    except RuntimeError as exc:
        model.seen.append(("both", str(exc)))
    return model


class Both(M):
    def configure_model(self):
        pass
