# Three ModelCheckpoints (filename formats, top-k, every_n_train_steps, save_last) and an EarlyStopping: files, best
# paths and scores, the checkpoint's keys.
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self, lr=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("val_loss", loss)
        self.log("val/acc", 1.0 - loss)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        return {
            "optimizer": opt,
            "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 2), "monitor": "val_loss"},
        }


def main(root):
    ds = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    seen = []
    ck1 = ModelCheckpoint(
        dirpath=os.path.join(root, "a"),
        filename="{epoch:02d}-{val_loss:.3f}",
        monitor="val_loss",
        save_top_k=2,
        save_last=True,
    )
    ck2 = ModelCheckpoint(dirpath=os.path.join(root, "b"), filename="s{step}", every_n_train_steps=3, save_top_k=-1)
    ck3 = ModelCheckpoint(
        dirpath=os.path.join(root, "c"),
        filename="acc={val/acc:.2f}",
        monitor="val/acc",
        mode="max",
        auto_insert_metric_name=False,
    )
    es = EarlyStopping(monitor="val_loss", patience=1, min_delta=10.0)
    model = M()
    trainer = pl.Trainer(
        max_epochs=5,
        callbacks=[ck1, ck2, ck3, es],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=8))
    for ck in (ck1, ck2, ck3):
        seen.append(
            (
                os.path.basename(ck.best_model_path),
                os.path.basename(ck.last_model_path or ""),
                sorted((os.path.basename(k), round(float(v), 5)) for k, v in ck.best_k_models.items()),
                sorted(os.listdir(ck.dirpath)),
                None if ck.best_model_score is None else round(float(ck.best_model_score), 5),
                os.path.basename(ck.kth_best_model_path),
            )
        )
    seen.append(
        (
            "es",
            es.wait_count,
            es.stopped_epoch,
            round(float(es.best_score), 5),
            trainer.current_epoch,
            trainer.global_step,
            trainer.should_stop,
        )
    )
    ckpt = torch.load(ck1.last_model_path, weights_only=False)
    seen.append(
        (
            "epoch",
            ckpt["epoch"],
            ckpt["global_step"],
            ckpt["hyper_parameters"],
            sorted(ckpt["state_dict"]),
            len(ckpt["optimizer_states"]),
            len(ckpt["lr_schedulers"]),
        )
    )
    seen.append(("sched", ckpt["lr_schedulers"][0].get("last_epoch"), ckpt["lr_schedulers"][0].get("_last_lr")))
    model.seen = seen
    return model
