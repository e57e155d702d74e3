"""Lightning's ``accelerators`` names: interlock chooses the accelerator by name (``Trainer(accelerator=...)``)."""

from __future__ import annotations

from interlock.lightning._refuse import missing

__getattr__ = missing(
    "interlock.lightning.accelerators",
    {
        "Accelerator": "pass Trainer(accelerator='cpu'|'cuda'|'gpu'|'mps'|'auto') by name",
        "CPUAccelerator": "Trainer(accelerator='cpu')",
        "CUDAAccelerator": "Trainer(accelerator='cuda') (or 'gpu')",
        "MPSAccelerator": "Trainer(accelerator='mps')",
        "XLAAccelerator": "interlock has no TPU/XLA accelerator; use 'cpu', 'cuda' or 'mps'",
        "find_usable_cuda_devices": "pass Trainer(devices=[indices]) or devices=N; 'auto' takes every visible GPU",
    },
)

#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
