# several training loaders, as Lightning cycles them: a dict and a list of loaders (CombinedLoader max_size_cycle,
# shorter loaders restarting with a fresh shuffle mid-epoch while the step draws dropout), an explicit CombinedLoader in
# each training mode, batch limits, a loader with its own generator, a data module's dict, the trainer's view of them,
# and a CombinedLoader iterated directly
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import CombinedLoader
from torch.utils.data import DataLoader, TensorDataset


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


def first(batch):
    return None if batch is None else round(float(batch[0][0, 0]), 5)


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.drop = torch.nn.Dropout(0.3)
        self.seen = []

    def on_train_start(self):
        t = self.trainer
        view = t.train_dataloader
        shape = sorted(view) if isinstance(view, dict) else type(view).__name__
        self.seen.append(("start", t.num_training_batches, t.estimated_stepping_batches, shape))

    def training_step(self, batch, batch_idx):
        parts = list(batch.values()) if isinstance(batch, dict) else list(batch)
        self.seen.append(("step", self.current_epoch, batch_idx, [first(b) for b in parts]))
        loss = 0
        for b in parts:
            if b is not None:
                x, y = b
                loss = loss + torch.nn.functional.mse_loss(self.lin(self.drop(x)), y)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class DM(pl.LightningDataModule):
    def train_dataloader(self):
        return {"x": DataLoader(data(10, 5), batch_size=4), "y": DataLoader(data(6, 6), batch_size=3, shuffle=True)}


def loaders():
    g = torch.Generator().manual_seed(42)
    return {
        "short": DataLoader(data(8, 1), batch_size=4, shuffle=True),
        "long": DataLoader(data(20, 2), batch_size=4, shuffle=True),
        "own": DataLoader(data(12, 3), batch_size=4, shuffle=True, generator=g),
    }


def main(root):
    model = M()
    flags = dict(
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
    )
    pl.Trainer(max_epochs=2, **flags).fit(model, loaders())
    pl.Trainer(max_epochs=1, **flags).fit(model, list(loaders().values()))
    pl.Trainer(max_epochs=1, limit_train_batches=3, **flags).fit(model, loaders())
    pl.Trainer(max_epochs=1, limit_train_batches=0.5, **flags).fit(model, loaders())
    for mode in ("max_size_cycle", "max_size", "min_size"):
        model.seen.append(("mode", mode))
        pl.Trainer(max_epochs=2, **flags).fit(model, CombinedLoader(loaders(), mode))
    pl.Trainer(max_epochs=1, **flags).fit(model, datamodule=DM())
    try:  # (Lightning raises it after on_train_start; interlock as the fit starts: another module records nothing)
        pl.Trainer(max_epochs=1, **flags).fit(M(), CombinedLoader(loaders(), "sequential"))
    except Exception as e:
        model.seen.append(("sequential", type(e).__name__))
    pair = {"a": DataLoader(range(6), batch_size=4), "b": DataLoader(range(15), batch_size=5)}
    direct = CombinedLoader(pair, "max_size")
    iter(direct)
    model.seen.append(("len", len(direct)))
    for batch, batch_idx, dataloader_idx in direct:
        a = None if batch["a"] is None else batch["a"].tolist()
        model.seen.append(("direct", a, batch["b"].tolist(), batch_idx, dataloader_idx))
    return model
