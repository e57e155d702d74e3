# self.log called in each hook, configure_optimizers and on_save_checkpoint: recorded where Lightning allows it, an
# error where Lightning refuses it
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

HOOKS = [
    "setup",
    "configure_optimizers",
    "on_fit_start",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_train_batch_end",
    "on_train_epoch_end",
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_epoch_end",
    "on_validation_end",
    "on_train_end",
    "on_fit_end",
    "teardown",
    "on_save_checkpoint",
]


def make(where):
    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

        def configure_optimizers(self):
            if where == "configure_optimizers":
                self.log("x", 1.0)
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def hook(self, *args, **kwargs):
        self.log("x", 1.0)

    if where != "configure_optimizers":
        setattr(Model, where, hook)
    return Model()


def main(root):
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    seen = []
    for where in HOOKS:
        model = make(where)
        trainer = pl.Trainer(
            max_epochs=1,
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
            default_root_dir=root,
            num_sanity_val_steps=0,
        )
        try:
            trainer.fit(model, data, data)
            seen.append((where, "ok", "x" in trainer.callback_metrics))
        except Exception:  # noqa: BLE001
            seen.append((where, "error"))
    model.seen = seen
    return model
