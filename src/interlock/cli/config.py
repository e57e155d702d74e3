"""The ``interlock`` argument parser: jsonargparse, laid out like LightningCLI.

Run subcommands (``fit``, ``validate``, ``test``, ``predict``) and ``listeners`` take
``--config cfg.yaml`` with ``model`` and ``data`` sections (``class_path`` +
``init_args``) and a ``trainer`` section holding the :class:`~interlock.Trainer`'s
flags, introspected from its signature. Without ``--config`` they read the built-in
example (:data:`DEFAULT_CONFIG`).
"""

from __future__ import annotations

import argparse
from importlib import resources
from typing import Any, Literal, Protocol

from jsonargparse import ActionConfigFile, ArgumentParser, DefaultHelpFormatter

from interlock.core.module import Module
from interlock.trainer.trainer import Trainer
from interlock.viz import FORMATS

__all__ = [
    "CONFIG_COMMANDS",
    "DEFAULT_CONFIG",
    "EXIT_STATUS",
    "LOADERS",
    "RUN_COMMANDS",
    "DataModule",
    "build_parser",
]

RUN_COMMANDS = ("fit", "validate", "test", "predict")
CONFIG_COMMANDS = (*RUN_COMMANDS, "lr-find", "listeners")
DEFAULT_CONFIG = str(resources.files("interlock.examples").joinpath("default.yaml"))

LOADERS: dict[str, tuple[str, str | None]] = {
    "fit": ("train_dataloader", "val_dataloader"),
    "validate": ("val_dataloader", None),
    "test": ("test_dataloader", None),
    "predict": ("predict_dataloader", None),
    "lr-find": ("train_dataloader", "val_dataloader"),
}
"""Per run subcommand: the data method it needs, and an optional one it uses when present."""

EXIT_STATUS = """\
exit status:
  0       success
  1       the run failed (the traceback is printed)
  2       bad command line or config: unknown key, wrong type, bad Trainer flag
          value, unreadable checkpoint, chart or trace
  128+N   fit was preempted by signal N (143 for SIGTERM, 138 for SIGUSR1 under
          SLURM); a checkpoint was saved to RUN_DIR/checkpoints/last.ckpt
          first. Resume with the same command plus `--ckpt_path last`:
          interlock fit ... --ckpt_path last
  130     interrupted with Ctrl-C
  141     stdout was closed early (e.g. `interlock inspect CKPT | head`)"""


class TrainData(Protocol):
    """Has ``train_dataloader()``."""

    def train_dataloader(self) -> Any: ...


class ValData(Protocol):
    """Has ``val_dataloader()``."""

    def val_dataloader(self) -> Any: ...


class TestData(Protocol):
    """Has ``test_dataloader()``."""

    def test_dataloader(self) -> Any: ...


class PredictData(Protocol):
    """Has ``predict_dataloader()``."""

    def predict_dataloader(self) -> Any: ...


DataModule = TrainData | ValData | TestData | PredictData
"""A data "module": any class with at least one of the four ``*_dataloader()`` methods."""


