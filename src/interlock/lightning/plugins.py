"""Lightning's ``plugins`` names: interlock's precision and checkpoint IO are chosen by name, not passed as objects."""

from __future__ import annotations

from interlock.lightning._refuse import missing

_PRECISION = "pass Trainer(precision='16-mixed'|'bf16-mixed'|'32-true'|'64-true'|'16-true'|'bf16-true')"
__getattr__ = missing(
    "interlock.lightning.plugins",
    {
        "Precision": _PRECISION,
        "MixedPrecision": _PRECISION,
        "HalfPrecision": _PRECISION,
        "DoublePrecision": "Trainer(precision='64-true')",
        "FSDPPrecision": f"Trainer(strategy='fsdp') with {_PRECISION}",
        "BitsandbytesPrecision": "interlock has no bitsandbytes quantization",
        "TransformerEnginePrecision": "interlock has no Transformer Engine precision",
        "DeepSpeedPrecision": "interlock has no DeepSpeed",
        "XLAPrecision": "interlock has no XLA support",
        "CheckpointIO": "interlock writes checkpoints itself; strategy='ddp_sharded'/'fsdp_sharded' writes sharded "
        "ones in the background",
        "TorchCheckpointIO": "interlock writes checkpoints with torch.save already",
        "AsyncCheckpointIO": "Trainer(strategy='ddp_sharded') or 'fsdp_sharded' writes checkpoints in the background",
        "XLACheckpointIO": "interlock has no XLA support",
        "LayerSync": "convert first: torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)",
        "TorchSyncBatchNorm": "convert first: torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)",
    },
)

#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
