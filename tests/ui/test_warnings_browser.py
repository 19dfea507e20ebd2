"""Shift warnings in a real JupyterLab + Chromium: banner, acknowledgement, log.

Runs a private copy of notebooks/00-widget-smoke.ipynb (its drifting synthetic stream raises
warnings) with Run All, acknowledges the first banner with a note through the DOM hooks of
docs/widget-protocol.md (``div.calwatch-warning[data-episode=N]``, its one line
``button.calwatch-warning-line`` that expands it, ``button.calwatch-ack``,
``input.calwatch-ack-note``, ``button.calwatch-ack-ok``, ``div.calwatch-warning-log``), and checks
the kernel's log, both views' banners and the warning log. Saves
test-artifacts/widget-warnings.png (the inline widget's header and banners).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import KERNEL_NAME, REPO
from .helpers import INLINE, SIDEBAR, TIMEOUT_MS, browser_errors, no_widget_error, open_notebook, run_all

pytestmark = pytest.mark.ui

SOURCE = "00-widget-smoke.ipynb"
#: A private copy: its own kernel, and no autosaved outputs shared with test_widget_browser.
NOTEBOOK = "warnings-smoke.ipynb"
NOTE = "seen in the browser test: synthetic drift"

# The acknowledgement of one episode, as the kernel logged it.
KERNEL_ACK = (
    "[(r['acknowledged'], r['ack_note']) for r in mon.warnings().to_dicts() if r['episode'] == {ep}][0]"
)

# True when the view under `root` shows no banner for the episode (removed or hidden).
NO_BANNER_JS = """
([root, ep]) => {
  const view = document.querySelector(root);
  if (view === null) return false;
  const b = view.querySelector(`div.calwatch-warning[data-episode="${ep}"]`);
  return b === null || b.offsetParent === null;
}
"""


def _copy_notebook(root: Path) -> None:
    nb = json.loads((REPO / "notebooks" / SOURCE).read_text())
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb.setdefault("metadata", {})["kernelspec"] = {
        "name": KERNEL_NAME,
        "display_name": "Python 3 (calwatch venv)",
        "language": "python",
    }
    (root / NOTEBOOK).write_text(json.dumps(nb, indent=1))


def _banner(root: str, episode: int | str) -> str:
    return f'{root} div.calwatch-warning[data-episode="{episode}"]'


def test_acknowledge_warning_in_jupyterlab(
    lab_server: Any, page: Any, artifacts_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t0 = time.monotonic()
    _copy_notebook(lab_server.root)
    kernel = open_notebook(page, lab_server, NOTEBOOK)
    run_all(page, NOTEBOOK, timeout_s=120)
    n_warnings = kernel.eval("mon.warnings().height")
    assert n_warnings > 0, "the smoke stream raised no shift warning"

    # ---- a banner in both views; the episode of the first (most recent) inline banner
    page.locator(f"{INLINE} div.calwatch-warning").first.wait_for(state="visible")
    episode = page.locator(f"{INLINE} div.calwatch-warning").first.get_attribute("data-episode")
    assert episode is not None and episode.isdigit(), episode
    banner = page.locator(_banner(INLINE, episode))
    page.locator(_banner(SIDEBAR, episode)).wait_for(state="visible")
    assert kernel.eval(KERNEL_ACK.format(ep=episode)) == (False, None)

    # ---- screenshot: the inline widget's header and banners
    header = page.locator(f"{INLINE} .calwatch-header").first.bounding_box()
    alerts = page.locator(f"{INLINE} .calwatch-alerts").first.bounding_box()
    assert header is not None and alerts is not None
    top = min(header["y"], alerts["y"])
    left = min(header["x"], alerts["x"])
    clip = {
        "x": left,
        "y": top,
        "width": max(header["x"] + header["width"], alerts["x"] + alerts["width"]) - left,
        "height": max(header["y"] + header["height"], alerts["y"] + alerts["height"]) - top,
    }
    page.screenshot(path=str(artifacts_dir / "widget-warnings.png"), clip=clip)

    # ---- acknowledge: the warning's line -> its full text and actions -> button -> inline note -> OK
    assert banner.locator("button.calwatch-ack").is_hidden()  # one line until expanded
    banner.locator("button.calwatch-warning-line").click()
    banner.locator("button.calwatch-ack").click()
    note = banner.locator("input.calwatch-ack-note")
    note.wait_for(state="visible")
    note.fill(NOTE)
    banner.locator("button.calwatch-ack-ok").click()

    # (a) the kernel recorded it, with the note
    kernel.wait_for(KERNEL_ACK.format(ep=episode), (True, NOTE))
    # (b) its banner is gone from both views
    for root in (INLINE, SIDEBAR):
        page.wait_for_function(NO_BANNER_JS, arg=[root, episode], timeout=TIMEOUT_MS)
    # (c) the warning log lists it as acknowledged, with the note
    page.locator(f"{INLINE} button.calwatch-warning-toggle").click()
    entry = page.locator(f'{INLINE} div.calwatch-warning-log li.calwatch-log-entry[data-episode="{episode}"]')
    entry.wait_for(state="visible")
    page.wait_for_function(
        "(sel) => { const e = document.querySelector(sel);"
        " return e !== null && e.classList.contains('calwatch-log-acknowledged'); }",
        arg=f'{INLINE} li.calwatch-log-entry[data-episode="{episode}"]',
        timeout=TIMEOUT_MS,
    )
    ack_text = entry.locator(".calwatch-log-ack").inner_text()
    assert "acknowledged" in ack_text and NOTE in ack_text, ack_text

    for root in (INLINE, SIDEBAR):
        no_widget_error(page, root)
    errors = browser_errors(page)
    assert not errors, errors
    with capsys.disabled():
        print(
            f"\ncalwatch warnings: {n_warnings} warning(s); acknowledged episode {episode} "
            f"in {time.monotonic() - t0:.1f} s (incl. Run All)"
        )
