"""Replay: a recorded fit re-executed bitwise to any transition, its failure reproduced, divergence refused."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interlock
from conftest import TinyModule, loader, only
from interlock.cli.main import main
from interlock.core.tracelist import read_transitions
from interlock.listeners.checkpoint import ModelCheckpoint
from interlock.listeners.guards import FiniteGuard
from interlock.listeners.trace import EventTrace

FLAGS: dict[str, Any] = {"max_epochs": 3, "accelerator": "cpu", "enable_progress_bar": False, "seed": 7}


class Boom(TinyModule):
    """Dropout, momentum, a scheduler; raises in ``training_step`` at epoch 2, batch 2 (when ``fail``)."""

    def __init__(self, fail: bool = True) -> None:
        super().__init__(dropout=0.25, scheduler=True)
        self.fail = fail
        self.failing_batch: Any = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail and self.current_epoch == 2 and batch_idx == 2:
            self.failing_batch = batch
            raise RuntimeError(f"boom at epoch {self.current_epoch}, batch {batch_idx}")
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self) -> Any:
        out = super().configure_optimizers()
        self.made = out  # the optimizer and scheduler, to compare after the fit
        return out


def fresh(fail: bool = True) -> Boom:
    torch.manual_seed(0)
    return Boom(fail)


def data() -> tuple[Any, Any]:
    return loader(shuffle=True), loader(32)


def digest(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in run_dir.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Boom, RuntimeError, interlock.TrainerState]:
    trainer = interlock.Trainer(**FLAGS, default_root_dir=tmp_path_factory.mktemp("failed"))
    module = fresh()
    with pytest.raises(RuntimeError) as info:
        trainer.fit(module, *data())
    return trainer.run_dir, module, info.value, trainer.state


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Boom]:
    keep_all = ModelCheckpoint(save_top_k=-1, save_last=True)
    trainer = interlock.Trainer(**FLAGS, default_root_dir=tmp_path_factory.mktemp("finished"), listeners=[keep_all])
    module = fresh(fail=False)
    trainer.fit(module, *data())
    return trainer.run_dir, module


def test_failed_run_is_reproduced_from_a_checkpoint_with_its_exception_state_and_step(failed_run: Any) -> None:
    """A run that raised in its third epoch replays from its epoch-end checkpoint to the same exception, state, step."""
    run_dir, module, error, state = failed_run
    before = digest(run_dir)
    with interlock.replay(run_dir, fresh(), *data()) as rep:
        assert rep.checkpoint is not None and rep.started_at == 8  # the end of epoch 1, not step 0
        assert type(rep.error) is RuntimeError and str(rep.error) == str(error)
        assert rep.state.chart == "fit.train.batch.step"
        assert (rep.state.epoch, rep.state.global_step, rep.state.batch_idx) == (2, state.global_step, 2)
        assert all(torch.equal(a, b) for a, b in zip(rep.batch, module.failing_batch, strict=True))
        assert rep.event is not None and rep.event.event == "fit.train.batch.step"
        assert read_transitions(run_dir, "idle")[rep.number].trigger == "fail"
    assert digest(run_dir) == before  # the recorded run is left as it was


def _batch_ends(run_dir: Path, epoch: int) -> list[int]:
    steps = read_transitions(run_dir, "idle")
    return [s.number for s in steps if s.event == "fit.train.batch.end" and s.epoch in (epoch, None)]


def _epoch_end(run_dir: Path, epoch: int) -> int:
    steps = read_transitions(run_dir, "idle")
    return next(s.number for s in steps if s.event == "fit.train.epoch_end" and s.epoch == epoch)


def _equal_runs(a: torch.nn.Module, b: torch.nn.Module, opt_a: Any, opt_b: Any) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    sa, sb = opt_a.state_dict(), opt_b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for k in sa["state"]:
        for key, value in sa["state"][k].items():
            assert torch.equal(value, sb["state"][k][key]) if torch.is_tensor(value) else value == sb["state"][k][key]


@pytest.mark.parametrize("epoch", [2, 0], ids=["from-a-checkpoint", "from-the-start"])
def test_finished_run_replayed_mid_epoch_saved_and_resumed_ends_bitwise_equal(
    finished_run: Any, epoch: int, tmp_path: Path
) -> None:
    """Replayed to a mid-epoch batch end, saved there and resumed, the run ends bitwise as the original did."""
    run_dir, original = finished_run
    ends = _batch_ends(run_dir, epoch)
    target = ends[len(ends) // 2]
    rep = interlock.replay(run_dir, fresh(fail=False), *data(), to=target)
    try:
        assert rep.number == target and rep.state.chart == "fit.train.batch.end"
        assert (rep.started_at is None) == (epoch == 0)
        saved = rep.save(tmp_path / "mid.ckpt")
    finally:
        rep.close()
    resumed = fresh(fail=False)
    trainer = interlock.Trainer(**FLAGS, default_root_dir=tmp_path / "resumed")
    trainer.fit(resumed, *data(), ckpt_path=saved)
    assert trainer.state.global_step == 12
    _equal_runs(original, resumed, original.made["optimizer"], resumed.made["optimizer"])
    assert original.made["lr_scheduler"].state_dict() == resumed.made["lr_scheduler"].state_dict()


def test_replay_with_fewer_samples_stops_at_the_first_transition_that_differs(finished_run: Any) -> None:
    """Fewer samples: the replay stops at the first transition that differs, naming it, expected and got."""
    run_dir, _ = finished_run
    with pytest.raises(
        interlock.ReplayDivergence,
        match=r"transition \d+: expected .*-\[next\]->.* got .*-\[validate\]->.*\(guard schedule.val_due\)",
    ) as e:
        interlock.replay(
            run_dir, fresh(fail=False), loader(48, shuffle=True), loader(32), to=_epoch_end(run_dir, 1) - 1
        )
    recorded = read_transitions(run_dir, "idle")[e.value.number - 1]
    assert (recorded.event, recorded.batch_idx) == ("fit.train.batch.fetch", 3)  # the run had a fourth batch there


def test_replay_with_other_sample_values_stops_at_the_first_metric_that_differs(finished_run: Any) -> None:
    """As many samples, other values: the transitions agree, the first logged metric row that differs stops it."""
    run_dir, _ = finished_run
    with pytest.raises(interlock.ReplayDivergence, match=r"metric row \d+ of its history is .* the run logged"):
        interlock.replay(
            run_dir, fresh(fail=False), loader(shuffle=True, seed=1), loader(32), to=_epoch_end(run_dir, 1) - 1
        )


def test_replay_with_a_fixed_module_stops_where_the_run_failed(failed_run: Any) -> None:
    """A module that no longer raises: the replay names the recorded failure as the first difference."""
    run_dir, *_ = failed_run
    with pytest.raises(interlock.ReplayDivergence, match=r"expected fit.train.batch.step -\[fail\]-> teardown") as e:
        interlock.replay(run_dir, fresh(fail=False), *data())
    assert read_transitions(run_dir, "idle")[e.value.number - 1].trigger == "fail"


class Doubled(Boom):
    """Boom with a changed ``training_step``: the loss doubled."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return 2 * super().training_step(batch, batch_idx)


