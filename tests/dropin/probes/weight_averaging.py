# Lightning's weight averaging callbacks: EMAWeightAveraging (a start step, every n steps, epochs too) and a
# WeightAveraging subclass with its own should_update (the equal-weight average at epoch ends), on a module with
# BatchNorm buffers. Validation sees the averaged weights (swapped in and back), training ends with them; the
# checkpoint holds the average under state_dict, the module under current_model_state, the count under
# averaging_state; a fit resumed from an epoch's file trains on as the whole run did (an epoch-end resume without a
# sanity check: Lightning restarts a mid-epoch one's data, and runs a sanity check after an epoch-end one)
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EMAWeightAveraging, ModelCheckpoint, WeightAveraging
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
        self.val_seen = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.val_seen.append(round(float(loss), 6))
        self.log("val_loss", loss)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class EpochAverage(WeightAveraging):
    def should_update(self, step_idx=None, epoch_idx=None):
        return epoch_idx is not None


def data():
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(48, 4, generator=g), torch.randn(48, 1, generator=g))
    return DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=16)


def fit(root, callback, ckpt_path=None, max_epochs=3):
    ck = ModelCheckpoint(dirpath=os.path.join(root, "ck"), every_n_train_steps=4, save_top_k=-1)
    epochs = ModelCheckpoint(dirpath=os.path.join(root, "ep"), every_n_epochs=1, save_top_k=-1)
    trainer = pl.Trainer(
        max_epochs=max_epochs,
        callbacks=[callback, ck, epochs],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=0 if ckpt_path else 1,
    )
    torch.manual_seed(1)
    model = M()
    train, val = data()
    trainer.fit(model, train, val, ckpt_path=ckpt_path)
    return model, ck, trainer


def contents(path):
    ckpt = torch.load(path, weights_only=False)
    keys = sorted(k for k in ckpt if k in ("state_dict", "current_model_state", "averaging_state", "callbacks"))
    tensors = {
        part: {k: v.tolist() for k, v in ckpt[part].items()}
        for part in ("state_dict", "current_model_state", "averaging_state")
        if part in ckpt
    }
    return keys, tensors, ckpt.get("callbacks", {}).get("EMAWeightAveraging")


def main(root):
    seen = []
    ema = EMAWeightAveraging(decay=0.8, update_starting_at_step=2, update_every_n_steps=2, update_starting_at_epoch=1)
    model, ck, trainer = fit(os.path.join(root, "ema"), ema)
    seen.append(("ema val", model.val_seen, trainer.global_step))
    seen.append(("ema step 16", contents(os.path.join(root, "ema", "ck", "epoch=2-step=16.ckpt"))))
    seen.append(("ema n_averaged", int(ema._average_model.n_averaged)))
    mid = os.path.join(root, "ema", "ep", "epoch=1-step=12.ckpt")
    seen.append(("ema mid", contents(mid)))
    again = EMAWeightAveraging(decay=0.8, update_starting_at_step=2, update_every_n_steps=2, update_starting_at_epoch=1)
    resumed, _, _ = fit(os.path.join(root, "ema2"), again, ckpt_path=mid)
    seen.append(("ema resumed val", resumed.val_seen))
    seen.append(
        (
            "ema resumed weights equal",
            all(torch.equal(a, b) for a, b in zip(resumed.state_dict().values(), model.state_dict().values())),
        )
    )
    seen.append(("ema resumed average", {k: v.tolist() for k, v in again._average_model.state_dict().items()}))

    swa = EpochAverage()
    other, ck2, _ = fit(os.path.join(root, "swa"), swa, max_epochs=2)
    seen.append(("swa val", other.val_seen))
    seen.append(("swa epoch 1", contents(os.path.join(root, "swa", "ep", "epoch=1-step=12.ckpt"))))
    model.seen = seen
    return model
