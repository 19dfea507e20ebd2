"""The dashboard in a real JupyterLab + Chromium, used as a user would.

A notebook written by the test streams a small monitor whose class names include an HTML
injection, shows it inline and in the sidecar, then: every tab is screenshotted; the α slider
recomputes the what-if coverage (checked against ``Monitor.what_if``); brushing the timeline
filters the other panels and reaches the kernel (``widget.batch_range``); a click on a batch opens
its rows; a note typed in the widget is kept by the monitor, survives save/load and shows in a
reloaded monitor's widget; the sidebar view matches the inline one; nothing user-typed is ever
markup. Screenshots: test-artifacts/dashboard-*.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .helpers import (
    INLINE,
    SIDEBAR,
    TIMEOUT_MS,
    Kernel,
    attr,
    browser_errors,
    no_widget_error,
    open_notebook,
    run_all,
    wait_attr,
    wait_seq,
    write_notebook,
)

pytestmark = pytest.mark.ui

NOTEBOOK = "dashboard.ipynb"
#: The first cell's widget (after the reload cell, INLINE matches two widgets).
FIRST = ".jp-Notebook .jp-Cell:first-child .calwatch-widget"
INJECTION = "<img src=x onerror=alert(1)>"
NOTE_TEXT = "<script>alert('note')</script> labels were late here & <b>bold</b>"
N_BATCHES = 12

SETUP = f"""
import numpy as np
import calwatch as cw

CLASSES = ["cat", "dog", {INJECTION!r}, "owl"]
rng = np.random.default_rng(0)


def batch(n, scale=2.0):
    logits = rng.normal(size=(n, 4)) * scale
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1)
    return P, np.array(CLASSES)[y]


mon = cw.Monitor(
    calibrators={{
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
        "risk": cw.RiskEstimator(method="temperature"),
    }},
    classes=CLASSES,
    name="dashboard",
)
SITES = ["north", "south", "east"]
P, y = batch(3000)
mon.calibrate(probs=P, y=y, meta={{"site": rng.choice(SITES, 3000)}})
pending = None
for b in range({N_BATCHES}):
    P, y = batch(400, scale=2.0 if b < 8 else 0.8)
    ids = [f"b{{b}}-{{i}}" for i in range(400)]
    mon.observe(probs=P, ids=ids, meta={{"site": rng.choice(SITES, 400)}})
    if pending is not None:
        mon.label(*pending)
    pending = (ids, y)
mon.note("drift starts here", batch=8, author="ana")
mon.show()
"""
SIDEBAR_CELL = "mon.show(sidebar=True)"
RELOAD_CELL = "mon2 = cw.Monitor.load(SNAPSHOT)\nmon2.show()"


# Points of the coverage line (their aria-label names the coverage; the axis-span points do not).
COUNT_LABELLED_JS = """
([sel, n]) => [...document.querySelectorAll(sel)]
  .filter((e) => (e.getAttribute('aria-label') || '').includes('coverage')).length === n