def test_replay_with_changed_module_code_stops_at_the_first_metric_that_differs(finished_run: Any) -> None:
    """Same transitions, other values (a changed training_step): the first logged metric row that differs stops it."""
    run_dir, _ = finished_run
    torch.manual_seed(0)
    with pytest.raises(interlock.ReplayDivergence, match=r"metric row \d+ of its history is .*val_loss"):
        interlock.replay(run_dir, Doubled(fail=False), *data(), to=_epoch_end(run_dir, 1) - 1)


def test_to_outside_the_trace_is_refused_naming_the_range(finished_run: Any) -> None:
    """``to`` must be a transition of the run: the error names the valid range."""
    run_dir, _ = finished_run
    n = len(read_transitions(run_dir, "idle"))
    with pytest.raises(ValueError, match=rf"from 1 to {n}"):
        interlock.replay(run_dir, fresh(), *data(), to=n + 1)


def test_a_failed_run_records_its_transition_and_data_position_and_the_note_names_the_replay(failed_run: Any) -> None:
    """failure.json holds the transition a replay stops at, the failing batch's position and the command."""
    run_dir, _, error, _ = failed_run
    record = json.loads((run_dir / "failure.json").read_text())
    with interlock.replay(run_dir, fresh(), *data(), to=record["transition"]) as rep:
        assert str(rep.error) == str(error) and rep.number == record["transition"]
        assert (record["epoch"], record["global_step"], record["batch_idx"]) == (2, rep.state.global_step, 2)
        assert record["data"]["seed"] == rep.state.data["seed"] and record["state"] == rep.state.chart
    assert record["command"] == f"interlock replay {run_dir} --to {record['transition']}"
    assert any(record["replay"] in note for note in error.__notes__)


