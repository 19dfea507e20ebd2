"""Sharing what a monitor saw: the offline report, the served dashboard, a notebook's static output.

- :mod:`~calwatch.publish.report` — one self-contained HTML page (:func:`write_report`);
- :mod:`~calwatch.publish.server` — ``calwatch serve``: a live page on 127.0.0.1 with a token;
- :mod:`~calwatch.publish.snapshot_feed` — the server's view of a snapshot folder as it is rewritten;
- :mod:`~calwatch.publish.notebook_output` — the frozen dashboard a saved notebook shows offline;
- :mod:`~calwatch.publish.svg_child` — Vega-Lite to SVG in a child process, for static images.
"""

from calwatch.publish.report import write_report

__all__ = ["write_report"]
