# What callbacks' on_*_batch_end get as outputs in fit, validation, test and predict; the metrics at epoch ends.
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


def _desc(x):
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), x.requires_grad, x.grad_fn is None)
    if isinstance(x, dict):
        return ("dict", tuple(sorted((k, _desc(v)) for k, v in x.items())))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_desc(v) for v in x))
    return (type(x).__name__, x if isinstance(x, (int, float, str, type(None), bool)) else None)


class Rec(pl.Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seen.append(("train_batch_end", batch_idx, _desc(outputs)))

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.seen.append(("val_batch_end", batch_idx, _desc(outputs)))

    def on_train_epoch_end(self, trainer, pl_module):
        self.seen.append(
            (
                "epoch_end",
                sorted(trainer.callback_metrics),
                sorted(trainer.logged_metrics),
                sorted(trainer.progress_bar_metrics),
            )
        )

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.seen.append(("test_batch_end", batch_idx, _desc(outputs)))

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.seen.append(("predict_batch_end", batch_idx, _desc(outputs)))


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("tl", loss, prog_bar=True)
        if batch_idx % 2:
            return {"loss": loss, "extra": loss * 2, "n": 3}
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("vl", loss)
        return {"vl": loss, "pred": self.lin(x)}

    def test_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def predict_step(self, batch, batch_idx):
        return self.lin(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    seen = []
    model = M()
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[Rec(seen)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        limit_val_batches=2,
        num_sanity_val_steps=1,
    )
    trainer.fit(model, DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=4))
    trainer.test(model, DataLoader(ds, batch_size=8))
    preds = trainer.predict(model, DataLoader(ds, batch_size=8))
    seen.append(("predict_return", _desc(preds)))
    model.seen = seen
    return model
