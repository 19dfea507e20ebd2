"""An executed notebook shows the dashboard and charts offline (issue 18 item 2).

One tiny notebook (``mon.show()``, a few batches, ``mon.chart``) is executed once with nbclient's
defaults (widget state stored, as ``jupyter nbconvert --to html --execute`` does) and exported
twice with nbconvert's HTML exporter: (a) as executed, where nbconvert picks the widget view for
the widget's output and would load its manager from a CDN, and (b) without widget state, as a
notebook saved from JupyterLab. Each page is opened in Chromium with every non-file request
aborted: the static output must draw the dashboard's charts and show its numbers.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbconvert import HTMLExporter
from nbconvert.preprocessors import ExecutePreprocessor

from .helpers import MARKS, TIMEOUT_MS, route_offline

pytestmark = pytest.mark.ui

CELLS = [
    """import numpy as np, calwatch as cw
rng = np.random.default_rng(0)
def draw(n):
    p = rng.dirichlet(np.ones(3), n)
    return p, np.array([rng.choice(3, p=r) for r in p])
aps = cw.SplitConformalClassifier(score="aps", alpha=0.1)
mon = cw.Monitor(None, name="offline <check>", calibrators={"aps": aps})
P, y = draw(200)
mon.calibrate(probs=P, y=y)
mon.show()""",
    """for b in range(6):
    P, y = draw(30)
    mon.observe(probs=P, y=y)""",
    'mon.chart("coverage")',
]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# Marks the notebook's first cell untrusted: JupyterLab re-renders its outputs, sanitised.
UNTRUST_JS = """
(path) => {
  for (const w of window.jupyterapp.shell.widgets('main')) {
    if (w.context && w.context.path === path) w.content.widgets[0].model.trusted = false;
  }
}
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The notebook executed once, exported with and without its widget state."""
    folder = tmp_path_factory.mktemp("offline-notebook")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    ExecutePreprocessor(timeout=300).preprocess(nb, {"metadata": {"path": str(folder)}})
    assert "widgets" in nb.metadata  # nbclient's default: the widget state is stored
    pages = {}
    for name in ("with_state", "no_state"):
        if name == "no_state":
            nb.metadata.pop("widgets")
        body, _ = HTMLExporter().from_notebook_node(nb)
        pages[name] = folder / f"{name}.html"
        pages[name].write_text(body, encoding="utf-8")
    nbformat.write(nb, folder / "executed.ipynb")
    return pages


def _open_offline(page: Any, path: Path) -> list[str]:
    asked = route_offline(page)
    page.goto(path.resolve().as_uri())
    return asked


@pytest.mark.parametrize("name", ["with_state", "no_state"])
def test_exported_notebook_draws_dashboard_and_chart_offline(page, exported, artifacts_dir, name):
    html = exported[name].read_text(encoding="utf-8")
    if name == "with_state":  # the case a text/html alternative in the widget's output cannot fix
        assert f'type="{WIDGET_VIEW}"' in html
    asked = _open_offline(page, exported[name])
    static = page.locator(".calwatch-static")
    assert static.count() == 1
    page.wait_for_selector(".calwatch-static[data-rendered=true]", timeout=TIMEOUT_MS)
    page.wait_for_function(
        "(sel) => document.querySelectorAll(sel).length > 0",
        arg=f'.calwatch-static [data-chart="coverage"] {MARKS}',
        timeout=TIMEOUT_MS,
    )
    assert static.get_attribute("data-live") == "false"
    text = static.inner_text()
    assert "offline <check>" in text and "6 batches" in text and "90% coverage" in text
    assert page.locator(".calwatch-static-fallback").is_hidden()  # drawn in its place
    # mon.chart: the kernel's SVG, which nbconvert shows as an image: drawn, with its marks
    chart = page.locator('[data-mime-type="image/svg+xml"] img')
    assert chart.count() == 1
    page.wait_for_function("(img) => img.complete && img.naturalWidth > 200", arg=chart.element_handle())
    svg = base64.b64decode(str(chart.get_attribute("src")).split(",", 1)[1]).decode("utf-8")
    assert "role-mark" in svg and "Coverage vs target" in svg and svg.count("<path") > 3
    assert any(not url.startswith(("file:", "blob:", "data:")) for url in asked)  # refused: offline
    page.screenshot(path=str(artifacts_dir / f"notebook-offline-{name}.png"), full_page=True)


def test_live_jupyterlab_shows_the_dashboard_once(lab_server, page, artifacts_dir):
    """In a live (trusted) JupyterLab the static copy stays hidden next to the live view, also
    after a cell's end refreshed it (``update_display`` redraws the output and its guard)."""
    from .helpers import Kernel, open_notebook, run_all, wait_until, write_notebook

    path = "offline-once.ipynb"
    cells = CELLS[:2]
    write_notebook(lab_server.root / path, cells)
    kernel: Kernel = open_notebook(page, lab_server, path)
    run_all(page, path)
    page.wait_for_function(
        "(sel) => document.querySelectorAll(sel).length > 0",
        arg=f".jp-Notebook .calwatch-widget {MARKS}",
        timeout=TIMEOUT_MS,
    )
    static = page.locator(".jp-Notebook .calwatch-static")
    wait_until(lambda: static.count() == 1 and static.get_attribute("data-live") == "true", "the guard")
    assert static.is_hidden()
    assert page.locator(".jp-Notebook .calwatch-widget:visible").count() == 1
    # the cell that streamed refreshed the static copy (6 batches), still hidden
    kernel.run("from calwatch.publish.notebook_output import static_for")
    shown = kernel.eval("static_for(mon.widget()).shown_seq")
    assert shown >= kernel.eval("mon.widget().seq_by_main_thread") > 0  # drawn after the cell's batches
    page.wait_for_timeout(500)
    assert static.is_hidden() and page.locator(".jp-Notebook .calwatch-static-view svg").count() == 0
    page.screenshot(path=str(artifacts_dir / "notebook-live-once.png"))
    # each refresh replaces the output and its guard; a replaced guard stops watching the area
    # (it kept the old copy, coverage image included, alive: ~290 SVG elements a refresh in a soak)
    for _ in range(3):
        kernel.run("static_for(mon.widget()).refresh(force=True)")
    wait_until(lambda: page.evaluate("globalThis.__calwatchStaticGuards") == 1, "one guard watching")
    assert static.count() == 1 and static.is_hidden()

    # untrusted (a collaborator's view of a fresh notebook): no widget view, no script; the
    # sanitised fallback shows its numbers and the coverage chart as an image
    page.evaluate(UNTRUST_JS, path)
    fallback = page.locator(".jp-Notebook .calwatch-static-fallback")
    wait_until(lambda: fallback.count() == 1 and fallback.is_visible(), "the untrusted fallback")
    assert page.locator(".jp-Notebook .calwatch-widget").count() == 0
    assert page.locator(".jp-Notebook .calwatch-static[data-started]").count() == 0  # no script ran
    assert "90% coverage" in fallback.inner_text() and "6 batches" in fallback.inner_text()
    image = fallback.locator("img.calwatch-static-image")
    page.wait_for_function("(img) => img.complete && img.naturalWidth > 200", arg=image.element_handle())
    page.screenshot(path=str(artifacts_dir / "notebook-untrusted-fallback.png"))
