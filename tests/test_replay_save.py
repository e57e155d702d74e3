"""Replay.save between checkpoint states: the last checkpoint state plus the transitions to re-execute, bitwise."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interlock
from conftest import loader
from interlock.cli.inspect import summarize_checkpoint
from interlock.cli.main import main
from interlock.connectors.replayto import REPLAY_TO_FORMAT, chart_digest
from interlock.core.tracelist import Step, read_transitions
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.plugins.checkpoint_io import TorchCheckpointIO
from test_replay import CLI_PLUGIN, FLAGS, Doubled, _equal_runs, data, fresh

BUILTIN = Path(__file__).resolve().parents[1] / "statecharts" / "trainer.yaml"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A finished 3-epoch run keeping every checkpoint: its run directory and its module."""
    keep_all = ModelCheckpoint(save_top_k=-1, save_last=True)
    trainer = interlock.Trainer(**FLAGS, default_root_dir=tmp_path_factory.mktemp("orig"), listeners=[keep_all])
    module = fresh(fail=False)
    trainer.fit(module, *data())
    return trainer.run_dir, module


def _steps(run_dir: Path) -> list[Step]:
    return read_transitions(run_dir, "idle")


def _between(run_dir: Path) -> list[Step]:
    """The fit's transitions into states that are not checkpoint states, after its first checkpoint state."""
    chart = interlock.load_chart()
    steps = _steps(run_dir)
    first = next(s.number for s in steps if s.event in chart.checkpoint_states)
    return [
        s
        for s in steps[first:]
        if s.event.startswith("fit.") and s.event not in chart.checkpoint_states and s.trigger != "fail"
    ]


def _save_at(run_dir: Path, module: Any, target: int, path: Path, *loaders: Any) -> Path:
    with interlock.replay(run_dir, module, *(loaders or data()), to=target) as rep:
        assert rep.number == target and rep.state.chart not in interlock.load_chart().checkpoint_states
        return rep.save(path)


def _resume(path: Path, root: Path, module: Any = None, *loaders: Any, **flags: Any) -> Any:
    resumed = module if module is not None else fresh(fail=False)
    trainer = interlock.Trainer(**{**FLAGS, **flags}, default_root_dir=root)
    trainer.fit(resumed, *(loaders or data()), ckpt_path=path)
    return trainer, resumed


def test_a_backward_in_the_middle_of_epoch_2_saved_and_resumed_ends_bitwise_equal(
    finished: Any, tmp_path: Path
) -> None:
    """Replayed to a backward mid-epoch, saved and resumed: params, optimizer and scheduler end as the original's."""
    run_dir, original = finished
    backwards = [s.number for s in _steps(run_dir) if s.event == "fit.train.batch.backward" and s.epoch == 2]
    target = backwards[len(backwards) // 2]
    saved = _save_at(run_dir, fresh(fail=False), target, tmp_path / "mid.ckpt")
    rec = TorchCheckpointIO().load_checkpoint(saved)["replay_to"]
    assert rec["format"] == REPLAY_TO_FORMAT and rec["to"] == target
    shown = summarize_checkpoint(saved)  # `interlock inspect`: a batch end, and what a resume re-executes from it
    assert shown["chart"] == "fit.train.batch.end"
    assert shown["replay_to"]["state"] == "fit.train.batch.backward" and shown["replay_to"]["to"] == target
    assert rec["transitions"][-1]["event"] == "fit.train.batch.backward" and len(rec["transitions"]) == 3
    trainer, resumed = _resume(saved, tmp_path / "resumed")
    assert trainer.state.global_step == 12 and trainer.state.status == "finished"
    _equal_runs(original, resumed, original.made["optimizer"], resumed.made["optimizer"])
    assert original.made["lr_scheduler"].state_dict() == resumed.made["lr_scheduler"].state_dict()
    # the resumed process made the re-executed transitions itself: its trace lists them after the restore
    again = [(s.event, s.trigger, s.count) for s in _steps(trainer.run_dir) if s.process == 0]
    want = [(t["event"], t["trigger"], t["count"]) for t in rec["transitions"]]
    assert any(again[i : i + len(want)] == want for i in range(len(again)))
    assert "checkpoint-replay-to.observer" not in trainer.bus.observer_sources()  # it left at its target


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.floats(0.0, 0.999))
def test_any_transition_between_checkpoint_states_saved_and_resumed_ends_bitwise_equal(
    finished: Any, tmp_path: Path, pick: float
) -> None:
    """Any fit transition between checkpoint states (epochs 0 and 1), saved and resumed: the original's end, bitwise."""
    run_dir, original = finished
    numbers = [s.number for s in _between(run_dir) if s.epoch in (0, 1)]
    target = numbers[int(pick * len(numbers))]
    saved = _save_at(run_dir, fresh(fail=False), target, tmp_path / f"at{target}.ckpt")
    _, resumed = _resume(saved, tmp_path / f"r{target}")
    _equal_runs(original, resumed, original.made["optimizer"], resumed.made["optimizer"])


