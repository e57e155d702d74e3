"""Entry point of the ``interlock`` command (``interlock --help``)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

from interlock.cli.commands import COMMANDS, UsageError
from interlock.cli.config import CONFIG_COMMANDS, DEFAULT_CONFIG, build_parser
from interlock.core.errors import ChartError, CheckpointError, ReplayDivergence, RunDirectoryInUse
from interlock.viz import GraphvizError, TraceError

__all__ = ["STDOUT_CLOSED", "main", "with_default_config"]

_INPUT_ERRORS = (UsageError, CheckpointError, ChartError, TraceError)

STDOUT_CLOSED = 141
"""Exit status when the reader of stdout went away (``interlock inspect CKPT | head``): 128 + SIGPIPE,
what a shell reports for ``cat FILE | head`` and what ``set -o pipefail`` reacts to."""


def with_default_config(args: Sequence[str]) -> list[str]:
    """``args`` with ``--config DEFAULT_CONFIG`` after a config subcommand that was given no ``--config``."""
    args = list(args)
    for i, arg in enumerate(args):
        if arg in CONFIG_COMMANDS:
            rest = args[i + 1 :]
            if any(a == "--config" or a.startswith("--config=") for a in rest):
                return args
            return [*args[: i + 1], "--config", DEFAULT_CONFIG, *rest]
        if not arg.startswith("-"):
            break
    return args


def _report(exc: BaseException) -> None:
    notes = "".join(f"\n  {note}" for note in getattr(exc, "__notes__", ()))
    print(f"error: {exc}{notes}", file=sys.stderr)


def _stdout_to_devnull() -> None:
    """Point the stdout descriptor at /dev/null, so the interpreter's flush at exit cannot fail again."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: a stdout without a descriptor
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``interlock`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    When stdout is a pipe whose reader exits early (``interlock inspect CKPT | head``), the
    command stops quietly, without a traceback, with status :data:`STDOUT_CLOSED` (141).
    """
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is reported below
    except BrokenPipeError:
        _stdout_to_devnull()
        return STDOUT_CLOSED
    return status


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        cfg = parser.parse_args(with_default_config(args))
    except SystemExit as exc:  # --help, --print_config, or a parse error already reported
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return COMMANDS[cfg.command](parser, cfg, args)
    except _INPUT_ERRORS as exc:
        _report(exc)
        return 2
    except (GraphvizError, RunDirectoryInUse, ReplayDivergence) as exc:
        _report(exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
