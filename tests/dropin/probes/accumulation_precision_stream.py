# GradientAccumulationScheduler, bf16-mixed on CPU, an IterableDataset with accumulation, a batch limit not a multiple
# of it.
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import GradientAccumulationScheduler
from torch.utils.data import DataLoader, IterableDataset, TensorDataset


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        g = torch.Generator().manual_seed(1)
        for _ in range(self.n):
            yield torch.randn(4, generator=g), torch.randn(1, generator=g)


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])
        self.log("tl", loss, on_epoch=True)
        return loss

    def on_train_epoch_end(self):
        self.seen.append(
            (
                self.current_epoch,
                self.global_step,
                self.trainer.accumulate_grad_batches,
                round(float(self.trainer.callback_metrics["tl_epoch"]), 5),
            )
        )

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.05)


def fit(root, data, **kw):
    torch.manual_seed(0)
    m = M()
    t = pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        **kw,
    )
    t.fit(m, data)
    return m


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(30, 4, generator=g), torch.randn(30, 1, generator=g))
    seen = []
    m = fit(root, DataLoader(ds, batch_size=4), max_epochs=4, callbacks=[GradientAccumulationScheduler({0: 1, 2: 3})])
    seen += m.seen + [[round(float(v), 6) for v in m.lin.weight.flatten()]]
    m = fit(root, DataLoader(ds, batch_size=4), max_epochs=2, precision="bf16-mixed")
    seen += m.seen + [[round(float(v), 6) for v in m.lin.weight.flatten()]]
    m = fit(root, DataLoader(Stream(22), batch_size=4), max_epochs=2, accumulate_grad_batches=2)
    seen += m.seen + [[round(float(v), 6) for v in m.lin.weight.flatten()]]
    m = fit(root, DataLoader(ds, batch_size=4), max_epochs=2, accumulate_grad_batches=3, limit_train_batches=7)
    seen += m.seen + [[round(float(v), 6) for v in m.lin.weight.flatten()]]
    m.seen = seen
    return m
