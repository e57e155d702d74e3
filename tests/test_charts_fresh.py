"""The committed renderings of the chart (`make charts`) match the chart."""

from __future__ import annotations

import re
from pathlib import Path

from interlock.core.chart import load_chart
from interlock.viz import to_dot, to_mermaid
from interlock.viz.render import SOURCE_STAMP, source_digest

CHARTS = Path(__file__).resolve().parents[1] / "statecharts"


def test_committed_mermaid_is_current() -> None:
    """statecharts/trainer.mmd equals what the chart renders to now (run `make charts` if not)."""
    current = to_mermaid(load_chart()).rstrip("\n") + "\n"
    assert (CHARTS / "trainer.mmd").read_text() == current, "statecharts/trainer.mmd is stale: run `make charts`"


def test_committed_svg_was_drawn_from_the_current_chart() -> None:
    """statecharts/trainer.svg carries the digest of the DOT it was drawn from, and it is today's DOT."""
    svg = (CHARTS / "trainer.svg").read_text()
    stamp = re.search(rf"{SOURCE_STAMP}: ([0-9a-f]{{64}})", svg)
    assert stamp, "statecharts/trainer.svg has no source stamp: run `make charts`"
    assert stamp.group(1) == source_digest(to_dot(load_chart())), "statecharts/trainer.svg is stale: run `make charts`"


def test_committed_mermaid_shows_every_guard_and_action() -> None:
    """The committed drawing is the program: every guard and action the chart uses is on it."""
    chart = load_chart()
    text = (CHARTS / "trainer.mmd").read_text()
    assert chart.guards() and chart.actions()
    for guard in sorted(chart.guards()):
        assert f"[{guard}]" in text, f"guard {guard} is not on statecharts/trainer.mmd"
    for action in sorted(chart.actions()):  # dotted names: no state id contains one
        assert re.search(rf"\b{re.escape(action)}\b", text), f"action {action} is not on statecharts/trainer.mmd"


def test_docs_copy_of_the_svg_is_the_committed_one() -> None:
    """docs/assets/trainer.svg (the Concepts page's picture) is statecharts/trainer.svg (`make charts` copies it)."""
    docs_copy = CHARTS.parent / "docs" / "assets" / "trainer.svg"
    assert docs_copy.read_bytes() == (CHARTS / "trainer.svg").read_bytes(), "run `make charts`"


#: The chart's parts on the README and docs pages (`make chart-parts`): file -> (region, depth).
PARTS = {
    "trainer-overview.svg": (None, 1),
    "trainer-fit.svg": ("fit", 1),
    "trainer-fit.sanity.svg": ("fit.sanity", None),
    "trainer-fit.train.svg": ("fit.train", 1),
    "trainer-fit.train.batch.svg": ("fit.train.batch", None),
    "trainer-fit.train.val.svg": ("fit.train.val", 1),
    "trainer-fit.train.val.batch.svg": ("fit.train.val.batch", None),
    "trainer-validate.svg": ("validate", None),
}


def test_committed_chart_parts_are_current_and_made_by_make() -> None:
    """Every docs/assets/trainer-*.svg part is drawn from today's chart, and `make chart-parts` draws each."""
    assets = CHARTS.parent / "docs" / "assets"
    makefile = (CHARTS.parent / "Makefile").read_text()
    on_disk = {p.name for p in assets.glob("trainer-*.svg")}
    assert on_disk == set(PARTS), "docs/assets/trainer-*.svg and PARTS differ"
    for name, (region, depth) in PARTS.items():
        svg = (assets / name).read_text()
        stamp = re.search(rf"{SOURCE_STAMP}: ([0-9a-f]{{64}})", svg)
        assert stamp and stamp.group(1) == source_digest(to_dot(load_chart(), region=region, depth=depth)), (
            f"docs/assets/{name} is stale: run `make charts`"
        )
        flags = (f"--region {region} " if region else "") + (f"--depth {depth} " if depth else "")
        assert f"{flags}-o docs/assets/{name}" in makefile, f"`make chart-parts` does not draw {name}"