@pytest.mark.parametrize("change", ["parameter", "momentum"])
def test_a_change_made_after_the_replay_stopped_is_refused_naming_the_next_saveable_transition(
    finished: Any, tmp_path: Path, change: str
) -> None:
    """A weight or optimizer state changed at a mid-batch stop: save raises, naming the next batch end and --to."""
    run_dir, _ = finished
    steps = _steps(run_dir)
    target = next(s.number for s in steps if s.event == "fit.train.batch.step" and s.epoch == 1)
    later = next(s.number for s in steps[target:] if s.event == "fit.train.batch.end")
    with interlock.replay(run_dir, fresh(fail=False), *data(), to=target) as rep:
        optimizer = rep.module.made["optimizer"]
        with torch.no_grad():
            if change == "parameter":
                next(rep.module.parameters()).add_(1.0)
            else:
                next(iter(optimizer.state.values()))["momentum_buffer"].mul_(2.0)
        with pytest.raises(ValueError, match=rf"changed since .* nearest later transition .*: {later} .*to={later}"):
            rep.save(tmp_path / "x.ckpt")
        assert not (tmp_path / "x.ckpt").exists()


def test_before_the_first_checkpoint_state_nothing_is_saved_and_the_error_names_the_first(
    finished: Any, tmp_path: Path
) -> None:
    """A transition of the sanity check (before any checkpoint state): save raises naming the first saveable one."""
    run_dir, _ = finished
    steps = _steps(run_dir)
    target = next(s.number for s in steps if s.event.startswith("fit.sanity.batch"))
    first = next(s.number for s in steps if s.event == "fit.train.epoch_start")
    with (
        interlock.replay(run_dir, fresh(fail=False), *data(), to=target) as rep,
        pytest.raises(ValueError, match=rf"before the first checkpoint state.*can be saved: {first}$"),
    ):
        rep.save(tmp_path / "x.ckpt")


def _optimizer_step(run_dir: Path, epoch: int) -> int:
    return next(s.number for s in _steps(run_dir) if s.event == "fit.train.batch.optimizer_step" and s.epoch == epoch)


def test_a_resume_whose_module_code_changed_stops_at_the_target_naming_it(finished: Any, tmp_path: Path) -> None:
    """Same transitions, other gradients (a doubled loss): the resumed fit stops at the saved transition, naming it."""
    run_dir, _ = finished
    target = _optimizer_step(run_dir, 1)
    saved = _save_at(run_dir, fresh(fail=False), target, tmp_path / "mid.ckpt")
    torch.manual_seed(0)
    with pytest.raises(
        interlock.ReplayDivergence, match=rf"diverged at transition {target}: the transitions agree"
    ) as e:
        _resume(saved, tmp_path / "resumed", Doubled(fail=False))
    assert e.value.number == target


