"""Griffe extension for the API reference: Sphinx roles in docstrings shown as code, not as markup.

calwatch's numpy-style docstrings name other objects with Sphinx roles (``:meth:`observe```,
``:class:`~calwatch.monitor.monitor.Monitor```, ``:func:`text <target>```), which Markdown would print
literally (":meth: observe"). This extension rewrites each role, when a docstring is loaded, as
the code span Sphinx would display: the target (its last part with ``~``), or the explicit text.
The docstrings in the package are left as they are. Loaded by mkdocs.yml.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|exc|obj|const|term|ref):`([^`]+)`")


def _shown(match: re.Match[str]) -> str:
    """What Sphinx displays for one role: ``text`` of ``text <target>``, else the target."""
    inner = match.group(1).strip()
    titled = re.fullmatch(r"(.+?)\s*<([^<>]+)>", inner)
    if titled:
        return f"`{titled.group(1).strip()}`"
    if inner.startswith("~"):
        inner = inner[1:].rsplit(".", 1)[-1]
    return f"`{inner.lstrip('!')}`"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx cross-reference roles in every loaded docstring as Markdown code spans."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """As each object is loaded, before its docstring is parsed."""
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_shown, obj.docstring.value)
