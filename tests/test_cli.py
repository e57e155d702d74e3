"""The ``interlock`` command line: configs, overrides, errors, preemption, chart, inspect, listeners."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from interlock.cli.commands import chart as chart_command
from interlock.cli.commands import chart_actions, resume_command
from interlock.cli.config import build_parser
from interlock.cli.main import main
from interlock.core.chart import load_chart

PLUGINS = '''
import os
import signal

import torch
from torch.utils.data import DataLoader, TensorDataset

import interlock


class KillAt(interlock.Listener):
    """Sends this process SIGTERM at the end of training step ``step``."""

    def __init__(self, step: int = 3) -> None:
        self.step = step

    @interlock.listen("fit.train.batch.end")
    def kill(self, event):
        if event.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class Counter(interlock.Listener):
    """Counts epochs in its stored state."""

    def __init__(self, key: str = "Counter", after: list[str] | None = None) -> None:
        self.key = key
        self.after = tuple(after or ())

    @interlock.listen("fit.train.epoch_end")
    def on_epoch_end(self, event, state):
        return self.store(state, epochs=self.stored(state).get("epochs", 0) + 1)

    @interlock.listen("fit.end", once=True)
    def on_fit_end(self, event):
        return None


class Tiny(interlock.Module):
    """A linear classifier on 4 features."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.net = torch.nn.Linear(width, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def test_step(self, batch, batch_idx):
        x, y = batch
        return {"loss": torch.nn.functional.cross_entropy(self.net(x), y)}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class TestOnlyData:
    """Only a test loader."""

    def __init__(self, n: int = 32) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)

    def test_dataloader(self):
        return DataLoader(TensorDataset(self.x, self.y), batch_size=8)
