# a Logger subclass written against Lightning's API: what it is called with, in order (hyper-parameters, metrics at
# their steps, save, finalize), in fit, validate, test and a failing fit; one that never calls super().__init__()
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers.logger import Logger, rank_zero_experiment
from pytorch_lightning.utilities import rank_zero_only
from torch.utils.data import DataLoader, TensorDataset


def _round(metrics):
    return {k: round(v, 5) if isinstance(v, float) else v for k, v in sorted(metrics.items())}


class Recorder(Logger):
    def __init__(self, seen, tag):
        super().__init__()
        self.seen, self.tag = seen, tag

    @property
    def name(self):
        return "recorder"

    @property
    def version(self):
        return "0"

    @property
    @rank_zero_experiment
    def experiment(self):
        return self.seen

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs):
        self.seen.append((self.tag, "hparams", dict(params)))

    @rank_zero_only
    def log_metrics(self, metrics, step=None):
        self.seen.append((self.tag, "metrics", step, _round(metrics)))

    @rank_zero_only
    def save(self):
        self.seen.append((self.tag, "save"))

    @rank_zero_only
    def finalize(self, status):
        self.seen.append((self.tag, "finalize", status))


class Bare(Logger):
    def __init__(self, seen):
        self.seen = seen

    @property
    def name(self):
        return "bare"

    @property
    def version(self):
        return 1

    def log_hyperparams(self, params):
        self.seen.append(("bare", "hparams", sorted(params)))

    def log_metrics(self, metrics, step=None):
        self.seen.append(("bare", "metrics", step, sorted(metrics)))


class Model(pl.LightningModule):
    def __init__(self, lr=0.1, width=4):
        super().__init__()
        self.save_hyperparameters()
        self.lin = torch.nn.Linear(width, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def on_train_epoch_end(self):
        self.logger.log_metrics({"custom": 1.5}, step=100 + self.current_epoch)
        self.seen_experiment = self.logger.experiment is self.logger.seen

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main(root):
    torch.manual_seed(0)
    seen = []
    g = torch.Generator().manual_seed(3)
    train = DataLoader(TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g)), batch_size=8)
    val = DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), batch_size=8)
    model = Model()
    trainer = pl.Trainer(
        max_epochs=2,
        log_every_n_steps=2,
        logger=[Recorder(seen, "a"), Bare(seen)],
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer.fit(model, train, val)
    seen.append(("experiment", model.seen_experiment, trainer.logger.name, trainer.logger.version))
    trainer.validate(model, val)
    trainer.test(model, val)

    class Failing(Model):
        def training_step(self, batch, batch_idx):
            if self.current_epoch == 1 and batch_idx == 2:
                raise ValueError("boom")
            return super().training_step(batch, batch_idx)

    trainer = pl.Trainer(
        max_epochs=2,
        log_every_n_steps=3,
        logger=Recorder(seen, "f"),
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
    )
    try:
        trainer.fit(Failing(lr=0.05), train, val)
    except ValueError as e:
        seen.append(("raised", str(e)))
    model.seen = seen
    return model
