"""self.all_gather under DDP (2 processes over gloo): every rank's tensor, stacked on a new first dimension."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from _together import run_script

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    import interlock

    class Gather(interlock.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            mine = torch.tensor([float(self.global_rank), 10.0])
            got = self.all_gather({"t": mine, "n": 3.0})
            self.log("rows", float(got["t"].shape[0]))
            self.log("rank_sum", got["t"][:, 0].sum())
            self.log("n_sum", got["n"].sum())
            self.log("world", float(got["t"].dim()))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    if __name__ == "__main__":
        data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
        trainer = interlock.Trainer(
            accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1, num_sanity_val_steps=0,
            logger=False, enable_trace=False, enable_progress_bar=False, enable_checkpointing=False,
            default_root_dir=sys.argv[1],
        )
        trainer.fit(Gather(), data, data)
        print(json.dumps(dict(trainer.state.metrics)))
    """
)


def test_all_gather_stacks_every_ranks_tensors_under_ddp(tmp_path: Path) -> None:
    """Two ranks: tensors come back as (2, ...) holding rank 0's and rank 1's values; numbers become tensors."""
    done = run_script(tmp_path, SCRIPT)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads(done.stdout.strip().splitlines()[-1])
    assert (metrics["rows"], metrics["rank_sum"], metrics["n_sum"], metrics["world"]) == (2.0, 1.0, 6.0, 2.0)
