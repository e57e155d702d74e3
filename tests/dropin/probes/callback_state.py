# a Callback's own state through checkpoints: state_dict/load_state_dict with a custom state_key, on_save_checkpoint
# adding a key, on_load_checkpoint, two instances of one class with different state keys, and a resume
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Counter(Callback):
    def __init__(self, tag, seen):
        self.tag, self.seen, self.batches = tag, seen, 0

    @property
    def state_key(self):
        return self._generate_state_key(tag=self.tag)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches += 1

    def state_dict(self):
        return {"batches": self.batches}

    def load_state_dict(self, state_dict):
        self.seen.append((self.tag, "load_state_dict", dict(state_dict)))
        self.batches = state_dict["batches"]

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint[f"extra_{self.tag}"] = self.batches

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        self.seen.append(
            (
                self.tag,
                "on_load_checkpoint",
                checkpoint.get(f"extra_{self.tag}"),
                sorted(k for k in checkpoint["callbacks"] if "Counter" in k),
            )
        )


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    data = DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), batch_size=4)
    kw = dict(enable_progress_bar=False, enable_model_summary=False, logger=False)
    model = Model()
    ck = ModelCheckpoint(dirpath=os.path.join(root, "ck"), save_top_k=-1, filename="{epoch}")
    cbs = [Counter("a", model.seen), Counter("b", model.seen), ck]
    pl.Trainer(max_epochs=2, callbacks=cbs, default_root_dir=root, **kw).fit(model, data)
    saved = torch.load(os.path.join(root, "ck", "epoch=0.ckpt"), weights_only=False)
    mine = sorted(k for k in saved["callbacks"] if k.startswith("Counter"))  # ModelCheckpoint's own: documented
    model.seen.append(("saved", mine, saved.get("extra_a"), saved.get("extra_b")))
    other = Model()
    again = [Counter("a", model.seen), Counter("b", model.seen)]
    pl.Trainer(
        max_epochs=3, callbacks=again, default_root_dir=os.path.join(root, "r"), enable_checkpointing=False, **kw
    ).fit(other, data, ckpt_path=os.path.join(root, "ck", "epoch=0.ckpt"))
    model.seen.append(("after resume", again[0].batches, again[1].batches))
    return model
