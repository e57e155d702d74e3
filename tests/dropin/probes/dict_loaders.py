# evaluation loaders given as a dict (Lightning's sequential CombinedLoader: dataloader_idx in the dict's order) in
# fit, validate, test and predict, and from a data module
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

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.seen.append(("val", dataloader_idx, batch_idx, len(x)))
        self.log("v", torch.nn.functional.mse_loss(self.lin(x), y))

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log("t", torch.nn.functional.mse_loss(self.lin(x), y))

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return (dataloader_idx, self.lin(batch[0]).sum().item())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class DM(pl.LightningDataModule):
    def train_dataloader(self):
        return DataLoader(data(32, 0), batch_size=8)

    def val_dataloader(self):
        return {"small": DataLoader(data(12, 1), batch_size=4), "big": DataLoader(data(20, 2), batch_size=10)}


def main(root):
    model = M()
    flags = dict(
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
    )
    trainer = pl.Trainer(max_epochs=2, **flags)
    val = {"b": DataLoader(data(16, 3), batch_size=8), "a": DataLoader(data(8, 4), batch_size=4)}
    trainer.fit(model, DataLoader(data(32, 0), batch_size=8), val)
    model.seen.append(("fit", {k: round(float(v), 6) for k, v in trainer.callback_metrics.items()}))
    model.seen.append(("validate", trainer.validate(model, val, verbose=False)))
    model.seen.append(
        (
            "test",
            trainer.test(
                model,
                {"x": DataLoader(data(8, 5), batch_size=4), "y": DataLoader(data(8, 6), batch_size=8)},
                verbose=False,
            ),
        )
    )
    preds = trainer.predict(
        model, {"p": DataLoader(data(8, 7), batch_size=4), "q": DataLoader(data(4, 8), batch_size=4)}
    )
    model.seen.append(("predict", [[(i, round(v, 6)) for i, v in per] for per in preds]))
    trainer = pl.Trainer(max_epochs=1, **flags)
    trainer.fit(model, datamodule=DM())
    model.seen.append(("datamodule", {k: round(float(v), 6) for k, v in trainer.callback_metrics.items()}))
    return model
