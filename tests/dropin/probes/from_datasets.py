# LightningDataModule.from_datasets: its loaders in fit, validate and test, a subclass taking batch_size, and a
# module given the datasets' data module
import pytorch_lightning as pl
import torch
from torch.utils.data import TensorDataset


class Sized(pl.LightningDataModule):
    def __init__(self, batch_size=1, tag="x"):
        super().__init__()
        self.batch_size, self.tag = batch_size, tag


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append(("train", batch_idx, tuple(batch[0].shape)))
        return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    train = TensorDataset(torch.randn(20, 4, generator=g), torch.randn(20, 1, generator=g))
    val = TensorDataset(torch.randn(12, 4, generator=g), torch.randn(12, 1, generator=g))
    dm = pl.LightningDataModule.from_datasets(train, val, test_dataset=val, batch_size=6)
    model = Model()
    kw = dict(enable_progress_bar=False, enable_model_summary=False, logger=False, default_root_dir=root)
    trainer = pl.Trainer(max_epochs=2, **kw)
    trainer.fit(model, datamodule=dm)
    model.seen.append(("fit", round(float(trainer.callback_metrics["val_loss"]), 6)))
    model.seen.append(("test", [round(v, 6) for r in trainer.test(model, datamodule=dm) for v in r.values()]))
    sized = Sized.from_datasets(train_dataset=train, batch_size=4, tag="y")
    model.seen.append(("sized", sized.batch_size, sized.tag, len(sized.train_dataloader())))
    pl.Trainer(max_epochs=1, **kw).fit(model, datamodule=sized)
    return model
