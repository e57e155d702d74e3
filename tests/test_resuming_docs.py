"""docs/resuming.md: the signal and exit-status table and the sbatch example match what the code does."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from interlock.cli.config import EXIT_STATUS
from interlock.trainer.session import preemption_signals

PAGE = Path(__file__).resolve().parents[1] / "docs" / "resuming.md"
SLURM_BATCH = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train"}


def _table() -> dict[str, tuple[str, int]]:
    """Signal name -> (when it is handled, the documented exit status)."""
    text = PAGE.read_text()
    block = text.split("<!-- signal-table -->")[1].split("<!-- /signal-table -->")[0]
    rows = [line for line in block.splitlines() if line.startswith("| `SIG")]
    out = {}
    for row in rows:
        name, when, code, _ = (cell.strip() for cell in row.strip("|").split("|"))
        out[name.split("`")[1]] = (when, int(code))
    return out


def test_the_signal_table_matches_the_handled_signals_and_exit_statuses() -> None:
    """Each documented signal is one fit handles (SIGUSR1 only under SLURM) and exits 128 + its number."""
    table = _table()
    handled = {signal.Signals(s).name for s in preemption_signals({})} | {"SIGINT"}
    under_slurm = {signal.Signals(s).name for s in preemption_signals(SLURM_BATCH)} | {"SIGINT"}
    assert set(table) == under_slurm, (table, under_slurm)
    for name, (when, code) in table.items():
        assert code == 128 + int(signal.Signals[name]), (name, code)  # cli: 128 + signum; 130 for Ctrl-C
        assert (name in handled) == (when.startswith("always")), (name, when)
    assert "SLURM" in table["SIGUSR1"][0]


def test_the_sbatch_example_requeues_on_every_preemption_exit_status() -> None:
    """The sbatch script requeues on the exit status of each signal SLURM can send (not on Ctrl-C's)."""
    script = PAGE.read_text().split("```bash\n#!/bin/bash")[1].split("```")[0]
    requeued = {int(code) for code in re.findall(r'"\$status" -eq (\d+)', script)}
    table = _table()
    assert requeued == {code for name, (_, code) in table.items() if name != "SIGINT"}, requeued
    assert "scontrol requeue" in script


def test_the_cli_exit_status_help_names_each_preemption_status() -> None:
    """`interlock fit --help` lists the exit statuses of the table."""
    for name, (_, code) in _table().items():
        assert str(code) in EXIT_STATUS, (name, code)
