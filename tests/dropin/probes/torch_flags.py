# torch's global flags after Trainer(deterministic=..., benchmark=...) is made and after its fit (cudnn benchmark
# and deterministic, deterministic algorithms, CUBLAS_WORKSPACE_CONFIG), each put back to torch's defaults between cases
import os

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.seen.append(("in step", flags()))
        return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def flags():
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )


def reset():
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


def main(root):
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    model = Model()
    for kw in (
        dict(),
        dict(deterministic=True),
        dict(deterministic="warn"),
        dict(benchmark=True),
        dict(deterministic=True, benchmark=False),
        dict(deterministic=False),
    ):
        reset()
        trainer = pl.Trainer(
            max_epochs=1,
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
            enable_checkpointing=False,
            default_root_dir=root,
            **kw,
        )
        model.seen.append((sorted(kw.items()), "made", flags()))
        trainer.fit(model, data)
        model.seen.append(("after fit", flags()))
    reset()
    return model
