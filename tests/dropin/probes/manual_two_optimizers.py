# Manual optimization with two optimizers and schedulers, toggle_optimizer, clip_gradients, max_steps across epochs.
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.g = torch.nn.Linear(4, 4)
        self.d = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        opt_g, opt_d = self.optimizers()
        sch_g, sch_d = self.lr_schedulers()
        x, y = batch
        self.toggle_optimizer(opt_d)
        d_loss = torch.nn.functional.mse_loss(self.d(self.g(x).detach()), y)
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        if (batch_idx + 1) % 2 == 0:
            self.toggle_optimizer(opt_g)
            g_loss = -self.d(self.g(x)).mean()
            opt_g.zero_grad()
            self.manual_backward(g_loss)
            self.clip_gradients(opt_g, 0.5, "norm")
            opt_g.step()
            self.untoggle_optimizer(opt_g)
            sch_g.step()
        self.log("d_loss", d_loss, prog_bar=True)
        self.seen.append(
            (self.global_step, batch_idx, round(sch_g.get_last_lr()[0], 6), round(opt_d.param_groups[0]["lr"], 6))
        )

    def on_train_epoch_end(self):
        self.lr_schedulers()[1].step()

    def configure_optimizers(self):
        og = torch.optim.Adam(self.g.parameters(), lr=0.01)
        od = torch.optim.SGD(self.d.parameters(), lr=0.1)
        return [og, od], [torch.optim.lr_scheduler.StepLR(og, 1, 0.9), torch.optim.lr_scheduler.StepLR(od, 1, 0.5)]


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g))
    model = M()
    t = pl.Trainer(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        max_steps=14,
    )
    t.fit(model, DataLoader(ds, batch_size=4))
    model.seen.append(
        ("end", t.global_step, t.current_epoch, {k: round(float(v), 5) for k, v in t.callback_metrics.items()})
    )
    return model
