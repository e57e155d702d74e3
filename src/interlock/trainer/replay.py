"""Replay: run a recorded fit again, bitwise, to any of its transitions, and stop there to look.

:func:`replay` reads the run directory (its trace ``events.jsonl``, its trainer ``trainer.json``,
its chart ``chart.yaml`` and its checkpoints), starts a fresh trainer from the newest checkpoint
at or before the target transition (from the start when there is none), and re-executes the chart
with the same RNG and data position. Each transition it makes is compared with the recorded one;
the first that differs stops the replay with :class:`~interlock.ReplayDivergence`. At the target it
stops *without* tearing the stage down: the module, the batch in flight and the frozen state are
there to inspect, and :meth:`Replay.save` writes a checkpoint of that exact moment.

Nothing is written into the recorded run: the replay's own outputs go to a temporary directory,
deleted by :meth:`Replay.close`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from interlock.connectors.checkpoint import saved_state, write_checkpoint
from interlock.connectors.hardware_slot import HardwareSlot
from interlock.connectors.recipe import read_recipe, trainer_kwargs
from interlock.connectors.replayto import fingerprint, record
from interlock.connectors.rundir import CHART_FILE
from interlock.core.chart import Chart, load_chart
from interlock.core.errors import Paused, ReplayDivergence
from interlock.core.events import EventBus
from interlock.core.registry import Registry
from interlock.core.state import TrainerState
from interlock.core.tracelist import Step, read_transitions
from interlock.plugins.checkpoint_io import TorchCheckpointIO
from interlock.trainer.runtime import Runtime, _Edge, _Node
from interlock.trainer.trainer import Trainer

__all__ = ["Replay", "replay", "replay_command"]

_HISTORY = "history.jsonl"


def replay_command(run_dir: str | os.PathLike[str], number: int, cli: bool) -> str:
    """The one line that replays ``run_dir`` to transition ``number``: the CLI's, or the Python call."""
    if cli:
        return f"interlock replay {run_dir} --to {number}"
    return f"interlock.replay({str(run_dir)!r}, module, <data>, to={number})"


