"""Two views of one dashboard in a real JupyterLab + Chromium: the brush, the theme, the row table.

- The timeline brush is drawn in every view: brushed in the inline view, set from Python
  (``mon.widget().batch_range``), cleared by a view's "clear" button or from Python; the drawn
  rectangle covers the same batches in the inline view and the ~250 px sidebar, stays over them
  when new batches extend the x axis, and is never written back with other values.
- JupyterLab Dark: the charts switch to light text on the notebook's dark background while the
  widget is shown, and back (screenshot test-artifacts/dashboard-dark.png).
- The row table of a batch follows the class filter: every row shown is predicted as or labelled
  the picked class (needs the kernel side of ``rows_page(class_filter=...)``).

Pixel checks read the brush rectangle (Vega's ``brush_brush_bg`` rect mark) against the plot: the
timeline's x axis is the batch, from the first batch (left end of the area mark) to the last
(its right end), so batch ``b`` sits at ``left + width * b / (n - 1)``.
"""

from __future__ import annotations

import time
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
    wait_until,
    write_notebook,
)

pytestmark = pytest.mark.ui

N_BATCHES = 12
CLASSES = ["cat", "dog", "owl", "yak"]

SETUP = f"""
import numpy as np
import polars as pl
import calwatch as cw

CLASSES = {CLASSES!r}
rng = np.random.default_rng(1)


def batch(n, scale=2.0):
    logits = rng.normal(size=(n, 4)) * scale
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1)
    return P, np.array(CLASSES)[y]


mon = cw.Monitor(
    calibrators={{"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}},
    classes=CLASSES,
    name="sync",
)
P, y = batch(2000)
mon.calibrate(probs=P, y=y)
pending = None
for b in range({N_BATCHES}):
    P, y = batch(200)
    ids = [f"b{{b}}-{{i}}" for i in range(200)]
    mon.observe(probs=P, ids=ids, name="2026-11-13" if b == 3 else None)  # one batch with a name
    if pending is not None:
        mon.label(*pending)
    pending = (ids, y)
mon.show()
"""
SIDEBAR_CELL = "mon.show(sidebar=True)"
ONE_MORE_BATCH = """
P, y = batch(200)
ids = [f"extra-{i}" for i in range(200)]
mon.observe(probs=P, ids=ids)
mon.label(*pending)
pending = (ids, y)
"""

TIMELINE = ".calwatch-timeline .calwatch-vega"

# The timeline's plot (x extent of the area mark: first to last batch) and the brush rectangle.
BRUSH_GEOMETRY_JS = """
(root) => {
  const timeline = root.querySelector('.calwatch-timeline');
  const areas = [...timeline.querySelectorAll('g.mark-area path')].map((p) => p.getBoundingClientRect());
  const rect = timeline.querySelector('g.brush_brush_bg path');
  const box = rect === null ? null : rect.getBoundingClientRect();
  return {
    left: Math.min(...areas.map((b) => b.left)),
    right: Math.max(...areas.map((b) => b.right)),
    rect: box === null ? null : [box.left, box.right],
  };
}
"""


def _start(page: Any, lab_server: Any, name: str, cells: list[str], roots: tuple[str, ...]) -> Kernel:
    write_notebook(lab_server.root / name, cells)
    kernel = open_notebook(page, lab_server, name)
    run_all(page, name, timeout_s=180)
    _caught_up(page, kernel, roots)
    for root in roots:
        wait_attr(page, root, "data-replay-seq")
        no_widget_error(page, root)
    return kernel


def _caught_up(page: Any, kernel: Kernel, roots: tuple[str, ...]) -> None:
    seq = kernel.eval("mon.widget().seq")
    for root in roots:
        wait_seq(page, root, seq)


def _brushed(root: str) -> str:
    return f"{root} {TIMELINE}"


def _covered(page: Any, root: str, n_batches: int) -> list[int]:
    """The batches whose x lies under the brush rectangle drawn in ``root`` ([] if none)."""
    g = page.eval_on_selector(root, BRUSH_GEOMETRY_JS)
    if g["rect"] is None or g["rect"][1] - g["rect"][0] < 1:
        return []
    step = (g["right"] - g["left"]) / (n_batches - 1)
    assert step > 5, g  # a plot wide enough to tell batches apart
    x0, x1 = g["rect"]
    # half a batch of margin either side (a drawn brush spans lo - 0.5 .. hi + 0.5); never on a batch
    return [b for b in range(n_batches) if x0 <= g["left"] + step * b <= x1]


