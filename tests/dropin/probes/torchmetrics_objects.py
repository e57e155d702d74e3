# torchmetrics Metric, MeanMetric and a MetricCollection logged in training and validation, with a sanity check.
import pytorch_lightning as pl
import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset


def R(d):
    return {k: round(float(v), 5) for k, v in sorted(d.items())}


class Rec(pl.Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_train_epoch_end(self, trainer, pl_module):
        self.seen.append(("tee", R(trainer.callback_metrics)))

    def on_validation_epoch_end(self, trainer, pl_module):
        self.seen.append(("vee", R(trainer.callback_metrics)))


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)
        self.val_metrics = torchmetrics.MetricCollection(
            {
                "acc": torchmetrics.Accuracy(task="multiclass", num_classes=3),
                "f1": torchmetrics.F1Score(task="multiclass", num_classes=3, average="macro"),
            },
            prefix="val_",
        )
        self.val_mean = torchmetrics.MeanMetric()

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.lin(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.lin(x)
        self.val_metrics.update(logits, y)
        self.val_mean.update(torch.nn.functional.cross_entropy(logits, y))
        self.log("val_mean", self.val_mean)

    def on_validation_epoch_end(self):
        self.log_dict(self.val_metrics.compute(), prog_bar=True)
        self.val_metrics.reset()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(40, 4, generator=g), torch.randint(0, 3, (40,), generator=g))
    seen = []
    model = M()
    t = pl.Trainer(
        max_epochs=3,
        callbacks=[Rec(seen)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=2,
        log_every_n_steps=1,
    )
    t.fit(model, DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=16))
    seen.append(("validate", [R(r) for r in t.validate(model, DataLoader(ds, batch_size=16), verbose=False)]))
    seen.append(("logged", R(t.logged_metrics)))
    model.seen = seen
    return model
