"""The standalone HTML report, opened from disk in Chromium with the network off."""

from __future__ import annotations

import pytest

import calwatch as cw
from calwatch.views import charts

from ..synthetic import PET_CLASSES, pets_monitor, planted_slice_monitor, softmax_data
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
    page.locator("details.setup > summary").click()  # configuration and provenance: compact, at the end
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


#: Every visible chart of the open tab: its container, its SVG, and its title and legend boxes.
CHART_BOXES = """() => [...document.querySelectorAll('.calwatch-chart, .calwatch-panel')]
  .filter((el) => el.offsetParent !== null)
  .map((el) => {
    const box = el.getBoundingClientRect();
    const svg = el.querySelector('svg');
    const s = svg === null ? null : svg.getBoundingClientRect();
    const inner = (sel) => [...el.querySelectorAll(sel)].map((t) => t.getBoundingClientRect())
      .filter((r) => r.width > 0).map((r) => [r.left, r.right]);
    return {chart: el.dataset.chart ?? el.dataset.panel, box: [box.left, box.right],
            svg: s === null ? null : [s.left, s.right, s.width],
            titles: inner('.role-title-text'), legends: inner('.role-legend-label text, .role-legend-title')};
  })"""


@pytest.mark.parametrize("width", [250, 400, 1200])
def test_every_tab_draws_its_charts_inside_the_page_at_any_width(page, tmp_path, artifacts_dir, width):
    # A side panel is ~250 px wide: no chart may collapse to zero width, and no title or legend
    # may run out of its chart's box (they wrap, or are shortened with the full text in a tooltip).
    mon = pets_monitor()
    report = mon.report(tmp_path / "pets.html")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(report.resolve().as_uri())
    page.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
    tabs = page.locator("button.calwatch-tab")
    names = tabs.all_inner_texts()
    assert len(names) >= 4, names
    problems = []
    for i, name in enumerate(names):
        tabs.nth(i).click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.calwatch-chart, .calwatch-panel')]"
            ".filter((e) => e.offsetParent !== null).every((e) => e.querySelector('svg') !== null)",
            timeout=TIMEOUT_MS,
        )
        page.wait_for_timeout(300)  # a resize settles within a frame or two
        charts_ = page.evaluate(CHART_BOXES)
        assert charts_, f"{name}: no chart drawn"
        for c in charts_:
            left, right = c["box"]
            if c["svg"] is None or c["svg"][2] <= 0:
                problems.append(f"{name}/{c['chart']}: zero width")
                continue
            if c["svg"][0] < left - 1 or c["svg"][1] > right + 1:
                problems.append(f"{name}/{c['chart']}: svg {c['svg'][:2]} outside {c['box']}")
            for kind in ("titles", "legends"):
                for lo, hi in c[kind]:
                    if lo < left - 1 or hi > right + 1:
                        problems.append(
                            f"{name}/{c['chart']}: {kind[:-1]} [{lo:.0f}, {hi:.0f}] outside {c['box']}"
                        )
        page.screenshot(path=str(artifacts_dir / f"report-{width}px-{name.lower()}.png"), full_page=False)
    assert not problems, "\n".join(problems)


def test_before_the_first_batch_the_page_states_promises_and_draws_no_empty_axes(
    page, tmp_path, artifacts_dir
):
    # The empty state read as broken: "no stated promise" chips beside cards saying 1−α=0.9, a
    # timeline axis reading "NaN" and a y-axis "0.000000".
    probs, y = softmax_data(200, seed=1)
    mon = cw.Monitor(
        calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1), "risk": cw.RiskEstimator()}
    )
    mon.calibrate(probs=probs, y=y)
    report = mon.report(tmp_path / "empty.html")
    page.goto(report.resolve().as_uri())
    page.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
    chips = page.eval_on_selector_all(
        "#calwatch-view .calwatch-health .calwatch-chip", "els => els.map((e) => e.textContent)"
    )
    assert any("90% coverage" in c for c in chips), chips
    assert not any("no stated promise" in c for c in chips), chips
    assert "Waiting for the first batch" in page.locator("#calwatch-headline").inner_text()
    assert page.locator(".calwatch-timeline").is_hidden()
    texts = " ".join(  # what is drawn on screen (hidden charts keep their empty axes off it)
        page.eval_on_selector_all(
            "svg text",
            "els => els.filter((e) => e.getBoundingClientRect().width > 0).map((e) => e.textContent)",
        )
    )
    assert "NaN" not in texts and "0.000000" not in texts
    assert "Waiting for the first batch" in page.locator('[data-chart="labels"] .calwatch-empty').inner_text()
    page.screenshot(path=str(artifacts_dir / "report-before-first-batch.png"), full_page=True)


LEGEND = "(sel) => [...document.querySelectorAll(sel + ' .role-legend-label text')].map((t) => t.textContent)"


