# self.log with values and options Lightning refuses or converts: a 2-element tensor, a string, None, a dict, an int,
# a bool, a numpy float, one name twice with different options, a slash in a name, log_dict of nested dicts
import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

CASES = {
    "two_elements": lambda m, loss: m.log("v", torch.ones(2)),
    "string": lambda m, loss: m.log("v", "text"),
    "none": lambda m, loss: m.log("v", None),
    "dict": lambda m, loss: m.log("v", {"a": 1.0}),
    "int": lambda m, loss: m.log("v", 3),
    "bool": lambda m, loss: m.log("v", True),
    "numpy": lambda m, loss: m.log("v", np.float32(2.5)),
    "int_tensor": lambda m, loss: m.log("v", torch.tensor(4)),
    "twice_different": lambda m, loss: (m.log("v", loss), m.log("v", loss, prog_bar=True)),
    "twice_same": lambda m, loss: (m.log("v", loss), m.log("v", loss * 2)),
    "slash": lambda m, loss: m.log("a/b", loss),
    "nested_dict": lambda m, loss: m.log_dict({"a": {"b": loss}}),
    "grad_tensor": lambda m, loss: m.log("v", loss),
}


class Model(pl.LightningModule):
    def __init__(self, case):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.case = case

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])
        CASES[self.case](self, loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    seen = []
    for case in CASES:
        model = Model(case)
        trainer = pl.Trainer(
            max_epochs=1,
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
            enable_checkpointing=False,
            default_root_dir=root,
        )
        try:
            trainer.fit(model, data)
            metrics = {k: (round(float(v), 5), str(v.dtype)) for k, v in sorted(trainer.callback_metrics.items())}
            seen.append((case, "ok", metrics))
        except Exception:  # noqa: BLE001
            seen.append((case, "error"))
    model.seen = seen
    return model
