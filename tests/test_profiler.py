"""The profiler charges each transition's time to the chart state it left and reports it per stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import interlock
import interlock.lightning as il
from conftest import TinyModule, loader
from interlock.lightning.profilers import PassThroughProfiler, SimpleProfiler
from interlock.listeners import EventTrace, Profiler

QUIET: dict[str, Any] = {"logger": False, "enable_progress_bar": False, "enable_checkpointing": False}


class Ticks:
    """A clock that moves one second per reading: every visit of a state then lasts a whole number of seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_each_states_visits_are_the_traces_and_the_table_sums_to_the_stage(tmp_path: Path) -> None:
    """Visits per state equal the trace's arrivals from it; every row's total adds up to the stage's wall time."""
    clock = Ticks()
    profiler = Profiler(clock=clock)
    trainer = interlock.Trainer(
        max_epochs=2, listeners=[profiler, EventTrace()], default_root_dir=tmp_path, enable_model_summary=False, **QUIET
    )
    trainer.fit(TinyModule(), loader(24, batch_size=8), loader(8, batch_size=8))
    ((stage, text),) = profiler.reports
    assert stage == "fit" and text.startswith("FIT Profiler Report (time per chart state)")
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("|")}
    assert set(rows) > {"Action", "Total", "fit.train.batch.step", "fit.train.val.batch.step"}
    from interlock.core.tracelist import read_transitions

    steps = read_transitions(next(tmp_path.rglob("events.jsonl")), "idle")
    left: dict[str, int] = {}
    for s in steps[1:]:
        left[s.source] = left.get(s.source, 0) + 1
    calls = {name: int(line.split("|")[3]) for name, line in rows.items() if name not in ("Action", "Total")}
    assert all(calls[name] == left[name] for name in calls)
    assert calls["fit.train.batch.step"] == 6 and calls["fit.train.val.batch.step"] >= 2
    totals = [float(line.split("|")[4]) for name, line in rows.items() if name not in ("Action", "Total")]
    assert sum(totals) == float(rows["Total"].split("|")[4]) == sum(calls.values())


def test_a_block_of_your_own_is_timed_into_the_table_and_the_report_is_a_file(tmp_path: Path) -> None:
    """``trainer.profiler.profile(name)`` in a LightningModule adds a row; ``filename`` writes ``{stage}-{name}.txt``"""

    class Timed(il.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.inner = TinyModule()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            with self.trainer.profiler.profile("my_forward"):
                return self.inner.training_step(batch, batch_idx)

        def configure_optimizers(self) -> Any:
            return self.inner.configure_optimizers()

    trainer = il.Trainer(
        max_epochs=1, profiler=SimpleProfiler(dirpath=tmp_path / "prof", filename="perf"), default_root_dir=tmp_path,
        enable_model_summary=False, **QUIET,
    )  # fmt: skip
    trainer.fit(Timed(), loader(16, batch_size=4))
    text = (tmp_path / "prof" / "fit-perf.txt").read_text()
    assert "|  my_forward" in text and "fit.train.batch.step" in text
    assert isinstance(trainer.profiler, SimpleProfiler) and trainer.profiler.reports[0][1] == text
    plain = il.Trainer(max_epochs=1, default_root_dir=tmp_path, enable_model_summary=False, **QUIET)
    assert isinstance(plain.profiler, PassThroughProfiler)
    plain.fit(Timed(), loader(8, batch_size=4))  # profile() without a profiler runs the block, times nothing


def test_profiler_simple_prints_the_report_once_per_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``profiler="simple"`` prints each stage's report (fit, then validate), without the calls columns if asked."""
    trainer = il.Trainer(
        max_epochs=1, profiler="simple", default_root_dir=tmp_path, enable_model_summary=False, **QUIET
    )
    trainer.fit(TinyModule(), loader(8, batch_size=4), loader(8, batch_size=4))
    trainer.validate(TinyModule(), loader(8, batch_size=4))
    out = capsys.readouterr().out
    assert out.count("FIT Profiler Report") == 1 and out.count("VALIDATE Profiler Report") == 1
    brief = Profiler(extended=False)
    interlock.Trainer(max_epochs=1, listeners=[brief], default_root_dir=tmp_path, **QUIET).fit(
        TinyModule(), loader(8, batch_size=4)
    )
    header = next(line for line in brief.reports[0][1].splitlines() if line.startswith("|  Action"))
    assert "Num calls" not in header and "Total time (s)" in header


@pytest.mark.parametrize(
    ("value", "error", "says"),
    [
        ("advanced", TypeError, "cProfile"),
        ("pytorch", TypeError, "torch.profiler.profile"),
        ("fast", ValueError, r"only be one of \['simple', 'advanced', 'pytorch', 'xla'\]"),
        (3, TypeError, "pass 'simple', a SimpleProfiler"),
    ],
)
def test_profilers_interlock_lacks_are_refused_naming_the_way(value: Any, error: type, says: str) -> None:
    """The other Lightning profilers, an unknown name or another object fail at construction, naming what works."""
    with pytest.raises(error, match=says):
        il.Trainer(profiler=value)


def test_stopping_a_block_never_started_is_an_error() -> None:
    """``stop(name)`` without ``start(name)`` names the missing call."""
    with pytest.raises(ValueError, match=r"stop\('x'\): it was not started"):
        Profiler().stop("x")
