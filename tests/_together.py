"""Independent tool processes run at the same time (the suite's time budget), each bounded, none left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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


def run_script(directory: Path, text: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Write ``text`` to ``directory/script.py`` and run it in a fresh interpreter that imports this checkout's
    interlock (``argv[1]`` is ``directory``), bounded by ``timeout`` seconds."""
    script = directory / "script.py"
    script.write_text(text)
    src = Path(__file__).resolve().parents[1] / "src"
    return subprocess.run(
        [sys.executable, str(script), str(directory)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        check=False,
    )
