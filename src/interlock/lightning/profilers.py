"""Lightning's ``profilers`` names: interlock has no profiler plugin; each raises ``ImportError`` naming the way."""

from __future__ import annotations

from interlock.lightning._refuse import missing

_TRACE = "the EventTrace listener times every state (interlock trace, interlock view)"
__getattr__ = missing(
    "interlock.lightning.profilers",
    {
        "Profiler": _TRACE,
        "SimpleProfiler": _TRACE,
        "AdvancedProfiler": f"run trainer.fit under cProfile, or {_TRACE}",
        "PassThroughProfiler": "leave Trainer(profiler=None)",
        "PyTorchProfiler": "wrap trainer.fit in torch.profiler.profile(...)",
        "XLAProfiler": "interlock has no XLA support",
    },
)

#: a package to the import system, so that Lightning's deeper paths below it resolve (interlock.lightning._paths)
__path__: list[str] = []
