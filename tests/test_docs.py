"""The documentation: every Python example runs, the site builds strictly, the commands exist.

Each ```python block in ``docs/**/*.md`` is executed in page order; the blocks of one page
share a namespace (later blocks use earlier names) and run in a fresh temporary working
directory, so the runs they start write there. A block whose title names a file
(```yaml title="config.yaml"```) is also written to that file first, so the examples after
it can use it. A block is skipped only when the line
before its fence is ``<!-- docs-test: skip REASON -->``: reserved for examples of parts
not written yet, listed by ``skipped_blocks()`` so they can be unskipped.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)(?P<attrs>[^\n]*)$")
_SKIP = re.compile(r"^\s*<!--\s*docs-test:\s*skip\b\s*(?P<reason>.*?)\s*-->\s*$")


@attrs.frozen
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None  # the reason, when marked skipped
    title: str = ""  # the fence's title="..." attribute

    @property
    def file(self) -> str | None:
        """The title when it names a file (``title="config.yaml"``): the block is written there."""
        return self.title if re.fullmatch(r"[\w.-]+(/[\w.-]+)*\.\w+", self.title) else None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order, dedented to its fence."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening or not opening["ticks"]:
            i += 1
            continue
        indent, ticks = opening["indent"], opening["ticks"]
        end = i + 1
        while end < len(lines) and not re.fullmatch(rf"{re.escape(indent)}{ticks[0]}{{{len(ticks)},}}\s*", lines[end]):
            end += 1
        body = "\n".join(
            line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[i + 1 : end]
        )
        previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _SKIP.match(previous)
        title = re.search(r'title="([^"]*)"', opening["attrs"])
        skip = marker["reason"] if marker else None
        found.append(Block(page, i + 1, opening["lang"].lower(), body + "\n", skip, title[1] if title else ""))
        i = end + 1
    return found


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def python_pages() -> list[Path]:
    return [p for p in pages() if any(b.lang in ("python", "py") for b in blocks(p))]


def skipped_blocks() -> list[Block]:
    """Every Python block marked ``<!-- docs-test: skip ... -->``, for the unskip list."""
    return [b for p in pages() for b in blocks(p) if b.lang in ("python", "py") and b.skip is not None]


# -- every example runs ----------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", python_pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_python_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the page's Python blocks in order, in one namespace, inside a temporary directory."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    ran = 0
    for block in blocks(page):
        if block.file is not None and block.skip is None:  # ```yaml title="config.yaml": later blocks use it
            target = tmp_path / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")
        if block.lang not in ("python", "py") or block.skip is not None:
            continue
        try:
            exec(compile(block.code, block.where, "exec"), namespace)
        except BaseException as exc:  # SystemExit included: an example must not exit
            raise AssertionError(f"the example at {block.where} failed: {type(exc).__name__}: {exc}") from exc
        ran += 1
    if not ran:
        pytest.skip(f"every Python example of {page.relative_to(ROOT)} is marked docs-test: skip")


def test_list_skipped_examples() -> None:
    """Skips (with the list in the reason) while any example is marked skipped: the unskip list."""
    skipped = skipped_blocks()
    if skipped:
        pytest.skip(
            f"{len(skipped)} docs example(s) marked skip: " + "; ".join(f"{b.where} ({b.skip})" for b in skipped)
        )


def test_skip_markers_precede_python_blocks_and_give_a_reason() -> None:
    """A marker must sit right above a Python block (no stray markers) and say why."""
    for page in pages():
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if "docs-test:" not in line:
                continue
            marker = _SKIP.match(line)
            assert marker, f"{page.relative_to(ROOT)}:{number}: unknown docs-test marker {line.strip()!r}"
            assert marker["reason"], f"{page.relative_to(ROOT)}:{number}: a skip marker needs a reason"
            following = next((b for b in blocks(page) if b.line > number), None)
            assert following is not None and following.lang in ("python", "py") and following.skip is not None, (
                f"{page.relative_to(ROOT)}:{number}: a skip marker must be the line before a ```python fence"
            )


# -- the commands the pages show exist --------------------------------------------------------


def _interlock_commands() -> list[tuple[str, list[str]]]:
    """``(where, argv)`` for each ``interlock ...`` line of a bash block (continuations joined)."""
    found = []
    for page in pages():
        for block in blocks(page):
            if block.lang not in ("bash", "sh", "console"):
                continue
            text = block.code.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.split(" #", 1)[0].strip().removeprefix("$ ")
                words = shlex.split(line) if line else []
                if "interlock" in words:
                    argv = words[words.index("interlock") + 1 :]
                elif "interlock.cli" in words:  # torchrun ... -m interlock.cli fit ...
                    argv = words[words.index("interlock.cli") + 1 :]
                else:
                    continue
                found.append((block.where, argv))
    return found


def test_interlock_commands_in_the_docs_exist() -> None:
    """Every ``interlock SUBCOMMAND --flag`` in a bash block is a real subcommand and flag."""
    from interlock.cli.config import build_parser

    parser = build_parser()
    subcommands = parser._subcommands_action._name_parser_map  # jsonargparse keeps argparse's map
    helps: dict[str, str] = {}
    commands = _interlock_commands()
    assert commands, "the docs show no interlock command"
    for where, argv in commands:
        if not argv or argv[0].startswith("-"):
            assert not argv or argv[0] in ("--help", "-h", "--version"), f"{where}: unknown option {argv[0]}"
            continue
        sub = argv[0]
        assert sub in subcommands, f"{where}: `interlock {sub}` is not a subcommand ({sorted(subcommands)})"
        if sub not in helps:
            helps[sub] = subcommands[sub].format_help()
        for arg in argv[1:]:
            if not arg.startswith("--"):
                continue
            flag = arg.split("=", 1)[0]
            if flag.startswith(("--model.", "--data.")):
                flag = flag.split(".", 1)[0]  # init_args depend on the chosen class
            assert flag in helps[sub], f"{where}: `interlock {sub}` has no option {flag}"


# -- the site builds ---------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_mkdocs_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (what ``make docs`` runs): no warnings, no broken links."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("mkdocs / mkdocstrings are not installed (pip install -e '.[dev]')")
    if not (DOCS / "performance.md").exists():
        pytest.skip("docs/performance.md is not written yet; the nav links to it")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    output = textwrap.indent(result.stdout + result.stderr, "  ")
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    assert "WARNING" not in result.stderr, f"mkdocs warned:\n{output}"
    assert (tmp_path / "site" / "index.html").exists()
