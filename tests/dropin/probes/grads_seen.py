# the gradients where a callback or the module reads them: on_after_backward, on_before_optimizer_step (norms, with
# accumulation and clipping), validation's start inside fit and validate (interlock frees them after each optimizer
# step: on_train_batch_end and after fit differ, documented in docs/porting.md)
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities import grad_norm
from torch.utils.data import DataLoader, TensorDataset


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


class Norms(Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        norms = grad_norm(pl_module, norm_type=2)
        self.seen.append(("cb_before_step", trainer.global_step, {k: round(float(v), 6) for k, v in norms.items()}))


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def grads(self):
        return tuple(None if p.grad is None else round(float(p.grad.norm()), 6) for p in self.parameters())

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def on_after_backward(self):
        self.seen.append(("after_backward", self.global_step, self.grads()))

    def on_before_optimizer_step(self, optimizer):
        self.seen.append(("before_step", self.global_step, self.grads()))

    def on_validation_start(self):
        self.seen.append(("val_start", self.global_step, self.grads()))

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(root):
    seen = []
    model = None
    cases = ({}, {"accumulate_grad_batches": 3}, {"val_check_interval": 2, "gradient_clip_val": 0.1})
    for flags in cases:
        model = M()
        trainer = pl.Trainer(
            max_epochs=2,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
            num_sanity_val_steps=1,
            callbacks=[Norms(model.seen)],
            **flags,
        )
        trainer.fit(model, DataLoader(data(32, 0), batch_size=8), DataLoader(data(16, 1), batch_size=8))
        trainer.validate(model, DataLoader(data(16, 1), batch_size=8), verbose=False)
        seen.append((flags, model.seen))
    model.seen = seen
    return model
