"""Two collaborators on one notebook with real-time collaboration (issue 18 item 4).

JupyterLab runs with ``jupyter-collaboration`` from ``.venv-rtc`` (built by ``make test`` from
``tests/ui/rtc-requirements.txt``; it reads the main venv's packages through a ``.pth`` file), so
the other browser tests' JupyterLab never sees the collaboration extensions. The kernel is the
project's venv, as everywhere.

Two browser contexts (two anonymous users, each with its own login cookie) open one fresh,
unsigned notebook. A runs it (``mon.show()`` and a stream of batches):

- B's copy of the outputs is untrusted (it did not run them): JupyterLab renders no widget view
  there, so B sees the static fallback of item 2 (the key numbers and the coverage chart as a
  ``data:`` SVG image, which survive the sanitiser); a batch A streams reaches B's fallback when
  A's cell ends (``update_display``);
- after a reload (as a late joiner) B's copy is trusted and B sees the live widget; a batch A
  streams is applied in B's view too, and the α slider and calibrator picker A moves move B's
  view (synced traits of the one widget, through the kernel), while the tab A picks stays A's.

The lag of B behind A is measured in the page (both contexts live in one Chromium, so
``performance.timeOrigin + performance.now()`` is one clock) and printed.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import CHROMIUM_ARGS, KERNEL_PYTHON, REPO, LabServer, running_lab
from .helpers import (
    MARKS,
    TIMEOUT_MS,
    Kernel,
    no_widget_error,
    open_notebook,
    run_all,
    wait_until,
    write_notebook,
)

pytestmark = pytest.mark.ui

RTC_PYTHON = REPO / ".venv-rtc" / "bin" / "python"
NOTEBOOK = "shared.ipynb"
WIDGET = ".jp-Notebook .calwatch-widget"
FALLBACK = ".jp-Notebook .calwatch-static-fallback"

SETUP = """
import numpy as np
import calwatch as cw

rng = np.random.default_rng(3)


def batch(n):
    logits = rng.normal(size=(n, 3)) * 2.0
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1)
    return P, y


mon = cw.Monitor(
    calibrators={
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
    },
    name="shared",
)
P, y = batch(500)
mon.calibrate(probs=P, y=y)
mon.show()
"""
STREAM = """
for b in range(5):
    P, y = batch(100)
    mon.observe(probs=P, y=y)
"""
N = 6  # batches after Run All
ONE_MORE = """
P, y = batch(100)
mon.observe(probs=P, y=y)
"""

# Records, in the page, when each state of interest first appears (ms on the shared clock): the
# live view's applied update (``seq:<n>``), the fallback's batch count (``fallback:<n>``), the α
# text (``alpha:<text>``), the picked calibrator (``pick:<value>``), and when the widget's update
# ``<n>`` reached the page's kernel connection (``comm:<n>``).
RECORD_JS = """
() => {
  const seen = (window.__cwSeen = window.__cwSeen || {});
  const note = (key) => { if (!(key in seen)) seen[key] = performance.timeOrigin + performance.now(); };
  const record = () => {
    for (const el of document.querySelectorAll('.jp-Notebook .calwatch-widget')) {
      const seq = el.getAttribute('data-applied-seq');
      if (seq !== null) note('seq:' + seq);
      const alpha = el.querySelector('.calwatch-alpha-text');
      if (alpha !== null && alpha.textContent) note('alpha:' + alpha.textContent.trim());
      const picker = el.querySelector('select.calwatch-picker');
      if (picker !== null && picker.value) note('pick:' + picker.value);
    }
    for (const el of document.querySelectorAll('.jp-Notebook .calwatch-static-fallback')) {
      const m = /([0-9,]+) batches/.exec(el.textContent || '');
      if (m !== null) note('fallback:' + m[1].replace(/,/g, ''));
    }
  };
  record();
  for (const w of window.jupyterapp.shell.widgets('main')) {
    const kernel = w.sessionContext?.session?.kernel;
    if (!kernel || kernel.__cwHooked) continue;
    kernel.__cwHooked = true;
    kernel.anyMessage.connect((_, args) => {
      if (args.direction !== 'recv') return;
      const msg = args.msg;
      if (msg.header.msg_type === 'comm_msg' && msg.content?.data?.content?.seq !== undefined)
        note('comm:' + msg.content.data.content.seq);
    });
  }
  new MutationObserver(record).observe(document.body, {
    subtree: true, childList: true, characterData: true, attributeFilter: ['data-applied-seq'],
  });
}
"""

IDLE_JS = "() => new Promise((done) => requestIdleCallback(() => done(), {timeout: 20000}))"
RUN_CELL_JS = """
([path, index]) => {
  const app = window.jupyterapp;
  for (const w of app.shell.widgets('main')) {
    if (!(w.context && w.context.path === path)) continue;
    app.shell.activateById(w.id);
    w.content.activeCellIndex = index;
    return app.commands.execute('notebook:run-cell');
  }
  throw new Error('notebook panel not found: ' + path);
}
"""


def _seen(page: Any, key: str) -> float | None:
    return page.evaluate("(key) => (window.__cwSeen || {})[key] ?? null", key)


def _when(page: Any, key: str, what: str) -> float:
    return float(wait_until(lambda: _seen(page, key), what))


@pytest.fixture(scope="module")
def rtc_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """JupyterLab with jupyter-collaboration, served by ``.venv-rtc``'s Python."""
    if not RTC_PYTHON.exists():
        pytest.fail(f"{RTC_PYTHON} is missing: `make test` builds .venv-rtc (or `make .venv-rtc/.stamp`)")
    # the main venv's lab extensions (widget manager, anywidget, sidecar) next to .venv-rtc's own
    shared = KERNEL_PYTHON.parent.parent / "share" / "jupyter"
    # the other browser tests' JupyterLab (the main venv) has no collaboration extension
    assert not (shared / "labextensions" / "@jupyter" / "docprovider-extension").exists()
    assert importlib.util.find_spec("jupyter_collaboration") is None  # pytest runs on the main venv
    with running_lab(
        tmp_path_factory.mktemp("jupyterlab-rtc"), RTC_PYTHON, {"JUPYTER_PATH": str(shared)}
    ) as server:
        wait_until(
            lambda: "jupyter_server_ydoc | extension was successfully loaded" in server.log_tail(400),
            "the collaboration server extension to load",
        )
        yield server


