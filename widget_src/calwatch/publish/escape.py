"""Text safe inside a page: HTML text and attributes, and JSON inside a ``<script>`` element.

Every page calwatch writes (the report, the served view, a notebook's static dashboard) shows
names that came from users, labels or classes; these two functions are the only way they reach
the markup.
"""

from __future__ import annotations

import html
import json
from typing import Any


def escape_html(value: Any) -> str:
    """``value`` as HTML text (quotes escaped too, so it may go in an attribute); None is ""."""
    return html.escape("" if value is None else str(value), quote=True)


def script_json(value: Any) -> str:
    """JSON that cannot end its <script> element early (``<``, ``>``, ``&`` escaped).

    Used wherever saved state is embedded in a page: the report, the served view, a notebook's
    static dashboard.
    """
    text = json.dumps(value, allow_nan=False, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


__all__ = ["escape_html", "script_json"]
