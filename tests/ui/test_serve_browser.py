"""calwatch serve in Chromium: two pages follow an autosaving monitor live, without a reload."""

from __future__ import annotations

import time

import numpy as np
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw

from ..synthetic import PET_CLASSES, pets_monitor, softmax_data
from .helpers import MARKS, TIMEOUT_MS

pytestmark = pytest.mark.ui

STATUS = ".calwatch-widget .calwatch-status"
#: The new snapshot is on screen: the status line says so and the charts applied its data (a replay).
UPDATED = """() => {
  const root = document.querySelector(".calwatch-widget");
  const status = root?.querySelector(".calwatch-status")?.textContent ?? "";
  return status.includes("7 batches") && root.dataset.replaySeq === '1';
}"""
UPDATE_BUDGET_S = 5.0


def _local_only(page, base: str, requests: list[str]) -> None:
    """Every request must go to the server itself (or blob:/data: URLs): the rest is aborted."""

    def route(route):
        requests.append(route.request.url)
        if route.request.url.startswith((base, "blob:", "data:")):
            route.continue_()
        else:
            route.abort("internetdisconnected")

    page.route("**/*", route)


def _marks(page, chart: str) -> int:
    return int(page.locator(f'[data-chart="{chart}"] {MARKS}').count())


PROVENANCE_BATCHES = """() => [...document.querySelectorAll("#calwatch-sections dt")]
  .find((dt) => dt.textContent === "batches")?.nextElementSibling?.textContent"""
TIMELINE_MARKS = f".calwatch-timeline {MARKS}"


def test_two_pages_follow_the_saves_live_and_the_snapshot_outlives_the_server(
    browser_context, page, tmp_path, artifacts_dir
):
    mon = pets_monitor()
    path = tmp_path / "pets"
    server = mon.serve(path, every_batches=1, every_seconds=None)
    base = f"http://127.0.0.1:{server.port}/"
    other = browser_context.new_page()
    requests: list[str] = []
    try:
        pages = [page, other]
        for p in pages:
            _local_only(p, base, requests)
            response = p.goto(server.url)
            assert response is not None and response.status == 200
        for p in pages:
            p.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
            p.wait_for_function(
                "(sel) => document.querySelectorAll(sel).length > 0",
                arg=f'[data-chart="coverage"] {MARKS}',
                timeout=TIMEOUT_MS,
            )
            assert "6 batches" in p.locator(STATUS).inner_text()
            p.evaluate("() => { window.__sameDocument = true; }")  # gone if the page reloads
        rows_before = int(page.locator(".calwatch-widget").get_attribute("data-rows-batches") or 0)
        coverage_before = _marks(page, "coverage")
        coverage_svg = page.inner_html('[data-chart="coverage"] svg')
        timeline_before = int(page.locator(".calwatch-widget").get_attribute("data-rows-timeline") or 0)
        assert page.locator(TIMELINE_MARKS).count() > 0 and page.evaluate(PROVENANCE_BATCHES) == "6"
        # the report's first screen, served: which promises hold, what broke
        headline = page.locator("#calwatch-headline").inner_text()
        assert "promises:" in headline and "labelled batches" in headline, headline

        P, y = softmax_data(400, seed=77)
        labels = np.array(PET_CLASSES)[y]  # known at once: the coverage panel gets a new point
        started = time.monotonic()
        mon.observe(probs=P, y=labels, ids=[f"live-{i}" for i in range(400)])  # autosaved on return
        saved = time.monotonic()
        for p in pages:
            p.wait_for_function(UPDATED, timeout=UPDATE_BUDGET_S * 1000, polling=10)
        latency = time.monotonic() - started
        save_ms = 1000 * (saved - started)
        print(f"\nobserve + autosave -> both pages: {1000 * latency:.0f} ms (observe+save {save_ms:.0f} ms)")
        assert latency < UPDATE_BUDGET_S

        for p in pages:
            assert p.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
            assert p.evaluate("() => document.body.dataset.updates") == "1"
            assert _marks(p, "coverage") > 0  # the panels are drawn from the new data
            assert p.evaluate(PROVENANCE_BATCHES) == "7"  # the sections follow too
            assert p.locator("#calwatch-headline").inner_text() != headline  # and the first screen
            assert p.locator("#calwatch-error").inner_text() == ""
            assert p.locator("img").count() == 0  # the hostile class name stays text
        rows_after = int(page.locator(".calwatch-widget").get_attribute("data-rows-batches") or 0)
        assert rows_after > rows_before
        timeline_after = int(page.locator(".calwatch-widget").get_attribute("data-rows-timeline") or 0)
        assert timeline_after == timeline_before + 1
        assert _marks(page, "coverage") >= coverage_before
        page.wait_for_function(  # the coverage panel is redrawn with the new batch
            "(old) => document.querySelector('[data-chart=\"coverage\"] svg')?.innerHTML !== old",
            arg=coverage_svg,
            timeout=TIMEOUT_MS,
        )
        page.screenshot(path=str(artifacts_dir / "serve.png"), full_page=False)

        wrong = other.goto(base + "?token=" + "x" * 43)
        assert wrong is not None and wrong.status == 403
        assert all(url.startswith((base, "blob:", "data:")) for url in requests), requests
    finally:
        other.close()
        server.stop()
        mon.stop_autosave()
    assert not server.running
    assert_frame_equal(cw.Monitor.load(path).summary(), mon.summary())
