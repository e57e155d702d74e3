# trainer.init_module(): a module made under it has the run's dtype (64-true, bf16-true: their default dtype, so
# its initial weights are drawn in that dtype) and skips initialisation with empty_init=True (the RNG undrawn, the
# weights then loaded); trainer.print, trainer.evaluating in each loop, distributed_sampler_kwargs and scaler on
# one device
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset


class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.out = torch.nn.Linear(3, 1)
        self.made = (
            str(self.lin.weight.dtype),
            str(self.lin.weight.device),
            torch.get_default_dtype() == torch.float32,
        )
        self.seen = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(("train", self.trainer.evaluating))
        return torch.nn.functional.mse_loss(self.out(self.lin(x)), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(("val", self.trainer.evaluating, self.trainer.sanity_checking))
        self.log("val_loss", torch.nn.functional.mse_loss(self.out(self.lin(x)), y))

    def test_step(self, batch, batch_idx):
        self.seen.append(("test", self.trainer.evaluating))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Printer(Callback):
    def __init__(self, out):
        self.out = out

    def on_train_epoch_end(self, trainer, pl_module):
        trainer.print("epoch", trainer.current_epoch, "done")
        self.out.append(("callback view", trainer.evaluating, trainer.distributed_sampler_kwargs, trainer.scaler))


def data():
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g))
    return DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=12)


def run(precision, empty_init=None, state=None):
    trainer = pl.Trainer(
        max_epochs=2,
        precision=precision,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=1,
    )
    with trainer.init_module(empty_init=empty_init):
        model = M()
    drawn = torch.rand(2).tolist()  # where the global RNG is after making the module
    initial = {k: v.float().tolist() for k, v in model.state_dict().items()} if empty_init is None else None
    if state is not None:
        model.load_state_dict(state)
    train, val = data()
    if precision != "64-true":
        train = DataLoader(TensorDataset(*(t.to(torch.bfloat16) for t in train.dataset.tensors)), batch_size=8)
        val = DataLoader(TensorDataset(*(t.to(torch.bfloat16) for t in val.dataset.tensors)), batch_size=12)
    trainer.fit(model, train, val)
    trainer.test(model, val, verbose=False)
    final = {k: v.float().tolist() for k, v in model.state_dict().items()}
    return model, [model.made, drawn, initial, model.seen, final, str(torch.get_default_dtype())]


def main(root):
    seen = []
    for precision in ("64-true", "bf16-true"):
        torch.manual_seed(0)
        model, record = run(precision)
        seen.append((precision, record))
    torch.manual_seed(0)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    empty, record = run("64-true", empty_init=True, state={k: v.double() for k, v in state.items()})
    seen.append(("empty_init", record))
    printed = []
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[Printer(printed)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(M(), *data())
    seen.append(("printed", printed, trainer.distributed_sampler_kwargs, trainer.scaler, trainer.evaluating))
    empty.seen = seen
    return empty
