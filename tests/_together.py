"""Independent tool processes run at the same time (the suite's time budget), each bounded, none left behind."""

from __future__ import annotations

import subprocess


def run_together(commands: list[list[str]], timeout: float) -> list[tuple[int, str, str]]:
    """Start every command at once; wait for each (``timeout`` seconds); ``(returncode, stdout, stderr)`` each.

    A command still running when another's wait fails is killed, so a failed test leaves no process.
    """
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in commands]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outputs, strict=True)]
