"""Griffe extension for the API reference: ``calwatch``'s lazily loaded names, seen statically.

``calwatch/__init__.py`` loads a few public names on first use (its ``_LAZY`` table and module
``__getattr__``), so that ``import calwatch`` stays fast; static analysis cannot see them. This
extension reads the same ``_LAZY`` table and adds each name to the ``calwatch`` package as an
alias of its defining module's object, as an ``if TYPE_CHECKING:`` import would, so that the
reference can say ``::: calwatch.VennAdmit``. Nothing is imported: the table is read from the
source by griffe itself. Loaded by mkdocs.yml (``plugins.mkdocstrings...extensions``).
"""

from __future__ import annotations

import ast
from typing import Any

import griffe


class LazyExports(griffe.Extension):
    """Add ``calwatch._LAZY``'s names to the ``calwatch`` package as aliases."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Once the package is loaded: an alias per lazy name, to ``module.name``."""
        lazy = pkg.members.get("_LAZY") if pkg.path == "calwatch" else None
        if not isinstance(lazy, griffe.Attribute):
            return
        table = ast.literal_eval(str(lazy.value))
        for name, module in table.items():
            if name not in pkg.members:
                pkg.set_member(name, griffe.Alias(name, f"{module}.{name}", parent=pkg))
