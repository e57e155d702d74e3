"""The loops: they advance only by firing the chart's triggers."""

from interlock.loops.evaluation import TRIGGERS as _EVAL_TRIGGERS
from interlock.loops.fit import TRIGGERS as _FIT_TRIGGERS
from interlock.loops.stage import TRIGGERS as _STAGE_TRIGGERS

#: Every trigger some loop fires; the chart must declare exactly these.
TRIGGERS = _EVAL_TRIGGERS | _FIT_TRIGGERS | _STAGE_TRIGGERS

__all__ = ["TRIGGERS"]
