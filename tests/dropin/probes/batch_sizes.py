# the batch size self.log infers to weight epoch means: dicts with strings first, dataclasses, nested lists (a
# smaller last batch makes a wrong weight visible)
import dataclasses

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    y: torch.Tensor


class Texts(Dataset):
    def __init__(self, n, kind):
        g = torch.Generator().manual_seed(n)
        self.x, self.y, self.kind = torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g), kind

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"text": f"sample {i}", "x": self.x[i], "y": self.y[i]}


def collate(kind):
    def fn(items):
        x = torch.stack([i["x"] for i in items])
        y = torch.stack([i["y"] for i in items])
        if kind == "dict":
            return {"text": [i["text"] for i in items], "x": x, "y": y}
        if kind == "dataclass":
            return Batch(x, y)
        return [[i["text"] for i in items], (x, y)]

    return fn


class Model(pl.LightningModule):
    def __init__(self, kind):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.kind = kind
        self.seen = []

    def _xy(self, batch):
        if self.kind == "dict":
            return batch["x"], batch["y"]
        if self.kind == "dataclass":
            return batch.x, batch.y
        return batch[1]

    def training_step(self, batch, batch_idx):
        x, y = self._xy(batch)
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = self._xy(batch)
        self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch

    def on_validation_epoch_end(self):
        self.seen.append(("val", round(float(self.trainer.callback_metrics["val_loss"]), 6)))

    def on_train_epoch_end(self):
        self.seen.append(("train", round(float(self.trainer.callback_metrics["train_loss"]), 6)))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    seen = []
    for kind in ("dict", "dataclass", "nested"):
        torch.manual_seed(0)
        model = Model(kind)
        train = DataLoader(Texts(10, kind), batch_size=4, collate_fn=collate(kind))
        val = DataLoader(Texts(7, kind), batch_size=3, collate_fn=collate(kind))
        trainer = pl.Trainer(
            max_epochs=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            default_root_dir=root,
        )
        trainer.fit(model, train, val)
        seen += [(kind, *s) for s in model.seen]
    model.seen = seen
    return model
