"""The standalone HTML report, opened from disk in Chromium with the network off."""

from __future__ import annotations

import pytest

from calwatch.views import charts

from ..synthetic import PET_CLASSES, pets_monitor
from .helpers import MARKS, TIMEOUT_MS, route_offline

pytestmark = pytest.mark.ui


def test_report_renders_every_panel_offline_and_escapes_user_text(page, tmp_path, artifacts_dir):
    mon = pets_monitor()
    mon.note("<script>alert('note')</script> checked with the owners", batch=4, author="<b>bo</b>")
    mon.save(tmp_path / "snap")
    report = mon.report(tmp_path / "pets.html")

    dialogs: list[str] = []
    requests = route_offline(page)  # the network is off: anything but the file itself fails
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(report.resolve().as_uri())
    page.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
    expected = charts.chart_kinds(mon)
    drawn = page.eval_on_selector_all(".calwatch-chart", "els => els.map((e) => e.dataset.chart)")
    assert drawn == expected
    for name in expected:  # every panel draws marks from the embedded data
        page.wait_for_function(
            '(name) => document.querySelectorAll(`[data-chart="${name}"] ' + MARKS + "`).length > 0",
            arg=name,
            timeout=TIMEOUT_MS,
        )
    assert page.locator(".calwatch-error:visible").count() == 0
    assert page.locator("#calwatch-error").inner_text() == ""
    # read-only: no pause toggle, no acknowledge button; the banners are there
    assert page.locator("button.calwatch-pause").is_hidden()
    assert page.locator("button.calwatch-ack:visible").count() == 0
    assert page.locator(".calwatch-warning").count() > 0
    # hostile class names, notes and authors are text, never markup
    assert page.locator("img").count() == 0 and dialogs == []
    assert PET_CLASSES[2] in page.locator("section", has_text="Configuration").inner_text()
    notes = page.locator("section", has_text="Notes").inner_text()
    assert "<script>alert('note')</script> checked with the owners" in notes and "<b>bo</b>" in notes
    assert all(url.startswith(("file:", "blob:")) for url in requests), requests
    # the picker still filters the coverage panel without a kernel
    before = page.locator(f'[data-chart="coverage"] {MARKS}').count()
    page.select_option("select.calwatch-picker", "lac")
    page.wait_for_function(
        '(n) => document.querySelectorAll(\'[data-chart="coverage"] ' + MARKS + "').length < n",
        arg=before,
        timeout=TIMEOUT_MS,
    )
    page.screenshot(path=str(artifacts_dir / "report.png"), full_page=True)
