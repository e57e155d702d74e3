# self.log and log_dict options (on_step/on_epoch, reductions, batch_size, prog_bar, logger=False) and several val
# loaders.
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


def R(d):
    return {k: round(float(v), 5) for k, v in sorted(d.items())}


class Rec(pl.Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_train_epoch_end(self, trainer, pl_module):
        self.seen.append(
            (
                "tee",
                trainer.current_epoch,
                R(trainer.callback_metrics),
                R(trainer.logged_metrics),
                R(trainer.progress_bar_metrics),
            )
        )

    def on_validation_epoch_end(self, trainer, pl_module):
        self.seen.append(("vee", trainer.current_epoch, R(trainer.callback_metrics), R(trainer.logged_metrics)))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 1:
            self.seen.append(
                (
                    "tbe",
                    trainer.global_step,
                    R(trainer.callback_metrics),
                    R(trainer.logged_metrics),
                    R(trainer.progress_bar_metrics),
                )
            )


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("a", loss)
        self.log("b", loss, on_step=True, on_epoch=True, prog_bar=True)
        self.log("c", loss, on_step=False, on_epoch=True, reduce_fx="max")
        self.log("d", float(batch_idx), on_epoch=True, reduce_fx="sum", batch_size=3)
        self.log_dict({"e": loss * 2, "f": 1.0}, on_step=True, on_epoch=False, prog_bar=True, logger=False)
        self.log("g", loss, on_epoch=True, batch_size=len(x) + batch_idx)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("vl", loss, prog_bar=True)
        self.log("vs", loss, on_step=True)
        self.log("vmin", loss, reduce_fx="min")
        self.log("vx", loss, add_dataloader_idx=False) if dataloader_idx == 0 else None

    def on_train_epoch_end(self):
        self.log("epoch_metric", float(self.current_epoch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g))
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
        num_sanity_val_steps=0,
        log_every_n_steps=2,
        limit_val_batches=3,
    )
    trainer.fit(model, DataLoader(ds, batch_size=8), [DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=5)])
    seen.append(("final", R(trainer.callback_metrics), R(trainer.logged_metrics), R(trainer.progress_bar_metrics)))
    res = trainer.validate(model, [DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=5)], verbose=False)
    seen.append(("validate", [R(r) for r in res]))
    model.seen = seen
    return model
