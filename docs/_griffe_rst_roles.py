"""Griffe extension for the API reference: Sphinx roles in docstrings become Markdown code.

The docstrings use ``:class:`~interlock.Trainer```-style roles; Markdown has none, so
``:role:`target``` is rendered as `` `target` `` (``~`` keeps the last dotted part).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):`(~?)([^`<]+?)`")


def _plain(match: re.Match[str]) -> str:
    target = match.group(2).strip()
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


class RstRoles(griffe.Extension):
    """Rewrite Sphinx cross-reference roles in every docstring as inline code."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_plain, obj.docstring.value)