'''

QUICK = [
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "5",
    "--trainer.limit_val_batches",
    "2",
    "--trainer.num_sanity_val_steps",
    "0",
]


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the importable module ``cli_plugins`` (listeners, a model, a data class)."""
    root = tmp_path_factory.mktemp("plugins")
    (root / "cli_plugins.py").write_text(textwrap.dedent(PLUGINS), encoding="utf-8")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    sys.modules.pop("cli_plugins", None)


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("interlock")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "interlock.cli"]
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def preempted(plugins: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real ``interlock fit`` process that SIGTERMs itself after step 3 (run once for the module)."""
    root = tmp_path_factory.mktemp("preempt")
    args = [
        "fit",
        *QUICK,
        "--trainer.max_epochs",
        "2",
        "--trainer.default_root_dir",
        str(root),
        "--trainer.listeners",
        '[{"class_path": "cli_plugins.KillAt"}, {"class_path": "cli_plugins.Counter"}]',
        "--trainer.enable_checkpointing",  # last.ckpt stays the preemption save (written by the trainer itself)
        "false",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")])}
    done = _cli(*args, cwd=root, env=env)
    return {"root": root, "args": args, "done": done, "ckpt": root / "runs" / "version_0" / "checkpoints" / "last.ckpt"}


def test_top_level_help_lists_subcommands_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """`interlock --help` lists every subcommand and documents the exit status, including 128+N on preemption."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("fit", "validate", "test", "predict", "listeners", "chart", "inspect"):
        assert command in out
    assert "128+N" in out and "--ckpt_path last" in out


def test_fit_help_shows_every_trainer_flag_with_types(capsys: pytest.CaptureFixture[str]) -> None:
    """`interlock fit --help` shows the config options and each Trainer flag with its type."""
    assert main(["fit", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--config", "--print_config", "--ckpt_path", "--model", "--data", "--trainer.listeners"):
        assert flag in out
    assert "--trainer.max_epochs" in out and "int | null" in out
    assert "--trainer.gradient_clip_algorithm" in out and "exit status" in out


def test_print_config_merges_embedded_default_and_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --config the built-in example is the base; overrides apply; the printed YAML round-trips."""
    assert main(["fit", "--trainer.max_epochs", "3", "--model.init_args.hidden", "64", "--print_config"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["model"]["class_path"] == "interlock.examples.digits.DigitsClassifier"
    assert cfg["model"]["init_args"]["hidden"] == 64
    assert cfg["data"]["class_path"] == "interlock.examples.digits.DigitsData"
    assert cfg["trainer"]["max_epochs"] == 3 and cfg["trainer"]["seed"] == 0
    assert cfg["trainer"]["listeners"] is None and cfg["ckpt_path"] is None
    saved = tmp_path / "cfg.yaml"
    saved.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert main(["fit", "--config", str(saved), "--print_config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == cfg


def test_fit_trains_and_reports_run_dir_and_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`interlock fit` trains the example and prints its run directory and final metrics."""
    assert main(["fit", *QUICK, "--trainer.default_root_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"run directory: {tmp_path / 'runs' / 'version_0'}" in out
    assert "final metrics:" in out and "val_acc" in out and "train_loss" in out


def test_user_config_replaces_the_example_and_test_uses_test_dataloader(
    plugins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --config file is used instead of the example; `test` calls only data.test_dataloader()."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "model:\n  class_path: cli_plugins.Tiny\ndata:\n  class_path: cli_plugins.TestOnlyData\n"
        f"trainer:\n  listeners: []\n  default_root_dir: {tmp_path}\n",
        encoding="utf-8",
    )
    assert main(["test", "--config", str(cfg), "--print_config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["trainer"]["max_epochs"] is None and printed["model"]["init_args"] == {"width": 4}
    assert main(["test", "--config", str(cfg)]) == 0
    assert "test finished" in capsys.readouterr().out
    assert main(["fit", "--config", str(cfg)]) == 2
    assert "needs data.train_dataloader()" in capsys.readouterr().err


def test_unknown_keys_are_rejected_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown flags and config keys (also abbreviations and typos in init_args) fail with exit 2 naming the key."""
    assert main(["fit", "--trainer.max_epoch", "3"]) == 2
    assert "--trainer.max_epoch" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_epoch: 3\n", encoding="utf-8")
    assert main(["fit", "--config", str(bad)]) == 2
    assert "trainer.max_epoch" in capsys.readouterr().err
    bad.write_text("model:\n  class_path: interlock.examples.digits.DigitsClassifier\n  init_args:\n    hiden: 3\n")
    assert main(["fit", "--config", str(bad)]) == 2
    assert "'hiden' is not accepted" in capsys.readouterr().err


def test_wrong_type_names_key_and_expected_type(capsys: pytest.CaptureFixture[str]) -> None:
    """A value of the wrong type fails with exit 2, naming the key, the expected type and the value."""
    assert main(["fit", "--trainer.max_epochs", "abc"]) == 2
    err = capsys.readouterr().err
    assert 'key "trainer.max_epochs"' in err and "Expected a <class 'int'>" in err and "abc" in err
    assert main(["chart", "--format", "jpg"]) == 2
    assert "'mermaid', 'dot', 'svg', 'png'" in capsys.readouterr().err


def test_bad_flag_values_give_the_value_error_without_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Trainer, model and data constructors' ValueErrors are printed plainly with exit status 2."""
    assert main(["fit", "--trainer.max_epochs", "-5"]) == 2
    err = capsys.readouterr().err
    assert "error: Trainer(max_epochs=-5) is invalid" in err and "Traceback" not in err
    assert main(["fit", "--data.init_args.batch_size", "0"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: DigitsData(batch_size=0) must be an int >= 1"
    cfg = tmp_path / "no_predict.yaml"
    cfg.write_text(
        "model:\n  class_path: interlock.examples.digits.DigitsClassifier\n"
        "data:\n  class_path: conftest.NoPredictData\n"
    )
    assert main(["predict", "--config", str(cfg)]) == 2
    assert "needs data.predict_dataloader()" in capsys.readouterr().err


def test_listeners_prints_order_and_handlers_per_event(
    plugins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`interlock listeners` orders configured listeners (honouring `after`) and lists each event's handlers."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "trainer:\n  enable_checkpointing: false\n  enable_progress_bar: false\n  logger: false\n"
        "  enable_trace: false\n  enable_model_summary: false\n  listeners:\n"
        "    - class_path: cli_plugins.Counter\n      init_args: {key: second, after: [first]}\n"
        "    - class_path: cli_plugins.Counter\n      init_args: {key: first}\n",
        encoding="utf-8",
    )
    assert main(["listeners", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert out.index("1. first") < out.index("2. second") and "(after first)" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  fit.")}
    assert lines["fit.train.epoch_end"].split()[1:] == ["first.on_epoch_end", "->", "second.on_epoch_end"]
    assert "[once, #1]" in lines["fit.end"] and "fit.train.batch.end" not in lines
    off = ["--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false"]
    off += ["--trainer.logger", "false", "--trainer.enable_trace", "false", "--trainer.enable_model_summary", "false"]
    assert main(["listeners", *off]) == 0
    assert "no listeners" in capsys.readouterr().out
    assert main(["listeners"]) == 0
    out = capsys.readouterr().out
    assert "the Trainer's defaults" in out
    assert "observers of every transition (called first, with plain values): EventTrace.record" in out


def test_preemption_exits_128_plus_signal_and_resume_hint_works(
    preempted: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A real SIGTERM during fit saves last.ckpt, says how to resume, exits 143; the printed command resumes."""
    done = preempted["done"]
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "a checkpoint was saved to" in done.stderr and preempted["ckpt"].is_file()
    hint = next(line for line in done.stderr.splitlines() if line.startswith("resume with: "))
    assert hint.endswith("--ckpt_path last") and "--trainer.default_root_dir" in hint
    assert main([*preempted["args"], "--ckpt_path", "last"]) == 0
    out = capsys.readouterr().out
    assert f"run directory: {preempted['root'] / 'runs' / 'version_0'}" in out  # the resumed run's own directory


def test_preempted_return_code_in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """When fit raises Preempted(signum) main returns 128 + signum and prints the resume command."""
    import interlock

    def preempt(*args: Any, **kwargs: Any) -> None:
        raise interlock.Preempted(signal.SIGINT)

    monkeypatch.setattr(interlock.Trainer, "fit", preempt)
    assert main(["fit", "--trainer.listeners", "[]", "--ckpt_path", "old.ckpt"]) == 128 + signal.SIGINT
    err = capsys.readouterr().err
    assert "preempted by SIGINT" in err
    assert "resume with: interlock fit --trainer.listeners '[]' --ckpt_path last" in err


def test_resume_command_replaces_any_ckpt_path() -> None:
    """The resume hint keeps every argument but swaps --ckpt_path (either spelling) for `last`."""
    assert resume_command(["fit", "--ckpt_path=a.ckpt", "--x", "1"]) == "interlock fit --x 1 --ckpt_path last"
    assert resume_command(["fit", "--ckpt_path", "a b"]) == "interlock fit --ckpt_path last"


def test_inspect_prints_checkpoint_json(preempted: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """`interlock inspect` shows state, progress, listener states, RNG kinds and tensors as [shape, dtype]."""
    assert main(["inspect", str(preempted["ckpt"])]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["header"]["format"] == "interlock-checkpoint" and info["format"] == "interlock.checkpoint/2"
    assert info["chart"] == "fit.train.batch.end" and info["stage"] == "fit"
    assert (info["epoch"], info["global_step"]) == (0, 3) and info["history_length"] == 0
    assert info["model"]["net.0.weight"] == [[128, 64], "float32"]
    assert info["optimizers"][0]["state"]["0"]["momentum_buffer"] == [[128, 64], "float32"]
    assert {"python", "torch"} <= set(info["rng"]) and "Counter" not in info["listeners"]  # no epoch ended yet


def test_inspect_rejects_bad_files_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad or missing checkpoint files give the CheckpointError message and exit 2, no traceback."""
    text = tmp_path / "notes.txt"
    text.write_text("hello", encoding="utf-8")
    assert main(["inspect", str(text)]) == 2
    err = capsys.readouterr().err
    assert "not an interlock checkpoint" in err and "Traceback" not in err
    assert main(["inspect", str(tmp_path / "missing.ckpt")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_validate_and_test_load_weights_from_ckpt_path(
    preempted: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`validate`/`test --ckpt_path FILE` evaluate the checkpoint's weights and print the metrics."""
    common = ["--trainer.default_root_dir", str(tmp_path), "--trainer.listeners", "[]", "--ckpt_path"]
    assert main(["validate", *common, str(preempted["ckpt"])]) == 0
    assert "val_acc" in capsys.readouterr().out
    assert main(["test", *common, str(tmp_path / "nope.ckpt")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err


def test_chart_text_formats_trace_and_errors(
    preempted: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`interlock chart` prints Mermaid/DOT, writes -o files, overlays a trace and reports bad inputs."""
    assert main(["chart"]) == 0
    assert capsys.readouterr().out.startswith("stateDiagram-v2")
    out = tmp_path / "sub" / "chart.dot"
    assert main(["chart", "--format", "dot", "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8").startswith("digraph interlock")
    (tmp_path / "events.jsonl").write_text("", encoding="utf-8")
    assert main(["chart", "--trace", str(tmp_path)]) == 0
    assert "no events yet" in capsys.readouterr().out
    assert main(["chart", "--chart", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read the chart" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("initial: nowhere\nstates: {}\n", encoding="utf-8")
    assert main(["chart", "--chart", str(tmp_path / "bad.yaml")]) == 2
    assert "invalid statechart" in capsys.readouterr().err
    assert main(["chart", "--trace", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_chart_binary_formats_need_a_file_or_a_pipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """svg/png go to -o or to a non-terminal stdout; a terminal is refused with exit 2."""
    if shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` is not installed")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["chart", "--format", "png"]) == 2
    assert "-o FILE" in capsys.readouterr().err
    assert main(["chart", "--format", "svg", "-o", str(tmp_path / "c.svg")]) == 0
    assert "<svg" in (tmp_path / "c.svg").read_text(encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "interlock.cli.main", "chart", "--format", "png"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith(b"\x89PNG")


CUSTOM_CHART = """\
initial: work
states:
  work:
    on: {fail: done, interrupt: done}
    entry: [data.fetch, my.action]
    always:
      - {trigger: go, guard: my.guard, target: done}
      - {trigger: stop, target: done}
  done: {final: true}
"""


def _row(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line[4:].split(" ", 1)[0] == name)


def test_chart_actions_lists_owners_docs_and_what_the_chart_uses(tmp_path: Path) -> None:
    """The action/guard listing: owner module and one-line doc per name, `*` on those the chart uses."""
    chart = load_chart()
    text = chart_actions(chart)
    fetch = _row(text, "data.fetch")
    assert fetch.startswith("  * ") and "interlock.connectors.data" in fetch and "training batch" in fetch
    val_due = _row(text, "schedule.val_due")
    assert val_due.startswith("  * ") and "interlock.loops.schedule" in val_due and "Validation is due" in val_due
    assert _row(text, "stage.is_predict").startswith("    stage.is_predict ")  # registered, not used by the chart
    for name in chart.actions() | chart.guards():
        assert _row(text, name).startswith("  * "), name
    assert text.index("\nguards: ") > text.index("  * data.fetch ")  # actions first, then guards
    assert "nothing registered" not in text
    custom = tmp_path / "custom.yaml"
    custom.write_text(CUSTOM_CHART, encoding="utf-8")
    text = chart_actions(load_chart(custom))
    assert _row(text, "data.fetch").startswith("  * ") and _row(text, "optim.step").startswith("    ")
    assert f"actions used by {custom} that nothing registered: my.action" in text
    assert f"guards used by {custom} that nothing registered: my.guard" in text


def test_chart_command_prints_the_actions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`interlock chart --actions` prints the listing instead of a drawing (to -o when given)."""
    parser = build_parser()
    cfg = parser.parse_args(["chart"])
    if "actions" in cfg.chart:  # the flag is declared by the chart subcommand's parser
        assert cfg.chart.actions is False
        assert main(["chart", "--actions"]) == 0
        assert capsys.readouterr().out == chart_actions(load_chart())
    cfg.chart.actions = True
    assert chart_command(parser, cfg, ["chart", "--actions"]) == 0
    out = capsys.readouterr().out
    assert out == chart_actions(load_chart()) and "  * schedule.val_due " in out
    cfg.chart.output = str(tmp_path / "actions.txt")
    assert chart_command(parser, cfg, ["chart", "--actions", "-o", cfg.chart.output]) == 0
    assert (tmp_path / "actions.txt").read_text(encoding="utf-8") == out
    assert "wrote the actions to" in capsys.readouterr().err
    cfg.chart.actions = False  # the drawing, as before
    cfg.chart.output = None
    assert chart_command(parser, cfg, ["chart"]) == 0
    assert capsys.readouterr().out.startswith("stateDiagram-v2")
