"""A click on a slice filters the row table to that slice's rows, in Chromium (issue "Where it fails", 3).

No JupyterLab: the page renders the widget's bundle (``renderView``) on a model whose messages go
to a real :class:`~calwatch.widget.MonitorWidget` in this process (Playwright's ``expose_function``),
which answers them as it answers a kernel's comm (``_on_custom_message``: the replay, the row
table's ``rows-request``), so the browser half and the kernel half meet as in a notebook, in
seconds. The synced traits are the widget's own; those the browser sets stay in the page (this
test sets none).

Checked: a click on the weakest slice (a point of ``where_it_fails``) with no batch open opens the
newest window batch holding rows of it, filtered to them, counted as ``mon.rows()``'s
``slice_<column>`` counts them, and named in the caption; the Slices view still picks the
column; a pair (``a & b``) keeps the open batch; a bar of ``slice_values`` picks its slice; "✕
slice" and a second click on the same slice show every row again. In the report (no raw rows)
the click only picks the column. Screenshots: test-artifacts/slice-filter{,-250px}.png.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import calwatch as cw
from calwatch.widget import MonitorWidget

from ..synthetic import planted_slice_monitor
from .helpers import TIMEOUT_MS, route_offline, wait_until

pytestmark = pytest.mark.ui

BUNDLE = Path(cw.__file__).parent / "static" / "widget.js"
ROOT = "#view .calwatch-widget"
TABLE = f"{ROOT} .calwatch-rows"
TITLE = f"{TABLE} .calwatch-rows-title"
RANKED_POINTS = '[data-panel="where_it_fails"] svg g.mark-symbol.role-mark path'
VALUE_POINTS = '[data-panel="slice_values"] svg g.mark-symbol.role-mark path'
#: Traits a view does not read (anywidget's and ipywidgets' own).
NOT_VIEW_STATE = ("_esm", "_css", "_anywidget_id", "_dom_classes")

# The page: the bundle (inlined, imported from a blob URL as the report does) drawn on a model that
# hands every message to the widget in the test process and emits its replies as msg:custom.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>slice filter</title></head>
<body style="margin: 8px">
<div id="view"></div>
<script id="state" type="application/json">{state}</script>
<script id="bundle" type="application/json">{bundle}</script>
<script type="module">
class BridgeModel {{
  constructor(state) {{
    this.state = state;
    this.handlers = new Map();
    this.widget_manager = {{ get_model: () => Promise.reject(new Error("no widget manager")) }};
  }}
  get(key) {{ return this.state[key]; }}
  set(key, value) {{
    if (this.state[key] === value) return;
    this.state[key] = value;
    this.emit(`change:${{key}}`);
  }}
  save_changes() {{}}
  send(content) {{
    window.__calwatchKernel(content).then((replies) => {{
      for (const reply of replies) setTimeout(() => this.emit("msg:custom", reply, []), 0);
    }});
  }}
  on(event, handler) {{ this.handlers.set(event, [...(this.handlers.get(event) ?? []), handler]); }}
  off(event, handler) {{
    if (event == null) {{ this.handlers.clear(); return; }}
    const left = handler == null ? [] : (this.handlers.get(event) ?? []).filter((h) => h !== handler);
    this.handlers.set(event, left);
  }}
  emit(event, ...args) {{ for (const h of this.handlers.get(event) ?? []) h(...args); }}
}}
const read = (id) => JSON.parse(document.getElementById(id).textContent);
const code = Uint8Array.from(atob(read("bundle")), (c) => c.charCodeAt(0));
const widget = await import(URL.createObjectURL(new Blob([code], {{ type: "text/javascript" }})));
widget.renderView(new BridgeModel(read("state")), document.getElementById("view"));
document.body.dataset.rendered = "true";
</script>
</body></html>
"""


def _bridged_page(page: Any, widget: MonitorWidget, path: Path) -> list[dict[str, Any]]:
    """Open the page of ``widget`` (its messages answered in this process); returns the requests seen."""
    asked: list[dict[str, Any]] = []

    def kernel(content: dict[str, Any]) -> list[dict[str, Any]]:
        asked.append(content)
        replies: list[dict[str, Any]] = []
        widget.send = lambda message, buffers=None: replies.append(message)  # type: ignore[method-assign]
        try:
            widget._on_custom_message(widget, content, [])
        finally:
            del widget.send  # the class's own again
        return json.loads(json.dumps(replies, default=str))

    state = {k: v for k, v in widget.get_state().items() if k.startswith("_") and k not in NOT_VIEW_STATE}
    state = {k: v for k, v in state.items() if not k.startswith(("_model_", "_view_"))}
    text = PAGE.format(
        state=json.dumps(state, default=str).replace("</", "<\\/"),
        bundle=json.dumps(base64.b64encode(BUNDLE.read_bytes()).decode()),
    )
    path.write_text(text, encoding="utf-8")
    page.expose_function("__calwatchKernel", kernel)
    route_offline(page)
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
    return asked


