"""Soak run: the dashboard open in headless Chromium while a background thread streams batches.

A private JupyterLab (127.0.0.1, random token, temp dirs, the venv's kernel; the helpers of
``tests/ui``) opens a notebook whose first cell builds a monitor (K = 10, LAC + randomised APS +
Mondrian-by-label LAC, default shift detectors) and shows its dashboard; the second cell starts a
producer thread that observes batches of 1,000 rows and labels each batch once the next has
arrived, for ``--batches`` batches (default 100,000) or ``--minutes`` minutes (default 60),
whichever comes first. Debian's Chromium (``CALWATCH_CHROMIUM``, default ``/usr/bin/chromium``)
shows the notebook through Playwright the whole time.

The producer thread waits until the baseline sample is taken, then streams as fast as the monitor
goes (``--rate N``: at most N batches a second). Every ``--sample-seconds`` (default 10) it
records the kernel's RSS, Chromium's summed RSS and PSS (the browser process and all its
children) and JS heap, the Jupyter server's RSS, the batches done, the kernel's time per widget
update (median / p95 over the interval, from ``MonitorWidget.kernel_ms``) and the kernel ->
pixels latency of the updates rendered in the interval (median / p95 of
``globalThis.__calwatchLatencies[].frame_ms``: from when the kernel began computing an update
until the animation frame after every shown chart rendered it). Both sample buffers are drained
at each sample, so they never fill.

Writes ``benchmarks/results/soak.csv`` and ``benchmarks/results/soak.png`` (RSS and latency
against elapsed minutes) and prints rows/s, RSS at start / middle / end and the slope of RSS per
10,000 batches after warm-up (flat = near zero). Every process it starts is stopped at the end,
also on Ctrl-C, SIGTERM or an error.

Run: ``make soak [SOAK_ARGS="--minutes 12"]`` or ``python benchmarks/soak.py [--minutes 60]
[--batches 100000] [--sample-seconds 10] [--rate 0] [--tab Coverage] [--screenshots MINUTES]
[--prelude FILE] [--pressure-at MINUTES]``
(``--prelude``: Python code run in the kernel before the monitor is built, to try a patch;
``--pressure-at``: signal critical memory pressure to Chromium once, to see how the page responds).
``--interact`` does what a user would while it runs: at each sample it moves the α slider (on the
Coverage tab) and adds a note pinned to the latest batch through the page, and records, in ms
from the input: when the kernel had recomputed the panels for the new α (``alpha_kernel_ms``, from
the kernel's clock: the machine's monotonic clock is the page driver's too), when every what-if
point on the screen showed the new α (``alpha_screen_ms``), and when the note was listed on the
screen, after its way through the kernel (``note_screen_ms``). ``exec_ms`` is the round trip of an
empty cell sent through the page (what running a cell waits for while the stream runs).

What holds the memory is sampled too: the kernel's glibc ``mallinfo2`` (bytes in use, and free
space kept inside its heaps: with ``PYTHONMALLOC=malloc`` every Python object lives there) and its
count of gc-tracked objects; the Chromium renderers' RSS (the page) apart from the other
processes; the page's DOM nodes and JS event listeners (DevTools ``Performance.getMetrics``);
the elements added to and held in each part of the dashboard and the page (``dom_added_by``,
``dom_held_by``). ``--live-heap-every MINUTES`` forces a full collection in the page that often
and records the JS heap left after it: growth there is the page holding memory, growth only
between collections is the collector's pacing. ``--heap-census-at MINUTES ...`` writes the page's
heap by constructor at those times and prints what grew most between the first and the last.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the browser tests' helpers: tests/ui

from tests.ui.conftest import (  # noqa: E402
    CHROMIUM_ARGS,
    DEFAULT_CHROMIUM,
    SERVER_START_TIMEOUT_S,
    LabServer,
    _free_port,
    _stop_server,
    _write_lab_dirs,
    lab_command,
)
from tests.ui.helpers import (  # noqa: E402
    INLINE,
    Kernel,
    open_notebook,
    run_all,
    wait_attr,
    wait_seq,
    write_notebook,
)

from _common import rss_split_mib  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
NOTEBOOK = "soak.ipynb"
MIB = 2**20

SETUP = """
import ctypes
import gc
import threading
import time
import traceback

import numpy as np

import calwatch as cw

K, ROWS, MAX_BATCHES, SECONDS, RATE = 10, {rows}, {batches}, {seconds}, {rate}
rng = np.random.default_rng(0)


def batch(n):
    y = rng.integers(0, K, size=n)
    logits = rng.normal(size=(n, K))
    logits[np.arange(n), y] += 2.0
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True), y


mon = cw.Monitor(
    calibrators={{
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True),
        "lac-by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
    }},
    name="soak",
)
P_cal, y_cal = batch(20_000)
mon.calibrate(probs=P_cal, y=y_cal)
go, stop = threading.Event(), threading.Event()
alpha_seen = []  # (monotonic time, value): after the widget's own handler has recomputed the panels
mon.widget().observe(lambda change: alpha_seen.append((time.monotonic(), change["new"])), names=["_alpha"])
progress = {{"batches": 0, "done": False, "error": "", "seconds": 0.0}}