class _ReplayRuntime(Runtime):
    """The interpreter, following a recorded trace: compares every transition, stops at the target."""

    def __init__(
        self, chart: Chart, bus: EventBus, registry: Registry, steps: list[Step], start: int, target: int
    ) -> None:
        super().__init__(chart, bus, registry)
        self.steps, self.start, self.target = steps, start, target
        self.aligned = start == 0  # from the start of the run: every transition is compared
        self.done = 0  # the number of the last recorded transition matched
        self.fails_next = target < len(steps) and steps[target].trigger == "fail"
        self.divergence: ReplayDivergence | None = None
        self.error: BaseException | None = None
        self.reached: Step | None = None
        self.rows: list[str] = []  # the run's metric history rows (history.jsonl), as canonical JSON
        self.rows_checked = 0
        self._taken = self._after_take
        # a target between checkpoint states: the newest checkpoint state before it, kept as a file on the way
        self.snapshot_at = _snapshot_at(chart, steps, start, target, self.fails_next)
        self.snapshot_file: Path | None = None  # where to write it (set by replay()); written there once reached
        self.snapshot: Path | None = None
        self.print_at_target = ""  # the module's and optimizers' fingerprint as the run entered the target
        bus.observe(self._seen)

    def _seen(
        self, name: str, trigger: str, source: str, count: int, epoch: int, global_step: int, batch_idx: int
    ) -> None:
        if not self.aligned:
            return
        number = self.done + 1
        got = Step(number, name, trigger, source, count, epoch, global_step, batch_idx, 0)
        want = self.steps[self.done] if self.done < len(self.steps) else None
        if want is None or not _same(want, got):
            self._diverge(number, want, got.describe(), self.chart.guard_of(source, trigger))
        if len(self._base.history) > self.rows_checked:
            self._check_rows(number)
        self.done = number
        self.reached = self.steps[number - 1]
        if number == self.target and self.snapshot_at is not None and _one_process(self.current_run):
            self.print_at_target = _print(self.current_run)  # several processes: only the transitions are checked

    def _check_rows(self, number: int) -> None:
        """Compare the metric rows logged since the last check with the run's (where it kept them)."""
        history = self._base.history
        for i in range(self.rows_checked, min(len(history), len(self.rows))):
            got = _canonical(history[i])
            if got != self.rows[i]:
                self.divergence = ReplayDivergence(
                    f"the replay diverged from the recorded run by transition {number}: metric row {i + 1} of its "
                    f"history is {got}, the run logged {self.rows[i]}. The transitions agree, the values do not: "
                    "the module's weights or code, or the data's values, differ from the run's",
                    number,
                )
                raise Paused
        self.rows_checked = len(history)

    def _diverge(self, number: int, want: Step | None, got: str, guard: str | None) -> None:
        expected = "the end of the recorded run" if want is None else want.describe()
        decided = self.chart.guard_of(want.source, want.trigger) if want is not None else None
        self.divergence = ReplayDivergence(
            f"the replay diverged from the recorded run at transition {number}: expected {expected}"
            + (f" (guard {decided})" if decided else "")
            + f"; got {got}"
            + (f" (guard {guard})" if guard else "")
            + ". The module, the data or the trainer differ from the run's (weights, data order or length, "
            "listeners that change the run such as EarlyStopping or FiniteGuard: pass them with "
            "replay(..., listeners=[...]))",
            number,
        )
        raise Paused

    def _after_take(self) -> None:
        if self.aligned and self.done == self.snapshot_at:
            self._snap()
        if self.aligned and self.done == self.target and not self.fails_next:
            raise Paused

    def _do_jump(self) -> _Node:
        node = super()._do_jump()
        self.aligned, self.done = True, self.start
        self.reached = self.steps[self.start - 1]
        if self.done == self.snapshot_at:
            self._snap()
        if self.done == self.target and not self.fails_next:
            raise Paused
        return node

    def _snap(self) -> None:
        """Write the checkpoint of this checkpoint state, the start of a save between it and the target."""
        run = self.current_run
        if self.snapshot_file is None or run is None or run.slot(HardwareSlot).strategy.sharded_checkpoint:
            return
        self.snapshot_file.parent.mkdir(parents=True, exist_ok=True)
        write_checkpoint(run, str(self.snapshot_file))
        self.snapshot = self.snapshot_file

    def _fail(self, exc: BaseException) -> _Edge:
        if isinstance(exc, Paused):
            raise exc
        if not self.aligned:
            return super()._fail(exc)
        want = self.steps[self.done] if self.done < len(self.steps) else None
        got = f"{type(exc).__name__}: {exc}"
        if want is None or want.trigger != "fail":
            self._diverge(self.done + 1, want, f"a failure in state {self.at!r}: {got}", None)
        assert want is not None
        if want.error is not None and want.error != got:
            self._diverge(self.done + 1, want, f"another error there: {got} (recorded: {want.error})", None)
        if self.done == self.target:
            self.error = exc
            raise Paused
        return super()._fail(exc)