@pytest.fixture
def two_users(playwright_driver: Any, chromium_path: str) -> Iterator[tuple[Any, Any]]:
    """Two pages in two browser contexts (two cookie jars: two users) of one headless Chromium."""
    browser = playwright_driver.chromium.launch(
        executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS
    )
    messages: list[str] = []
    try:
        pages = []
        for user in ("A", "B"):
            context = browser.new_context(viewport={"width": 1200, "height": 1400})
            page = context.new_page()
            page.on("console", lambda m, u=user: messages.append(f"[{u} console.{m.type}] {m.text}"))
            page.on("pageerror", lambda e, u=user: messages.append(f"[{u} pageerror] {e}"))
            pages.append(page)
        yield pages[0], pages[1]
    finally:
        errors = [m for m in messages if "error]" in m]
        print(f"\n--- browser console: {len(messages)} messages, {len(errors)} errors ---")
        for line in errors[:40]:
            print(line[:400])
        browser.close()


def _selected_tab(page: Any) -> str:
    return str(page.locator(f'{WIDGET} button.calwatch-tab[aria-selected="true"]').inner_text())


def test_two_collaborators_see_one_dashboard(
    rtc_lab: LabServer, two_users: tuple[Any, Any], artifacts_dir: Any
) -> None:
    a, b = two_users
    t0 = time.monotonic()
    phases: list[str] = []

    def phase(name: str) -> None:
        phases.append(f"{name} {time.monotonic() - t0:.1f} s")

    write_notebook(rtc_lab.root / NOTEBOOK, [SETUP, STREAM, ONE_MORE])
    ka: Kernel = open_notebook(a, rtc_lab, NOTEBOOK)
    open_notebook(b, rtc_lab, NOTEBOOK)
    phase("both open")
    # two users (one login cookie each) on one kernel (the server's one session of the path)
    users = [p.evaluate("() => window.jupyterapp.serviceManager.user.identity?.username") for p in (a, b)]
    assert None not in users and users[0] != users[1], users
    ka.run("_rtc_marker = 'one kernel'")
    assert Kernel(b, NOTEBOOK).eval("_rtc_marker") == "one kernel"
    for page in (a, b):
        page.evaluate(RECORD_JS)

    # ---- A runs the fresh notebook. B did not run it: its outputs are untrusted, so no widget
    # view and no script; the static fallback shows the numbers and the coverage image.
    run_all(a, NOTEBOOK, timeout_s=180)
    a.wait_for_function(
        "(s) => document.querySelectorAll(s).length > 0", arg=f"{WIDGET} {MARKS}", timeout=TIMEOUT_MS
    )
    no_widget_error(a, WIDGET)
    assert ka.eval("mon.n_batches") == N
    _when(b, f"fallback:{N}", f"B's fallback to show {N} batches")
    phase("A ran, B shows the fallback")
    assert b.locator(WIDGET).count() == 0  # JupyterLab renders no widget view untrusted
    fallback = b.locator(FALLBACK)
    assert fallback.count() == 1 and fallback.is_visible()
    text = fallback.inner_text()
    assert "lac: 90% coverage" in text and "aps: 90% coverage" in text, text
    image = fallback.locator("img.calwatch-static-image")
    assert str(image.get_attribute("src")).startswith("data:image/svg+xml")
    b.wait_for_function("(img) => img.complete && img.naturalWidth > 200", arg=image.element_handle())
    assert b.locator(".jp-Notebook .calwatch-static[data-started]").count() == 0  # no script ran
    assert b.locator(".jp-Notebook .calwatch-static-view svg").count() == 0  # no inline SVG either
    b.screenshot(path=str(artifacts_dir / "collab-B-untrusted.png"))

    # ---- a new batch in A: B's fallback follows when A's cell ends (update_display)
    a.evaluate(RUN_CELL_JS, [NOTEBOOK, 2])
    wait_until(lambda: ka.eval("mon.n_batches") == N + 1, "A's new batch")
    t_a = _when(a, f"seq:{ka.eval('mon.widget().seq')}", "A's view to apply the batch")
    lag_fallback = _when(b, f"fallback:{N + 1}", "B's fallback to show the new batch") - t_a
    phase("batch reached B's fallback")

    # ---- B reloads (as a late joiner would): B's copy is trusted now, so B sees the live
    # widget, and the static copy hides itself
    b.reload()
    b.wait_for_function(
        "(s) => document.querySelectorAll(s).length > 0", arg=f"{WIDGET} {MARKS}", timeout=TIMEOUT_MS
    )
    no_widget_error(b, WIDGET)
    wait_until(lambda: b.locator(FALLBACK).is_hidden(), "B's static copy to hide next to the live view")
    wait_until(lambda: b.locator(f"{WIDGET}[data-replay-seq]").count() == 1, "B's view to replay the stream")
    b.evaluate(RECORD_JS)
    # the reload's work done (every chart embedded: updates that arrive earlier wait for the
    # embeds), so the lag below is the steady state's
    b.wait_for_function(
        "(s) => { const c = [...document.querySelectorAll(s)];"
        " return c.length > 0 && c.every((el) => el.querySelector('svg') !== null); }",
        arg=f"{WIDGET} div.calwatch-chart",
        timeout=TIMEOUT_MS,
    )
    b.evaluate(IDLE_JS)
    phase("B reloaded: live")

    # a batch streamed in A is applied in both views
    a.evaluate(RUN_CELL_JS, [NOTEBOOK, 2])
    wait_until(lambda: ka.eval("mon.n_batches") == N + 2, "A's second new batch")
    seq = ka.eval("mon.widget().seq")
    t_a = _when(a, f"seq:{seq}", "A's view to apply the batch")
    lag_live = _when(b, f"seq:{seq}", "B's view to apply the batch") - t_a
    lag_comm = _when(b, f"comm:{seq}", "B's update") - _when(a, f"comm:{seq}", "A's update")
    for page in (a, b):
        assert f"{N + 2} batches" in page.locator(f"{WIDGET} .calwatch-status").inner_text()

    # the α slider and the calibrator picker are synced traits: A's change moves B's view
    a.locator(f'{WIDGET} button.calwatch-tab[data-section="Coverage"]').click()
    a.locator(f"{WIDGET} input.calwatch-alpha").fill("0.25")
    ka.wait_for("mon.widget().alpha", 0.25)
    key = "alpha:" + str(a.locator(f"{WIDGET} .calwatch-alpha-text").text_content()).strip()
    assert "1−α = 0.75" in key
    lag_alpha = _when(b, key, "B's α text to follow A's slider") - _when(a, key, "A's α text")
    assert b.locator(f"{WIDGET} input.calwatch-alpha").input_value() == "0.25"
    a.locator(f"{WIDGET} select.calwatch-picker").select_option("aps")
    ka.wait_for("mon.widget()._selected", "aps")
    lag_pick = _when(b, "pick:aps", "B's picker to follow A's") - _when(a, "pick:aps", "A's picker")
    # tabs are per viewer: A is on Coverage, B stays on Overview
    assert _selected_tab(a) == "Coverage" and _selected_tab(b) == "Overview"
    phase("controls")
    a.screenshot(path=str(artifacts_dir / "collab-A.png"))
    b.screenshot(path=str(artifacts_dir / "collab-B-live.png"))

    lags = {
        "fallback": lag_fallback,
        "batch message": lag_comm,
        "batch applied": lag_live,
        "alpha": lag_alpha,
        "picker": lag_pick,
    }
    # printed, not asserted: B may apply a batch before A (A's page also runs the cell)
    print("\nlag of B behind A (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in lags.items()))
    print("phases: " + "; ".join(phases))
