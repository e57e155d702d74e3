# Lightning's IterableBoringDataModule (a map-style and an iterable dataset per stage): training cycles the two loaders
# together (an unsized combined loader, ended by both running out), validate/test/predict run them in turn
import pytorch_lightning as pl
import torch
from pytorch_lightning.demos.boring_classes import BoringModel, IterableBoringDataModule


class Pair(BoringModel):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)  # the data module's vectors have 4 features
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append(("train", self.current_epoch, batch_idx, [round(float(b.sum()), 4) for b in batch]))
        return {"loss": sum(self.step(b) for b in batch)}

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.seen.append(("val", dataloader_idx, batch_idx))
        self.log("v", self.step(batch))

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("t", self.step(batch))

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return round(float(self(batch).sum()), 4)


def main(root):
    model = Pair()
    flags = dict(
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
        num_sanity_val_steps=0,
        limit_val_batches=3,
    )
    trainer = pl.Trainer(max_epochs=2, **flags)
    dm = IterableBoringDataModule()
    trainer.fit(model, datamodule=dm)
    metrics = {k: round(float(v), 5) for k, v in trainer.callback_metrics.items()}
    model.seen.append(("fit", trainer.global_step, metrics))
    model.seen.append(("validate", trainer.validate(model, datamodule=dm, verbose=False)))
    model.seen.append(("test", trainer.test(model, datamodule=dm, verbose=False)))
    preds = trainer.predict(model, datamodule=dm)
    model.seen.append(("predict", [len(p) for p in preds], [p[:3] for p in preds]))
    return model
