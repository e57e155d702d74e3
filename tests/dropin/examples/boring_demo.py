# lightning.pytorch.demos.boring_classes: BoringModel with its own loaders, then DemoModel on BoringDataModule.
import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel, DemoModel


class Both(torch.nn.Module):
    def __init__(self, boring, demo):
        super().__init__()
        self.boring = boring
        self.demo = demo


def main(root):
    seed_everything(7)
    model = BoringModel()
    checkpoint = ModelCheckpoint(monitor="epoch", mode="max")
    trainer = Trainer(
        max_epochs=2, limit_train_batches=8, limit_val_batches=4, limit_test_batches=4, callbacks=[checkpoint]
    )
    trainer.fit(model)
    trainer.test(model)
    assert trainer.current_epoch == 2 and trainer.global_step == 16
    assert trainer.checkpoint_callback.best_model_path.endswith("epoch=1-step=16.ckpt")

    demo = DemoModel(out_dim=4, learning_rate=0.01)
    trainer = Trainer(max_epochs=1, limit_train_batches=6, enable_checkpointing=False, logger=False)
    trainer.fit(demo, datamodule=BoringDataModule())
    return Both(model, demo)
