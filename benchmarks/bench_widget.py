"""Kernel time of the live widget per update, at 100 and 1,000 batches: full rebuild vs incremental.

With the dashboard open, every ``observe`` and ``label`` call notifies the widget, which reads
the monitor (under its lock) and sends the rows that changed. A monitor (K = 10, LAC + randomised
APS + Mondrian-by-label LAC, default shift detectors, window 100,000 rows) streams batches of
1,000 rows with labels one batch late; the widget's front end is a stub that serialises each
message to JSON (what the kernel's comm does). Printed, per update, over the updates of the last
50 batches before each checkpoint:

- *after*: the widget's own kernel time (:attr:`calwatch.widget.MonitorWidget.kernel_ms`), with
  the window panels (reliability, set sizes by class) left to their refresh (at most every
  0.5 s in a kernel; timed on their own below);
- *before*: what the widget computed per update before it kept its datasets incrementally: a
  rebuild with polars of the updated buckets' chart datasets (:func:`calwatch.widget.view_datasets`),
  the per-batch summary of the cards, the timeline's buckets and the cards, plus the same status,
  warnings and JSON serialisation (in a stream of its own, with the same data and no widget);
- the window panels' refresh: from scratch (before) and from what the widget keeps (after).

Kernel → screen latency in a browser is measured by ``tests/ui/test_dashboard_perf_browser.py``
(``globalThis.__calwatchLatencies``; written to ``test-artifacts/dashboard-perf.json``).

Run: ``python benchmarks/bench_widget.py [--batches 100 1000] [--batch 1000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import calwatch as cw
from _common import machine_line, three_set_calibrators_monitor
from _common import softmax_rows as _softmax_rows
from calwatch.views import charts, dashboard
from calwatch.views.cards import overview_rows
from calwatch.views.resolution import Resolution, bucket_width
from calwatch.widget import json_rows, view_datasets, warning_rows

K = 10
TARGET_MS = 5.0
SAMPLE = 50  # batches before each checkpoint whose updates are timed


def softmax_rows(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return _softmax_rows(n, K, rng)


def make_monitor() -> cw.Monitor:
    mon: cw.Monitor = three_set_calibrators_monitor(K)
    return mon


def full_rebuild(mon: cw.Monitor, batches: tuple[int, ...]) -> int:
    """One update as the widget computed it before: polars rebuilds of the touched buckets; JSON bytes."""
    with mon.lock:
        detail, width = Resolution.whole(mon.n_batches), bucket_width(mon.n_batches)
        data = view_datasets(mon, tuple(b for b in batches if detail.contains(b)), resolution=detail)
        data["timeline"] = json_rows(dashboard.timeline(mon, batches, width=width))
        cards = {r["key"]: r for r in json_rows(charts.batch_summary(mon, batches))}
        warnings = warning_rows(mon)
        data["overview"] = overview_rows(
            cards.values(),
            calibrators=list(mon.calibrators),
            labels=charts.calibrator_labels(mon),
            warnings=warnings,
        )
        status = mon.status()
        dashboard.what_if_info(mon, None)
    return len(json.dumps({"kind": "upsert", "seq": 0, "data": data})) + len(json.dumps([status, warnings]))


def summary(values: Sequence[float]) -> tuple[float, float]:
    """Median and 95th percentile."""
    return statistics.median(values), float(np.percentile(np.asarray(values), 95))


def run(checkpoints: Sequence[int], batch: int, *, incremental: bool) -> list[dict[str, Any]]:
    """Stream up to the last checkpoint; time the updates of the ``SAMPLE`` batches before each one.

    ``incremental``: the widget's own updates, else the full rebuild (no widget), each in a stream
    of its own (the same data) so that one's garbage and threads do not slow the other down.
    """
    mon = make_monitor()
    results: list[dict[str, Any]] = []
    sampling = False
    if incremental:
        widget = mon.widget()
        sizes: list[int] = []
        widget.send = lambda content, buffers=None: sizes.append(len(json.dumps(content)))  # type: ignore[method-assign]
        widget._window_due = lambda: False  # type: ignore[method-assign]  # the panels are timed on their own

        def record(batches: tuple[int, ...]) -> None:
            if sampling:
                results.append({"batches": mon.n_batches, "ms": widget.kernel_ms[-1], "bytes": sizes[-1]})

        mon.subscribe(record)  # after the widget's listener
    else:

        def rebuild(batches: tuple[int, ...]) -> None:
            if batches and sampling:
                t = time.perf_counter()
                size = full_rebuild(mon, batches)
                results.append(
                    {"batches": mon.n_batches, "ms": 1000 * (time.perf_counter() - t), "bytes": size}
                )

        mon.subscribe(rebuild)
    rng = np.random.default_rng(1)
    previous: tuple[range, np.ndarray] | None = None
    for b in range(max(checkpoints)):
        P, y = softmax_rows(batch, rng)
        ids = range(b * batch, (b + 1) * batch)
        sampling = any(c - SAMPLE <= b < c for c in checkpoints)
        mon.observe(probs=P, ids=ids)
        if previous is not None:
            mon.label(*previous)
        previous = (ids, y)
        if not sampling:
            continue
        # The window panels after this batch and its predecessor's labels (a refresh, at most
        # every 0.5 s, sees a few such batches at a time).
        t = time.perf_counter()
        if incremental:
            with mon.lock:
                widget._window_data()
        else:
            dashboard.reliability(mon)
            dashboard.set_by_class(mon)
        results.append({"batches": b + 1, "window": True, "ms": 1000 * (time.perf_counter() - t)})
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--batch", type=int, default=1_000)
    args = parser.parse_args(argv)
    loadavg = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        f"widget kernel ms per update (observe or label), K = {K}, 3 set calibrators, default shift "
        f"detectors, {args.batch:,} rows per batch, labels one batch late, window 100,000 rows"
    )
    print(machine_line(loadavg))
    checkpoints = sorted(args.batches)
    runs = {
        "before (full rebuild)": run(checkpoints, args.batch, incremental=False),
        "after (incremental)": run(checkpoints, args.batch, incremental=True),
    }
    print(f"{'batches':>8} {'':<22} {'median ms':>10} {'p95 ms':>8} {'KB/update':>10} {'target':>8}")
    for n in checkpoints:
        for label, results in runs.items():
            updates = [r for r in results if n - SAMPLE < r["batches"] <= n and "window" not in r]
            median, p95 = summary([r["ms"] for r in updates])
            kb = statistics.median(r["bytes"] for r in updates) / 1024
            verdict = ("PASS" if p95 <= TARGET_MS else "FAIL") if label.startswith("after") else ""
            print(f"{n:>8} {label:<22} {median:>10.2f} {p95:>8.2f} {kb:>10.1f} {verdict:>8}")
        for label, results in runs.items():
            panels = [r["ms"] for r in results if n - SAMPLE < r["batches"] <= n and "window" in r]
            median, p95 = summary(panels)
            print(f"{n:>8} {'window panels ' + label.split()[0]:<22} {median:>10.2f} {p95:>8.2f}")
    print(
        f"(the updates (observe and label) of the last {SAMPLE} batches before each checkpoint; p95 target "
        f"<= {TARGET_MS:g} ms per update. Window panels: reliability and set sizes by class, refreshed "
        "after each of those batches here; a kernel refreshes them at most every 0.5 s.)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
