"""A ddp fit on 2 CPU ranks, and its replay under torchrun (``fit OUT`` or ``replay OUT N [M ...]``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

import interlock
from _dist_worker import RANK_BATCH, Net, dataset
from interlock.listeners.checkpoint import ModelCheckpoint

FLAGS = {"max_epochs": 2, "seed": 5, "strategy": "ddp", "devices": 2, "accelerator": "cpu", "num_sanity_val_steps": 0}


def data() -> DataLoader[tuple[torch.Tensor, ...]]:
    return DataLoader(dataset(), batch_size=RANK_BATCH, shuffle=True)


def net() -> Net:
    torch.manual_seed(0)
    return Net(dropout=0.2, momentum=0.9)


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ.get("RANK", "0"))
    if mode == "fit":
        trainer = interlock.Trainer(
            **FLAGS, default_root_dir=out, enable_progress_bar=False, listeners=[ModelCheckpoint(save_top_k=-1)]
        )
        module = net()
        trainer.fit(module, data())
        torch.save(module.state_dict(), out / f"final{rank}.pt")
        return
    run_dir = out / "runs" / "version_0"
    for to in map(int, sys.argv[3:]):  # each target: replay, save, resume to the end
        with interlock.replay(run_dir, net(), data(), to=to) as rep:
            result = {"number": rep.number, "state": rep.state.chart, "started_at": rep.started_at}
            saved = rep.save(out / f"at{to}.ckpt")
        module = net()
        trainer = interlock.Trainer(**FLAGS, default_root_dir=out / f"resumed{to}", enable_progress_bar=False)
        trainer.fit(module, data(), ckpt_path=saved)
        torch.save(module.state_dict(), out / f"resumed{rank}-{to}.pt")
        (out / f"replay{rank}-{to}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