class _HelpFormatter(DefaultHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """jsonargparse's formatter that keeps the line breaks of descriptions and epilogs."""


def _parser(**kwargs: Any) -> ArgumentParser:
    return ArgumentParser(formatter_class=_HelpFormatter, allow_abbrev=False, **kwargs)


def _config_parser(command: str) -> ArgumentParser:
    """The parser of a run subcommand (or of ``listeners``, where model and data are optional)."""
    run = command in RUN_COMMANDS
    need, optional = LOADERS.get(command, ("", None))
    calls = f"data.{need}()" + (f", data.{optional}() if the data class has it" if optional else "")
    description = (
        f"Build model, data and Trainer from the config, then run\n  trainer.{command}(model, {calls})."
        if run
        else "Build model, data and Trainer from the config, then sweep the learning rate (Lightning's finder):\n"
        f"  interlock.tuner.lr_find(trainer, model, {calls}),\n"
        "print the suggested rate and write the plot lr_find.svg to the sweep's run directory."
        if command == "lr-find"
        else "Build the Trainer from the config (no run) and print its listeners and, for each event,\n"
        "which handlers run in which order."
    )
    parser = _parser(
        description=f"{description}\nWithout --config, the built-in example is used: {DEFAULT_CONFIG}",
        epilog=EXIT_STATUS if command == "fit" else None,
        usage="%(prog)s [--config CFG.yaml] [--print_config]\n       [--model.init_args.NAME VALUE] "
        f"[--data.init_args.NAME VALUE] [--trainer.FLAG VALUE]{' [--ckpt_path PATH|last]' if run else ''}",
    )
    parser.add_argument("--config", action=ActionConfigFile, help="A YAML file with model, data and trainer sections.")
    parser.add_subclass_arguments(
        Module,
        "model",
        required=run or command == "lr-find",
        help="The interlock.Module to run: class_path (import path or name) and init_args.",
    )
    parser.add_argument(
        "--data",
        type=DataModule | None,
        required=run or command == "lr-find",
        help="The data: class_path and init_args of any class with train_dataloader(), val_dataloader(), "
        "test_dataloader() and/or predict_dataloader().",
    )
    parser.add_class_arguments(Trainer, "trainer")
    assert parser.groups is not None  # the two add_*_arguments calls above created the groups
    parser.groups["model"].title = "model (the interlock.Module subclass to run)"
    parser.groups["trainer"].title = "trainer (the Trainer's init flags)"
    parser.add_argument(
        "--ckpt_path",
        type=str | None,
        default=None,
        help="Checkpoint to start from: a file, or 'last' (the newest last.ckpt under "
        "trainer.default_root_dir). fit resumes exactly; the others load its weights."
        + ("" if run else " Ignored here."),
    )
    if command == "lr-find":
        parser.add_argument("--min_lr", type=float, default=1e-8, help="The first rate of the sweep.")
        parser.add_argument("--max_lr", type=float, default=1.0, help="The last rate of the sweep.")
        parser.add_argument("--num_training", type=int, default=100, help="How many rates (optimizer steps) to try.")
        parser.add_argument(
            "--mode", type=Literal["exponential", "linear"], default="exponential", help="How the rate grows."
        )
        parser.add_argument(
            "--early_stop_threshold",
            type=float | None,
            default=4.0,
            help="Stop once the smoothed loss exceeds this many times the best (null: never).",
        )
    if command == "fit":
        parser.add_argument(
            "--view",
            action="store_true",
            help="Serve the live view of this run on 127.0.0.1 while it trains, and until Ctrl-C after "
            "(needs interlock[view]).",
        )
    return parser


def _chart_parser() -> ArgumentParser:
    parser = _parser(
        description="Draw the lifecycle statechart, optionally with a run's events trace overlaid.\n"
        "Text formats go to stdout without -o; svg/png need -o or a stdout that is not a terminal."
    )
    parser.add_argument(
        "--format", type=Literal[FORMATS], default="mermaid", help="Output format (svg/png need Graphviz)."
    )
    parser.add_argument(
        "--trace", type=str | None, default=None, help="A run directory (or its events.jsonl) to overlay."
    )
    parser.add_argument(
        "--chart", type=str | None, default=None, help="A custom chart YAML file instead of the built-in one."
    )
    parser.add_argument(
        "--region",
        type=str | None,
        default=None,
        help="Draw only the states inside this compound state (e.g. fit.train.batch); dot/svg/png.",
    )
    parser.add_argument(
        "--depth",
        type=int | None,
        default=None,
        help="Draw this many levels of states below the region (or the top); deeper ones as one box each.",
    )
    parser.add_argument(
        "--actions",
        action="store_true",
        help="List every action and guard (owner, one-line doc, slots read and written, where the chart uses it) "
        "instead of drawing; * marks those the chart uses.",
    )
    parser.add_argument(
        "--extension",
        type=str | None,
        default=None,
        help="With --actions: add interlock.Extension objects, MODULE:NAME (comma-separated).",
    )
    parser.add_argument("-o", "--output", type=str | None, default=None, help="Write to this file.")
    return parser


def _inspect_parser() -> ArgumentParser:
    parser = _parser(
        description="Print a checkpoint as JSON: header, chart state, progress, metrics, listener states,\n"
        "RNG kinds and [shape, dtype] of every tensor. No model is built and no code in it runs."
    )
    parser.add_argument("ckpt", type=str, help="Path of the checkpoint file (or sharded checkpoint directory).")
    return parser


def _convert_parser() -> ArgumentParser:
    from interlock.cli.convert import CONVERTERS

    parser = _parser(
        description="Write a checkpoint (interlock, or a PyTorch Lightning .ckpt) in another format.\n"
        "--to weights: the bare state dict as a plain torch.save file, for\n"
        "  module.load_state_dict(torch.load(DST, weights_only=True)).\n"
        "--to file: a sharded checkpoint directory as one checkpoint file (loads in one process).\n"
        "--to sharded: a checkpoint file as a sharded directory (resumes on any world size).\n"
        "No code in SRC runs and no model is built."
    )
    parser.add_argument("src", type=str, help="The checkpoint to read.")
    parser.add_argument("dst", type=str, help="The file to write (replaced atomically).")
    parser.add_argument(
        "--to", type=Literal[tuple(CONVERTERS)], default="weights", help="The format to write (default: weights)."
    )
    return parser


def _view_parser() -> ArgumentParser:
    parser = _parser(
        description="Serve a local web page showing runs on the statechart: where each run is (live while it\n"
        "trains), its timeline, metrics and checkpoints. Only files of runs under PATH are served.\n"
        "Needs the view extra: pip install 'interlock[view]'."
    )
    parser.add_argument(
        "path", type=str, nargs="?", default="runs", help="A run directory, or a root holding runs (default: runs)."
    )
    parser.add_argument("--host", type=str, default="127.0.0.1", help="Address to bind (default 127.0.0.1).")
    parser.add_argument("--port", type=int, default=8765, help="Port (0: any free one).")
    parser.add_argument(
        "--remote",
        action="store_true",
        help="Allow a --host that is not a loopback address; requests then need a token (printed in the URL).",
    )
    parser.add_argument("--token", type=str | None, default=None, help="The token for --remote (default: random).")
    parser.add_argument("--open", action="store_true", help="Open the page in the default browser.")
    return parser


def _replay_parser() -> ArgumentParser:
    parser = _parser(
        description="Replay a run started by `interlock fit` (its config is in RUN_DIR/cli.yaml) up to one of its\n"
        "transitions, bitwise, from the newest checkpoint before it; stop there to look or save.\n"
        "A failed run replays to its failure by default. Transitions are numbered as in\n"
        "`interlock chart --trace` and the view's timeline.",
        epilog="exit status: 0 replayed; 1 the replay diverged from the recorded run (the error names the first\n"
        "transition that differs); 2 bad arguments or a run directory without cli.yaml/trainer.json",
    )
    parser.add_argument("run_dir", type=str, help="The run directory (RUN, holding events.jsonl and cli.yaml).")
    parser.add_argument("--to", type=int | None, default=None, help="The transition to stop at (default: the last).")
    parser.add_argument("--save", type=str | None, default=None, help="Write a checkpoint of that moment here.")
    parser.add_argument("--json", action="store_true", help="Print where the replay stopped as JSON.")
    parser.add_argument(
        "--pdb", action="store_true", help="Drop into pdb there, with module, batch, state and error in scope."
    )
    return parser


def build_parser() -> ArgumentParser:
    """The whole ``interlock`` command line, with its subcommands."""
    from interlock import __version__

    parser = _parser(
        prog="interlock",
        description="Train, evaluate and debug interlock models from a config.\n"
        "`interlock fit` with no config trains the built-in digits example.",
        epilog=EXIT_STATUS,
    )
    parser.add_argument("--version", action="version", version=f"interlock {__version__}")
    commands = parser.add_subcommands(dest="command")
    helps = {
        "fit": "Train (or resume with --ckpt_path).",
        "validate": "Run the validation loop once.",
        "test": "Run the test loop once.",
        "predict": "Run the predict loop.",
        "listeners": "Show the configured listeners and which handlers run for each event.",
        "lr-find": "Sweep the learning rate and suggest one (Lightning's learning-rate finder).",
    }
    for name in CONFIG_COMMANDS:
        commands.add_subcommand(name, _config_parser(name), help=helps[name])
    commands.add_subcommand("chart", _chart_parser(), help="Draw the statechart (Mermaid, DOT, SVG, PNG).")
    commands.add_subcommand("inspect", _inspect_parser(), help="Print a checkpoint as readable JSON.")
    commands.add_subcommand(
        "convert", _convert_parser(), help="Write a checkpoint in another format (weights, file, sharded)."
    )
    commands.add_subcommand("view", _view_parser(), help="Serve a live web view of runs on the statechart.")
    commands.add_subcommand("replay", _replay_parser(), help="Replay a fit to one of its transitions, bitwise.")
    return parser
