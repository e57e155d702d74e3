# on_train_batch_start returning -1, the model-mode hooks overridden with super() calls, should_stop before min_epochs.
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def on_train_batch_start(self, batch, batch_idx):
        if self.current_epoch == 1 and batch_idx == 2:
            return -1

    def training_step(self, batch, batch_idx):
        self.seen.append(("ts", self.current_epoch, batch_idx, self.global_step))
        return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.seen.append(("vs", self.current_epoch, batch_idx, self.global_step))

    def on_validation_model_eval(self):
        self.seen.append(("model_eval", self.training))
        super().on_validation_model_eval()

    def on_validation_model_train(self):
        self.seen.append(("model_train", self.training))
        super().on_validation_model_train()

    def on_train_epoch_end(self):
        self.seen.append(("tee", self.current_epoch, self.global_step))
        if self.current_epoch == 2:
            self.trainer.should_stop = True

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(20, 4, generator=g), torch.randn(20, 1, generator=g))
    m = M()
    t = pl.Trainer(
        max_epochs=6,
        min_epochs=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=1,
        limit_val_batches=2,
    )
    t.fit(m, DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=4))
    m.seen.append(("end", t.current_epoch, t.global_step, t.should_stop))
    return m