def _wait_brush(page: Any, text: str, roots: tuple[str, ...] = (INLINE, SIDEBAR)) -> None:
    for root in roots:
        wait_attr(page, _brushed(root), "data-brush", text)


def _drag(page: Any, root: str, frm: float, to: float) -> None:
    """Drag across the timeline of ``root`` from ``frm`` to ``to`` (shares of the plot width)."""
    plot = page.locator(f"{root} .calwatch-timeline g.mark-area path").first.bounding_box()
    assert plot is not None
    x0, x1 = plot["x"] + plot["width"] * frm, plot["x"] + plot["width"] * to
    y = plot["y"] + plot["height"] * 0.5
    page.mouse.move(x0, y)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, y, steps=4)
    page.mouse.move(x1, y, steps=4)
    page.mouse.up()


def test_brush_is_drawn_in_every_view(lab_server: Any, page: Any, artifacts_dir: Path) -> None:
    kernel = _start(page, lab_server, "brush-sync.ipynb", [SETUP, SIDEBAR_CELL], (INLINE, SIDEBAR))
    for root in (INLINE, SIDEBAR):
        assert attr(page, _brushed(root), "data-brush") == ""
        assert _covered(page, root, N_BATCHES) == []

    # ---- brushed in the inline view: the sidebar draws a rectangle over the same batches
    _drag(page, INLINE, 0.30, 0.62)
    page.wait_for_function(
        "(s) => document.querySelector(s).dataset.batchRange.includes('-')", arg=INLINE, timeout=TIMEOUT_MS
    )
    lo, hi = (int(v) for v in str(attr(page, INLINE, "data-batch-range")).split("-"))
    assert 0 < lo <= hi < N_BATCHES - 1, (lo, hi)
    kernel.wait_for("mon.widget().batch_range", (lo, hi))
    _wait_brush(page, f"{lo}-{hi}")
    wait_attr(page, SIDEBAR, "data-batch-range", f"{lo}-{hi}")
    for root in (INLINE, SIDEBAR):
        assert _covered(page, root, N_BATCHES) == list(range(lo, hi + 1)), root
    widths = [page.locator(f"{root} {TIMELINE}").bounding_box()["width"] for root in (INLINE, SIDEBAR)]
    assert widths[1] < 0.5 * widths[0], widths  # the same batches at two different scales
    page.locator(".jupyterlab-sidecar").screenshot(path=str(artifacts_dir / "dashboard-brush-sidebar.png"))

    # ---- set from Python: drawn in both views; nothing written back
    kernel.run("mon.widget().batch_range = (2, 4)")
    _wait_brush(page, "2-4")
    for root in (INLINE, SIDEBAR):
        assert _covered(page, root, N_BATCHES) == [2, 3, 4], root
    page.wait_for_timeout(500)  # past the views' 150 ms brush debounce
    assert kernel.eval("mon.widget().batch_range") == (2, 4)
    # a single batch gets a rectangle too
    kernel.run("mon.widget().batch_range = (7, 7)")
    _wait_brush(page, "7-7")
    for root in (INLINE, SIDEBAR):
        assert _covered(page, root, N_BATCHES) == [7], root

    # ---- a new batch extends the x axis: the rectangles move with batch 7
    kernel.run(ONE_MORE_BATCH)
    _caught_up(page, kernel, (INLINE, SIDEBAR))
    page.wait_for_timeout(300)
    for root in (INLINE, SIDEBAR):
        assert _covered(page, root, N_BATCHES + 1) == [7], root
    assert kernel.eval("mon.widget().batch_range") == (7, 7)

    # ---- the sidebar's clear button clears both, and the kernel's range
    page.locator(f"{SIDEBAR} button.calwatch-range-clear").click()
    kernel.wait_for("mon.widget().batch_range", None)
    _wait_brush(page, "")
    for root in (INLINE, SIDEBAR):
        assert _covered(page, root, N_BATCHES + 1) == [], root
    # ---- and Python's None
    kernel.run("mon.widget().batch_range = (5, 9)")
    _wait_brush(page, "5-9")
    kernel.run("mon.widget().batch_range = None")
    _wait_brush(page, "")
    for root in (INLINE, SIDEBAR):
        assert _covered(page, root, N_BATCHES + 1) == [], root
        wait_attr(page, root, "data-batch-range", "")
        no_widget_error(page, root)
    page.wait_for_timeout(500)
    assert kernel.eval("mon.widget().batch_range") is None
    errors = [e for e in browser_errors(page) if "calwatch" in e.lower() or "vega" in e.lower()]
    assert not errors, errors


