# predict without a predict_step (Lightning's default calls forward on the batch), with a tuple batch, a dict
# batch, and test/validate without the steps they need
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def forward(self, x):
        if isinstance(x, (tuple, list)):
            x = x[0]
        if isinstance(x, dict):
            x = x["x"]
        return self.lin(x)

    def training_step(self, batch, batch_idx):
        return self(batch).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    torch.manual_seed(0)
    model = Model()
    x = torch.randn(6, 4)
    kw = dict(enable_progress_bar=False, enable_model_summary=False, logger=False, default_root_dir=root)
    for data in (
        DataLoader(x, batch_size=3),
        DataLoader(TensorDataset(x), batch_size=3),
        DataLoader([{"x": r} for r in x], batch_size=3),
    ):
        out = pl.Trainer(**kw).predict(model, data)
        model.seen.append([[round(v, 5) for v in o.flatten().tolist()] for o in out])
    for call in ("validate", "test"):
        try:
            getattr(pl.Trainer(**kw), call)(model, DataLoader(x, batch_size=3))
            model.seen.append((call, "ok"))
        except Exception:  # noqa: BLE001
            model.seen.append((call, "error"))
    return model
