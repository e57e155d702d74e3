# precision flags as Lightning takes them (ints, short and legacy strings), on the CPU: trainer.precision and the
# dtype of the activations and the weights after a short fit
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])
        self.seen.append(str(self.lin(batch[0]).dtype))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    seen = []
    for precision in (
        32,
        "32",
        "32-true",
        64,
        "64",
        "64-true",
        "bf16",
        "bf16-mixed",
        "bf16-true",
        16,
        "16",
        "16-mixed",
        "16-true",
        "transformer-engine",
        "double",
        "half",
    ):
        torch.manual_seed(0)
        model = Model()
        try:
            trainer = pl.Trainer(
                max_epochs=1,
                precision=precision,
                enable_progress_bar=False,
                logger=False,
                enable_model_summary=False,
                enable_checkpointing=False,
                default_root_dir=root,
            )
            trainer.fit(model, data)
            seen.append((repr(precision), trainer.precision, model.seen[-1], str(model.lin.weight.dtype)))
        except Exception:  # noqa: BLE001
            seen.append((repr(precision), "error"))
    model = Model()
    model.seen = seen
    return model
