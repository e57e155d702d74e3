# monitors that find nothing (EarlyStopping strict and not, ModelCheckpoint with validation off; the errors' types and
# messages), a failing step seen by a callback's on_exception (trainer.interrupted, the status), and the trainer's state
# after each
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self, fail_at=None):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.fail_at = fail_at
        self.seen = []

    def training_step(self, batch, batch_idx):
        if self.global_step == self.fail_at:
            raise ValueError("step failed")
        loss = torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Seen(Callback):
    def __init__(self, seen):
        self.seen = seen

    def on_exception(self, trainer, pl_module, exception):
        self.seen.append(
            (
                "on_exception",
                type(exception).__name__,
                str(exception),
                trainer.state.status.value,
                trainer.interrupted,
                trainer.global_step,
            )
        )


def attempt(model, root, name, **kw):
    trainer = pl.Trainer(
        max_epochs=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        default_root_dir=os.path.join(root, name),
        **kw,
    )
    g = torch.Generator().manual_seed(2)
    data = DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), batch_size=4)
    try:
        trainer.fit(model, data, data)
        outcome = "ok"
    except Exception as e:  # noqa: BLE001
        outcome = (type(e).__name__, str(e))
    ck = trainer.checkpoint_callback
    files = sorted(os.listdir(ck.dirpath)) if ck is not None and ck.dirpath and os.path.isdir(ck.dirpath) else []
    files = [f for f in files if f != "last.ckpt"]  # interlock's default checkpoint also keeps last.ckpt (documented)
    model.seen.append((name, outcome, trainer.state.status.value, trainer.state.stage, trainer.global_step, files))


def main(root):
    torch.manual_seed(0)
    model = Model()
    attempt(model, root, "es_strict", callbacks=[EarlyStopping("missing")])
    attempt(model, root, "es_lenient", callbacks=[EarlyStopping("missing", strict=False)])
    attempt(model, root, "ck_no_val", callbacks=[ModelCheckpoint(monitor="val_loss")], limit_val_batches=0)
    attempt(model, root, "ck_missing", callbacks=[ModelCheckpoint(monitor="nope")])
    failing = Model(fail_at=5)
    attempt(failing, root, "failing", callbacks=[Seen(failing.seen)])
    model.seen += failing.seen
    return model