def produce():
    go.wait()  # set by the soak script once it has taken the baseline sample
    pending = None
    start = time.monotonic()
    try:
        for b in range(MAX_BATCHES):
            if stop.is_set() or time.monotonic() - start >= SECONDS:
                break
            if RATE > 0:  # at most RATE batches a second (0: as fast as the monitor goes)
                time.sleep(max(0.0, start + b / RATE - time.monotonic()))
            P, y = batch(ROWS)
            ids = np.arange(b * ROWS, (b + 1) * ROWS)
            mon.observe(probs=P, ids=ids)
            if pending is not None:
                mon.label(*pending)  # the previous batch's labels, once this one has arrived
            pending = (ids, y)
            progress["batches"] = b + 1
        if pending is not None:
            mon.label(*pending)
    except BaseException as err:
        progress["error"] = "".join(traceback.format_exception(err)[-6:])
    finally:
        progress["seconds"] = time.monotonic() - start
        progress["done"] = True


class _MallInfo2(ctypes.Structure):  # glibc's census of its heaps (all arenas), glibc >= 2.33
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
            "keepcost",
        )
    ]


try:
    _libc = ctypes.CDLL("libc.so.6")
    _libc.mallinfo2.restype = _MallInfo2
except (OSError, AttributeError):
    _libc = None


def malloc_census():
    # bytes glibc's malloc hands out (its heaps' chunks in use plus its own mmapped chunks) and
    # the free space inside its heaps: growth of the first is memory held, of the second the
    # allocator keeping holes
    if _libc is None:
        return {{"malloc_used_mib": None, "malloc_free_mib": None}}
    info = _libc.mallinfo2()
    return {{
        "malloc_used_mib": round((info.uordblks + info.hblkhd) / 2**20, 1),
        "malloc_free_mib": round(info.fordblks / 2**20, 1),
    }}


