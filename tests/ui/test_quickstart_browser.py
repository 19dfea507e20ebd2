"""The quickstart notebook (real data) in a real JupyterLab + Chromium.

Runs notebooks/01-quickstart.ipynb with Run All (NYC flights 2013, a scikit-learn model,
``mon.show()`` inline, 32 batches streamed with labels one batch late, ``mon.show(sidebar=True)``,
then a static Altair chart) and checks what a reader sees: both live views complete (DOM hooks of
docs/widget-protocol.md), the header and status line, the static chart, no error anywhere.
Screenshots go to test-artifacts/quickstart-{inline,sidebar}.png.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from .helpers import (
    INLINE,
    MARKS,
    SET_CHART_NAMES,
    SIDEBAR,
    assert_charts,
    attr,
    browser_errors,
    count,
    no_widget_error,
    open_notebook,
    run_all,
    wait_attr,
    wait_seq,
)

pytestmark = pytest.mark.ui

NOTEBOOK = "01-quickstart.ipynb"
N_BATCHES = 32  # May-December, four batches a month
N_CALIBRATORS = 2  # lac, lac-by-class
RUN_ALL_TIMEOUT_S = 240.0  # model fit (a few seconds) + stream (~5 s), with room for a slow machine

STATIC_CHART_TIMEOUT_MS = 15_000  # after Run All: a static chart draws in well under a second

# The outputs of the last code cell: a Vega chart drawn in the page (vega-embed with SVG marks or a
# canvas) or a static SVG image (Altair's "svg" renderer), and its text.
STATIC_CHART_JS = """
(marks) => {
  const cells = document.querySelectorAll('.jp-Notebook .jp-CodeCell');
  const cell = cells[cells.length - 1];
  if (!cell) return null;
  const outputs = [...cell.querySelectorAll('.jp-OutputArea-output')];
  const images = [...cell.querySelectorAll('.jp-OutputArea-output img')];
  return {
    mime: outputs.map((o) => o.dataset.mimeType ?? null),
    vega_marks: cell.querySelectorAll(`.vega-embed ${marks}`).length,
    vega_canvas: cell.querySelectorAll('.vega-embed canvas').length,
    svg_images: images.filter((i) => i.src.startsWith('data:image/svg') && i.naturalWidth > 0).length,
    text: outputs.map((o) => o.innerText).join('\\n').slice(0, 500),
  };
}
"""


def _wait_static_chart(page: Any) -> dict[str, Any]:
    """Wait for the last cell's static chart; fail with what it shows instead (e.g. a CDN error)."""
    try:
        page.wait_for_function(
            f"(marks) => {{ const s = ({STATIC_CHART_JS})(marks);"
            " return s !== null && (s.vega_marks > 0 || s.vega_canvas > 0 || s.svg_images > 0"
            " || /error/i.test(s.text)); }",
            arg=MARKS,
            timeout=STATIC_CHART_TIMEOUT_MS,
        )
    except PlaywrightTimeoutError:
        state = page.evaluate(STATIC_CHART_JS, MARKS)
        pytest.fail(
            f"the static Altair chart (last cell) did not render within {STATIC_CHART_TIMEOUT_MS} ms: "
            f"{state}; browser errors: {browser_errors(page)[:10]}"
        )
    state = page.evaluate(STATIC_CHART_JS, MARKS)
    assert "error" not in state["text"].lower(), (
        f"the static Altair chart (last cell) shows an error: {state}; "
        f"browser errors: {browser_errors(page)[:10]}"
    )
    return state


def test_quickstart_in_jupyterlab(
    lab_server: Any,
    page: Any,
    artifacts_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    t0 = time.monotonic()
    kernel = open_notebook(page, lab_server, NOTEBOOK)
    t_run = time.monotonic()
    run_all(page, NOTEBOOK, timeout_s=RUN_ALL_TIMEOUT_S)
    run_all_s = time.monotonic() - t_run

    # ---- the truth, from the kernel
    latest = kernel.eval("mon.widget().seq")
    name = kernel.eval("mon.name")
    status = kernel.eval("mon.status()")
    n_batches = kernel.eval("len(mon.summary()['name'].unique())")
    assert n_batches == N_BATCHES, f"the notebook streamed {n_batches} batches, expected {N_BATCHES}"
    assert status["batches"] == N_BATCHES, status
    assert status["rows_pending"] == 0, status  # the last labels arrived
    expected_rows = str(N_BATCHES * N_CALIBRATORS)

    # ---- both views: every update applied, then their replay (complete data)
    views: dict[str, dict[str, Any]] = {}
    for label, root in (("inline", INLINE), ("sidebar", SIDEBAR)):
        wait_seq(page, root, latest)
        wait_attr(page, root, "data-replay-seq")
        assert count(page, root) == 1, f"{count(page, root)} {label} views"
        assert attr(page, root, "data-rows-batches") == expected_rows, label
        charts_ = assert_charts(page, root, SET_CHART_NAMES)
        no_widget_error(page, root)
        title = page.locator(f"{root} .calwatch-title").inner_text().strip()
        assert title == name, f"{label} header title {title!r}, expected the monitor's name {name!r}"
        status_line = page.locator(f"{root} .calwatch-status").inner_text()
        assert f"{status['rows_seen']:,} rows" in status_line, f"{label} status line: {status_line!r}"
        assert f"{N_BATCHES} batches" in status_line, f"{label} status line: {status_line!r}"
        views[label] = {
            "replay_seq": attr(page, root, "data-replay-seq"),
            "status": status_line.strip(),
            "chart_widths": [c["width"] for c in charts_],
        }
    assert count(page, f"#jp-right-stack {SIDEBAR}") == 1, "the sidecar is not in the right area"

    # ---- screenshots (before the static chart check, so that they exist when it fails)
    page.locator(INLINE).screenshot(path=str(artifacts_dir / "quickstart-inline.png"))
    page.locator(".jupyterlab-sidecar").screenshot(path=str(artifacts_dir / "quickstart-sidebar.png"))

    # ---- the static Altair chart of the last cell rendered, and nothing went to stderr
    static = _wait_static_chart(page)
    stderr = page.locator(".jp-Notebook .jp-OutputArea-output[data-mime-type*=stderr]").all_inner_texts()
    assert not stderr, f"cells wrote to stderr: {stderr}"

    errors = browser_errors(page)
    assert not errors, f"browser errors: {errors[:10]}"
    test_s = time.monotonic() - t0
    with capsys.disabled():
        print(
            f"\ncalwatch quickstart: test {test_s:.1f} s (Run All {run_all_s:.1f} s); "
            f"{status['rows_seen']:,} rows, seq {latest}; "
            + "; ".join(
                f"{label}: replay seq {v['replay_seq']}, chart widths {v['chart_widths']} px"
                for label, v in views.items()
            )
            + f"; static chart: {static['mime']}"
        )
