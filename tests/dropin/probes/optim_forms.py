# configure_optimizers' return forms (an optimizer, a list, lists of optimizers and schedulers, dicts with interval,
# frequency and name, a scheduler config list), the learning rate after each step and trainer.lr_scheduler_configs;
# a step-interval ReduceLROnPlateau on a train metric and on a validation metric (validation every 3 batches)
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset


class Rec(Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seen.append((trainer.global_step, [round(o.param_groups[0]["lr"], 8) for o in trainer.optimizers]))

    def on_train_start(self, trainer, pl_module):
        self.seen.append(
            [
                (type(c.scheduler).__name__, c.interval, c.frequency, c.name, c.monitor, c.strict, c.reduce_on_plateau)
                for c in trainer.lr_scheduler_configs
            ]
        )
        self.seen.append(trainer.estimated_stepping_batches)


class M(pl.LightningModule):
    def __init__(self, form):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.form = form

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        step = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
        f = self.form
        if f == "opt":
            return opt
        if f == "list":
            return [opt]
        if f == "tuple_lists":
            return [opt], [step]
        if f == "dict_sched":
            return {"optimizer": opt, "lr_scheduler": step}
        if f == "dict_config":
            return {
                "optimizer": opt,
                "lr_scheduler": {"scheduler": step, "interval": "step", "frequency": 3, "name": "my_lr"},
            }
        if f == "lists_config":
            return [opt], [{"scheduler": step, "interval": "step"}]
        if f == "plateau":
            return {
                "optimizer": opt,
                "lr_scheduler": {
                    "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5),
                    "monitor": "train_loss",
                    "interval": "step",
                    "strict": False,
                },
            }
        if f == "plateau_val":  # steps every 3 batches, after the validation that runs there
            return {
                "optimizer": opt,
                "lr_scheduler": {
                    "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5),
                    "monitor": "val_loss",
                    "interval": "step",
                    "frequency": 3,
                },
            }
        if f == "onecycle":
            total = self.trainer.estimated_stepping_batches
            return {
                "optimizer": opt,
                "lr_scheduler": {
                    "scheduler": torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=total),
                    "interval": "step",
                },
            }
        if f == "tuple_opt_dict":
            return ({"optimizer": opt, "lr_scheduler": step},)
        raise ValueError(f)


def main(root):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g))
    seen = []
    model = None
    forms = [
        "opt",
        "list",
        "tuple_lists",
        "dict_sched",
        "dict_config",
        "lists_config",
        "plateau",
        "onecycle",
        "tuple_opt_dict",
    ]
    cases = [(form, {"accumulate_grad_batches": 2}) for form in forms]
    # validation every 3 batches, the plateau stepping there, without and with accumulation
    cases += [
        ("plateau_val", {"val_check_interval": 3, "accumulate_grad_batches": a, "num_sanity_val_steps": 0})
        for a in (1, 3)
    ]
    for form, flags in cases:
        seen.append((form, flags))
        model = M(form)
        trainer = pl.Trainer(
            max_epochs=3,
            callbacks=[Rec(seen)],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
            limit_train_batches=7,
            **flags,
        )
        trainer.fit(model, DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=8))
        seen.append(("weights", [round(float(v), 6) for v in model.lin.weight.flatten()]))
    model.seen = seen
    return model