def test_a_resume_with_shorter_data_stops_at_the_first_transition_that_differs(finished: Any, tmp_path: Path) -> None:
    """A loader one batch short: re-executing to the saved last batch stops where the run had a batch, naming it."""
    run_dir, _ = finished
    steps = _steps(run_dir)
    target = next(s.number for s in steps if s.event == "fit.train.batch.step" and s.epoch == 1 and s.batch_idx == 3)
    saved = _save_at(run_dir, fresh(fail=False), target, tmp_path / "mid.ckpt")
    at = target - 1  # the batch end before: the run went on to fetch batch 3, the short loader has none
    with pytest.raises(
        interlock.ReplayDivergence,
        match=rf"diverged at transition {at}: expected .*-\[next\]-> fit.train.batch.fetch.*; got .*-\[validate\]->"
        r".*\(guard schedule.val_due\)",
    ) as e:
        _resume(saved, tmp_path / "resumed", None, loader(48, shuffle=True), loader(32))
    assert e.value.number == at


def test_a_resume_that_fails_before_the_target_raises_its_error_noting_the_divergence(
    finished: Any, tmp_path: Path
) -> None:
    """A module that now raises in the re-executed batch: its error is raised, noting where the replay diverged."""
    run_dir, _ = finished
    steps = _steps(run_dir)
    epoch_2 = next(s.number for s in steps if s.event == "fit.train.epoch_start" and s.epoch == 2)
    target = [s.number for s in steps[epoch_2:] if s.event == "fit.train.batch.backward"][2]  # batch 2's
    saved = _save_at(run_dir, fresh(fail=False), target, tmp_path / "mid.ckpt")
    with pytest.raises(RuntimeError, match="boom at epoch 2, batch 2") as e:
        _resume(saved, tmp_path / "resumed", fresh(fail=True))
    said = rf"ReplayDivergence: .* diverged at transition {target}: expected .*-\[backward\]-> .*; got .*-\[fail\]->"
    assert any(re.search(said, note) for note in e.value.__notes__), e.value.__notes__


def test_a_failed_run_saved_at_its_failure_reproduces_it_and_a_fixed_module_resumes_it_bitwise(
    finished: Any, tmp_path: Path
) -> None:
    """Saved at its failure: resuming raises it again; with the module fixed, the fit ends as if it never failed."""
    _, original = finished
    trainer = interlock.Trainer(**FLAGS, default_root_dir=tmp_path / "failed")
    with pytest.raises(RuntimeError, match="boom at epoch 2, batch 2"):
        trainer.fit(fresh(), *data())
    with interlock.replay(trainer.run_dir, fresh(), *data()) as rep:
        assert rep.error is not None and rep.state.chart == "fit.train.batch.step"
        saved = rep.save(tmp_path / "failure.ckpt")
    with pytest.raises(RuntimeError, match="boom at epoch 2, batch 2"):
        _resume(saved, tmp_path / "again", fresh())
    _, fixed = _resume(saved, tmp_path / "fixed", fresh(fail=False))
    _equal_runs(original, fixed, original.made["optimizer"], fixed.made["optimizer"])


def _retagged(tmp_path: Path) -> Path:
    """The built-in chart with one more tag on the epoch start: the same run, another chart."""
    text = BUILTIN.read_text().replace("tags: [epoch_start]", "tags: [epoch_start, mine]", 1)
    path = tmp_path / "retagged.yaml"
    path.write_text("tags: [mine]\n" + text)
    return path


def test_a_resume_under_another_chart_or_record_format_is_refused_before_anything_changes(
    finished: Any, tmp_path: Path
) -> None:
    """Another chart, or a record of another format: the resume fails at load, naming the file and the fix."""
    run_dir, _ = finished
    saved = _save_at(run_dir, fresh(fail=False), _optimizer_step(run_dir, 1), tmp_path / "mid.ckpt")
    module = fresh(fail=False)
    before = [p.clone() for p in module.parameters()]
    with pytest.raises(interlock.CheckpointError, match=r"under another chart .*\(Trainer\(chart=RUN/chart.yaml\)\)"):
        _resume(saved, tmp_path / "other", module, chart=_retagged(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))
    io = TorchCheckpointIO()
    ckpt = io.load_checkpoint(saved)
    ckpt["replay_to"]["format"] = "interlock.replay_to/0"
    io.save_checkpoint(ckpt, tmp_path / "old.ckpt")
    with pytest.raises(interlock.CheckpointError, match=rf"format 'interlock.replay_to/0'; .* {REPLAY_TO_FORMAT!r}"):
        _resume(tmp_path / "old.ckpt", tmp_path / "old")


