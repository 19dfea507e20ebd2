"""The health strip in a real JupyterLab + Chromium, inline and in the ~250 px sidecar.

A monitor with a calibrator that holds its promise and one that breaks it
(tests/health_scenario.py) is shown inline and in the sidebar. Each view's chips
(``div.calwatch-chip[data-calibrator][data-state]``) must match :func:`calwatch.views.health.health`
on the kernel's ``summary()`` and ``warnings()``; the strip sits above the controls and tabs and
fits the sidebar without overflowing. A shifted batch then opens a coverage-drop warning: both
views follow (the broken calibrator's reason names it), and the warning shows as one line (what,
since when) that expands to its full text and actions; a chip's reason wraps rather than being
cut short inline. The what-if panel stays hidden until the α
slider is used, and the HTML report draws the same strip. Screenshots:
test-artifacts/health-strip*-{inline,sidebar}.png (or $CALWATCH_HEALTH_SHOTS).

A second monitor (``REGIONS_SOURCE``) has one chip in each region of the rule, marginal and per
class (holding, at risk, broken): the page's chips, their reasons (the worst class named) and
their colours follow :func:`calwatch.views.health.health`. Screenshots of its strip:
health-regions-{inline,sidebar}.png (docs/screens/ holds a copy).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from ..health_scenario import REGION_STATES, REGIONS_SOURCE, SOURCE
from .helpers import (
    INLINE,
    SIDEBAR,
    TIMEOUT_MS,
    Kernel,
    browser_errors,
    no_widget_error,
    open_notebook,
    run_all,
    wait_seq,
    write_notebook,
)

pytestmark = pytest.mark.ui

NOTEBOOK = "health-strip.ipynb"
#: The chips by the rule, from the kernel's public reads (``{mon}``: the monitor's name).
EXPECTED = (
    "[(c['key'], c['state'], c['promise']) for c in (lambda h, m: h.health(m.summary(), m.warnings(),"
    " qualifiers=h.qualifiers(m), floors=h.floors(m), classes=m.class_coverage(),"
    " per_class=h.per_class_calibrators(m)))"
    "(__import__('importlib').import_module('calwatch.views.health'), {mon})]"
)
SHIFT = """
_shift_rng = np.random.default_rng(1)
P = _shift_rng.dirichlet(np.ones(4) * 0.3, size=300)
ids = [f"s-{i}" for i in range(300)]
mon.observe(probs=P, ids=ids)
mon.label(ids, list(_shift_rng.choice(HEALTH_CLASSES, size=300)))
"""

CHIPS_JS = """
(root) => [...document.querySelectorAll(root + ' .calwatch-health .calwatch-chip')].map((c) => [
  c.dataset.calibrator, c.dataset.state, c.querySelector('.calwatch-chip-promise').textContent,
])
"""
# Layout of one view: the strip's place and whether any chip overflows its box or the view.
LAYOUT_JS = """
(root) => {
  const view = document.querySelector(root);
  const box = (sel) => view.querySelector(sel).getBoundingClientRect();
  const right = view.getBoundingClientRect().right;
  const chips = [...view.querySelectorAll('.calwatch-chip')];
  return {
    width: view.getBoundingClientRect().width,
    strip_top: box('.calwatch-health').top - box('.calwatch-controls').bottom,
    above_controls: box('.calwatch-health').bottom <= box('.calwatch-dash-controls').top + 1,
    above_tabs: box('.calwatch-health').bottom <= box('.calwatch-tabs').top + 1,
    overflow: chips
      .filter((c) => c.scrollWidth > c.clientWidth + 1 || c.getBoundingClientRect().right > right + 1)
      .map((c) => c.dataset.calibrator),
    sparklines: chips.map((c) => c.querySelectorAll('svg path.calwatch-spark-line').length),
    clipped_reasons: chips
      .filter((c) => {
        const r = c.querySelector('.calwatch-chip-reason');
        return r.scrollHeight > r.clientHeight + 1 || r.scrollWidth > r.clientWidth + 1;
      })
      .map((c) => c.dataset.calibrator),
  };
}
"""


def _chips(page: Any, root: str) -> list[tuple[str, str, str]]:
    return [tuple(c) for c in page.evaluate(CHIPS_JS, root)]


def _wait_chips(page: Any, root: str, expected: list[tuple[str, str, str]]) -> None:
    page.wait_for_function(
        f"([root, want]) => JSON.stringify(({CHIPS_JS})(root)) === JSON.stringify(want)",
        arg=[root, [list(e) for e in expected]],
        timeout=TIMEOUT_MS,
    )


def _expected(kernel: Kernel, mon: str = "mon") -> list[tuple[str, str, str]]:
    return [tuple(c) for c in kernel.eval(EXPECTED.format(mon=mon))]


def _updates_done(page: Any, kernel: Kernel, mon: str = "mon") -> None:
    seq = kernel.eval(f"{mon}.widget().seq")
    for root in (INLINE, SIDEBAR):
        wait_seq(page, root, seq)


def _screenshots(page: Any, artifacts_dir: Path, tag: str) -> None:
    out = Path(os.environ.get("CALWATCH_HEALTH_SHOTS", artifacts_dir))
    out.mkdir(parents=True, exist_ok=True)
    view = page.locator(INLINE).first
    box = view.bounding_box()
    assert box is not None
    clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], 520)}
    page.screenshot(path=str(out / f"{tag}-inline.png"), clip=clip)
    page.locator(".jupyterlab-sidecar").screenshot(path=str(out / f"{tag}-sidebar.png"))


def test_health_strip_matches_summary_and_warnings(lab_server: Any, page: Any, artifacts_dir: Path) -> None:
    write_notebook(lab_server.root / NOTEBOOK, [SOURCE + "\nmon.show()", "mon.show(sidebar=True)"])
    kernel = open_notebook(page, lab_server, NOTEBOOK)
    run_all(page, NOTEBOOK, timeout_s=120)
    _updates_done(page, kernel)

    # ---- the states of summary() and warnings(): one holding, one broken
    expected = _expected(kernel)
    assert [(k, s) for k, s, _ in expected] == [("lac", "holding"), ("softmax-risk", "broken")], expected
    assert expected[0][2] == "90% coverage" and re.fullmatch(
        r"risk [≤≈] 0\.\d{3} \(top-1, last \d+ batch(es)?\)", expected[1][2]
    )
    for root in (INLINE, SIDEBAR):
        _wait_chips(page, root, expected)

    # ---- at a glance: under the header, above the controls and tabs; nothing overflows at ~250 px
    inline, sidebar = page.evaluate(LAYOUT_JS, INLINE), page.evaluate(LAYOUT_JS, SIDEBAR)
    assert sidebar["width"] < 400 < inline["width"], (inline, sidebar)
    for layout in (inline, sidebar):
        assert layout["above_controls"] and layout["above_tabs"] and layout["strip_top"] < 12, layout
        assert layout["overflow"] == [] and layout["sparklines"] == [1, 1], layout
    # the reason (the chip's verdict) wraps instead of being cut to one line: whole inline; in the
    # ~250 px sidebar at most three lines, the rest in the chip's title
    assert inline["clipped_reasons"] == [], inline
    _screenshots(page, artifacts_dir, "health-strip")

    # ---- the what-if panel waits for the α slider
    what_if = f'{INLINE} div.calwatch-panel[data-panel="what_if"]'
    page.locator(f'{INLINE} button.calwatch-tab[data-section="Coverage"]').click()
    assert page.locator(what_if).is_hidden()
    page.locator(f"{INLINE} input.calwatch-alpha").fill("0.2")
    page.locator(what_if).wait_for(state="visible", timeout=TIMEOUT_MS)

    # ---- a shifted batch opens a coverage-drop warning: both views follow the kernel
    kernel.run(SHIFT)
    _updates_done(page, kernel)
    expected = _expected(kernel)
    assert [(k, s) for k, s, _ in expected] == [("lac", "broken"), ("softmax-risk", "broken")], expected
    warnings = kernel.eval(
        "[(w['episode'], w['name'], w['first_batch']) for w in mon.warnings().to_dicts() if w['open']]"
    )
    assert any(name == "lac: coverage drop" for _, name, _ in warnings), warnings
    for root in (INLINE, SIDEBAR):
        _wait_chips(page, root, expected)
        reason = page.locator(
            f'{root} .calwatch-chip[data-calibrator="lac"] .calwatch-chip-reason'
        ).inner_text()
        assert "lac: coverage drop since batch 8" in reason, reason
    assert page.evaluate(LAYOUT_JS, INLINE)["clipped_reasons"] == []

    # ---- each warning is one line (what, since when); a click shows the full text and actions
    episode, name, first = next(w for w in warnings if w[1] == "lac: coverage drop")
    lines = page.locator(f"{SIDEBAR} button.calwatch-warning-line")
    lines.first.wait_for(state="visible", timeout=TIMEOUT_MS)
    assert all(box["height"] < 24 for box in (line.bounding_box() for line in lines.all()))  # one line each
    _screenshots(page, artifacts_dir, "health-strip-warning")
    line = page.locator(
        f'{SIDEBAR} div.calwatch-warning[data-episode="{episode}"] button.calwatch-warning-line'
    )
    assert line.inner_text().replace("\n", " ").startswith(f"{name} since batch {first}")
    body = page.locator(f'{SIDEBAR} div.calwatch-warning[data-episode="{episode}"] .calwatch-warning-body')
    assert body.is_hidden()
    line.click()
    body.wait_for(state="visible", timeout=TIMEOUT_MS)
    assert "suggested:" in body.inner_text() and body.locator("button.calwatch-ack").is_visible()
    _screenshots(page, artifacts_dir, "health-strip-warning-expanded")

    for root in (INLINE, SIDEBAR):
        no_widget_error(page, root)
    errors = [e for e in browser_errors(page) if "calwatch" in e.lower() or "vega" in e.lower()]
    assert not errors, errors

    # ---- the report (the same bundle, from saved state) draws the same strip
    report = lab_server.root / "health-report.html"
    kernel.run(f"mon.report({str(report)!r})")
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-rendered=true]", timeout=TIMEOUT_MS)
    _wait_chips(page, "body", expected)


# Each chip's state, reason and the colour of its state stripe, in one view.
REGION_CHIPS_JS = """
(root) => [...document.querySelectorAll(root + ' .calwatch-health .calwatch-chip')].map((c) => [
  c.dataset.calibrator, c.dataset.state, c.querySelector('.calwatch-chip-state').textContent,
  c.querySelector('.calwatch-chip-reason').textContent, getComputedStyle(c).borderLeftColor,
])
"""


def _strip_shots(page: Any, tag: str) -> list[Path]:
    """The strip alone, inline and in the ~250 px side panel (under $CALWATCH_HEALTH_SHOTS)."""
    out = Path(
        os.environ.get("CALWATCH_HEALTH_SHOTS", Path(__file__).resolve().parents[2] / "test-artifacts")
    )
    out.mkdir(parents=True, exist_ok=True)
    shots = [out / f"{tag}-inline.png", out / f"{tag}-sidebar.png"]
    for root, path in zip((INLINE, SIDEBAR), shots, strict=True):
        page.locator(f"{root} .calwatch-health").screenshot(path=str(path))
    return shots


def test_health_strip_regions(lab_server: Any, page: Any) -> None:
    """One chip per region (holding / at risk / broken; marginal and per class): the page follows the rule."""
    notebook = "health-regions.ipynb"
    write_notebook(
        lab_server.root / notebook, [REGIONS_SOURCE + "\nregions.show()", "regions.show(sidebar=True)"]
    )
    kernel = open_notebook(page, lab_server, notebook)
    run_all(page, notebook, timeout_s=120)
    _updates_done(page, kernel, "regions")

    expected = _expected(kernel, "regions")
    assert [(k, s) for k, s, _ in expected] == [(k, s) for k, (s, _) in REGION_STATES.items()], expected
    assert [p for _, _, p in expected] == [
        *(f"{t}% coverage" for t in (80, 90, 95)),
        *(f"{t}% coverage (per class)" for t in (80, 90, 95)),
    ]
    reasons = dict(
        kernel.eval(
            "[(r['key'], r['reason']) for r in __import__('calwatch.widget').widget.health_rows(regions)]"
        )
    )
    for root in (INLINE, SIDEBAR):
        _wait_chips(page, root, expected)
        chips = {c[0]: c[1:] for c in page.evaluate(REGION_CHIPS_JS, root)}
        assert {k: c[0] for k, c in chips.items()} == {k: s for k, (s, _) in REGION_STATES.items()}
        assert {k: c[1] for k, c in chips.items()} == {k: s for k, (s, _) in REGION_STATES.items()}
        assert {k: c[2] for k, c in chips.items()} == reasons
        # the worst class is named on every per-class chip; the slack is said on the amber ones
        for key, (state, worst) in REGION_STATES.items():
            if worst is not None:
                assert chips[key][2].startswith(f"class '{worst}': 0.800 [0.744, 0.849]"), chips[key]
            if state == "at risk":
                assert "below 90%, within calibration slack" in chips[key][2], chips[key]
        # one colour per state: green, amber, red, each distinct
        colours = {
            state: {c[3] for c in chips.values() if c[0] == state}
            for state in ("holding", "at risk", "broken")
        }
        assert all(len(v) == 1 for v in colours.values()) and len(set().union(*colours.values())) == 3, (
            colours
        )
        layout = page.evaluate(LAYOUT_JS, root)
        assert layout["overflow"] == [] and layout["sparklines"] == [1] * 6, layout
    assert page.evaluate(LAYOUT_JS, SIDEBAR)["width"] < 400
    assert page.evaluate(LAYOUT_JS, INLINE)["clipped_reasons"] == []
    for path in _strip_shots(page, "health-regions"):
        assert 0 < path.stat().st_size < 200_000, (path, path.stat().st_size)
    for root in (INLINE, SIDEBAR):
        no_widget_error(page, root)