class Replay:
    """A replayed run stopped at one transition: look at it, save it, :meth:`close` it.

    ``state`` is the frozen trainer state there; ``event`` the transition reached (its number, states,
    trigger and counters); ``error`` the exception when the replay ended in the run's failure (captured,
    not raised); ``started_at`` the global step of the checkpoint it started from (``None``: from the
    start); ``checkpoint`` that file; ``module`` the module, as it is there; ``batch`` the batch in flight;
    ``saved_from`` after :meth:`save`, the transition whose checkpoint state the file holds.
    """

    def __init__(self, runtime: _ReplayRuntime, module: Any, run_dir: Path, tmp: str, started: Any) -> None:
        self._runtime, self._tmp, self.run_dir = runtime, tmp, run_dir
        self.module = module
        self.state: TrainerState = runtime.state
        self.event: Step | None = runtime.reached
        self.error: BaseException | None = runtime.error
        self.checkpoint: Path | None = started[0]
        self.started_at: int | None = started[1]
        run = runtime.current_run
        self.batch: Any = run.step.batch if run is not None else None
        # between checkpoint states: what the module and optimizers are here, to refuse a save after a change
        self._print = _print(run) if runtime.snapshot is not None else ""
        #: after :meth:`save`: the transition whose checkpoint state the file holds (this one's, or the one a
        #: resume re-executes from, up to this one); ``None`` before a save
        self.saved_from: int | None = None

    @property
    def number(self) -> int:
        """The number of the transition reached (0: none)."""
        return self.event.number if self.event is not None else 0

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a checkpoint of this exact moment; ``Trainer.fit(ckpt_path=path)`` continues from it bitwise.

        In a ``checkpoint: true`` state (a batch or epoch boundary) the file holds the run as it is here.
        In any other state (the middle of a batch, a failure) it holds the newest checkpoint state the
        replay passed before this transition, and a ``replay_to`` record: the transitions from there to
        here. A fit resumed from it re-executes them, checking each against the record, and continues.
        That re-execution cannot carry a change made here by hand: if the module's weights, gradients or
        optimizer state changed since the replay stopped, this raises ``ValueError`` naming the next
        transition whose state is saved as it is. Before the run's first checkpoint state nothing can be saved.
        """
        runtime = self._runtime
        run = runtime.current_run
        if run is None:
            raise ValueError("this replay is closed; replay the run again to save it")
        where = self.state.chart
        target = Path(path)
        if self.error is None and where in runtime.chart.checkpoint_states:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_checkpoint(run, str(target))
            self.saved_from = self.number
            return target
        snapshot, at = runtime.snapshot, runtime.snapshot_at
        strategy = run.slot(HardwareSlot).strategy
        if strategy.sharded_checkpoint:
            raise ValueError(
                f"cannot save at transition {self.number}, state {where!r} (between checkpoint states), with sharded "
                f"checkpoints ({type(strategy).__name__}): the save of a checkpoint state and the transitions to "
                f"re-execute is one file. {self._later()}"
            )
        if snapshot is None or at is None:
            raise ValueError(self._not_here(where))
        if _print(run) != self._print:
            raise ValueError(
                f"cannot save at transition {self.number}: the module's weights, gradients or optimizer state changed "
                f"since the replay stopped there, and a save in state {where!r} (between checkpoint states) is "
                f"resumed by re-executing transitions {at + 1} to {self.number} from the checkpoint state of "
                f"transition {at}, which would lose the change. {self._later()}"
            )
        if strategy.is_global_zero:
            io = TorchCheckpointIO()
            ckpt = io.load_checkpoint(snapshot, map_location="cpu")
            ckpt["replay_to"] = record(
                runtime.chart,
                str(self.run_dir),
                at,
                runtime.steps[at : self.number],
                self.number,
                runtime.print_at_target,
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            io.save_checkpoint(ckpt, target)
        strategy.barrier()
        self.saved_from = at
        return target

    def _later(self) -> str:
        """Where the run is saved as it is: the next checkpoint state of this process, and how to replay there."""
        chart, steps, n = self._runtime.chart, self._runtime.steps, self.number
        ok = chart.checkpoint_states - chart.final_states
        later = next((s.number for s in steps[n:] if s.event in ok and s.process == steps[n - 1].process), None)
        if later is None:
            return "No later transition of this run is a checkpoint state: make the change in the resumed fit instead"
        return (
            f"The nearest later transition saved as it is: {later} (state {steps[later - 1].event}); replay to it "
            f"(interlock.replay(..., to={later}), or `interlock replay RUN --to {later} --save PATH`), change the "
            "module there and save"
        )

    def _not_here(self, where: str) -> str:
        chart, steps, n = self._runtime.chart, self._runtime.steps, self.number
        ok = chart.checkpoint_states - chart.final_states
        after = next((s.number for s in steps[n:] if s.event in ok and s.process == steps[n - 1].process), None)
        state = f"the failure in state {where!r}" if self.error is not None else f"state {where!r}"
        return (
            f"cannot save at transition {n}, {state}: it comes before the first checkpoint state of this process "
            f"({', '.join(sorted(ok))}), so there is no saved state to re-execute it from; the nearest transition "
            f"that can be saved: {after if after is not None else 'none in this run'}"
        )

    def close(self) -> None:
        """Release the stopped stage and delete the replay's temporary outputs (idempotent)."""
        if self._runtime.current_run is not None:
            self._runtime.release()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        end = f", error={type(self.error).__name__}" if self.error is not None else ""
        return f"Replay(transition {self.number}: {self.state.chart}, global step {self.state.global_step}{end})"


def _snapshot_at(chart: Chart, steps: list[Step], start: int, target: int, fails: bool) -> int | None:
    """The transition into the newest checkpoint state at or after ``start`` and before ``target``.

    ``None`` where none is needed (the target is a checkpoint state and the run does not fail there: a save
    writes that state itself) or none was made (the target comes before the first checkpoint state).
    """
    ok = chart.checkpoint_states - chart.final_states
    if target >= 1 and steps[target - 1].event in chart.checkpoint_states and not fails:
        return None
    for number in range(target - 1, max(start, 1) - 1, -1):
        if steps[number - 1].event in ok:
            return number
    return None