ARIA_LABELS = "els => els.map((e) => e.getAttribute('aria-label') || '')"


def _slices_drawn(page: Any, selector: str) -> list[str]:
    """The slice of each point of a Slices panel, from its aria-label (``…; slice: carrier = B; …``)."""
    labels: list[str] = page.eval_on_selector_all(selector, ARIA_LABELS)
    return [label.split("slice: ")[1].split(";")[0] if "slice: " in label else "" for label in labels]


def _click_slice(page: Any, selector: str, words: str) -> None:
    """Click the point of the slice named exactly ``words``."""
    drawn = _slices_drawn(page, selector)
    assert words in drawn, (words, drawn[:6])
    page.locator(selector).nth(drawn.index(words)).click(force=True)


def _shown(page: Any, slice_filter: str, batch: int, first_row: int = 1) -> str:
    """Wait until the row table shows rows of ``batch`` picked by ``slice_filter``; its caption."""
    page.wait_for_function(
        """([sel, slice, batch]) => { const e = document.querySelector(sel);
          return e !== null && !e.hidden && !e.dataset.loading && e.dataset.sliceFilter === slice
            && e.dataset.batch === String(batch); }""",
        arg=[TABLE, slice_filter, batch],
        timeout=TIMEOUT_MS,
    )
    title: str = page.locator(TITLE).inner_text()
    assert f"rows {first_row}–" in title or "no rows" in title, title
    return title


def _ids(page: Any) -> list[str]:
    ids: list[str] = page.eval_on_selector_all(
        f"{TABLE} td[data-column=id]", "els => els.map((e) => e.textContent)"
    )
    return ids


def test_a_click_on_a_slice_filters_the_row_table_to_its_rows(page, tmp_path, artifacts_dir):
    mon = planted_slice_monitor(named_ids=True)
    widget = mon.widget()
    rows = mon.rows()
    weakest = mon.slices()["slice"][0]
    assert weakest == "carrier = B"
    page.set_viewport_size({"width": 1000, "height": 1400})
    asked = _bridged_page(page, widget, tmp_path / "view.html")
    page.locator(f"{ROOT} button.calwatch-tab", has_text="Slices").click()
    page.wait_for_selector(RANKED_POINTS, timeout=TIMEOUT_MS)
    assert page.locator(TABLE).is_hidden()

    # no batch open: the newest window batch holding rows of the slice, its rows only
    _click_slice(page, RANKED_POINTS, weakest)
    in_b = rows.filter((pl.col("batch") == 7) & (pl.col("slice_carrier") == weakest))
    title = _shown(page, weakest, 7)
    assert title == f"Batch 7 · carrier = B: rows 1–20 of {in_b.height}", title
    assert _ids(page) == [str(i) for i in in_b["id"].head(20)]
    assert page.locator(f"{TABLE} button.calwatch-rows-unslice").is_visible()
    assert page.locator(ROOT).get_attribute("data-slice-column") == "carrier"  # the column is picked too
    assert asked[-1] | {"batch": None} == asked[-1] and asked[-1]["slice_filter"] == weakest
    page.wait_for_timeout(200)
    page.locator(ROOT).screenshot(path=str(artifacts_dir / "slice-filter.png"))

    # the next page keeps the slice
    page.locator(f"{TABLE} button.calwatch-rows-next").click()
    title = _shown(page, weakest, 7, first_row=21)
    assert _ids(page) == [str(i) for i in in_b["id"].slice(20, 20)]

    # a pair keeps the open batch, from its first page: rows in both
    pairs = [words for words in _slices_drawn(page, RANKED_POINTS) if words.startswith("carrier = B & ")]
    assert pairs, _slices_drawn(page, RANKED_POINTS)
    pair = pairs[0]
    _click_slice(page, RANKED_POINTS, pair)
    origin = pair.split(" & ")[1]
    in_pair = in_b.filter(pl.col("slice_origin") == origin)
    assert 0 < in_pair.height < in_b.height
    title = _shown(page, pair, 7)
    assert title == f"Batch 7 · {pair}: rows 1–{min(20, in_pair.height)} of {in_pair.height}", title

    # the same pair again: every row of the batch
    _click_slice(page, RANKED_POINTS, pair)
    title = _shown(page, "", 7)
    assert title == "Batch 7: rows 1–20 of 500", title
    assert page.locator(f"{TABLE} button.calwatch-rows-unslice").is_hidden()

    # a bar of the values panel picks its slice; "✕ slice" clears it
    _click_slice(page, VALUE_POINTS, "carrier = C")
    in_c = rows.filter((pl.col("batch") == 7) & (pl.col("slice_carrier") == "carrier = C"))
    assert _shown(page, "carrier = C", 7) == f"Batch 7 · carrier = C: rows 1–20 of {in_c.height}"
    page.locator(f"{TABLE} button.calwatch-rows-unslice").click()
    assert _shown(page, "", 7) == "Batch 7: rows 1–20 of 500"

    # ~250 px (the sidecar): the caption wraps, the clear button stays in reach
    _click_slice(page, RANKED_POINTS, weakest)
    _shown(page, weakest, 7)
    page.set_viewport_size({"width": 266, "height": 1400})
    page.wait_for_timeout(400)
    box = page.locator(f"{TABLE} button.calwatch-rows-unslice").bounding_box()
    assert box is not None and box["x"] + box["width"] <= 266, box
    page.locator(ROOT).screenshot(path=str(artifacts_dir / "slice-filter-250px.png"))
    errors = [m for m in page.console_messages_ if m.startswith(("[console.error]", "[pageerror]"))]
    assert not errors, errors
    assert page.locator(f"{ROOT} .calwatch-error:visible").count() == 0