def soak_sample():
    # drain the widget's kernel timings (a deque: popleft is safe against the producer's appends)
    timings, kept = [], mon.widget()._kernel_ms
    while True:
        try:
            timings.append(kept.popleft())
        except IndexError:
            break
    timings.sort()
    return {{
        **progress,
        **malloc_census(),
        "gc_objects": len(gc.get_objects()),
        "seq": mon.widget().seq,
        "updates": len(timings),
        "kernel_ms_median": timings[len(timings) // 2] if timings else None,
        "kernel_ms_p95": timings[round(0.95 * (len(timings) - 1))] if timings else None,
    }}


mon.show()
"""

START = """
producer = threading.Thread(target=produce, name="soak producer", daemon=True)
producer.start()
"""

# frame_ms of each update rendered since the last sample (emptied in place: the views hold the array)
TAKE_LATENCIES_JS = "() => (globalThis.__calwatchLatencies ?? []).splice(0).map((s) => s.frame_ms)"
JS_HEAP_JS = "() => (performance.memory ? performance.memory.usedJSHeapSize : null)"

FIELDS = [
    "elapsed_s",
    "elapsed_min",
    "batches",
    "rows",
    "kernel_rss_mib",
    "kernel_anon_mib",
    "kernel_file_mib",
    "browser_rss_mib",
    "browser_pss_mib",
    "browser_procs",
    "js_heap_mib",
    "renderer_rss_mib",
    "dom_nodes",
    "dom_added",
    "dom_added_by",
    "dom_held",
    "dom_held_by",
    "js_listeners",
    "js_heap_live_mib",
    "kernel_malloc_used_mib",
    "kernel_malloc_free_mib",
    "kernel_gc_objects",
    "server_rss_mib",
    "kernel_updates",
    "kernel_ms_median",
    "kernel_ms_p95",
    "latency_updates",
    "latency_ms_median",
    "latency_ms_p95",
    "widget_seq",
    "loadavg_1m",
    "alpha_kernel_ms",
    "alpha_screen_ms",
    "note_screen_ms",
    "exec_ms",
]

#: The α values ``--interact`` moves the slider through, one a sample.
ALPHAS = (0.05, 0.2, 0.1, 0.3)


def start_lab(base: Path) -> LabServer:
    """JupyterLab on 127.0.0.1 with a random token, temp dirs and the venv's kernel only."""
    env = {**os.environ, **_write_lab_dirs(base), "PYTHONUNBUFFERED": "1"}
    root = base / "root"
    root.mkdir()
    port, token = _free_port(), secrets.token_hex(24)
    cmd = lab_command(root, port, token)
    log_path = base / "jupyterlab.log"
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return LabServer(f"http://127.0.0.1:{port}", token, root, log_path, proc)


def wait_ready(server: LabServer) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {server.proc.returncode}:\n{server.log_tail()}")
        try:
            server.api("/api/status")
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            if time.monotonic() > deadline:
                msg = f"JupyterLab did not answer within {SERVER_START_TIMEOUT_S:.0f} s:\n{server.log_tail()}"
                raise RuntimeError(msg) from err
            time.sleep(0.1)


def rss_mib(pid: int) -> float:
    try:
        return psutil.Process(pid).memory_info().rss / MIB
    except psutil.Error:
        return math.nan


def browser_memory(profile: Path) -> tuple[float, float, int, float]:
    """Summed RSS and PSS (MiB) of the Chromium on ``profile`` and its children, their count, renderers' RSS.

    Summed RSS counts the pages its processes share once per process; PSS splits them. The
    renderers (``--type=renderer``) hold the page: its DOM, its JS heap, Vega's canvases; the rest
    is the browser process, the GPU process and utilities.
    """
    flag = f"--user-data-dir={profile}"
    roots = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if flag in (p.info["cmdline"] or []):
                roots.append(p)
    procs: dict[int, psutil.Process] = {}
    for root in roots:
        procs[root.pid] = root
        with contextlib.suppress(psutil.Error):
            procs.update((c.pid, c) for c in root.children(recursive=True))
    rss = pss = renderers = 0
    for p in procs.values():
        with contextlib.suppress(psutil.Error, AttributeError):
            full = p.memory_full_info()
            rss, pss = rss + full.rss, pss + full.pss
            if "--type=renderer" in p.cmdline():
                renderers += full.rss
    return rss / MIB, pss / MIB, len(procs), renderers / MIB


class PageMetrics:
    """The page's DOM nodes, event listeners and JS heap from Chromium's DevTools protocol.

    A page that leaks holds ever more nodes or listeners, or a JS heap that grows *after* a full
    collection; a heap that only grows between collections is the collector's pacing.
    ``live_heap_mib`` forces a full collection (``HeapProfiler.collectGarbage``) first: it
    changes what it measures (the next collections start from a clean heap), so the soak asks
    for it only every ``--live-heap-every`` minutes.
    """

    def __init__(self, context: Any, page: Any) -> None:
        self._cdp = context.new_cdp_session(page)
        self._cdp.send("Performance.enable")

    def read(self) -> dict[str, float]:
        metrics = self._cdp.send("Performance.getMetrics")["metrics"]
        return {m["name"]: float(m["value"]) for m in metrics}

    def live_heap_mib(self) -> float:
        self._cdp.send("HeapProfiler.collectGarbage")
        return self.read()["JSHeapUsedSize"] / MIB

    def census(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Objects on the page's JS heap by (kind, constructor or name): (count, bytes), from a snapshot.

        A heap snapshot collects the garbage first, so what it counts is what the page holds.
        """
        chunks: list[str] = []
        handler = lambda event: chunks.append(event["chunk"])  # noqa: E731
        self._cdp.on("HeapProfiler.addHeapSnapshotChunk", handler)
        try:
            self._cdp.send("HeapProfiler.takeHeapSnapshot", {"reportProgress": False})
        finally:
            self._cdp.remove_listener("HeapProfiler.addHeapSnapshotChunk", handler)
        return heap_census(json.loads("".join(chunks)))


def heap_census(snapshot: dict[str, Any]) -> dict[tuple[str, str], tuple[int, int]]:
    """A V8 heap snapshot (``.heapsnapshot`` JSON) summed by (node kind, name): (count, self bytes).

    Strings are summed as one name per kind (their text is their name); the 30 commonest shapes
    of their text (the first 24 characters, digits as ``#``) come as kind ``string shape``, to
    tell what they are (row keys, SVG paths, JSON). The layout is the snapshot's own ``meta``:
    ``nodes`` is a flat array of ``len(node_fields)`` numbers a node.
    """
    meta = snapshot["snapshot"]["meta"]
    fields = meta["node_fields"]
    kinds = meta["node_types"][0]
    width = len(fields)
    at_kind, at_name, at_size = fields.index("type"), fields.index("name"), fields.index("self_size")
    nodes, strings = snapshot["nodes"], snapshot["strings"]
    out: dict[tuple[str, str], list[int]] = {}
    shapes: dict[str, list[int]] = {}
    digits = str.maketrans("0123456789", "##########")
    for i in range(0, len(nodes), width):
        kind = kinds[nodes[i + at_kind]]
        if kind == "string":
            shape = shapes.setdefault(strings[nodes[i + at_name]][:24].translate(digits), [0, 0])
            shape[0] += 1
            shape[1] += nodes[i + at_size]
        name = (
            kind
            if kind in ("string", "concatenated string", "sliced string", "number")
            else strings[nodes[i + at_name]][:80]
        )
        held = out.setdefault((kind, name), [0, 0])
        held[0] += 1
        held[1] += nodes[i + at_size]
    for text, held in sorted(shapes.items(), key=lambda kv: -kv[1][0])[:30]:
        out[("string shape", repr(text))] = held
    return {key: (count, size) for key, (count, size) in out.items()}


def census_growth(
    first: dict[tuple[str, str], tuple[int, int]], last: dict[tuple[str, str], tuple[int, int]], top: int = 15
) -> list[str]:
    """Lines naming the ``top`` (kind, name) groups whose bytes grew most from ``first`` to ``last``."""
    grown = []
    for key in first.keys() | last.keys():
        (n0, b0), (n1, b1) = first.get(key, (0, 0)), last.get(key, (0, 0))
        grown.append((b1 - b0, n1 - n0, key, b1))
    grown.sort(reverse=True)
    return [
        f"  {db / MIB:+8.2f} MiB {dn:+9,d} objects  {kind}: {name}  (now {b1 / MIB:.2f} MiB)"
        for db, dn, (kind, name), b1 in grown[:top]
    ]


def quantiles(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    ordered = sorted(values)
    return statistics.median(ordered), ordered[round(0.95 * (len(ordered) - 1))]


def take_sample(
    t0: float,
    page: Any,
    kernel: Kernel,
    kernel_pid: int,
    server: LabServer,
    profile: Path,
    rows: int,
    metrics: PageMetrics,
    live_heap: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    state = kernel.eval("soak_sample()")
    latencies = page.evaluate(TAKE_LATENCIES_JS)
    heap = page.evaluate(JS_HEAP_JS)
    lat_median, lat_p95 = quantiles(latencies)
    browser, browser_pss, n_procs, renderers = browser_memory(profile)
    dom = metrics.read()
    live_heap_mib = metrics.live_heap_mib() if live_heap else None
    churn: dict[str, int] = page.evaluate(TAKE_CHURN_JS)
    held: dict[str, int] = page.evaluate(COUNT_HELD_JS, INLINE)
    anon, file_backed = rss_split_mib(kernel_pid)
    elapsed = time.monotonic() - t0
    sample = {
        "elapsed_s": round(elapsed, 1),
        "elapsed_min": round(elapsed / 60, 3),
        "batches": state["batches"],
        "rows": state["batches"] * rows,
        "kernel_rss_mib": round(rss_mib(kernel_pid), 1),
        "kernel_anon_mib": round(anon, 1),
        "kernel_file_mib": round(file_backed, 1),
        "browser_rss_mib": round(browser, 1),
        "browser_pss_mib": round(browser_pss, 1),
        "browser_procs": n_procs,
        "js_heap_mib": None if heap is None else round(heap / MIB, 1),
        "renderer_rss_mib": round(renderers, 1),
        "dom_nodes": int(dom.get("Nodes", 0)),
        "dom_added": sum(churn.values()),
        "dom_added_by": json.dumps(dict(sorted(churn.items(), key=lambda kv: -kv[1]))),
        "dom_held": sum(held.values()),
        "dom_held_by": json.dumps(dict(sorted(held.items(), key=lambda kv: -kv[1]))),
        "js_listeners": int(dom.get("JSEventListeners", 0)),
        "js_heap_live_mib": None if live_heap_mib is None else round(live_heap_mib, 1),
        "kernel_malloc_used_mib": state["malloc_used_mib"],
        "kernel_malloc_free_mib": state["malloc_free_mib"],
        "kernel_gc_objects": state["gc_objects"],
        "server_rss_mib": round(rss_mib(server.proc.pid), 1),
        "kernel_updates": state["updates"],
        "kernel_ms_median": _round(state["kernel_ms_median"]),
        "kernel_ms_p95": _round(state["kernel_ms_p95"]),
        "latency_updates": len(latencies),
        "latency_ms_median": _round(lat_median),
        "latency_ms_p95": _round(lat_p95),
        "widget_seq": state["seq"],
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    return sample, state


WHAT_IF_POINTS = f'{INLINE} div.calwatch-panel[data-panel="what_if"] g.mark-symbol.role-mark path'
NOTE_ITEMS = f"{INLINE} li.calwatch-note"
#: True once every what-if point on the screen carries α = arg[1] in its aria-label.
WHAT_IF_AT_JS = """([sel, alpha]) => {
  const marks = [...document.querySelectorAll(sel)];
  return marks.length > 0 && marks.every((m) => (m.getAttribute("aria-label") || "").includes("α: " + alpha));
}"""
COUNT_JS = "(sel) => document.querySelectorAll(sel).length"
#: The part of the dashboard an element is in: its panel (the charts' SVG marks) or widget part.
PART_OF_JS = """(el) => {
  const host = el && el.closest(
    "[data-panel], .calwatch-health, .calwatch-alerts, .calwatch-notes, .calwatch-controls, "
    + ".calwatch-dash-controls, .calwatch-card, .calwatch-rows");
  return !host ? "other" : host.dataset.panel ? "panel " + host.dataset.panel : host.classList[0];
}"""
#: Counts the elements added under the dashboard (with their descendants), by the part they went
#: into: where the page's DOM churn (garbage for its collector) comes from.
WATCH_CHURN_JS = f"""(sel) => {{
  if (globalThis.__calwatchChurn) return;
  const partOf = {PART_OF_JS};
  const counts = new Map();
  new MutationObserver((records) => {{
    for (const r of records) {{
      for (const n of r.addedNodes) {{
        const name = partOf(n.nodeType === 1 ? n : n.parentElement);
        const added = 1 + (n.nodeType === 1 ? n.querySelectorAll("*").length : 0);
        counts.set(name, (counts.get(name) || 0) + added);
      }}
    }}
  }}).observe(document.querySelector(sel), {{ childList: true, subtree: true }});
  globalThis.__calwatchChurn = counts;
}}"""
#: Elements now in the page: in the dashboard by part, elsewhere by the nearest JupyterLab part
#: (``page jp-…``).
COUNT_HELD_JS = f"""(sel) => {{
  const partOf = {PART_OF_JS};
  const out = {{}};
  const root = document.querySelector(sel);
  if (!root) return out;
  for (const el of document.body.querySelectorAll("*")) {{
    let name;
    if (root.contains(el)) {{
      name = partOf(el.parentElement);
    }} else {{
      const jp = el.closest("[class*='jp-']");
      const cls = jp ? [...jp.classList].find((c) => c.startsWith("jp-")) : null;
      name = "page " + (cls || el.tagName.toLowerCase());
    }}
    out[name] = (out[name] || 0) + 1;
  }}
  return out;
}}"""
TAKE_CHURN_JS = """() => {
  const counts = globalThis.__calwatchChurn;
  if (!counts) return {};
  const out = Object.fromEntries(counts);
  counts.clear();
  return out;
}"""


def interact(page: Any, kernel: Kernel, step: int, batch: int) -> dict[str, float | None]:
    """Move the α slider and add a note pinned to ``batch`` through the page, as a user would.

    Returns the milliseconds from each input until the kernel had recomputed for the new α, until
    the screen showed it, until the note was listed on the screen, and an empty cell's round trip.
    """
    alpha = ALPHAS[step % len(ALPHAS)]
    begin = time.monotonic()
    kernel.eval("1")
    exec_ms = 1e3 * (time.monotonic() - begin)
    start = time.monotonic()
    page.locator(f"{INLINE} input.calwatch-alpha").fill(str(alpha))
    page.wait_for_function(WHAT_IF_AT_JS, arg=[WHAT_IF_POINTS, f"{alpha:.3f}"], timeout=60_000)
    alpha_screen_ms = 1e3 * (time.monotonic() - start)
    seen = kernel.eval(f"[t for t, a in alpha_seen if a == {alpha!r}][-1:]")
    alpha_kernel_ms = 1e3 * (seen[0] - start) if seen and seen[0] >= start else None
    notes = int(page.evaluate(COUNT_JS, NOTE_ITEMS))
    page.eval_on_selector(f"{INLINE} details.calwatch-notes", "(el) => { el.open = true; }")
    page.locator(f"{INLINE} select.calwatch-note-target").select_option("batch")
    page.locator(f"{INLINE} input.calwatch-note-batch").fill(str(max(0, batch - 1)))
    page.locator(f"{INLINE} input.calwatch-note-author").fill("soak")
    page.locator(f"{INLINE} textarea.calwatch-note-text").fill(f"soak note {step}: batch {batch - 1}")
    start = time.monotonic()
    page.locator(f"{INLINE} button.calwatch-note-add").click()
    more = f"(sel) => document.querySelectorAll(sel).length > {notes}"
    page.wait_for_function(more, arg=NOTE_ITEMS, timeout=60_000)
    return {
        "alpha_kernel_ms": _round(alpha_kernel_ms, 1),
        "alpha_screen_ms": round(alpha_screen_ms, 1),
        "note_screen_ms": round(1e3 * (time.monotonic() - start), 1),
        "exec_ms": round(exec_ms, 1),
    }


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def slope_per_1e4(samples: list[dict[str, Any]], key: str) -> float:
    """Least-squares slope of ``key`` (MiB) per 10,000 batches, over the samples past warm-up.

    Warm-up: the first 10% of the batches (allocator pools, caches and JIT-like first costs).
    """
    last = samples[-1]["batches"]
    pts = [
        (s["batches"], s[key])
        for s in samples
        if s["batches"] >= 0.1 * last and s[key] is not None and not math.isnan(s[key])
    ]
    if len(pts) < 3 or pts[-1][0] == pts[0][0]:
        return math.nan
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    return 1e4 * sxy / sxx


def edge_median(samples: list[dict[str, Any]], key: str, end: bool) -> float | None:
    """Median of ``key`` over the first (or last) 10% of the samples that have it (at least one)."""
    values = [s[key] for s in samples if s[key] is not None]
    if not values:
        return None
    n = max(1, len(values) // 10)
    return round(statistics.median(values[-n:] if end else values[:n]), 2)


def write_census(census: dict[tuple[str, str], tuple[int, int]], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["kind", "name", "count", "self_bytes"])
        for (kind, name), (count, size) in sorted(census.items(), key=lambda kv: -kv[1][1]):
            writer.writerow([kind, name, count, size])


def write_csv(samples: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(samples)


def _series(
    samples: list[dict[str, Any]], named: tuple[tuple[str, str], ...], unit: str
) -> list[dict[str, Any]]:
    """Long-form rows (minutes, series, ``unit``) of the sampled columns ``named`` (label, column)."""
    return [
        {"minutes": s["elapsed_min"], "series": name, unit: s[key]}
        for s in samples
        for name, key in named
        if s.get(key) is not None and not math.isnan(s[key])
    ]


def write_png(samples: list[dict[str, Any]], path: Path, title: str) -> None:
    """Three panels against elapsed minutes: RSS (kernel, browser), what it holds, p95 latency."""
    import altair as alt

    x = alt.X("minutes:Q", title="elapsed (minutes)")

    def panel(values: list[dict[str, Any]], heading: str, y: Any) -> Any:
        return (
            alt.Chart(alt.Data(values=values), title=heading)
            .mark_line(point=alt.OverlayMarkDef(size=12))
            .encode(x=x, y=y, color=alt.Color("series:N", title=None))
            .properties(width=720, height=240)
        )

    rss = (
        ("kernel RSS", "kernel_rss_mib"),
        ("kernel RSS: anonymous (heap)", "kernel_anon_mib"),
        ("Chromium RSS (all processes)", "browser_rss_mib"),
    )
    held = (
        ("kernel: glibc malloc, in use", "kernel_malloc_used_mib"),
        ("kernel: glibc malloc, free in its heaps", "kernel_malloc_free_mib"),
        ("Chromium renderers' RSS", "renderer_rss_mib"),
        ("page JS heap", "js_heap_mib"),
        ("page JS heap after a forced full GC", "js_heap_live_mib"),
    )
    lat = (("kernel per update, p95", "kernel_ms_p95"), ("kernel → pixels, p95", "latency_ms_p95"))
    chart = alt.vconcat(
        panel(_series(samples, rss, "MiB"), "Resident memory", alt.Y("MiB:Q", title="RSS (MiB)")),
        panel(
            _series(samples, held, "MiB"),
            "What holds it: the kernel's C heap, the page",
            alt.Y("MiB:Q", title="MiB"),
        ),
        panel(
            _series(samples, lat, "ms"),
            "Update latency (p95 over each sample interval)",
            alt.Y("ms:Q", title="ms (log scale)", scale=alt.Scale(type="log")),
        ),
        title=title,
    ).resolve_scale(color="independent")
    chart.save(str(path), ppi=100)


def _load(load: tuple[float, ...]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def _screenshot(page: Any, out: Path, elapsed_s: float) -> None:
    """The dashboard as the page shows it now (what a person watching would see)."""
    page.locator(INLINE).first.screenshot(path=str(out / f"soak-screen-{elapsed_s / 60:05.1f}min.png"))


def _stop_producer(kernel: Kernel) -> None:
    with contextlib.suppress(Exception):
        kernel.run("stop.set(); go.set()")


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=100_000, help="batches to stream (default 100,000)")
    parser.add_argument("--minutes", type=float, default=60.0, help="or stop after this long (default 60)")
    parser.add_argument("--rows", type=int, default=1_000, help="rows a batch (default 1,000)")
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="sampling interval (default 10)")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="at most this many batches a second (default 0: no limit)"
    )
    parser.add_argument("--tab", default=None, help="dashboard tab to show (default: the one it opens on)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of soak.csv and soak.png")
    parser.add_argument(
        "--interact",
        action="store_true",
        help="at each sample move the α slider and add a note through the page (opens the Coverage tab)",
    )
    parser.add_argument(
        "--screenshots",
        type=float,
        default=0.0,
        metavar="MINUTES",
        help="save the dashboard as the page shows it every MINUTES (and at the end) as soak-screen-*.png",
    )
    parser.add_argument(
        "--prelude",
        type=Path,
        default=None,
        help="Python file run in the kernel before the monitor is built (to try a patch or a setting)",
    )
    parser.add_argument(
        "--pressure-at",
        type=float,
        default=None,
        metavar="MINUTES",
        help="after MINUTES, tell Chromium the system is under critical memory pressure (CDP "
        "Memory.simulatePressureNotification), to see how the page's memory and latency respond",
    )
    parser.add_argument(
        "--live-heap-every",
        type=float,
        default=0.0,
        metavar="MINUTES",
        help="every MINUTES force a full collection in the page and record the JS heap left "
        "(js_heap_live_mib: what the page holds, not what its collector has yet to free)",
    )
    parser.add_argument(
        "--heap-census-at",
        type=float,
        nargs="*",
        default=[],
        metavar="MINUTES",
        help="at each MINUTES take a heap snapshot of the page and write its objects by kind and "
        "constructor (heap-census-MIN.csv); prints what grew most from the first to the last",
    )
    args = parser.parse_args(argv)
    chromium = os.environ.get("CALWATCH_CHROMIUM", DEFAULT_CHROMIUM)
    if not (os.path.isfile(chromium) and os.access(chromium, os.X_OK)):
        parser.error(f"Chromium not found at {chromium!r} (set CALWATCH_CHROMIUM or run `make chromium`)")
    from playwright.sync_api import sync_playwright

    signal.signal(signal.SIGTERM, _on_sigterm)
    args.out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    samples: list[dict[str, Any]] = []
    final: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="calwatch-soak-")))
        server = start_lab(base / "lab")
        stack.callback(_stop_server, server)
        wait_ready(server)
        profile = base / "chromium-profile"
        pw = stack.enter_context(sync_playwright())
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 2000},
            device_scale_factor=1,
        )
        stack.callback(context.close)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(f"[pageerror] {e}"))
        page.on(
            "console", lambda m: errors.append(f"[console.error] {m.text}") if m.type == "error" else None
        )

        seconds = 60.0 * args.minutes
        setup = SETUP.format(rows=args.rows, batches=args.batches, seconds=seconds, rate=args.rate)
        if args.prelude is not None:
            setup = args.prelude.read_text() + "\n" + setup
        write_notebook(server.root / NOTEBOOK, [setup, START])
        kernel = open_notebook(page, server, NOTEBOOK)
        kernel_pid = int(kernel.eval("__import__('os').getpid()"))
        metrics = PageMetrics(context, page)
        # the producer is a daemon thread; stop it before the kernel goes (also on errors)
        stack.callback(_stop_producer, kernel)
        print(
            f"soak: {args.batches:,} batches of {args.rows:,} rows or {args.minutes:g} min, K = 10, "
            f"LAC + randomised APS + Mondrian LAC, default shift detectors; kernel pid {kernel_pid}; "
            f"sample every {args.sample_seconds:g} s; load average {_load(load_start)}",
            flush=True,
        )
        run_all(page, NOTEBOOK, timeout_s=300)
        t0 = time.monotonic()
        wait_attr(page, INLINE, "data-replay-seq")
        if args.interact and not args.tab:
            args.tab = "Coverage"  # where the α slider is
        if args.tab:
            page.locator(f'{INLINE} button.calwatch-tab[data-section="{args.tab}"]').click()
            wait_attr(page, INLINE, "data-section", args.tab)
        server.remember_children()
        page.evaluate(WATCH_CHURN_JS, INLINE)
        print(
            f"{'min':>6} {'batches':>8} {'kernel MiB':>10} {'browser MiB':>11} {'kernel p95 ms':>13} "
            f"{'->pixels p95 ms':>15} {'load':>5}",
            flush=True,
        )
        next_at = t0
        started = False
        next_screen = next_live_heap = 0.0
        censuses_due = sorted(args.heap_census_at)
        censuses: list[tuple[float, dict[tuple[str, str], tuple[int, int]]]] = []
        while True:
            if args.screenshots and time.monotonic() - t0 >= next_screen:
                _screenshot(page, args.out, time.monotonic() - t0)
                next_screen += 60.0 * args.screenshots
            if args.pressure_at is not None and time.monotonic() - t0 >= 60.0 * args.pressure_at:
                cdp = context.new_cdp_session(page)
                cdp.send("Memory.simulatePressureNotification", {"level": "critical"})
                cdp.detach()
                signalled = (time.monotonic() - t0) / 60
                print(f"critical memory pressure signalled at {signalled:.1f} min", flush=True)
                args.pressure_at = None
            if censuses_due and time.monotonic() - t0 >= 60.0 * censuses_due[0]:
                censuses_due.pop(0)
                minute = (time.monotonic() - t0) / 60
                censuses.append((minute, metrics.census()))
                write_census(censuses[-1][1], args.out / f"heap-census-{minute:05.1f}min.csv")
            live_heap = bool(args.live_heap_every) and time.monotonic() - t0 >= next_live_heap
            if live_heap:
                next_live_heap += 60.0 * args.live_heap_every
            sample, state = take_sample(
                t0, page, kernel, kernel_pid, server, profile, args.rows, metrics, live_heap
            )
            if args.interact and started and not state["done"]:
                sample |= interact(page, kernel, len(samples), int(state["batches"]))
            samples.append(sample)
            write_csv(samples, args.out / "soak.csv")  # as it goes: an interrupted run keeps its samples
            print(
                f"{sample['elapsed_min']:6.1f} {sample['batches']:8,d} {sample['kernel_rss_mib']:10.1f} "
                f"{sample['browser_rss_mib']:11.1f} {sample['kernel_ms_p95'] or math.nan:13.1f} "
                f"{sample['latency_ms_p95'] or math.nan:15.1f} {sample['loadavg_1m']:5.2f}",
                flush=True,
            )
            if not started:  # the baseline is in: let the producer go
                kernel.run("go.set()")
                started = True
            elif state["done"]:
                break
            if time.monotonic() - t0 > seconds + 120:  # the producer should have stopped by now
                kernel.run("stop.set()")
            next_at += args.sample_seconds
            time.sleep(max(0.0, next_at - time.monotonic()))
        # every update reaches the screen: wait for the last one, then take the last latencies
        last_seq = kernel.eval("mon.widget().seq")
        wait_seq(page, INLINE, last_seq)
        page.wait_for_timeout(200)
        tail = page.evaluate(TAKE_LATENCIES_JS)
        widget_errors = page.eval_on_selector_all(
            f"{INLINE} .calwatch-error", "(els) => els.filter((e) => !e.hidden).map((e) => e.textContent)"
        )
        if args.screenshots:
            _screenshot(page, args.out, time.monotonic() - t0)
        final = {
            **state,
            "seq": last_seq,
            "status": kernel.eval("mon.status()"),
            "tail_latencies": len(tail),
            "browser_errors": errors[:20],
            "widget_errors": widget_errors,
            "load_end": os.getloadavg(),
        }
        title = (
            f"calwatch soak: {final['batches']:,} batches of {args.rows:,} rows in "
            f"{final['seconds'] / 60:.1f} min, dashboard open in headless Chromium"
            + (" (the producer stopped on an error)" if final["error"] else "")
        )
        write_png(samples, args.out / "soak.png", title)
        if len(censuses) >= 2:
            (m0, first), (m1, last) = censuses[0], censuses[-1]
            print(f"page heap, what grew most from {m0:.1f} to {m1:.1f} min (after collection):")
            print("\n".join(census_growth(first, last)), flush=True)
    summarise(samples, final, args.rows, load_start, args.out)
    return 1 if final["error"] or final["widget_errors"] else 0


def summarise(
    samples: list[dict[str, Any]],
    final: dict[str, Any],
    rows: int,
    load_start: tuple[float, ...],
    out: Path,
) -> None:
    batches, secs = final["batches"], final["seconds"]
    mid = samples[len(samples) // 2]
    print(
        f"\nstreamed {batches:,} batches ({batches * rows:,} rows) in {secs:.0f} s: "
        f"{batches * rows / secs:,.0f} rows/s, {batches / secs:.1f} batches/s; "
        f"status {json.dumps(final['status'])}"
    )
    if final["error"]:
        print(f"THE PRODUCER STOPPED ON AN ERROR after {batches:,} batches:\n{final['error']}")
    if final["widget_errors"]:
        print(f"THE WIDGET SHOWS AN ERROR: {final['widget_errors']}")
    for label, key in (
        ("kernel RSS", "kernel_rss_mib"),
        ("kernel RSS, anonymous", "kernel_anon_mib"),
        ("kernel RSS, file-backed", "kernel_file_mib"),
        ("Chromium RSS", "browser_rss_mib"),
        ("Chromium PSS", "browser_pss_mib"),
        ("Chromium renderers' RSS", "renderer_rss_mib"),
        ("kernel glibc malloc in use", "kernel_malloc_used_mib"),
        ("kernel glibc malloc free in heaps", "kernel_malloc_free_mib"),
        ("server RSS", "server_rss_mib"),
    ):
        if samples[0].get(key) is None or mid.get(key) is None or samples[-1].get(key) is None:
            continue
        print(
            f"{label} MiB: start {samples[0][key]:.1f}, middle {mid[key]:.1f}, "
            f"end {samples[-1][key]:.1f}; "
            f"slope after warm-up {slope_per_1e4(samples, key):+.2f} MiB per 10,000 batches"
        )
    heap = [s["js_heap_mib"] for s in samples if s["js_heap_mib"] is not None]
    if heap:
        print(
            f"Chromium JS heap MiB: start {heap[0]:.1f}, middle {heap[len(heap) // 2]:.1f}, "
            f"end {heap[-1]:.1f}"
        )
    for label, key in (
        ("page DOM nodes", "dom_nodes"),
        ("page JS event listeners", "js_listeners"),
        ("kernel gc-tracked objects", "kernel_gc_objects"),
    ):
        print(
            f"{label}: start {samples[0][key]:,}, middle {mid[key]:,}, end {samples[-1][key]:,}; "
            f"slope after warm-up {slope_per_1e4(samples, key):+,.0f} per 10,000 batches"
        )
    added: dict[str, int] = {}
    for s in samples:
        for name, n in json.loads(s["dom_added_by"]).items():
            added[name] = added.get(name, 0) + n
    if added and samples[-1]["batches"]:
        per_batch = ", ".join(
            f"{name} {n / samples[-1]['batches']:.1f}"
            for name, n in sorted(added.items(), key=lambda kv: -kv[1])
        )
        print(f"elements added to the dashboard per batch, by part: {per_batch}")
    first_held, last_held = json.loads(samples[0]["dom_held_by"]), json.loads(samples[-1]["dom_held_by"])
    print(
        "elements in the page at start / end, the 12 largest parts: "
        + ", ".join(f"{name} {first_held.get(name, 0):,} / {n:,}" for name, n in list(last_held.items())[:12])
    )
    live = [(s["batches"], s["js_heap_live_mib"]) for s in samples if s["js_heap_live_mib"] is not None]
    if live:
        print(
            "page JS heap after a forced full GC, MiB at batches: "
            + ", ".join(f"{mib:.1f} @ {b:,}" for b, mib in live)
        )
    for label, key in (("kernel per update", "kernel_ms_p95"), ("kernel -> pixels", "latency_ms_p95")):
        start, end = edge_median(samples, key, end=False), edge_median(samples, key, end=True)
        print(f"{label} p95 ms (median over the first / last 10% of samples): {start} -> {end}")
    for label, key in (
        ("α slider -> kernel recomputed", "alpha_kernel_ms"),
        ("α slider -> screen", "alpha_screen_ms"),
        ("note -> listed on screen", "note_screen_ms"),
        ("empty cell round trip", "exec_ms"),
    ):
        done = sorted(s[key] for s in samples if s.get(key) is not None)
        if done:
            print(
                f"{label} ms over {len(done)} interactions: median {statistics.median(done):.0f}, "
                f"max {done[-1]:.0f}"
            )
    print(
        f"every update applied in the browser (last seq {final['seq']}); "
        f"browser errors: {len(final['browser_errors'])}"
    )
    for line in final["browser_errors"]:
        print(f"  {line[:300]}")
    print(
        f"load average at start {_load(load_start)}, at end {_load(final['load_end'])} "
        f"({os.cpu_count()} CPUs)"
    )
    print(f"wrote {out / 'soak.csv'} and {out / 'soak.png'}")


if __name__ == "__main__":
    sys.exit(main())
