# gradient_clip_val 0, the Trainer's value and algorithm through clip_gradients(opt) alone, manual clipping in any
# case, a bad value.
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Auto(pl.LightningModule):
    def __init__(self, bare_clip=False):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.bare_clip = bare_clip

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y) * 10

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        if self.bare_clip:
            self.clip_gradients(optimizer)
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Manual(pl.LightningModule):
    def __init__(self, val, alg):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.automatic_optimization = False
        self.val, self.alg = val, alg

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y) * 10
        opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=self.val, gradient_clip_algorithm=self.alg)
        opt.step()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(model, **kw):
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    trainer = pl.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kw,
    )
    trainer.fit(model, DataLoader(ds, batch_size=8))
    return [round(float(v), 6) for v in model.lin.weight.flatten()]


def main(root):
    seen = []
    torch.manual_seed(1)
    seen.append(("zero", fit(Auto(), gradient_clip_val=0.0, default_root_dir=root)))
    torch.manual_seed(1)
    seen.append(("zero_int", fit(Auto(), gradient_clip_val=0, default_root_dir=root)))
    torch.manual_seed(1)
    seen.append(("none", fit(Auto(), default_root_dir=root)))
    torch.manual_seed(1)
    seen.append(("bare", fit(Auto(bare_clip=True), gradient_clip_val=0.05, default_root_dir=root)))
    torch.manual_seed(1)
    seen.append(
        (
            "bare_value",
            fit(Auto(bare_clip=True), gradient_clip_val=0.05, gradient_clip_algorithm="value", default_root_dir=root),
        )
    )
    torch.manual_seed(1)
    seen.append(("flag", fit(Auto(), gradient_clip_val=0.05, default_root_dir=root)))
    torch.manual_seed(1)
    seen.append(("manual_Value", fit(Manual(0.01, "Value"), default_root_dir=root)))
    torch.manual_seed(1)
    seen.append(("manual_zero", fit(Manual(0, None), default_root_dir=root)))
    torch.manual_seed(1)
    seen.append(("manual_none", fit(Manual(None, None), default_root_dir=root)))
    try:
        torch.manual_seed(1)
        fit(Manual("a", None), default_root_dir=root)
    except Exception as e:
        seen.append(("bad", type(e).__name__))
    m = Auto()
    m.seen = seen
    return m
