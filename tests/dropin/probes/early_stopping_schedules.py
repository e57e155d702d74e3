# EarlyStopping with check_val_every_n_epoch=2, val_check_interval=0.5, min_epochs, stopping_threshold,
# divergence_threshold and check_on_train_epoch_end: the epoch and step each fit stops at, the callback's state
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.lr = lr
        self.seen = []

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def main(root):
    g = torch.Generator().manual_seed(3)
    data = TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g))
    cases = [
        (0.0, dict(check_val_every_n_epoch=2), dict(monitor="val_loss", patience=1)),
        (0.0, dict(val_check_interval=0.5), dict(monitor="val_loss", patience=2)),
        (0.0, dict(min_epochs=5), dict(monitor="val_loss", patience=0)),
        (0.05, dict(), dict(monitor="val_loss", stopping_threshold=1.0)),
        (3.0, dict(), dict(monitor="train_loss", divergence_threshold=5.0, check_on_train_epoch_end=True)),
        (0.01, dict(), dict(monitor="train_loss", min_delta=0.05, patience=1, check_on_train_epoch_end=True)),
    ]
    seen = []
    for lr, flags, es in cases:
        torch.manual_seed(0)
        model = Model(lr)
        stop = EarlyStopping(**es)
        trainer = pl.Trainer(
            max_epochs=8,
            callbacks=[stop],
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
            enable_checkpointing=False,
            default_root_dir=root,
            **flags,
        )
        trainer.fit(model, DataLoader(data, batch_size=8), DataLoader(data, batch_size=16))
        seen.append(
            (
                sorted(flags.items()),
                sorted(es.items()),
                trainer.current_epoch,
                trainer.global_step,
                stop.stopped_epoch,
                stop.wait_count,
                round(float(stop.best_score), 5),
                trainer.should_stop,
            )
        )
    model.seen = seen
    return model