def _one_process(run: Any) -> bool:
    return run is not None and run.slot(HardwareSlot).strategy.world_size == 1


def _print(run: Any) -> str:
    """The fingerprint of ``run``'s module and optimizers (gradients too where a checkpoint holds them)."""
    if run is None:
        return ""
    return fingerprint(run.module, run.optimizers, run.slot(HardwareSlot).strategy.world_size == 1)


def _canonical(row: Any) -> str:
    return json.dumps(dict(row), sort_keys=True)


def _recorded_rows(run_dir: Path) -> list[str]:
    """The run's metric history rows kept in ``history.jsonl`` (up to its last checkpoint), canonical JSON."""
    try:
        lines = (run_dir / _HISTORY).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(_canonical(json.loads(line)))
        except (ValueError, TypeError):
            break
    return out


def _same(want: Step, got: Step) -> bool:
    if (want.event, want.trigger, want.source, want.count) != (got.event, got.trigger, got.source, got.count):
        return False
    pairs = ((want.epoch, got.epoch), (want.global_step, got.global_step), (want.batch_idx, got.batch_idx))
    return all(w is None or w == g for w, g in pairs)


def _target(steps: list[Step], to: int | None) -> int:
    """The transition number to stop at: ``to``, or the last (the state that failed, for a failed run)."""
    if to is None:
        failed = [s.number for s in steps if s.trigger == "fail"]
        last_process = steps[-1].process
        failed = [n for n in failed if steps[n - 1].process == last_process]
        return failed[-1] - 1 if failed else len(steps)
    if isinstance(to, bool) or not isinstance(to, int) or not 1 <= to <= len(steps):
        raise ValueError(
            f"replay(to={to!r}) is not a transition of this run: pass a number from 1 to {len(steps)} (the "
            "numbering of `interlock chart --trace` and the view's timeline), or None for the last"
        )
    stage = steps[to - 1].event.split(".")[0]
    if stage in ("validate", "test", "predict"):
        fits = [s.number for s in steps[:to] if s.event.startswith("fit.")]
        last = f"; the last fit transition before it is {fits[-1]}" if fits else ""
        raise ValueError(f"transition {to} is in the {stage} stage: a replay re-executes a fit{last}")
    return to


def _start(run_dir: Path, steps: list[Step], target: int, chart: Chart) -> tuple[Path | None, int, int | None]:
    """The newest checkpoint at or before ``target`` in the process that made it: (file, its number, its step)."""
    process = steps[target - 1].process
    io = TorchCheckpointIO()
    best: tuple[Path | None, int, int | None] = (None, 0, None)
    for file in sorted((run_dir / "checkpoints").glob("*.ckpt")):
        if not file.is_file():
            continue
        try:
            state = saved_state(io.load_checkpoint(file, map_location="cpu"), str(file))
        except Exception:  # an unreadable or foreign file is not a starting point
            continue
        spec = chart.states.get(state.chart)
        if spec is None or spec.resume_at is not None or not spec.checkpoint:
            continue
        count = state.counts.get(state.chart)
        for s in reversed(steps[:target]):
            if s.process != process or s.number <= best[1]:
                break
            at = (s.epoch, s.global_step, s.batch_idx)
            now = (state.epoch, state.global_step, state.progress.batch_idx)
            if (
                s.event == state.chart
                and s.count == count
                and all(a is None or a == b for a, b in zip(at, now, strict=True))
            ):
                best = (file, s.number, state.global_step)
                break
    if best[0] is None and steps[0].process != process:
        raise ValueError(
            f"transition {target} was made by a resumed process of this run, and no checkpoint kept in "
            f"{run_dir / 'checkpoints'} lies before it in that process; keep more checkpoints "
            "(ModelCheckpoint(save_top_k=-1) or every_n_train_steps) to replay there"
        )
    return best


