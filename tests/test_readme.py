"""The README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs_and_stops_by_its_listener(tmp_path: Any, monkeypatch: Any) -> None:
    """The twenty-line example trains the digits model until its listener returns Stop."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1
    code = blocks[0].replace("max_epochs=20", "max_epochs=20, default_root_dir=TMP")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"TMP": str(tmp_path)}
    exec(compile(code, str(README), "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.state.chart == "finished"
    assert trainer.state.stop_reason == "val_acc reached 0.97"
    assert trainer.state.metrics["val_acc"] >= 0.97
