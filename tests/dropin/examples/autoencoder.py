# Lightning's examples/pytorch/basics/autoencoder.py, with random 28x28 "images" in place of MNIST and a
# callback that records a decoded sample (the original draws it with torchvision).

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule, Trainer, callbacks
from lightning.pytorch.cli import LightningCLI
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class ImageSampler(callbacks.Callback):
    def __init__(self, num_samples: int = 3) -> None:
        super().__init__()
        self.num_preds = num_samples
        self.sums = []

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        dl = trainer.datamodule.val_dataloader()
        images, _ = next(iter(dl))
        images = images[: self.num_preds].to(pl_module.device)
        with torch.no_grad():
            pl_module.eval()
            images_flattened = images.view(images.size(0), -1)
            generated = pl_module(images_flattened)
            pl_module.train()
        self.sums.append(float(generated.sum()))


class LitAutoEncoder(LightningModule):
    def __init__(self, hidden_dim: int = 64, learning_rate=10e-3):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 3))
        self.decoder = nn.Sequential(nn.Linear(3, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 28 * 28))

    def forward(self, x):
        z = self.encoder(x)
        return self.decoder(z)

    def training_step(self, batch, batch_idx):
        return self._common_step(batch, batch_idx, "train")

    def validation_step(self, batch, batch_idx):
        self._common_step(batch, batch_idx, "val")

    def test_step(self, batch, batch_idx):
        self._common_step(batch, batch_idx, "test")

    def predict_step(self, batch, batch_idx, dataloader_idx=None):
        x = self._prepare_batch(batch)
        return self(x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    def _prepare_batch(self, batch):
        x, _ = batch
        return x.view(x.size(0), -1)

    def _common_step(self, batch, batch_idx, stage: str):
        x = self._prepare_batch(batch)
        loss = F.mse_loss(x, self(x))
        self.log(f"{stage}_loss", loss, on_step=True)
        return loss


class MyDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 32, size: int | None = 160):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        images = torch.rand(size, 1, 28, 28, generator=g)
        labels = torch.randint(0, 10, (size,), generator=g)
        dataset = TensorDataset(images, labels)
        self.mnist_test = TensorDataset(images[: size // 4], labels[: size // 4])
        self.mnist_train, self.mnist_val = random_split(
            dataset, [size - size // 4, size // 4], generator=torch.Generator().manual_seed(42)
        )
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(self.mnist_train, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.mnist_val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.mnist_test, batch_size=self.batch_size)


def main(root):
    cli = LightningCLI(
        LitAutoEncoder,
        MyDataModule,
        seed_everything_default=1234,
        run=False,  # used to de-activate automatic fitting.
        trainer_defaults={"callbacks": ImageSampler(), "max_epochs": 10},
        save_config_kwargs={"overwrite": True},
        args=[
            "--trainer.max_epochs=2",
            "--trainer.limit_train_batches=3",
            "--model.hidden_dim=16",
            "--data.batch_size=16",
            f"--trainer.default_root_dir={root}",
        ],
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule)
    predictions = cli.trainer.predict(ckpt_path="best", datamodule=cli.datamodule)
    assert len(predictions) == 3 and predictions[0].shape == (16, 28 * 28)
    return cli.model