def test_a_run_directory_that_cannot_be_written_costs_the_record_not_the_error(
    failed_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only (or full) run directory: record_failure returns the record unwritten and raises nothing."""
    import errno
    import shutil

    from interlock.listeners import flight

    run_dir, _, _, state = failed_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "failure.json").unlink()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, "Read-only file system", str(copy))

    monkeypatch.setattr(flight.tempfile, "mkstemp", refuse)
    trace = next(copy.glob("events*.jsonl"))
    record = flight.record_failure(trace, state, RuntimeError("boom"), cli=False)
    assert record["transition"] == json.loads((run_dir / "failure.json").read_text())["transition"]
    left = sorted(p.name for p in copy.iterdir())
    assert left == sorted(p.name for p in run_dir.iterdir() if p.name != "failure.json")  # no .tmp left behind


class Diverging(TinyModule):
    """A learning rate so high that the loss overflows after a few steps."""

    def __init__(self) -> None:
        super().__init__(lr=1e6)


def test_a_non_finite_loss_under_finite_guard_is_recorded_and_reproduced(tmp_path: Path) -> None:
    """FiniteGuard's failure: recorded in failure.json; the replay (with the guard) stops at it, same error."""
    torch.manual_seed(0)
    trainer = interlock.Trainer(**FLAGS, default_root_dir=tmp_path, listeners=[FiniteGuard()])
    with pytest.raises(FloatingPointError) as info:
        trainer.fit(Diverging(), loader(shuffle=True), loader(32))
    record = json.loads((trainer.run_dir / "failure.json").read_text())
    assert record["state"] == "fit.train.batch.backward" and record["error"].startswith("FloatingPointError")
    torch.manual_seed(0)
    with interlock.replay(
        trainer.run_dir, Diverging(), loader(shuffle=True), loader(32), listeners=[FiniteGuard()]
    ) as rep:
        assert str(rep.error) == str(info.value) and rep.number == record["transition"]
        assert not torch.isfinite(rep.module.training_step(rep.batch, rep.state.batch_idx))  # look at the batch


def test_a_plain_run_writes_no_failure_record(finished_run: Any) -> None:
    """A run that ends well leaves no failure.json."""
    run_dir, _ = finished_run
    assert not (run_dir / "failure.json").exists()


CLI_PLUGIN = """
import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock


class Boom(interlock.Module):
    def __init__(self, fail_epoch: int = 2) -> None:
        super().__init__()
        self.fail_epoch = fail_epoch
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.25), torch.nn.Linear(8, 2))

    def training_step(self, batch, batch_idx):
        if self.current_epoch == self.fail_epoch and batch_idx == 1:
            raise ValueError(f"bad batch {batch_idx} in epoch {self.current_epoch}")
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class Data:
    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 4, generator=g)
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16, shuffle=True)

    def val_dataloader(self):
        x = torch.ones(16, 4)
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
"""


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, BaseException]:
    """One failing ``interlock fit`` (in this process): its run directory, the plugin folder and the error."""
    root = tmp_path_factory.mktemp("cli")
    (root / "replay_plugin.py").write_text(CLI_PLUGIN, encoding="utf-8")
    (root / "cfg.yaml").write_text(
        "model: {class_path: replay_plugin.Boom}\ndata: {class_path: replay_plugin.Data}\n"
        "trainer: {max_epochs: 4, seed: 5, accelerator: cpu, enable_progress_bar: false, "
        f"default_root_dir: {root}}}\n",
        encoding="utf-8",
    )
    sys.path.insert(0, str(root))
    try:
        with pytest.raises(ValueError, match="bad batch 1 in epoch 2") as info:
            main(["fit", "--config", str(root / "cfg.yaml")])
    finally:
        sys.path.remove(str(root))
    return root / "runs" / "version_0", root, info.value


