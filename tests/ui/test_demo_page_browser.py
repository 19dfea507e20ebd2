"""The charts page `make demo` writes, opened from disk in Chromium with the network off.

Every chart must be drawn at a finite size, each below the one before (none on top of another),
with marks from the embedded data. (Charts of calibrator kinds a monitor does not have used to be
included with empty data, which gave Vega infinite extents: every chart in the top-left corner.)
"""

from __future__ import annotations

import itertools
import math

import pytest

from calwatch.demo import write_charts_html
from calwatch.views import charts

from ..synthetic import pets_monitor
from .helpers import TIMEOUT_MS

pytestmark = pytest.mark.ui


def test_demo_page_draws_each_chart_once_at_a_finite_size_without_overlap(page, tmp_path, artifacts_dir):
    mon = pets_monitor()
    html = write_charts_html(mon, tmp_path / "calwatch-demo.html")
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if m.type in ("warning", "error") else None)
    page.route(
        "**/*",
        lambda r: r.continue_() if r.request.url.startswith(("file:", "data:", "blob:")) else r.abort(),
    )
    page.goto(html.resolve().as_uri())
    page.wait_for_selector("svg.marks", timeout=TIMEOUT_MS)
    root = page.eval_on_selector("svg.marks", "s => [s.getAttribute('width'), s.getAttribute('height')]")
    width, height = (float(v) for v in root)
    assert math.isfinite(width) and math.isfinite(height) and 0 < width < 5_000 and 0 < height < 50_000, root
    # One group per chart at the top level of the concatenation, stacked top to bottom.
    boxes = page.eval_on_selector_all(
        "svg.marks g.mark-group.role-scope",
        """els => els
            .filter((e) => [...e.classList].some((c) => /^concat_\\d+_group$/.test(c)))
            .map((e) => { const b = e.getBoundingClientRect(); return [b.top, b.bottom, b.height]; })""",
    )
    kinds = charts.chart_kinds(mon)
    assert len(boxes) == len(kinds), (len(boxes), kinds)
    for (top, bottom, h), (next_top, _, _) in itertools.pairwise(boxes):
        assert h > 20 and bottom <= next_top + 1, (top, bottom, next_top)
    assert not [w for w in warnings if "Infinite extent" in w], warnings
    page.screenshot(path=str(artifacts_dir / "demo-page.png"), full_page=True)
