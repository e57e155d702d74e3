# the LearningRateFinder callback: the sweep as the fit starts (its rates, losses and suggestion), the module's lr
# and every param group set to the suggestion after configure_optimizers (a scheduler built on the old rate keeps
# its base), update_attr=False leaving both, and the fit after it trained from the same weights, data and RNG (a
# shuffled loader on the global RNG or its own generator, with a validation loader and its sanity check)
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import LearningRateFinder
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self, lr=0.01):
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Scheduled(M):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05)
        return [opt], [torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5**epoch)]


def data(generator=None):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    return DataLoader(ds, batch_size=4, shuffle=True, generator=generator)


class Validated(M):
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))


def run(model, finder, generator=None, val=None):
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[finder],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, data(generator), val)
    found = finder.optimal_lr
    return [
        [round(v, 6) for v in found.results["lr"]],
        [round(v, 5) for v in found.results["loss"]],
        found.suggestion(),
        model.lr,
        [g["lr"] for o in trainer.optimizers for g in o.param_groups],
        torch.rand(2).tolist(),
        [p.detach().flatten().tolist() for p in model.parameters()],
    ]


def main(root):
    seen = []
    torch.manual_seed(0)
    model = M()
    seen.append(("lr attr", run(model, LearningRateFinder(min_lr=1e-4, max_lr=1.0, num_training_steps=20))))
    torch.manual_seed(0)
    seen.append(("scheduled", run(Scheduled(), LearningRateFinder(num_training_steps=12, mode="linear"))))
    torch.manual_seed(0)
    kept = LearningRateFinder(num_training_steps=12, update_attr=False)
    seen.append(("update_attr=False", run(M(), kept)))
    torch.manual_seed(0)
    own = torch.Generator().manual_seed(5)
    validated = run(
        Validated(), LearningRateFinder(num_training_steps=16), own, DataLoader(data().dataset, batch_size=16)
    )
    seen.append(("a loader's generator, validation", validated))
    model.seen = seen
    return model