# Colour of a computed CSS colour as [r, g, b, a] (0-255, alpha 0-1).
COLOR_JS = """
(el, prop) => {
  const c = getComputedStyle(el)[prop];
  const m = c.match(/rgba?\\(([^)]*)\\)/);
  if (m === null) return null;
  const v = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
  return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
}
"""
CHART = f'{INLINE} div.calwatch-chart[data-chart="coverage"]'


def _luminance(rgba: list[float]) -> float:
    r, g, b = (c / 255 for c in rgba[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _label_luminances(page: Any) -> list[float]:
    colors = page.eval_on_selector_all(
        f"{CHART} g.role-axis-label text", f"(els) => els.map((el) => ({COLOR_JS})(el, 'fill'))"
    )
    assert colors and all(c is not None for c in colors), colors
    return [_luminance(c) for c in colors]


def _set_theme(page: Any, theme: str, light: bool) -> None:
    page.evaluate("(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", theme)
    page.wait_for_function(
        "(v) => document.body.dataset.jpThemeLight === v", arg=str(light).lower(), timeout=TIMEOUT_MS
    )


def test_dark_theme_while_shown(lab_server: Any, page: Any, artifacts_dir: Path) -> None:
    _start(page, lab_server, "dark.ipynb", [SETUP], (INLINE,))
    page.locator(f'{INLINE} button.calwatch-tab[data-section="Coverage"]').click()
    page.wait_for_function(
        "(s) => document.querySelectorAll(s).length > 0",
        arg=f"{CHART} g.mark-symbol path",
        timeout=TIMEOUT_MS,
    )
    assert max(_label_luminances(page)) < 0.2  # light theme: dark axis labels
    try:
        _set_theme(page, "JupyterLab Dark", light=False)
        # the widget follows without a re-run: the charts are re-embedded with Vega's dark theme
        wait_until(lambda: min(_label_luminances(page)) > 0.8, "light axis labels in the dark theme")
        page.wait_for_function(
            "(s) => document.querySelectorAll(s).length > 0",
            arg=f"{CHART} g.mark-symbol path",
            timeout=TIMEOUT_MS,
        )
        svg_bg = page.eval_on_selector(f"{CHART} svg", f"(el) => ({COLOR_JS})(el, 'backgroundColor')")
        assert svg_bg is not None and svg_bg[3] == 0, svg_bg  # transparent: the notebook's background
        # the widget's own CSS takes JupyterLab's variables: light text, dark controls
        root_color = page.eval_on_selector(INLINE, f"(el) => ({COLOR_JS})(el, 'color')")
        assert _luminance(root_color) > 0.6, root_color
        select_bg = page.eval_on_selector(
            f"{INLINE} select.calwatch-class-filter", f"(el) => ({COLOR_JS})(el, 'backgroundColor')"
        )
        assert select_bg is not None and _luminance(select_bg) < 0.3, select_bg
        page.wait_for_timeout(300)  # let the re-embedded charts settle their widths
        page.locator(INLINE).screenshot(path=str(artifacts_dir / "dashboard-dark.png"))
        no_widget_error(page, INLINE)
    finally:
        # the server (and its user settings) is shared by the whole session: back to light
        _set_theme(page, "JupyterLab Light", light=True)
    wait_until(lambda: max(_label_luminances(page)) < 0.2, "dark axis labels again in the light theme")
    errors = [e for e in browser_errors(page) if "calwatch" in e.lower() or "vega" in e.lower()]
    assert not errors, errors


def _open_rows_at(page: Any, root: str, batch: int, n_batches: int) -> None:
    """Click the timeline of ``root`` at ``batch`` (opens its rows)."""
    g = page.eval_on_selector(root, BRUSH_GEOMETRY_JS)
    x = g["left"] + (g["right"] - g["left"]) * batch / (n_batches - 1)
    plot = page.locator(f"{root} .calwatch-timeline g.mark-area path").first.bounding_box()
    page.mouse.click(x, plot["y"] + plot["height"] * 0.5)


ROWS_LOADED_JS = """
(s) => { const e = document.querySelector(s);
  return e !== null && !e.hidden && !e.dataset.loading && e.querySelectorAll('tbody tr').length > 0; }
"""


def _rows_shown(page: Any, table: str, class_filter: str, timeout_s: float = 30.0) -> None:
    """Wait until the row table shows rows of a reply that names ``class_filter``."""
    page.wait_for_function(ROWS_LOADED_JS, arg=table, timeout=TIMEOUT_MS)
    deadline = time.monotonic() + timeout_s
    shown = None
    while time.monotonic() < deadline:
        shown = attr(page, table, "data-class-filter")
        if shown == class_filter and page.evaluate(ROWS_LOADED_JS, table):
            return
        time.sleep(0.05)
    pytest.fail(
        f"the row table shows rows of class_filter={shown!r}, not {class_filter!r}: the kernel's `rows` "
        "reply must name the class filter its rows were picked by (dashboard.rows_page(class_filter=...))"
    )


def test_row_table_follows_the_class_filter(lab_server: Any, page: Any, artifacts_dir: Path) -> None:
    kernel = _start(page, lab_server, "rows-class.ipynb", [SETUP], (INLINE,))
    table = f"{INLINE} .calwatch-rows"
    batch = 5
    page.locator(f"{INLINE} select.calwatch-class-filter").select_option("cat")
    kernel.wait_for("mon.widget().class_filter", "cat")
    _open_rows_at(page, INLINE, batch, N_BATCHES)
    wait_attr(page, table, "data-batch", str(batch))
    _rows_shown(page, table, "cat")
    expected = kernel.eval(
        f"mon.rows(batch={batch}).filter((pl.col('prediction').cast(pl.Utf8) == 'cat')"
        " | (pl.col('label').cast(pl.Utf8) == 'cat')).height"
    )
    assert 0 < expected < 200
    title = page.locator(f"{table} .calwatch-rows-title").inner_text()
    assert title == f"Batch {batch} · class cat: rows 1–{min(20, expected)} of {expected}", title

    def rows() -> list[list[str]]:
        shown: list[list[str]] = page.eval_on_selector_all(
            f"{table} tbody tr",
            "(trs) => trs.map((tr) => [tr.querySelector('[data-column=prediction]').textContent,"
            " tr.querySelector('[data-column=label]').textContent])",
        )
        return shown

    seen = 0
    while True:  # every page
        shown = rows()
        assert shown and all("cat" in pair for pair in shown), shown
        seen += len(shown)
        nxt = page.locator(f"{table} button.calwatch-rows-next")
        if nxt.is_disabled():
            break
        page_no = int(attr(page, table, "data-page") or "0")
        nxt.click()
        wait_attr(page, table, "data-page", str(page_no + 1))
        _rows_shown(page, table, "cat")
    assert seen == expected

    # another class while the table is open: re-requested, from its first page
    page.locator(f"{INLINE} select.calwatch-class-filter").select_option("dog")
    _rows_shown(page, table, "dog")
    assert attr(page, table, "data-page") == "0"
    assert all("dog" in pair for pair in rows())
    assert "· class dog:" in page.locator(f"{table} .calwatch-rows-title").inner_text()
    # no filter: the whole batch
    page.locator(f"{INLINE} select.calwatch-class-filter").select_option("")
    _rows_shown(page, table, "")
    assert page.locator(f"{table} .calwatch-rows-title").inner_text() == f"Batch {batch}: rows 1–20 of 200"
    # a batch observed under a name is shown by it (observe(name=...)), with its index
    _open_rows_at(page, INLINE, 3, N_BATCHES)
    wait_attr(page, table, "data-batch", "3")
    _rows_shown(page, table, "")
    title = page.locator(f"{table} .calwatch-rows-title")
    wait_until(
        lambda: title.inner_text() == "Batch 3 (2026-11-13): rows 1–20 of 200",
        f"the batch's name ({title.inner_text()!r})",
    )
    page.locator(table).screenshot(path=str(artifacts_dir / "row-table-named-batch.png"))
    no_widget_error(page, INLINE)
