# names imported from the modules that define them (callbacks.model_checkpoint, loggers.csv_logs, utilities.types,
# ...), as Lightning code often does; is_overridden on a module, a callback and a wrapped hook.
import functools
import os

import torch
from pytorch_lightning.callbacks.callback import Callback
from pytorch_lightning.callbacks.early_stopping import EarlyStopping
from pytorch_lightning.callbacks.model_checkpoint import ModelCheckpoint
from pytorch_lightning.callbacks.progress.tqdm_progress import TQDMProgressBar
from pytorch_lightning.core.datamodule import LightningDataModule
from pytorch_lightning.core.module import LightningModule
from pytorch_lightning.loggers.csv_logs import CSVLogger
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.trainer.trainer import Trainer
from pytorch_lightning.utilities.exceptions import MisconfigurationException
from pytorch_lightning.utilities.model_helpers import is_overridden
from pytorch_lightning.utilities.rank_zero import rank_zero_only
from pytorch_lightning.utilities.types import STEP_OUTPUT, OptimizerLRSchedulerConfig
from torch.utils.data import DataLoader, TensorDataset


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class Data(LightningDataModule):
    def train_dataloader(self):
        g = torch.Generator().manual_seed(1)
        return DataLoader(TensorDataset(torch.randn(48, 4, generator=g), torch.randn(48, 1, generator=g)), batch_size=8)

    def val_dataloader(self):
        g = torch.Generator().manual_seed(2)
        return DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), batch_size=8)


class Stages(Callback):
    def __init__(self, seen):
        self.seen = seen

    @rank_zero_only
    def on_train_epoch_end(self, trainer, pl_module):
        self.seen.append(("epoch", trainer.current_epoch, trainer.state.fn == TrainerFn.FITTING))


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx) -> STEP_OUTPUT:
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    @logged
    def on_validation_epoch_end(self):
        pass

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        opt = torch.optim.SGD(self.parameters(), lr=0.05)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)}


def main(root):
    torch.manual_seed(0)
    model = Model()
    stages = Stages(model.seen)
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=2, filename="{epoch}-{val_loss:.4f}")
    trainer = Trainer(
        max_epochs=3,
        logger=CSVLogger(root),
        callbacks=[checkpoint, EarlyStopping("val_loss", patience=5), TQDMProgressBar(refresh_rate=0), stages],
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer.fit(model, datamodule=Data())
    model.seen.append(sorted(os.path.basename(p) for p in checkpoint.best_k_models))
    model.seen.append(
        [
            is_overridden(name, model)
            for name in ("training_step", "test_step", "on_validation_epoch_end", "on_train_epoch_end")
        ]
    )
    model.seen.append([is_overridden(name, stages) for name in ("on_train_epoch_end", "on_fit_start")])
    model.seen.append(is_overridden("train_dataloader", Data()))
    model.seen.append(is_overridden("training_step", None))
    try:
        is_overridden("forward", torch.nn.Linear(1, 1))
    except ValueError:
        model.seen.append("no parent")
    try:
        raise MisconfigurationException("mine")
    except MisconfigurationException as e:
        model.seen.append(str(e))
    return model