def test_cli_replay_reproduces_a_cli_run_failure_as_json(cli_run: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`interlock replay RUN --json` replays a CLI run to its failure, from a checkpoint; the note named the command."""
    run_dir, root, error = cli_run
    command = f"interlock replay {run_dir} --to "
    assert any(command in note for note in error.__notes__)  # the failure printed the command
    sys.path.insert(0, str(root))
    try:
        capsys.readouterr()
        assert main(["replay", str(run_dir), "--json"]) == 0
    finally:
        sys.path.remove(str(root))
    out = json.loads(capsys.readouterr().out)
    record = json.loads((run_dir / "failure.json").read_text())
    assert out["transition"] == record["transition"] and out["error"] == f"ValueError: {error}"
    assert out["started_at"] == 6 and out["checkpoint"].endswith(".ckpt")  # the end of epoch 1, not step 0
    assert (out["state"], out["epoch"], out["batch_idx"]) == ("fit.train.batch.step", 2, 1)


def test_cli_replay_saves_a_batch_end_and_fit_resumes_it(cli_run: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`--to N --save PATH` at a batch end writes a checkpoint that `interlock fit --ckpt_path` resumes."""
    run_dir, root, _ = cli_run
    n = next(s.number for s in read_transitions(run_dir, "idle") if s.event == "fit.train.batch.end" and s.epoch == 1)
    saved = root / "mid.ckpt"
    sys.path.insert(0, str(root))
    try:
        assert main(["replay", str(run_dir), "--to", str(n), "--save", str(saved)]) == 0
        assert f"to transition {n}: state fit.train.batch.end" in capsys.readouterr().out
        cfg = ["--config", str(root / "cfg.yaml"), "--model.init_args.fail_epoch", "9", "--ckpt_path", str(saved)]
        assert main(["fit", *cfg, "--trainer.default_root_dir", str(root / "resumed")]) == 0
    finally:
        sys.path.remove(str(root))
    assert "global step 4" in capsys.readouterr().err  # resumed at the saved batch end (epoch 1, batch 0 done)


def test_cli_replay_of_a_run_without_its_config_is_refused(
    finished_run: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run not started by `interlock fit` has no cli.yaml: exit 2, naming the Python call instead."""
    run_dir, _ = finished_run
    assert main(["replay", str(run_dir)]) == 2
    assert "interlock.replay(RUN, module" in capsys.readouterr().err


def test_cli_replay_pdb_has_module_batch_and_state_in_scope(cli_run: Any) -> None:
    """`--pdb` stops in the debugger with module, batch and state in scope (a scripted stdin)."""
    run_dir, root, _ = cli_run
    script = "p type(module).__name__\np state.chart\np batch[0].shape\np error\nc\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-m", "interlock.cli", "replay", str(run_dir), "--pdb"],
        input=script,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for expected in ("'Boom'", "'fit.train.batch.step'", "torch.Size([16, 4])", "ValueError('bad batch 1 in epoch 2')"):
        assert expected in proc.stdout


def test_ddp_run_is_refused_on_one_process_and_replays_exactly_under_torchrun(tmp_path: Path) -> None:
    """A 2-rank ddp run: one process refuses, saying why; torchrun replays, saves (mid-batch too), resumes exactly."""
    import _dist_worker as w

    worker = str(Path(__file__).with_name("_replay_ddp_worker.py"))
    w.run_all([w.torchrun("--nproc-per-node=2", f"--master-port={w.free_port()}", worker, "fit", str(tmp_path))],
              tmp_path, 240)  # fmt: skip
    run_dir = tmp_path / "runs" / "version_0"
    with pytest.raises(ValueError, match=r"trained by 2 processes .* torchrun --nproc-per-node 2 "):
        interlock.replay(run_dir, fresh(), loader())
    steps = read_transitions(run_dir, "idle")
    target = [s.number for s in steps if s.event == "fit.train.batch.end" and s.epoch == 1][1]
    mid = [s.number for s in steps if s.event == "fit.train.batch.backward" and s.epoch == 1][2]  # between
    replay = [worker, "replay", str(tmp_path), str(target), str(mid)]
    w.run_all([w.torchrun("--nproc-per-node=2", f"--master-port={w.free_port()}", *replay)], tmp_path, 240)
    first_end = next(s.global_step for s in steps if s.event == "fit.train.epoch_end" and s.epoch == 0)
    for to, state in ((target, "fit.train.batch.end"), (mid, "fit.train.batch.backward")):
        result = json.loads((tmp_path / f"replay0-{to}.json").read_text())
        assert result == {"number": to, "state": state, "started_at": first_end}  # from a checkpoint
        final, resumed = torch.load(tmp_path / "final0.pt"), torch.load(tmp_path / f"resumed0-{to}.pt")
        assert all(torch.equal(final[k], resumed[k]) for k in final), to


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.floats(0.0, 0.999))
def test_any_checkpoint_state_replayed_saved_and_resumed_ends_bitwise_equal(
    finished_run: Any, tmp_path: Path, pick: float
) -> None:
    """Any transition into a checkpoint state, replayed, saved and resumed: the original's final weights, bitwise."""
    run_dir, original = finished_run
    chart = interlock.load_chart()
    ok = chart.checkpoint_states - chart.final_states
    numbers = [s.number for s in read_transitions(run_dir, "idle") if s.event in ok and s.epoch != 2]
    target = numbers[int(pick * len(numbers))]
    saved = tmp_path / f"at{target}.ckpt"
    with interlock.replay(run_dir, fresh(fail=False), *data(), to=target) as rep:
        rep.save(saved)
    resumed = fresh(fail=False)
    interlock.Trainer(**FLAGS, default_root_dir=tmp_path / f"r{target}").fit(resumed, *data(), ckpt_path=saved)
    for (name, a), b in zip(original.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), (target, name)


def test_compact_trace_numbers_transitions_as_the_full_trace_lists_them(tmp_path: Path) -> None:
    """The transitions read from a compact trace (loops counted) equal the full trace's lines of the same run."""
    runs = []
    for full in (False, True):
        torch.manual_seed(0)
        trainer = interlock.Trainer(
            **{**FLAGS, "max_epochs": 2, **only(EventTrace(full=full))}, default_root_dir=tmp_path
        )
        trainer.fit(TinyModule(), loader(160, 4), loader(32, 4))
        runs.append(read_transitions(trainer.run_dir, "idle"))
    compact, full_ = runs
    assert len(compact) == len(full_) > 100
    for a, b in zip(compact, full_, strict=True):
        assert (a.number, a.event, a.trigger, a.source, a.count) == (b.number, b.event, b.trigger, b.source, b.count)
        for x, y in ((a.epoch, b.epoch), (a.global_step, b.global_step), (a.batch_idx, b.batch_idx)):
            assert x is None or x == y


def test_a_resumed_run_replays_in_each_of_its_processes(tmp_path: Path) -> None:
    """A run that failed, then resumed in its directory: each process's transitions replay from its own checkpoints."""
    keep = {"listeners": [ModelCheckpoint(save_top_k=-1, save_last=True)]}
    trainer = interlock.Trainer(**{**FLAGS, "max_epochs": 4}, default_root_dir=tmp_path, **keep)
    with pytest.raises(RuntimeError):
        trainer.fit(fresh(), *data())
    run_dir = trainer.run_dir
    failed_at = json.loads((run_dir / "failure.json").read_text())["transition"]
    resumed = interlock.Trainer(**{**FLAGS, "max_epochs": 4}, default_root_dir=tmp_path, **keep)
    resumed.fit(fresh(fail=False), *data(), ckpt_path=run_dir / "checkpoints" / "last.ckpt")
    steps = read_transitions(run_dir, "idle")
    assert steps[-1].process == 1 and steps[failed_at].trigger == "fail"
    with interlock.replay(run_dir, fresh(), *data(), to=failed_at) as first:  # the first process, to its failure
        assert first.error is not None and first.state.epoch == 2
    later = next(s.number for s in steps if s.process == 1 and s.event == "fit.train.batch.end" and s.epoch == 3)
    with interlock.replay(run_dir, fresh(fail=False), *data(), to=later) as second:  # the resumed process
        assert second.error is None and second.number == later and second.state.epoch == 3
        assert second.checkpoint is not None and second.started_at is not None and second.started_at >= 8


def test_a_transition_of_another_stage_is_refused_naming_it(tmp_path: Path) -> None:
    """A replay re-executes a fit: a target in a later validate stage of the run is refused, saying so."""
    trainer = interlock.Trainer(**{**FLAGS, "max_epochs": 1}, default_root_dir=tmp_path)
    trainer.fit(fresh(fail=False), *data())
    trainer.validate(dataloaders=loader(32))
    steps = read_transitions(trainer.run_dir, "idle")
    target = next(s.number for s in steps if s.event.startswith("validate."))
    with pytest.raises(ValueError, match=rf"transition {target} is in the validate stage"):
        interlock.replay(trainer.run_dir, fresh(), *data(), to=target)
