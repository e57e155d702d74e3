"""A checkpoint saved by a replay between two checkpoint states: its "replay-to" record, written and followed.

:meth:`interlock.Replay.save` at a transition ``T`` whose state is not a ``checkpoint: true`` one (the
middle of a batch: ``fetch``, ``step``, ``backward``, ``optimizer_step``; a failure) writes the full
checkpoint of the newest checkpoint state ``C`` the replay passed at or before ``T``, plus a
``replay_to`` record: the transitions from ``C`` to ``T`` as the run made them, the chart's digest and (in one
process) a fingerprint of the module's and optimizers' tensors at ``T``. A fit resumed from the file restores ``C``,
re-executes to ``T`` checking each transition against the record (:class:`Follower`, an observer of
the stage) and at ``T`` the fingerprint, then simply continues: the run is the original's, bitwise.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import torch

from interlock.core.chart import Chart
from interlock.core.errors import CheckpointError, ReplayDivergence
from interlock.core.events import EventBus
from interlock.core.tracelist import Step

__all__ = [
    "FOLLOW_SOURCE",
    "REPLAY_TO_FORMAT",
    "Follower",
    "chart_digest",
    "check_record",
    "fingerprint",
    "follow",
    "record",
]

#: The ``format`` of a checkpoint's ``replay_to`` record that this interlock reads and writes.
REPLAY_TO_FORMAT = "interlock.replay_to/1"
#: The bus source the follower observes under (removed at the end of the stage).
FOLLOW_SOURCE = "checkpoint-replay-to"
_FIELDS = ("event", "trigger", "source", "count", "epoch", "global_step", "batch_idx")


def _plain(value: Any) -> Any:
    """``value`` as JSON data in one order whatever the process (sets sorted: their order follows the hash seed)."""
    if attrs.has(type(value)):
        return _plain(attrs.asdict(value, recurse=False))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value if value is None or isinstance(value, bool | int | float | str) else repr(value)


def chart_digest(chart: Chart) -> str:
    """A digest of the chart's states and transitions (their docs left out): which chart a record follows.

    The same in every process (no set's order, no object's address goes into it).
    """
    states = {path: {**_plain(spec), "doc": ""} for path, spec in chart.states.items()}
    return hashlib.sha256(json.dumps(states, sort_keys=True).encode()).hexdigest()[:16]


def _tensor(h: Any, name: str, value: torch.Tensor) -> None:
    local = value.to_local() if hasattr(value, "to_local") else value  # a DTensor: this rank's shard
    t = local.detach().cpu().contiguous().reshape(-1)
    h.update(f"{name}:{t.dtype}:{tuple(local.shape)};".encode())
    h.update(t.view(torch.uint8).numpy())  # the buffer itself, not a copy


def fingerprint(module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer], grads: bool) -> str:
    """A digest of the module's parameters and buffers, their gradients (``grads``) and the optimizers' states."""
    h = hashlib.sha256()
    for name, value in module.state_dict().items():
        if isinstance(value, torch.Tensor):
            _tensor(h, f"model.{name}", value)
    if grads:
        for name, param in module.named_parameters():
            if param.grad is not None:
                _tensor(h, f"grad.{name}", param.grad)
    for i, optimizer in enumerate(optimizers):
        saved = optimizer.state_dict()
        for key in sorted(saved["state"], key=str):
            for field, value in sorted(saved["state"][key].items()):
                if isinstance(value, torch.Tensor):
                    _tensor(h, f"optim{i}.{key}.{field}", value)
                else:
                    h.update(f"optim{i}.{key}.{field}={value!r};".encode())
        groups = [{k: v for k, v in sorted(g.items()) if k != "params"} for g in saved["param_groups"]]
        h.update(f"optim{i}.groups={groups!r};".encode())
    return h.hexdigest()


def record(chart: Chart, run_dir: str, start: int, steps: Iterable[Step], target: int, values: str) -> dict[str, Any]:
    """The ``replay_to`` record: from transition ``start`` (the saved state's) to ``target``, made as ``steps``.

    ``values``: the :func:`fingerprint` at ``target`` (``""``: not checked, a run of several processes).
    """
    return {
        "format": REPLAY_TO_FORMAT,
        "chart": chart_digest(chart),
        "run_dir": run_dir,
        "from": start,
        "to": target,
        "transitions": [{k: getattr(s, k) for k in _FIELDS} for s in steps],
        "fingerprint": values,
    }


def check_record(rec: Any, chart: Chart | None, source: str) -> None:
    """Raise :class:`CheckpointError` unless ``rec`` is a ``replay_to`` record this interlock follows on ``chart``."""
    if not isinstance(rec, Mapping) or rec.get("format") != REPLAY_TO_FORMAT:
        found = rec.get("format") if isinstance(rec, Mapping) else type(rec).__name__
        raise CheckpointError(
            f"{source} holds a replay_to record of format {found!r}; this interlock follows {REPLAY_TO_FORMAT!r}: "
            "replay the run again with this interlock and save"
        )
    steps = rec.get("transitions")
    if not isinstance(steps, list) or len(steps) != int(rec.get("to", -1)) - int(rec.get("from", 0)):
        raise CheckpointError(f"{source}: its replay_to record's transitions do not span 'from' to 'to'")
    if chart is not None and rec.get("chart") != chart_digest(chart):
        raise CheckpointError(
            f"{source} was saved by a replay of {rec.get('run_dir')} at transition {rec.get('to')}, a state between "
            f"two checkpoint states, under another chart (digest {rec.get('chart')}; this trainer's chart "
            f"{chart.source!r} has {chart_digest(chart)}): resuming re-executes the run's transitions "
            f"{int(rec.get('from', 0)) + 1} to {rec.get('to')}, which only the same chart can. Resume it with the "
            "run's chart (Trainer(chart=RUN/chart.yaml)), or replay to a checkpoint state and save there"
        )


def _describe(want: Mapping[str, Any], number: int) -> str:
    at = (want.get("epoch"), want.get("global_step"), want.get("batch_idx"))
    names = (str(want.get("event")), str(want.get("trigger")), str(want.get("source")), int(want.get("count") or 0))
    return Step(number, *names, *at, process=0).describe()


class Follower:
    """Observes a resumed fit from the restored state to the record's target; raises at the first difference.

    ``run``: the stage's run (its module and optimizers, fingerprinted at the target); ``grads``: whether
    gradients are part of the fingerprint (a checkpoint of one process holds them).
    """

    def __init__(self, rec: Mapping[str, Any], run: Any, bus: EventBus, source: str, grads: bool) -> None:
        self.rec, self.run, self.bus, self.source, self.grads = rec, run, bus, source, grads
        self.steps: list[Mapping[str, Any]] = list(rec["transitions"])
        self.start, self.target = int(rec["from"]), int(rec["to"])
        self.seen = 0
        self.done = False

    def __call__(
        self, name: str, trigger: str, source: str, count: int, epoch: int, global_step: int, batch_idx: int
    ) -> None:
        if self.done:
            return
        number = self.start + self.seen + 1
        want = self.steps[self.seen]
        got = {"event": name, "trigger": trigger, "source": source, "count": count}
        at = {"epoch": epoch, "global_step": global_step, "batch_idx": batch_idx}
        if any(want.get(k) != v for k, v in got.items()) or any(
            want.get(k) is not None and want.get(k) != v for k, v in at.items()
        ):
            self._stop(
                number,
                f"expected {_describe(want, number)}{self._guard(want.get('source'), want.get('trigger'))}; got "
                f"{_describe({**got, **at}, number)}{self._guard(source, trigger)}. The module's code, the data or "
                "the trainer differ from the replay's",
            )
        self.seen += 1
        if number < self.target:
            return
        run, kept = self.run, self.rec.get("fingerprint")
        if kept and fingerprint(run.module, run.optimizers, self.grads) != kept:  # one process: values checked too
            self._stop(
                number,
                "the transitions agree, but the module's weights, gradients or optimizer state there differ from the "
                "replay's (the module's code or the data's values differ)",
            )
        self._finish()

    def _guard(self, source: Any, trigger: Any) -> str:
        chart = getattr(self.run, "chart", None)
        guard = chart.guard_of(str(source), str(trigger)) if chart is not None else None
        return f" (guard {guard})" if guard else ""

    def _stop(self, number: int, why: str) -> None:
        self._finish()
        raise ReplayDivergence(
            f"{self.source} resumes by re-executing transitions {self.start + 1} to {self.target} of "
            f"{self.rec.get('run_dir')} (saved by a replay at transition {self.target}); it diverged at transition "
            f"{number}: {why}",
            number,
        )

    def _finish(self) -> None:
        """Stop following; leave the bus when last among its observers (removing it then skips none)."""
        self.done = True
        if self.bus.observers and self.bus.observers[-1] is self:
            self.bus.remove_sources({FOLLOW_SOURCE})


def follow(rec: Mapping[str, Any], run: Any, bus: EventBus, source: str, grads: bool) -> Follower:
    """Observe the stage from now (the restored state) with a :class:`Follower` of ``rec``."""
    follower = Follower(rec, run, bus, source, grads)
    bus.observe(follower, source=FOLLOW_SOURCE)
    return follower
