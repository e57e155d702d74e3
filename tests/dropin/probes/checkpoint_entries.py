# the callbacks' entries of a checkpoint file (Lightning's state keys and state dicts of ModelCheckpoint and
# EarlyStopping) in a last.ckpt and a top-k file, and EarlyStopping's stopping_reason and message for each way to stop
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def plain(value):
    if isinstance(value, torch.Tensor):
        return round(float(value), 5)
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, str) and os.sep in value:
        return os.path.basename(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    return value


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g))
    ck = ModelCheckpoint(dirpath=os.path.join(root, "a"), monitor="val_loss", save_top_k=2, save_last=True)
    steps = ModelCheckpoint(dirpath=os.path.join(root, "b"), every_n_train_steps=3, save_top_k=-1)
    es = EarlyStopping(monitor="val_loss", patience=2)
    model = M()
    trainer = pl.Trainer(
        max_epochs=3,
        callbacks=[ck, steps, es],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=8))
    seen = []
    for path in (ck.last_model_path, ck.best_model_path):
        entries = torch.load(path, weights_only=False)["callbacks"]
        seen.append(sorted(entries))
        seen.append([(key, plain(dict(value))) for key, value in sorted(entries.items())])
    model.seen = seen + stops(os.path.join(root, "stops"))
    return model


class Noisy(M):
    """Logs a schedule of values, so each way of stopping happens."""

    def __init__(self, values):
        super().__init__()
        self.values = values

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.tensor(self.values[min(self.current_epoch, len(self.values) - 1)]))


def stops(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g))
    cases = [
        ("patience", [1.0, 0.9, 0.95, 0.97, 0.99], {"patience": 2}),
        ("threshold", [1.0, 0.5, 0.2, 0.1], {"stopping_threshold": 0.3}),
        ("divergence", [1.0, 0.9, 7.0, 0.1], {"divergence_threshold": 5.0}),
        ("nonfinite", [1.0, float("nan"), 0.1], {}),
        ("max", [1.0, 2.0, 1.5, 1.2, 1.1], {"mode": "max", "patience": 3, "min_delta": 0.01}),
        ("none", [1.0, 0.9], {}),
    ]
    seen = []
    for name, values, kwargs in cases:
        es = EarlyStopping(monitor="val_loss", **kwargs)
        ck = ModelCheckpoint(dirpath=os.path.join(root, name), save_last=True)
        trainer = pl.Trainer(
            max_epochs=len(values),
            callbacks=[es, ck],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=root,
            num_sanity_val_steps=0,
        )
        trainer.fit(Noisy(values), DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=8))
        entries = torch.load(ck.last_model_path, weights_only=False)["callbacks"]
        seen.append((name, es.stopping_reason.value, es.stopping_reason_message, trainer.current_epoch))
        seen.append([(key, plain(dict(value))) for key, value in sorted(entries.items())])
    return seen
