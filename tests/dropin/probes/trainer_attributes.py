# the Trainer attributes Lightning code reads before any call and after a fit, a validate and a test
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

ATTRS = [
    "current_epoch",
    "global_step",
    "max_epochs",
    "max_steps",
    "min_epochs",
    "min_steps",
    "num_training_batches",
    "num_val_batches",
    "num_sanity_val_batches",
    "num_test_batches",
    "check_val_every_n_epoch",
    "val_check_interval",
    "val_check_batch",
    "log_every_n_steps",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "precision",
    "num_devices",
    "device_ids",
    "num_nodes",
    "node_rank",
    "local_rank",
    "global_rank",
    "world_size",
    "is_global_zero",
    "estimated_stepping_batches",
    "should_stop",
    "sanity_checking",
    "training",
    "validating",
    "testing",
    "predicting",
    "interrupted",
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "fast_dev_run",
    "received_sigterm",
]


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {
            "optimizer": opt,
            "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 2), "interval": "step", "frequency": 3},
        }


def read(trainer, fit=True):
    out = {}
    for name in ATTRS if fit else [a for a in ATTRS if a != "estimated_stepping_batches"]:  # Lightning: fit only
        try:
            value = getattr(trainer, name)
            out[name] = value if isinstance(value, (int, float, bool, str, type(None))) else repr(value)
        except Exception as e:  # noqa: BLE001
            out[name] = f"error {type(e).__name__}"
    out["optimizers"] = [type(o).__name__ for o in trainer.optimizers]
    out["schedulers"] = [(type(c.scheduler).__name__, c.interval, c.frequency) for c in trainer.lr_scheduler_configs]
    # interlock's trace listener is in trainer.callbacks too (no Lightning counterpart)
    out["callbacks"] = sorted(type(c).__name__ for c in trainer.callbacks if type(c).__name__ != "EventTrace")
    out["es"] = type(trainer.early_stopping_callback).__name__
    out["ck"] = [type(c).__name__ for c in trainer.checkpoint_callbacks]
    out["state"] = (trainer.state.fn, trainer.state.status, trainer.state.stage)
    return out


def main(root):
    before = pl.Trainer(logger=False, enable_progress_bar=False, default_root_dir=root)
    first = [
        repr(getattr(before, n))
        for n in (
            "num_training_batches",
            "num_val_batches",
            "num_test_batches",
            "num_predict_batches",
            "num_sanity_val_batches",
            "val_check_batch",
        )
    ]
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    data = TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g))
    model = Model()
    model.seen.append(("before any call", first))
    trainer = pl.Trainer(
        max_epochs=3,
        min_epochs=1,
        limit_train_batches=4,
        limit_val_batches=0.5,
        val_check_interval=2,
        accumulate_grad_batches=2,
        gradient_clip_val=1.0,
        log_every_n_steps=3,
        callbacks=[EarlyStopping("val_loss", patience=9), ModelCheckpoint(monitor="val_loss")],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        default_root_dir=root,
    )
    trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))
    model.seen.append(("fit", read(trainer)))
    trainer.validate(model, DataLoader(data, batch_size=8))
    model.seen.append(("validate", read(trainer, fit=False)))
    trainer.test(model, DataLoader(data, batch_size=5))
    model.seen.append(("test", read(trainer, fit=False)))
    return model
