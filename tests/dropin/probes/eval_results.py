# validate(ckpt_path='best'), test with two loaders and an epoch-end value, predict with two loaders and
# return_predictions=False.
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


def R(x):
    if isinstance(x, dict):
        return {k: R(v) for k, v in sorted(x.items())}
    if isinstance(x, (list, tuple)):
        return [R(v) for v in x]
    if isinstance(x, torch.Tensor):
        return [round(float(v), 5) for v in x.flatten()][:4]
    if isinstance(x, float):
        return round(x, 5)
    return x


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("test_loss", loss)
        self.log("test_max", loss, reduce_fx="max", on_step=True)
        return {"l": loss}

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self.lin(batch[0]) + dataloader_idx

    def on_test_epoch_end(self):
        self.log("after", 1.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(20, 4, generator=g), torch.randn(20, 1, generator=g))
    seen = []
    model = M()
    ck = ModelCheckpoint(dirpath=os.path.join(root, "ck"), monitor="val_loss", save_top_k=1)
    trainer = pl.Trainer(
        max_epochs=3,
        callbacks=[ck],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=4))
    seen.append(("best", os.path.basename(ck.best_model_path)))
    seen.append(
        ("validate_best", R(trainer.validate(model, DataLoader(ds, batch_size=4), ckpt_path="best", verbose=False)))
    )
    seen.append(("w_after_validate_best", R(model.lin.weight)))
    seen.append(
        ("test2", R(trainer.test(model, [DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=10)], verbose=False)))
    )
    seen.append(("cm", R(trainer.callback_metrics)))
    seen.append(("predict2", R(trainer.predict(model, [DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=10)]))))
    seen.append(("predict_none", trainer.predict(model, DataLoader(ds, batch_size=8), return_predictions=False)))
    seen.append(("state", trainer.current_epoch, trainer.global_step, str(trainer.state.fn), str(trainer.state.stage)))
    model.seen = seen
    return model
