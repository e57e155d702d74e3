# gradients around validation inside fit (Lightning releases them before validating unless a window is open:
# on_validation_model_zero_grad), an override of that hook, and the gradients after fit and after validate
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


class M(pl.LightningModule):
    def __init__(self, override):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.override = override
        self.seen = []

    def grads(self):
        return tuple(p.grad is None for p in self.parameters())

    def training_step(self, batch, batch_idx):
        self.seen.append(("train", self.current_epoch, batch_idx, self.grads()))
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.seen.append(("batch_end", batch_idx, self.grads()))

    def on_train_epoch_end(self):
        self.seen.append(("epoch_end", self.current_epoch, self.grads()))

    def on_validation_start(self):
        self.seen.append(("val_start", self.global_step, self.grads()))

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Keep(M):
    def on_validation_model_zero_grad(self):
        self.seen.append(("zero_grad_hook", self.global_step))


def main(root):
    seen = []
    model = None
    for cls, flags in ((M, {}), (M, {"accumulate_grad_batches": 3}), (Keep, {}), (M, {"val_check_interval": 2})):
        model = cls(True)
        trainer = pl.Trainer(
            max_epochs=2,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
            num_sanity_val_steps=1,
            **flags,
        )
        trainer.fit(model, DataLoader(data(32, 0), batch_size=8), DataLoader(data(16, 1), batch_size=8))
        model.seen.append(("after_fit", model.grads()))
        trainer.validate(model, DataLoader(data(16, 1), batch_size=8), verbose=False)
        model.seen.append(("after_validate", model.grads()))
        seen.append((cls.__name__, flags, model.seen))
    model.seen = seen
    return model
