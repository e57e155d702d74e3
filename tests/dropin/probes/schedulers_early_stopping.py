# ReduceLROnPlateau (val and train monitors, frequency), OneCycleLR sized by estimated_stepping_batches, EarlyStopping
# settings.
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping
from torch.utils.data import DataLoader, TensorDataset


class Rec(pl.Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_train_epoch_start(self, trainer, pl_module):
        self.seen.append(
            (
                "tes",
                trainer.current_epoch,
                trainer.global_step,
                [round(g["lr"], 6) for o in trainer.optimizers for g in o.param_groups],
                trainer.num_training_batches,
                trainer.estimated_stepping_batches,
            )
        )

    def on_validation_end(self, trainer, pl_module):
        self.seen.append(("ve", trainer.current_epoch, trainer.global_step, trainer.should_stop))


class M(pl.LightningModule):
    def __init__(self, kind):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.kind = kind

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y) + 0.0 * self.current_epoch)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        if self.kind == "plateau":
            s = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": s, "monitor": "val_loss"}}
        if self.kind == "plateau_train":
            s = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
            return {
                "optimizer": opt,
                "lr_scheduler": {"scheduler": s, "monitor": "train_loss_epoch", "interval": "epoch", "frequency": 2},
            }
        if self.kind == "onecycle":
            s = torch.optim.lr_scheduler.OneCycleLR(
                opt, max_lr=0.5, total_steps=self.trainer.estimated_stepping_batches
            )
            return [opt], [{"scheduler": s, "interval": "step"}]
        return opt


def fit(kind, root, seen, **kw):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g))
    torch.manual_seed(0)
    model = M(kind)
    trainer = pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
        callbacks=[Rec(seen)] + kw.pop("cbs", []),
        **kw,
    )
    trainer.fit(model, DataLoader(ds, batch_size=8, shuffle=True), DataLoader(ds, batch_size=8))
    seen.append(
        (kind, trainer.current_epoch, trainer.global_step, [round(float(v), 6) for v in model.lin.weight.flatten()])
    )
    return model


def main(root):
    seen = []
    fit("plateau", root, seen, max_epochs=4)
    fit("plateau_train", root, seen, max_epochs=5)
    fit("onecycle", root, seen, max_epochs=3, accumulate_grad_batches=2, limit_train_batches=0.8)
    fit(
        "plain",
        root,
        seen,
        max_epochs=6,
        cbs=[
            EarlyStopping(
                "val_loss",
                patience=1,
                stopping_threshold=0.0,
                divergence_threshold=100.0,
                check_on_train_epoch_end=False,
            )
        ],
    )
    fit(
        "plain",
        root,
        seen,
        max_epochs=6,
        check_val_every_n_epoch=2,
        cbs=[EarlyStopping("val_loss", patience=0, min_delta=0.05, mode="min")],
    )
    fit(
        "plain",
        root,
        seen,
        max_epochs=3,
        val_check_interval=0.5,
        cbs=[EarlyStopping("train_loss_epoch", patience=0, min_delta=0.5, check_on_train_epoch_end=True)],
    )
    m = fit(
        "plain",
        root,
        seen,
        max_steps=7,
        max_epochs=-1,
        min_epochs=2,
        cbs=[EarlyStopping("val_loss", patience=0, min_delta=5.0)],
    )
    m.seen = seen
    return m
