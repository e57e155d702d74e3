# configure_gradient_clipping, lr_scheduler_step, on_before_optimizer_step, on_save/load_checkpoint, then a resume
# from last.ckpt.
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []
        self.extra = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y) * 10
        self.extra += 1
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.seen.append(("clip", gradient_clip_val, gradient_clip_algorithm, self.global_step))
        self.clip_gradients(optimizer, gradient_clip_val=0.01)

    def lr_scheduler_step(self, scheduler, metric):
        self.seen.append(
            ("sched_step", self.current_epoch, self.global_step, None if metric is None else round(float(metric), 5))
        )
        scheduler.step()

    def on_before_optimizer_step(self, optimizer):
        self.seen.append(("before_opt", self.global_step, round(float(self.lin.weight.grad.abs().max()), 6)))

    def on_save_checkpoint(self, checkpoint):
        checkpoint["my_extra"] = self.extra
        self.seen.append(
            ("save", sorted(k for k in checkpoint if k in ("state_dict", "epoch", "global_step", "my_extra")))
        )

    def on_load_checkpoint(self, checkpoint):
        self.seen.append(("load", checkpoint.get("my_extra"), checkpoint["epoch"], checkpoint["global_step"]))
        self.extra = checkpoint["my_extra"]

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [
            {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5), "interval": "step", "frequency": 2}
        ]


def main(root):
    ds = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    model = M()
    ck = ModelCheckpoint(dirpath=os.path.join(root, "ck"), save_last=True)
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[ck],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
        gradient_clip_algorithm="value",
    )
    trainer.fit(model, DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=8))
    model2 = M()
    trainer2 = pl.Trainer(
        max_epochs=3,
        callbacks=[ModelCheckpoint(dirpath=os.path.join(root, "ck2"))],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
        gradient_clip_algorithm="value",
    )
    trainer2.fit(model2, DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=8), ckpt_path=ck.last_model_path)
    model2.seen = model.seen + [("---",)] + model2.seen + [("extra", model2.extra)]
    return model2
