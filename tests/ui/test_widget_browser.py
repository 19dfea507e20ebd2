"""The live widget in a real JupyterLab + Chromium: render, streaming, sidebar, controls.

Runs notebooks/00-widget-smoke.ipynb with Run All, watches the DOM hooks of
docs/widget-protocol.md (``div.calwatch-widget[data-applied-seq]``, ``data-rows-<dataset>``,
``div.calwatch-chart``) and ``globalThis.__calwatchTimings``, and saves screenshots and latency
numbers into test-artifacts/.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from calwatch.views import charts
from calwatch.widget import WINDOW_REFRESH_S

from .helpers import (
    INLINE,
    MARKS,
    SIDEBAR,
    Kernel,
    assert_charts,
    attr,
    browser_errors,
    count,
    no_widget_error,
    open_notebook,
    run_all,
    wait_seq,
)

pytestmark = pytest.mark.ui

NOTEBOOK = "00-widget-smoke.ipynb"
N_BATCHES = 30  # as in the notebook
N_CALIBRATORS = 3  # lac, aps, and the temperature risk estimator

# Records every change of data-applied-seq (any view) with the page's clock and the mark count.
WATCH_SEQ_JS = """
(marks) => {
  window.__seqLog = [];
  new MutationObserver((records) => {
    const now = Date.now();
    const seen = new Set();
    for (const r of records) {
      const el = r.target;
      if (seen.has(el)) continue;
      seen.add(el);
      window.__seqLog.push({
        t: now,
        view: el.dataset.viewId,
        sidebar: el.closest('.jupyterlab-sidecar') !== null,
        seq: Number(el.dataset.appliedSeq),
        rows: Number(el.getAttribute('data-rows-batches')),
        marks: el.querySelectorAll(marks).length,
      });
    }
  }).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['data-applied-seq']});
}
"""

# Continues the notebook's stream from the test (labels one batch late, like the notebook).
LIVE_STREAM = """
for b in range({start}, {start} + {n}):
    P, y = softmax_batch({rows})
    ids = np.arange(b * {rows}, (b + 1) * {rows})
    mon.observe(probs=P, ids=ids)
    mon.label(*pending)
    pending = (ids, y)
    time.sleep({sleep})