"""


def _aria(page: Any, selector: str) -> list[dict[str, str]]:
    """The aria-labels of the marks under ``selector``, parsed into ``{field: value}``."""
    labels = page.eval_on_selector_all(selector, "els => els.map((e) => e.getAttribute('aria-label') || '')")
    return [dict(part.split(": ", 1) for part in label.split("; ") if ": " in part) for label in labels]


def _texts(page: Any, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map((e) => e.textContent)")


def _visible_texts(page: Any, selector: str) -> list[str]:
    return page.eval_on_selector_all(
        selector, "els => els.filter((e) => e.offsetParent !== null).map((e) => e.textContent)"
    )


def _tab(page: Any, root: str, section: str) -> None:
    page.locator(f'{root} button.calwatch-tab[data-section="{section}"]').click()
    wait_attr(page, root, "data-section", section)


def _upserts_done(page: Any, kernel: Kernel) -> None:
    seq = kernel.eval("mon.widget().seq")
    for root in (INLINE, SIDEBAR):
        wait_seq(page, root, seq)


def test_dashboard_in_jupyterlab(lab_server: Any, page: Any, artifacts_dir: Path, tmp_path: Path) -> None:
    write_notebook(lab_server.root / NOTEBOOK, [SETUP, SIDEBAR_CELL])
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    kernel = open_notebook(page, lab_server, NOTEBOOK)
    run_all(page, NOTEBOOK, timeout_s=180)
    latest = kernel.eval("mon.widget().seq")
    for root in (INLINE, SIDEBAR):
        wait_seq(page, root, latest)
        wait_attr(page, root, "data-replay-seq")
        no_widget_error(page, root)

    # ---- tabs: one per section with content; every tab screenshotted (inline and sidebar)
    sections = [s["name"] for s in kernel.eval("mon.widget()._sections")]
    assert sections == ["Overview", "Coverage", "Risk", "Calibration", "Sets", "Shift", "Slices"]
    assert _texts(page, f"{INLINE} button.calwatch-tab") == sections
    for section in sections:
        _tab(page, INLINE, section)
        shown = page.eval_on_selector_all(
            f"{INLINE} .calwatch-chart, {INLINE} .calwatch-panel",
            "els => els.filter((e) => e.offsetParent !== null).map((e) => e.dataset.section)",
        )
        assert shown and set(shown) == {section}, (section, shown)
        page.wait_for_timeout(300)  # let the charts of the tab catch up and resize
        page.locator(INLINE).screenshot(path=str(artifacts_dir / f"dashboard-{section.lower()}.png"))
        page.locator(".jupyterlab-sidecar").screenshot(
            path=str(artifacts_dir / f"dashboard-sidebar-{section.lower()}.png")
        )
        _tab(page, SIDEBAR, section)
    _tab(page, INLINE, "Overview")
    cards = _texts(page, f"{INLINE} .calwatch-card .calwatch-card-title")
    assert cards == ["lac: 1−α=0.9", "aps: 1−α=0.9", "risk: temperature, top-1, calibrated estimate"]
    lac_card = page.locator(f'{INLINE} .calwatch-card[data-calibrator="lac"]').inner_text()
    overview = kernel.eval(
        "__import__('importlib').import_module('calwatch.views.dashboard').overview(mon)"
        ".filter(__import__('polars').col('key') == 'lac').to_dicts()[0]"
    )
    assert f"coverage {overview['coverage']:.3f}" in lac_card and "vs target 0.900" in lac_card

    # ---- the α slider: the what-if coverage line shows the coverage recomputed at that α
    _tab(page, INLINE, "Coverage")
    assert "what-if α: off" in page.locator(f"{INLINE} .calwatch-alpha-text").inner_text()
    page.locator(f"{INLINE} input.calwatch-alpha").fill("0.25")
    kernel.wait_for("mon.widget().alpha", 0.25)
    _upserts_done(page, kernel)
    expected = {
        (r["batch"], r["calibrator"]): round(r["coverage"], 4)
        for r in kernel.eval(
            "mon.what_if(0.25).drop_nulls('coverage').select('batch', 'calibrator', 'coverage').to_dicts()"
        )
    }
    assert expected, "the window has labelled rows"
    points = f'{INLINE} div.calwatch-panel[data-panel="what_if"] g.mark-symbol.role-mark path'
    page.wait_for_function("(s) => document.querySelectorAll(s).length > 0", arg=points, timeout=TIMEOUT_MS)
    labels = _aria(page, points)
    assert all("coverage" in p for p in labels), labels[:3]
    shown = {(int(p["batch"]), p["calibrator"]): round(float(p["coverage"]), 4) for p in labels}
    assert shown == expected
    own = {
        (int(r["batch"]), r["calibrator"])
        for r in kernel.eval(
            "mon.summary().filter(__import__('polars').col('coverage').is_not_null()).select('batch','calibrator').to_dicts()"
        )
    }
    assert set(shown) <= own
    info = page.locator(f"{INLINE} .calwatch-alpha-info").inner_text()
    assert f"batches 0–{N_BATCHES - 1}" in info and "4,800 rows" in info  # the window it applies to
    assert "1−α = 0.75" in page.locator(f"{SIDEBAR} .calwatch-alpha-text").inner_text()  # both views
    # moving it again replaces the line (no stale rows from 0.25)
    page.locator(f"{INLINE} input.calwatch-alpha").fill("0.05")
    kernel.wait_for("mon.widget().alpha", 0.05)
    _upserts_done(page, kernel)
    expected = {
        (r["batch"], r["calibrator"]): round(r["coverage"], 4)
        for r in kernel.eval(
            "mon.what_if(0.05).drop_nulls('coverage').select('batch', 'calibrator', 'coverage').to_dicts()"
        )
    }
    page.wait_for_function(
        "([s, n]) => document.querySelectorAll(s).length === n",
        arg=[points, len(expected)],
        timeout=TIMEOUT_MS,
    )
    assert {
        (int(p["batch"]), p["calibrator"]): round(float(p["coverage"]), 4) for p in _aria(page, points)
    } == expected
    page.locator(INLINE).screenshot(path=str(artifacts_dir / "dashboard-what-if.png"))
    # the side panel (α changed from the inline view while it showed another tab) draws the same
    # what-if chart once its Coverage tab opens: never at zero width, always inside the panel
    _tab(page, SIDEBAR, "Coverage")
    side_panel = f'{SIDEBAR} div.calwatch-panel[data-panel="what_if"]'
    page.wait_for_function(
        "([s, n]) => document.querySelectorAll(s).length === n",
        arg=[f"{side_panel} g.mark-symbol.role-mark path", len(expected)],
        timeout=TIMEOUT_MS,
    )
    boxes = page.evaluate(
        "(s) => [document.querySelector(s), document.querySelector(s + ' svg')]"
        ".map((e) => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.width]; })",
        side_panel,
    )
    (panel_lo, panel_hi, _), (svg_lo, svg_hi, svg_width) = boxes
    assert svg_width > 0 and panel_lo - 1 <= svg_lo and svg_hi <= panel_hi + 1, boxes
    page.locator(".jupyterlab-sidecar").screenshot(path=str(artifacts_dir / "dashboard-sidebar-what-if.png"))
    # the Slices tab in the side panel: a bar per tested slice, every chart inside the panel
    tested = kernel.eval("mon.slices().height")
    assert tested > 0
    _tab(page, SIDEBAR, "Slices")
    bars = f'{SIDEBAR} div.calwatch-panel[data-panel="where_it_fails"] g.role-mark path'
    page.wait_for_function(
        "([s, n]) => document.querySelectorAll(s).length >= n", arg=[bars, tested], timeout=TIMEOUT_MS
    )
    for panel in ("where_it_fails", "slice_values"):
        boxes = page.evaluate(
            "(s) => [document.querySelector(s), document.querySelector(s + ' svg')]"
            ".map((e) => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.width]; })",
            f'{SIDEBAR} div.calwatch-panel[data-panel="{panel}"]',
        )
        (panel_lo, panel_hi, _), (svg_lo, svg_hi, svg_width) = boxes
        assert svg_width > 0 and panel_lo - 1 <= svg_lo and svg_hi <= panel_hi + 1, (panel, boxes)
    page.locator(".jupyterlab-sidecar").screenshot(path=str(artifacts_dir / "dashboard-sidebar-slices.png"))
    _tab(page, SIDEBAR, "Coverage")

    # ---- brush the timeline: the other panels filter, the kernel knows the range
    coverage_points = f'{INLINE} div.calwatch-chart[data-chart="coverage"] g.mark-symbol.role-mark path'
    before = {int(p["batch"]) for p in _aria(page, coverage_points) if "coverage" in p}
    assert before == set(range(N_BATCHES - 1))  # every labelled batch
    plot = page.locator(f"{INLINE} .calwatch-timeline g.mark-area path").first.bounding_box()
    assert plot is not None
    x0, x1 = plot["x"] + plot["width"] * 0.30, plot["x"] + plot["width"] * 0.62
    y = plot["y"] + plot["height"] * 0.5
    page.mouse.move(x0, y)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, y, steps=4)
    page.mouse.move(x1, y, steps=4)
    page.mouse.up()
    page.wait_for_function(
        "(sel) => document.querySelector(sel).dataset.batchRange.includes('-')",
        arg=INLINE,
        timeout=TIMEOUT_MS,
    )
    lo, hi = (int(v) for v in attr(page, INLINE, "data-batch-range").split("-"))
    assert 0 < lo <= hi < N_BATCHES - 1, (lo, hi)
    kernel.wait_for("mon.widget().batch_range", (lo, hi))
    page.wait_for_function(COUNT_LABELLED_JS, arg=[coverage_points, 2 * (hi - lo + 1)], timeout=TIMEOUT_MS)
    assert {int(p["batch"]) for p in _aria(page, coverage_points)} == set(range(lo, hi + 1))
    # the sidebar follows (its filters, via the kernel's trait), and so do the overview cards
    wait_attr(page, SIDEBAR, "data-batch-range", f"{lo}-{hi}")
    _upserts_done(page, kernel)
    assert (
        f"· {hi - lo + 1} batches"
        in page.locator(f'{SIDEBAR} .calwatch-card[data-calibrator="lac"]').inner_text()
    )
    assert f"batches {lo}–{hi}" in page.locator(f"{INLINE} .calwatch-range").inner_text()
    page.locator(INLINE).screenshot(path=str(artifacts_dir / "dashboard-brushed.png"))
    page.locator(f"{INLINE} button.calwatch-range-clear").click()
    kernel.wait_for("mon.widget().batch_range", None)
    page.wait_for_function(COUNT_LABELLED_JS, arg=[coverage_points, 2 * len(before)], timeout=TIMEOUT_MS)

    # ---- a click on a batch opens its rows (ids, prediction, set, risk, label), paged
    page.locator(f'{coverage_points}[aria-label^="batch: 5;"]').first.click()
    table = f"{INLINE} .calwatch-rows"
    page.wait_for_function(
        "(s) => { const e = document.querySelector(s); return e && !e.hidden && !e.dataset.loading "
        "&& e.querySelectorAll('tbody tr').length > 0; }",
        arg=table,
        timeout=TIMEOUT_MS,
    )
    assert "Batch 5: rows 1–20 of 400" in page.locator(f"{table} .calwatch-rows-title").inner_text()
    assert _texts(page, f"{table} th") == ["id", "prediction", "confidence", "set", "risk", "label"]
    ids = _texts(page, f'{table} td[data-column="id"]')
    assert ids == [f"b5-{i}" for i in range(20)]
    page.locator(f"{table} button.calwatch-rows-next").click()
    page.wait_for_function(
        "(s) => document.querySelector(s).dataset.page === '1' && !document.querySelector(s).dataset.loading",
        arg=table,
    )
    assert _texts(page, f'{table} td[data-column="id"]')[0] == "b5-20"
    kernel_rows = kernel.eval("[str(v) for v in mon.rows(batch=5)['prediction'][20:40]]")
    assert _texts(page, f'{table} td[data-column="prediction"]') == kernel_rows  # injection as text

    # ---- a note typed in the widget: kept by the monitor, on the timeline, after save/load
    page.locator(f"{table} button.calwatch-rows-note").click()  # pins the note form to batch 5
    assert page.locator(f"{INLINE} input.calwatch-note-batch").input_value() == "5"
    page.locator(f"{INLINE} input.calwatch-note-author").fill("<i>bo</i>")
    page.locator(f"{INLINE} textarea.calwatch-note-text").fill(NOTE_TEXT)
    page.locator(f"{INLINE} button.calwatch-note-add").click()
    kernel.wait_for("len(mon.notes())", 2)
    assert kernel.eval("mon.notes().row(1, named=True)['text']") == NOTE_TEXT
    assert kernel.eval("(mon.notes()['batch'][1], mon.notes()['author'][1])") == (5, "<i>bo</i>")
    for root in (INLINE, SIDEBAR):
        page.wait_for_function(
            "(s) => document.querySelectorAll(s).length === 2",
            arg=f"{root} li.calwatch-note",
            timeout=TIMEOUT_MS,
        )
        assert _texts(page, f'{root} li.calwatch-note[data-batch="5"] .calwatch-note-body') == [NOTE_TEXT]
    # the notes' rules (the timeline's invisible x-span rule is aria-hidden: no label)
    rules = f"{INLINE} .calwatch-timeline g.mark-rule.role-mark line"
    assert {p.get("batch") for p in _aria(page, rules) if p} == {"5", "8"}
    snapshot = tmp_path / "snap"
    kernel.run(f"SNAPSHOT = {str(snapshot)!r}\nmon.save(SNAPSHOT)")
    assert kernel.eval("cw.Monitor.load(SNAPSHOT).notes()['text'].to_list()") == [
        "drift starts here",
        NOTE_TEXT,
    ]
    _run_new_cell(page, RELOAD_CELL)
    reloaded = ".jp-Notebook .jp-Cell:last-child .calwatch-widget"
    page.wait_for_function(
        "(s) => document.querySelectorAll(s).length === 2",
        arg=f"{reloaded} li.calwatch-note",
        timeout=TIMEOUT_MS,
    )
    assert _texts(page, f"{reloaded} li.calwatch-note .calwatch-note-body") == [
        "drift starts here",
        NOTE_TEXT,
    ]

    # ---- the sidebar matches the inline view: same data, cards, notes, filters
    _upserts_done(page, kernel)
    for name in (
        "batches",
        "set_sizes",
        "class_coverage",
        "shift",
        "overview",
        "notes",
        "what_if",
        "reliability",
        "set_by_class",
    ):
        assert attr(page, SIDEBAR, f"data-rows-{name}") == attr(page, FIRST, f"data-rows-{name}"), name
    assert _texts(page, f"{SIDEBAR} .calwatch-card") == _texts(page, f"{FIRST} .calwatch-card")
    assert _texts(page, f"{SIDEBAR} li.calwatch-note") == _texts(page, f"{FIRST} li.calwatch-note")
    sidebar_width = page.locator(f"{SIDEBAR}").bounding_box()["width"]
    assert sidebar_width < 400, sidebar_width
    page.locator(".jupyterlab-sidecar").screenshot(path=str(artifacts_dir / "dashboard-sidebar.png"))

    # ---- the class filter: a kernel trait, a Vega signal in every view
    page.locator(f"{FIRST} select.calwatch-class-filter").select_option(INJECTION)
    kernel.wait_for("mon.widget().class_filter", INJECTION)
    wait_attr(page, SIDEBAR, "data-class-filter", INJECTION)
    assert INJECTION in _texts(page, f"{SIDEBAR} select.calwatch-class-filter option")

    # ---- nothing typed by users, labels or class names became markup
    assert (
        page.locator(
            ".calwatch-widget img, .calwatch-widget script, .calwatch-widget b, .calwatch-widget i"
        ).count()
        == 0
    )
    assert dialogs == []
    errors = [e for e in browser_errors(page) if "calwatch" in e.lower() or "vega" in e.lower()]
    assert not errors, errors
    for root in (FIRST, SIDEBAR):
        no_widget_error(page, root)


def _run_new_cell(page: Any, source: str) -> None:
    """Append a code cell with ``source`` at the end of the notebook and run it."""
    page.evaluate(
        """async ([path, source]) => {
          const app = window.jupyterapp;
          let panel = null;
          for (const w of app.shell.widgets('main')) if (w.context && w.context.path === path) panel = w;
          const nb = panel.content;
          nb.activeCellIndex = nb.widgets.length - 1;
          await app.commands.execute('notebook:insert-cell-below');
          nb.activeCell.model.sharedModel.setSource(source);
          await app.commands.execute('notebook:run-cell');
        }""",
        [NOTEBOOK, source],
    )
    page.wait_for_selector(".jp-Notebook .jp-Cell:last-child .calwatch-widget", timeout=TIMEOUT_MS)