RESUME_SCRIPT = """
import sys

import torch

import interlock
from test_replay import FLAGS, data, fresh

module = fresh(fail=False)
interlock.Trainer(**FLAGS, default_root_dir=sys.argv[2]).fit(module, *data(), ckpt_path=sys.argv[1])
torch.save(module.state_dict(), sys.argv[3])
"""


def test_a_file_saved_at_an_optimizer_step_resumes_bitwise_in_another_process(finished: Any, tmp_path: Path) -> None:
    """Saved here, resumed by a fresh process with another hash seed: the checks pass and the weights end equal."""
    run_dir, original = finished
    saved = _save_at(run_dir, fresh(fail=False), _optimizer_step(run_dir, 1), tmp_path / "mid.ckpt")
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, *sys.path]), "PYTHONHASHSEED": "7"}
    out = tmp_path / "final.pt"
    proc = subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT, str(saved), str(tmp_path / "resumed"), str(out)],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "re-executes transitions" in proc.stderr
    final = torch.load(out)
    assert all(torch.equal(a, final[k]) for k, a in original.state_dict().items())


def test_the_chart_digest_is_the_same_in_every_process() -> None:
    """Processes with other hash seeds (the ranks of a ddp run) give the chart the same digest, so each resumes."""
    code = "from interlock.connectors.replayto import chart_digest; import interlock; "
    code += "print(chart_digest(interlock.load_chart()))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    digests = {
        subprocess.run(
            [sys.executable, "-c", code], env={**env, "PYTHONHASHSEED": seed}, capture_output=True, text=True,
            timeout=120, check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }  # fmt: skip
    assert digests == {chart_digest(interlock.load_chart())}


@pytest.fixture(scope="module")
def cli_finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One finished ``interlock fit`` (in this process): its run directory and the plugin folder."""
    root = tmp_path_factory.mktemp("cli")
    (root / "replay_plugin.py").write_text(CLI_PLUGIN, encoding="utf-8")
    (root / "cfg.yaml").write_text(
        "model: {class_path: replay_plugin.Boom, init_args: {fail_epoch: 9}}\n"
        "data: {class_path: replay_plugin.Data}\n"
        "trainer: {max_epochs: 3, seed: 5, accelerator: cpu, enable_progress_bar: false, "
        f"default_root_dir: {root}}}\n",
        encoding="utf-8",
    )
    sys.path.insert(0, str(root))
    try:
        assert main(["fit", "--config", str(root / "cfg.yaml")]) == 0
    finally:
        sys.path.remove(str(root))
    return root / "runs" / "version_0", root


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return dict(TorchCheckpointIO().load_checkpoint(run_dir / "checkpoints" / "last.ckpt")["state_dict"])


def test_cli_replay_saves_a_mid_batch_transition_and_fit_resumes_it_bitwise(
    cli_finished: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`replay --to N --save P` at a backward, then `fit --ckpt_path P`: the final weights are the original's."""
    run_dir, root = cli_finished
    n = next(s.number for s in _steps(run_dir) if s.event == "fit.train.batch.backward" and s.epoch == 1)
    saved = root / "mid.ckpt"
    sys.path.insert(0, str(root))
    try:
        assert main(["replay", str(run_dir), "--to", str(n), "--save", str(saved)]) == 0
        out = capsys.readouterr().out
        assert f"to transition {n}: state fit.train.batch.backward" in out
        assert f"the checkpoint state of transition {n - 3} and the transitions from there to {n}" in out
        cfg = ["--config", str(root / "cfg.yaml"), "--ckpt_path", str(saved)]
        assert main(["fit", *cfg, "--trainer.default_root_dir", str(root / "resumed")]) == 0
    finally:
        sys.path.remove(str(root))
    assert f"re-executes transitions {n - 2} to {n}" in capsys.readouterr().err
    final, resumed = _final_weights(run_dir), _final_weights(root / "resumed" / "runs" / "version_0")
    assert final.keys() == resumed.keys() and all(torch.equal(final[k], resumed[k]) for k in final)