"""


def _sent_at(kernel: Kernel) -> dict[int, float]:
    """Kernel time (s) at which each update seq was sent (the notebook's ``sent_at``)."""
    return {int(k): v for k, v in json.loads(kernel.eval("__import__('json').dumps(sent_at)")).items()}


def _summary(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"count": 0, "median_ms": None, "p95_ms": None, "max_ms": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "count": len(values),
        "median_ms": round(statistics.median(values), 2),
        "p95_ms": round(p95, 2),
        "max_ms": round(ordered[-1], 2),
    }


def test_widget_in_jupyterlab(
    lab_server: Any,
    page: Any,
    artifacts_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    t0 = time.monotonic()
    # ---- the notebook is open and its kernel (the venv's python) is idle
    kernel = open_notebook(page, lab_server, NOTEBOOK)

    # ---- Run All, recording every applied update of every view
    page.evaluate(WATCH_SEQ_JS, MARKS)
    t_run = time.monotonic()
    run_all(page, NOTEBOOK, timeout_s=120)
    run_all_s = time.monotonic() - t_run

    latest = kernel.eval("mon.widget().seq")
    # one upsert per observe, one per (late) label call, and the window panels' refresh once idle
    assert latest >= 2 * N_BATCHES - 1
    expected_rows = N_BATCHES * N_CALIBRATORS
    problems: list[str] = []  # failures that should not stop the remaining checks

    # ---- (a) inline view: every chart rendered, with marks, and all data applied
    wait_seq(page, INLINE, latest)
    assert count(page, INLINE) == 1
    assert attr(page, INLINE, "data-rows-batches") == str(expected_rows)
    kinds = kernel.eval("__import__('importlib').import_module('calwatch.views.charts').chart_kinds(mon)")
    inline_charts = assert_charts(page, INLINE, kinds)
    no_widget_error(page, INLINE)
    inline_view = attr(page, INLINE, "data-view-id")

    # ---- (b) during Run All, marks and applied seq grew while the batches streamed
    log = page.evaluate("() => window.__seqLog")
    inline_log = [e for e in log if e["view"] == inline_view]
    sent_at = _sent_at(kernel)
    end_of_stream_ms = max(sent_at.values()) * 1000
    during = [e for e in inline_log if e["t"] < end_of_stream_ms]
    seqs = [e["seq"] for e in inline_log]
    assert seqs == sorted(set(seqs)), f"applied seq went back or repeated: {seqs}"
    assert inline_log[-1]["seq"] == latest
    if len(during) < 2 or during[-1]["marks"] <= during[0]["marks"]:
        problems.append(
            f"Run All: the inline view applied {len(during)} update(s) while the kernel streamed "
            f"seq {min(sent_at)}..{max(sent_at)} (page time {min(sent_at.values()) * 1000:.0f}.."
            f"{end_of_stream_ms:.0f} ms); it applied {[(e['seq'], e['t']) for e in inline_log]} "
            "(seq, page ms), i.e. nothing was live until the kernel went idle"
        )

    # ---- (c) the sidebar (sidecar) view shows the same data, replayed
    wait_seq(page, SIDEBAR, latest)
    assert count(page, SIDEBAR) == 1
    assert count(page, f"#jp-right-stack {SIDEBAR}") == 1, "the sidecar is not in the right area"
    for dataset in charts.CHART_DATASETS:
        name = f"data-rows-{dataset}"
        assert attr(page, SIDEBAR, name) == attr(page, INLINE, name), name
    sidebar_charts = assert_charts(page, SIDEBAR, kinds)
    no_widget_error(page, SIDEBAR)
    sidebar_view = attr(page, SIDEBAR, "data-view-id")

    # ---- (e) screenshots (all calibrators, stream done)
    page.locator(INLINE).screenshot(path=str(artifacts_dir / "widget-inline.png"))
    page.locator(".jupyterlab-sidecar").screenshot(path=str(artifacts_dir / "widget-sidebar.png"))

    # ---- (b') both views live: stream more batches from the kernel and watch both views grow.
    # "paced": a batch every 0.3 s (latency without backlog); "burst": 20 batches back to back.
    k2b: dict[str, dict[str, list[float]]] = {}
    live_during: dict[str, dict[str, int]] = {}
    drain_ms: dict[str, float] = {}
    seq_before, batches_done = latest, N_BATCHES
    for phase, n_live, pause_s in (("paced", 8, 0.3), ("burst", 20, 0.0)):
        kernel.run(LIVE_STREAM.format(start=batches_done, n=n_live, rows=500, sleep=pause_s))
        batches_done += n_live
        seq_after = kernel.eval("mon.widget().seq")
        assert seq_after >= seq_before + 2 * n_live
        for root in (INLINE, SIDEBAR):
            wait_seq(page, root, seq_after)
        sent_at = _sent_at(kernel)
        # the last update of the stream (a later window-panel refresh is not a monitor update)
        last_sent = max(q for q in sent_at if q <= seq_after)
        end_ms = sent_at[last_sent] * 1000
        log = page.evaluate("() => window.__seqLog")
        k2b[phase], live_during[phase] = {}, {}
        for label, view in (("inline", inline_view), ("sidebar", sidebar_view)):
            entries = [e for e in log if e["view"] == view and seq_before < e["seq"] <= seq_after]
            live = [e for e in entries if e["t"] < end_ms]
            live_during[phase][label] = len(live)
            if phase == "paced" and (len(live) < 2 or live[-1]["marks"] <= live[0]["marks"]):
                problems.append(
                    f"live stream: the {label} view applied {len(live)} update(s) while the kernel "
                    f"streamed seq {seq_before + 1}..{seq_after}: "
                    f"{[(e['seq'], e['marks']) for e in live]}"
                )
            first_shown: dict[int, float] = {}
            for e in entries:
                first_shown.setdefault(e["seq"], e["t"])
            k2b[phase][label] = [t - sent_at[q] * 1000 for q, t in first_shown.items() if q in sent_at]
            shown_at = next(t for q, t in sorted(first_shown.items()) if q >= last_sent)
            drain_ms[f"{phase}/{label}"] = round(shown_at - end_ms, 1)
        seq_before = seq_after
    # the window panels' last refresh comes once the kernel is idle (widget.WINDOW_REFRESH_S)
    time.sleep(WINDOW_REFRESH_S + 0.3)
    live_latest = kernel.eval("mon.widget().seq")
    for root in (INLINE, SIDEBAR):
        wait_seq(page, root, live_latest)
    assert attr(page, SIDEBAR, "data-rows-batches") == attr(page, INLINE, "data-rows-batches")
    rows_now = int(attr(page, INLINE, "data-rows-batches") or 0)
    assert rows_now == batches_done * N_CALIBRATORS

    # ---- (d) picker -> kernel's _selected; both views follow
    page.locator(f'{INLINE} button.calwatch-tab[data-section="Coverage"]').click()
    coverage_marks = f"{INLINE} div.calwatch-chart[data-chart=coverage] {MARKS}"
    marks_all = count(page, coverage_marks)
    page.locator(f"{INLINE} select.calwatch-picker").select_option("aps")
    kernel.wait_for("mon.widget()._selected", "aps")
    page.wait_for_function(
        "(sel) => document.querySelector(sel).value === 'aps'",
        arg=f"{SIDEBAR} select.calwatch-picker",
    )
    page.wait_for_function(  # the charts filter to one calibrator
        "([sel, n]) => document.querySelectorAll(sel).length < n", arg=[coverage_marks, marks_all]
    )

    # ---- (d) pause: a streamed batch is queued, not applied, until resume
    pause = page.locator(f"{INLINE} button.calwatch-pause")
    assert pause.inner_text().strip() == "Pause"
    pause.click()
    kernel.wait_for("mon.widget()._paused", True)
    page.wait_for_function(
        "(sel) => document.querySelector(sel).textContent.trim() === 'Resume'",
        arg=f"{SIDEBAR} button.calwatch-pause",
    )
    kernel.run("P_new, _ = softmax_batch(500)\nmon.observe(probs=P_new, ids=range(10**6, 10**6 + 500))")
    paused_seq = kernel.eval("mon.widget().seq")
    assert paused_seq >= live_latest + 1
    for root in (INLINE, SIDEBAR):  # the message arrived (queued) ...
        page.wait_for_function(
            "(sel) => /\\d+ updates? queued/.test(document.querySelector(sel).textContent)",
            arg=f"{root} .calwatch-pending",
        )
        # ... and was not applied
        assert attr(page, root, "data-applied-seq") == str(live_latest)
        assert attr(page, root, "data-rows-batches") == str(rows_now)
    page.locator(INLINE).screenshot(path=str(artifacts_dir / "widget-inline-paused.png"))
    pause.click()  # resume
    kernel.wait_for("mon.widget()._paused", False)
    for root in (INLINE, SIDEBAR):
        wait_seq(page, root, paused_seq)
        assert attr(page, root, "data-rows-batches") == str(rows_now + N_CALIBRATORS)
        assert page.locator(f"{root} .calwatch-pending").inner_text().strip() == ""
        no_widget_error(page, root)

    js_errors = browser_errors(page)
    if js_errors:
        problems.append(f"browser errors: {js_errors[:10]}")

    # ---- (f) timings from the page
    timings = page.evaluate("() => Array.from(globalThis.__calwatchTimings ?? [])")
    update = _summary(timings)
    k2b_summary = {
        phase: {label: _summary(values) for label, values in views.items()} for phase, views in k2b.items()
    }
    result = {
        "update_ms": update,
        "update_note": "globalThis.__calwatchTimings: one changeset + runAsync of one chart",
        "kernel_to_browser_ms": k2b_summary,
        "kernel_to_browser_note": (
            "after Run All, both views live: paced = 8 batches 0.3 s apart, burst = 20 batches "
            "back to back (2 updates per batch: observe + late labels). Kernel time.time() right "
            "after widget.send (a Monitor.subscribe listener) to page Date.now() when the view "
            "set data-applied-seq (every chart of the view rendered)"
        ),
        "drain_ms_after_last_send": drain_ms,
        "run_all_s": round(run_all_s, 2),
        "updates_applied_inline_during_run_all_stream": len(during),
        "updates_applied_during_live_stream": live_during,
        "inline_charts": inline_charts,
        "sidebar_charts": sidebar_charts,
        "console_messages": len(page.console_messages_),
        "problems": problems,
        "test_s": round(time.monotonic() - t0, 2),
    }
    (artifacts_dir / "browser-latency.json").write_text(json.dumps(result, indent=2))
    with capsys.disabled():
        print(
            f"\ncalwatch browser: update (changeset+runAsync, per chart) median "
            f"{update['median_ms']} ms, p95 {update['p95_ms']} ms, n={update['count']}; "
            + "; ".join(
                f"kernel->{label} view ({phase}) median {v['median_ms']} ms, p95 {v['p95_ms']} ms, "
                f"n={v['count']}"
                for phase, views in k2b_summary.items()
                for label, v in views.items()
            )
            + f"; Run All {run_all_s:.1f} s; chart width inline {inline_charts[0]['width']} px, "
            f"sidebar {sidebar_charts[0]['width']} px"
        )
    assert update["count"] > 0, "globalThis.__calwatchTimings is empty"
    assert not problems, "\n".join(problems)