def _distributed(recipe: dict[str, Any], run_dir: Path) -> None:
    """Refuse a run of several processes outside a launcher of the same size, saying why and what to do."""
    world = int(recipe.get("world_size", 1))
    here = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or here == world:
        return
    raise ValueError(
        f"{run_dir} was trained by {world} processes ({recipe.get('strategy')}): every optimizer step used the "
        f"gradients of {world} batches, one per rank, averaged, so one process cannot reproduce rank 0's view "
        f"bitwise (its steps would use its own batches alone). Replay it with {world} processes, as it ran: "
        f"torchrun --nproc-per-node {world} -m interlock.cli replay {run_dir} --to N (a run of `interlock fit`), or "
        "your script calling interlock.replay under torchrun: every rank replays its own view, rank 0 compares"
    )


def replay(
    run_dir: str | os.PathLike[str],
    module: Any,
    train_dataloaders: Any = None,
    val_dataloaders: Any = None,
    datamodule: Any = None,
    to: int | None = None,
    *,
    listeners: Sequence[Any] = (),
) -> Replay:
    """Replay the fit recorded in ``run_dir`` up to transition ``to`` (``None``: the last; a failed run: the failure).

    ``module`` and the data must be the run's (a module built as it was: same class, same weights when the
    replay starts from the beginning). The trainer's flags come from ``run_dir/trainer.json``; ``listeners``
    that changed the run (``EarlyStopping``, ``FiniteGuard``, your own) are passed again here. Raises
    :class:`~interlock.ReplayDivergence` at the first transition that differs from the recorded one.

    A run of several processes (ddp, fsdp) is replayed by as many, under the same launcher (``torchrun``):
    its steps averaged every rank's gradients, so one process alone cannot reproduce them; in one process
    this raises ``ValueError`` saying so.
    """
    run_dir = Path(run_dir)
    recipe = read_recipe(run_dir)
    _distributed(recipe, run_dir)
    chart_file = run_dir / CHART_FILE
    chart = load_chart(chart_file if chart_file.is_file() else None)
    steps = read_transitions(run_dir, chart.initial or "")
    if not steps:
        raise ValueError(f"{run_dir / 'events.jsonl'} holds no transitions: nothing to replay")
    target = _target(steps, to)
    ckpt, start, started_at = _start(run_dir, steps, target, chart)
    tmp = tempfile.mkdtemp(prefix="interlock-replay-")
    try:
        ckpt_path = None
        if ckpt is not None:  # a copy outside any run's checkpoints/: the replay writes nothing into the run
            ckpt_path = Path(tmp, "start", ckpt.name)
            ckpt_path.parent.mkdir()
            shutil.copyfile(ckpt, ckpt_path)
            if (run_dir / _HISTORY).is_file():
                shutil.copyfile(run_dir / _HISTORY, ckpt_path.parent / _HISTORY)
        print(
            f"interlock: replaying {run_dir} to transition {target} from "
            + (f"{ckpt} (transition {start}, global step {started_at})" if ckpt else "the start"),
            file=sys.stderr,
        )
        trainer = Trainer(
            **trainer_kwargs(recipe),
            accelerator=recipe.get("accelerator", "auto"),
            devices=int(recipe.get("world_size", 1)) if int(recipe.get("world_size", 1)) > 1 else 1,
            strategy=str(recipe.get("strategy", "auto")) if int(recipe.get("world_size", 1)) > 1 else "auto",
            deterministic=bool(recipe.get("deterministic", False)),
            chart=chart_file if chart_file.is_file() else None,
            default_root_dir=tmp,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_trace=False,
            logger=False,
            listeners=list(listeners),
        )
        runtime = _ReplayRuntime(trainer.statechart, trainer.bus, trainer.registry, steps, start, target)
        runtime.rows = _recorded_rows(run_dir)
        runtime.snapshot_file = Path(tmp, "snapshot", "between.ckpt")
        trainer.runtime = runtime
        paused = False
        try:
            trainer.fit(module, train_dataloaders, val_dataloaders, ckpt_path=ckpt_path, datamodule=datamodule)
        except Paused:
            paused = True
        except BaseException:
            if runtime.divergence is None:
                raise
        if runtime.divergence is not None:
            if runtime.current_run is not None:
                runtime.release()
            raise runtime.divergence
        if not paused:
            raise ReplayDivergence(
                f"the replay's fit ended after transition {runtime.done}, before transition {target}: the module, "
                "the data or the trainer differ from the run's",
                runtime.done + 1,
            )
        return Replay(runtime, module, run_dir, tmp, (ckpt, started_at))
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp, ignore_errors=True)
        raise
