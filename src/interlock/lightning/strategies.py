"""Lightning's ``strategies`` names: interlock takes strategies by name; each raises ``ImportError`` saying which."""

from __future__ import annotations

from interlock.lightning._refuse import missing

_BY_NAME = "interlock takes the strategy by name: Trainer(strategy="
__getattr__ = missing(
    "interlock.lightning.strategies",
    {
        "DDPStrategy": f"{_BY_NAME}'ddp') (or 'ddp_spawn', 'ddp_sharded'); see docs/distributed.md",
        "FSDPStrategy": f"{_BY_NAME}'fsdp') (or 'fsdp_sharded'); see docs/distributed.md",
        "SingleDeviceStrategy": f"{_BY_NAME}'single_device')",
        "DeepSpeedStrategy": "interlock has no DeepSpeed strategy; use Trainer(strategy='fsdp')",
        "ModelParallelStrategy": "interlock has no tensor parallelism; use Trainer(strategy='fsdp')",
        "ParallelStrategy": f"{_BY_NAME}'ddp') or 'fsdp'",
        "Strategy": "interlock's strategies are plugins chosen by name (interlock.plugins.strategy)",
    },
)

#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