#: The coverage chart's points of the picked slice (its hover text names the slice).
SLICE_SERIES = '[data-chart="coverage"] svg g.mark-symbol.role-mark path[aria-label^="slice: "]'
#: The same on the mean-set-size chart (the Sets tab).
SLICE_SIZES = '[data-chart="set_size"] svg g.mark-symbol.role-mark path[aria-label^="slice: "]'


def _texts(page: Any, selector: str) -> list[str]:
    texts: list[str] = page.eval_on_selector_all(selector, "els => els.map((e) => e.textContent || '')")
    return texts


def _slice_points(page: Any, selector: str = SLICE_SERIES) -> list[str]:
    labels: list[str] = page.eval_on_selector_all(selector, ARIA_LABELS)
    return labels


def _sizes_tab(page: Any) -> None:
    """Open the Sets tab, its mean-set-size chart drawn."""
    page.locator(f"{ROOT} button.calwatch-tab", has_text="Sets").click()
    page.wait_for_selector('[data-chart="set_size"] svg g.mark-symbol.role-mark path', timeout=TIMEOUT_MS)


def test_a_click_on_a_slice_adds_its_coverage_per_window_batch_to_the_coverage_chart(
    page, tmp_path, artifacts_dir
):
    """Issue "Where it fails", 3: the coverage-over-time chart filters to the slice clicked, too.

    And the mean-set-size chart (Sets tab): the slice's mean set size per window batch.
    """
    mon = planted_slice_monitor(named_ids=True)
    widget = mon.widget()
    weakest = mon.slices()["slice"][0]
    # every batch is in the window and labelled: a point per batch with rows of carrier = B
    batches = mon.rows().filter(pl.col("slice_carrier") == weakest)["batch"].unique().sort().to_list()
    assert batches == list(range(8)) and len(mon.window_records()) == 8
    page.set_viewport_size({"width": 1000, "height": 1400})
    asked = _bridged_page(page, widget, tmp_path / "view.html")
    page.locator(f"{ROOT} button.calwatch-tab", has_text="Coverage").click()
    page.wait_for_selector('[data-chart="coverage"] svg g.mark-symbol.role-mark path', timeout=TIMEOUT_MS)
    assert _slice_points(page) == []
    _sizes_tab(page)
    assert _slice_points(page, SLICE_SIZES) == []

    page.locator(f"{ROOT} button.calwatch-tab", has_text="Slices").click()
    page.wait_for_selector(RANKED_POINTS, timeout=TIMEOUT_MS)
    _click_slice(page, RANKED_POINTS, weakest)
    _shown(page, weakest, 7)
    view = page.locator(ROOT).get_attribute("data-view-id")
    assert {"kind": "slice-filter", "view": view, "slice_filter": weakest} in asked
    page.locator(f"{ROOT} button.calwatch-tab", has_text="Coverage").click()
    wait_until(lambda: len(_slice_points(page)) == len(batches), "a point per window batch of the slice")
    points = _slice_points(page)
    assert all(f"slice: {weakest};" in p for p in points), points[:2]
    assert all("95% low (exact)" in p for p in points), points[:1]
    expected = widget.replay_payload()["slice_coverage"]
    assert sorted(r["batch"] for r in expected) == batches
    first = next(r for r in expected if r["batch"] == 0)
    assert f"slice coverage: {first['coverage']:.3f}" in next(p for p in points if "batch (window): 0;" in p)
    title = _texts(page, '[data-chart="coverage"] svg .role-title-text')
    assert any("window batches only" in t and weakest in t for t in title), title
    legend = _texts(page, '[data-chart="coverage"] svg .role-legend-label text')
    assert weakest in legend, legend
    assert page.locator(ROOT).get_attribute("data-slice-filter") == weakest
    page.wait_for_timeout(200)
    page.locator(f'{ROOT} [data-chart="coverage"]').screenshot(
        path=str(artifacts_dir / "slice-coverage-over-time.png")
    )
    page.locator(ROOT).screenshot(path=str(artifacts_dir / "slice-coverage-over-time-view.png"))

    # the mean-set-size chart: the slice's mean set size per window batch (all its rows)
    _sizes_tab(page)
    wait_until(lambda: len(_slice_points(page, SLICE_SIZES)) == len(batches), "a size point per window batch")
    sizes = _slice_points(page, SLICE_SIZES)
    assert all(f"slice: {weakest};" in p for p in sizes), sizes[:2]
    in_first = mon.rows().filter((pl.col("batch") == 0) & (pl.col("slice_carrier") == weakest))
    assert first["n_rows"] == in_first.height
    assert first["mean_set_size"] == pytest.approx(in_first["size_lac"].mean())
    size_0 = next(p for p in sizes if "batch (window): 0;" in p)
    assert f"slice mean size: {first['mean_set_size']:.3f}" in size_0, size_0
    assert f"rows of the slice: {in_first.height}" in size_0, size_0
    title = _texts(page, '[data-chart="set_size"] svg .role-title-text')
    assert any("window batches only" in t and weakest in t for t in title), title
    legend = _texts(page, '[data-chart="set_size"] svg .role-legend-label text')
    assert weakest in legend, legend
    page.wait_for_timeout(200)
    page.locator(f'{ROOT} [data-chart="set_size"]').screenshot(
        path=str(artifacts_dir / "slice-set-size-over-time.png")
    )

    # ✕ slice: the series go (and the kernel sends tombstones for its rows)
    page.locator(f"{TABLE} button.calwatch-rows-unslice").click()
    wait_until(lambda: _slice_points(page, SLICE_SIZES) == [], "the slice's sizes removed")
    title = _texts(page, '[data-chart="set_size"] svg .role-title-text')
    assert not any("window batches only" in t for t in title), title
    page.locator(f"{ROOT} button.calwatch-tab", has_text="Coverage").click()
    wait_until(lambda: _slice_points(page) == [], "the slice series removed")
    assert asked[-2:][0] == {"kind": "slice-filter", "view": view, "slice_filter": ""}  # then the rows
    assert widget.replay_payload()["slice_coverage"] == []
    title = _texts(page, '[data-chart="coverage"] svg .role-title-text')
    assert not any("window batches only" in t for t in title), title

    # a second click on the same slice removes it too
    page.locator(f"{ROOT} button.calwatch-tab", has_text="Slices").click()
    _click_slice(page, RANKED_POINTS, weakest)
    _shown(page, weakest, 7)
    _click_slice(page, RANKED_POINTS, weakest)
    _shown(page, "", 7)
    page.locator(f"{ROOT} button.calwatch-tab", has_text="Coverage").click()
    page.wait_for_timeout(300)
    assert _slice_points(page) == []
    _sizes_tab(page)
    page.wait_for_timeout(300)
    assert _slice_points(page, SLICE_SIZES) == []
    errors = [m for m in page.console_messages_ if m.startswith(("[console.error]", "[pageerror]"))]
    assert not errors, errors


def test_in_the_report_a_click_on_a_slice_only_picks_its_column(page, tmp_path):
    mon = planted_slice_monitor(named_ids=True)
    report = mon.report(tmp_path / "slices.html")
    page.set_viewport_size({"width": 1000, "height": 1000})
    route_offline(page)
    page.goto(report.resolve().as_uri())
    page.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
    page.locator("button.calwatch-tab", has_text="Slices").click()
    page.wait_for_selector(RANKED_POINTS, timeout=TIMEOUT_MS)
    origin = next(w for w in _slices_drawn(page, RANKED_POINTS) if w.startswith("origin =") and "&" not in w)
    _click_slice(page, RANKED_POINTS, origin)
    wait_until(
        lambda: page.locator(".calwatch-widget").get_attribute("data-slice-column") == "origin",
        "the column of the slice clicked",
    )
    assert page.locator(".calwatch-rows").is_hidden()
    assert page.locator("#calwatch-error").inner_text() == ""
