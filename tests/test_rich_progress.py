"""RichProgressBar: rich bars per loop with the metrics after the bar; a clear error without rich."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import interlock
from conftest import TinyModule, loader, only
from interlock.listeners import ProgressBar, RichProgressBar

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def fit_output(tmp_path: Path, bar: ProgressBar) -> str:
    trainer = interlock.Trainer(max_epochs=2, default_root_dir=tmp_path, num_sanity_val_steps=1, **only(bar))
    trainer.fit(TinyModule(), loader(64, 16), loader(32, 16))
    trainer.test(TinyModule(), loader(32, 16))
    return ANSI.sub("", bar.file.getvalue())  # type: ignore[union-attr]


def test_bars_per_loop_with_metrics_after_the_bar(tmp_path: Path) -> None:
    """Sanity, epoch, validation and test bars are drawn; an epoch's line ends with its loss and metrics."""
    out = fit_output(tmp_path, RichProgressBar(mode="bar", file=io.StringIO()))
    for label in ("Sanity Checking", "Epoch 0", "Epoch 1", "Validation", "Testing"):
        assert label in out, label
    assert re.search(r"Epoch 1 [━ ]+ 4/4 .*it/s.* loss=[0-9.]+", out)
    assert re.search(r"Epoch 1 [━ ]+ 4/4 .*it/s.* train_loss=[0-9.]+ val_acc=[0-9.]+ val_loss=[0-9.]+", out)
    assert re.search(r"Testing .*2/\?.*test_acc=[0-9.]+ test_loss=[0-9.]+", out)


def test_without_a_terminal_auto_prints_lines_as_the_plain_bar(tmp_path: Path) -> None:
    """mode='auto' on a file that is not a terminal prints the ProgressBar's plain lines, no bars."""
    out = fit_output(tmp_path, RichProgressBar(file=io.StringIO()))
    assert "Epoch 1: 4 batches" in out and "━" not in out


def test_it_replaces_the_default_progress_bar(tmp_path: Path) -> None:
    """Passing a RichProgressBar leaves the trainer one progress listener, as Lightning's single bar."""
    trainer = interlock.Trainer(listeners=[RichProgressBar()], default_root_dir=tmp_path)
    assert [type(x).__name__ for x in trainer.listeners if isinstance(x, ProgressBar)] == ["RichProgressBar"]


def test_missing_rich_names_the_extra(monkeypatch: Any) -> None:
    """Without rich installed, construction raises ImportError naming pip install 'interlock[rich]'."""
    for name in ("rich", "rich.console", "rich.progress", "rich.text"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=re.escape("pip install 'interlock[rich]'")):
        RichProgressBar()


def test_the_lightning_name_takes_lightnings_arguments() -> None:
    """interlock.lightning.callbacks.RichProgressBar(refresh_rate, leave) works; a theme is refused by name."""
    from interlock.lightning.callbacks import RichProgressBar as Lit

    bar = Lit(refresh_rate=2, leave=True)
    assert isinstance(bar, RichProgressBar) and (bar.refresh_rate, bar.leave) == (2, True)
    with pytest.raises(ValueError, match="theme"):
        Lit(theme=object())