def test_the_shift_view_has_a_lane_per_detector_and_shows_one_detector_s_evidence_on_a_click(
    page, tmp_path, artifacts_dir
):
    # The Shift tab was six statistics overplotted around one threshold: which detector is in
    # alarm, since when, and why, could not be read. Now each detector has a lane with its alarm
    # episodes and its state in words; a click on a lane shows that detector's evidence alone.
    mon = pets_monitor()
    mon.acknowledge(0, note="seen", by="bo")
    report = mon.report(tmp_path / "pets.html")
    page.set_viewport_size({"width": 900, "height": 1000})
    page.goto(report.resolve().as_uri())
    page.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
    page.locator("button.calwatch-tab", has_text="Shift").click()
    lanes = '[data-panel="shift_lanes"]'
    page.wait_for_selector(f"{lanes} svg .role-mark text", timeout=TIMEOUT_MS)
    words = page.eval_on_selector_all(f"{lanes} svg .role-mark text", "els => els.map((e) => e.textContent)")
    detectors = [d.name for d in mon.shift_watch.detectors]
    assert len(words) == len(detectors)  # a lane per detector, its state in words
    assert "alarm acknowledged since batch 3 (acknowledged by bo)" in words
    # the acknowledged episode is drawn in its colour over batches 3-5
    fills = page.eval_on_selector_all(
        f"{lanes} svg .role-mark path", "els => els.map((e) => e.getAttribute('fill'))"
    )
    assert "#9a6700" in fills
    # the lanes come first in the Shift view, then the evidence
    order = page.eval_on_selector_all(
        ".calwatch-chart:not([hidden]), .calwatch-panel:not([hidden])",
        "els => els.filter((e) => e.offsetParent !== null).map((e) => e.dataset.chart ?? e.dataset.panel)",
    )
    assert order[:2] == ["shift_lanes", "shift"], order
    evidence = '[data-chart="shift"]'
    assert len(page.evaluate(LEGEND, evidence)) == len(detectors)
    lane = page.locator(f"{lanes} svg .role-mark text", has_text="alarm acknowledged")
    lane.click()
    page.wait_for_function(f"(sel) => ({LEGEND})(sel).length === 1", arg=evidence, timeout=TIMEOUT_MS)
    assert page.evaluate(LEGEND, evidence)[0].startswith("confidence mart")
    page.screenshot(path=str(artifacts_dir / "shift-lanes-picked.png"), full_page=False)
    lane.click()  # a second click shows every detector again
    page.wait_for_function(
        f"([sel, n]) => ({LEGEND})(sel).length === n", arg=[evidence, len(detectors)], timeout=TIMEOUT_MS
    )


def test_batch_axes_label_named_batches_by_their_names(page, tmp_path, artifacts_dir):
    # Batch names given to observe(name=...) appeared nowhere on the axes ("Batch 12").
    probs, y = softmax_data(1400, seed=2)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)})
    mon.calibrate(probs=probs[:200], y=y[:200])
    months = ["May", "Jun", "Jul", "Aug", "Sep", "Oct"]
    for i, month in enumerate(months):
        rows = slice(200 + 200 * i, 400 + 200 * i)
        mon.observe(probs=probs[rows], y=y[rows], name=month)
    report = mon.report(tmp_path / "named.html")
    page.set_viewport_size({"width": 1200, "height": 900})
    page.goto(report.resolve().as_uri())
    page.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
    page.locator("button.calwatch-tab", has_text="Coverage").click()
    ticks = '[data-chart="coverage"] svg .role-axis-label text'
    page.wait_for_function(
        "(s) => [...document.querySelectorAll(s)].some((t) => t.textContent === 'May')",
        arg=ticks,
        timeout=TIMEOUT_MS,
    )
    labels = page.eval_on_selector_all(ticks, "els => els.map((e) => e.textContent)")
    assert set(months) & set(labels) and not {str(i) for i in range(6)} & set(labels), labels
    timeline = page.eval_on_selector_all(
        ".calwatch-timeline svg .role-axis-label text", "els => els.map((e) => e.textContent)"
    )
    assert "Jun" in timeline, timeline
    page.locator('[data-chart="coverage"]').screenshot(path=str(artifacts_dir / "named-batch-axis.png"))


def test_where_it_fails_ranks_slices_and_a_click_shows_that_column_s_values(page, tmp_path, artifacts_dir):
    # "For whom does it fail?": the Slices tab ranks the slices tested by mon.slices() (flagged in
    # red at the stated FDR) and shows one column's values; a click on a slice picks its column.
    mon = planted_slice_monitor()
    report = mon.report(tmp_path / "slices.html")
    for width in (1000, 250):
        page.set_viewport_size({"width": width, "height": 1000})
        page.goto(report.resolve().as_uri())
        page.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
        page.locator("button.calwatch-tab", has_text="Slices").click()
        ranked = '[data-panel="where_it_fails"] svg .role-axis-label text'
        values = '[data-panel="slice_values"] svg .role-axis-label text'
        page.wait_for_selector(ranked, timeout=TIMEOUT_MS)
        names = page.eval_on_selector_all(ranked, "els => els.map((e) => e.textContent)")
        first = next(name for name in names if " = " in name)  # the y axis: slices, strongest first
        assert first.startswith("carrier = B"), names
        page.wait_for_function(
            "(s) => [...document.querySelectorAll(s)].some((t) => t.textContent.startsWith('carrier = A'))",
            arg=values,
            timeout=TIMEOUT_MS,
        )
        page.screenshot(path=str(artifacts_dir / f"where-it-fails-{width}px.png"), full_page=False)
    # a click on an origin slice shows origin's values
    page.set_viewport_size({"width": 1000, "height": 1000})
    page.wait_for_timeout(300)
    point = page.locator('[data-panel="where_it_fails"] svg g.mark-symbol.role-mark path')
    labels = page.eval_on_selector_all(
        '[data-panel="where_it_fails"] svg g.mark-symbol.role-mark path',
        "els => els.map((e) => e.getAttribute('aria-label') || '')",
    )
    picks = [i for i, label in enumerate(labels) if "origin =" in label and "&" not in label]
    assert picks, labels[:5]
    point.nth(picks[0]).click(force=True)
    page.wait_for_function(
        "(s) => [...document.querySelectorAll(s)].some((t) => t.textContent.startsWith('origin ='))",
        arg=values,
        timeout=TIMEOUT_MS,
    )
