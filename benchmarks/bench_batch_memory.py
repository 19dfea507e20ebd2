"""Memory kept per batch by a long stream, with and without the live widget attached.

A monitor (K classes, LAC + randomised APS, default shift detectors, default window and row
log) streams batches of 1,000 rows with labels one batch late, once on its own and once with
its dashboard widget model attached (``Monitor.widget()``; no front end: the widget's messages
are serialised to JSON and dropped, as a kernel's comm would send them). For each run it prints

- the kernel's resident memory (RSS) slope in MiB per 10^4 batches, a least-squares line through
  RSS sampled every ``--sample`` batches after a warm-up of ``--warmup`` batches (the window fills
  and the first settled records go to columns during the warm-up), and the same for its
  anonymous part (``RssAnon``: the heap; the history columns that :mod:`calwatch.core.paged` keeps in
  file mappings are file-backed, reclaimable pages and count in RSS but not here). Run it with
  ``CALWATCH_PAGED_FROM_BYTES=999999999999`` to keep every column in the heap, as before;
- then, with :mod:`tracemalloc` tracing from ``--pretrace`` batches before the first snapshot
  (what the window, the row log's buffer and the recent records hold has turned over), the
  memory allocated and still held after ``--traced`` more batches minus that held at the first
  snapshot, per batch, by the ``file:line`` that allocated it (the top ``--top`` lines) and in
  total: what each batch leaves behind. 1,600 batches is a whole number of the row log's parts
  (100 batches) and of settling's chunks (64), so both snapshots hold the same bounded buffers.

Reading the lines: a line with many blocks per batch is Python objects kept per batch; one with
~0 blocks and many bytes is a container that grew during the traced batches (a column's or a
list's reallocation, counted whole because its previous buffer was not traced), whose cost
per batch is its row width. Bounded caches that fill over thousands of batches (the widget's
interval cache, its sent rows between two bucket-width doublings) also show here and in the RSS
slope of a short run. RSS includes what the allocator keeps and the spare room of growing
columns, so its slope is noisy at small N; the traced bytes are exact for Python objects and
numpy arrays.

Run: ``python benchmarks/bench_batch_memory.py [--batches 20000] [--classes 5] [--no-widget]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np
import psutil

import calwatch as cw
from _common import machine_line, rss_split_mib, softmax_rows

BATCH = 1_000


def rss_mib() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def anon_mib() -> float:
    """Resident anonymous memory (MiB): the heap, without the paged history columns' file pages."""
    return rss_split_mib(os.getpid())[0]


def make_monitor(K: int) -> cw.Monitor:
    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=1),
        }
    )
    P, y = softmax_rows(10_000, K, np.random.default_rng(0))
    mon.calibrate(probs=P, y=y)
    return mon


class Stream:
    """Batches from a pool of 16 (data generation is not measured), labels one batch late."""

    def __init__(self, mon: cw.Monitor, K: int) -> None:
        rng = np.random.default_rng(1)
        self.mon = mon
        self.pool = [softmax_rows(BATCH, K, rng) for _ in range(16)]
        self.b = 0
        self.previous: tuple[range, np.ndarray] | None = None

    def step(self) -> None:
        P, y = self.pool[self.b % len(self.pool)]
        ids = range(self.b * BATCH, (self.b + 1) * BATCH)
        self.mon.observe(probs=P, ids=ids)
        if self.previous is not None:
            self.mon.label(*self.previous)
        self.previous = (ids, y)
        self.b += 1


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` against ``xs``."""
    return float(np.polyfit(np.asarray(xs), np.asarray(ys), 1)[0]) if len(xs) > 1 else float("nan")


def run(
    K: int, batches: int, warmup: int, sample: int, pretrace: int, traced: int, top: int, widget: bool
) -> dict[str, Any]:
    mon = make_monitor(K)
    sent: list[int] = [0, 0]
    if widget:
        w = mon.widget()

        def send(content: Any, buffers: Any = None) -> None:
            sent[0] += 1
            sent[1] += len(json.dumps(content))

        w.send = send  # type: ignore[method-assign]
    stream = Stream(mon, K)
    start = time.perf_counter()
    xs: list[float] = []
    ys: list[float] = []
    anon: list[float] = []
    for b in range(batches):
        stream.step()
        if b + 1 >= warmup and (b + 1 - warmup) % sample == 0:
            gc.collect()
            xs.append(b + 1)
            ys.append(rss_mib())
            anon.append(anon_mib())
    elapsed = time.perf_counter() - start
    tracemalloc.start(1)
    for _ in range(pretrace):  # what the window, the row log's buffer and the recent records hold turns over
        stream.step()
    gc.collect()
    before = tracemalloc.take_snapshot()
    for _ in range(traced):
        stream.step()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diffs = after.filter_traces(ignore).compare_to(before.filter_traces(ignore), "lineno")
    diffs.sort(key=lambda d: d.size_diff, reverse=True)
    total = sum(d.size_diff for d in diffs)
    return {
        "widget": widget,
        "seconds": elapsed,
        "rss_start": ys[0] if ys else float("nan"),
        "rss_end": ys[-1] if ys else float("nan"),
        "slope": 1e4 * slope(xs, ys),
        "anon_start": anon[0] if anon else float("nan"),
        "anon_end": anon[-1] if anon else float("nan"),
        "anon_slope": 1e4 * slope(xs, anon),
        "bytes_per_batch": total / traced,
        "blocks_per_batch": sum(d.count_diff for d in diffs) / traced,
        "top": [(d.traceback[0], d.size_diff / traced, d.count_diff / traced) for d in diffs[:top]],
        "messages": sent[0],
    }


def short(frame: tracemalloc.Frame) -> str:
    path = frame.filename
    for marker in ("calwatch" + os.sep, "site-packages" + os.sep, "lib" + os.sep + "python"):
        if marker in path:
            path = path[path.index(marker) :]
            break
    return f"{path}:{frame.lineno}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20_000, help="batches streamed for the RSS slope")
    parser.add_argument("--warmup", type=int, default=2_000, help="batches before the first RSS sample")
    parser.add_argument("--sample", type=int, default=500, help="batches between RSS samples")
    parser.add_argument("--widget-batches", type=int, default=4_000, help="--batches with the widget")
    parser.add_argument("--pretrace", type=int, default=400, help="batches traced before the first snapshot")
    parser.add_argument("--traced", type=int, default=1_600, help="batches between the snapshots (a period)")
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--top", type=int, default=15, help="allocation lines printed")
    parser.add_argument("--no-widget", action="store_true", help="only the run without the widget")
    parser.add_argument("--widget-only", action="store_true", help="only the run with the widget")
    args = parser.parse_args(argv)
    loadavg = os.getloadavg()
    print(
        f"memory per batch: batches of {BATCH:,} rows, K = {args.classes}, "
        "LAC + randomised APS, default detectors, labels one batch late"
    )
    print(machine_line(loadavg))
    modes = [False] if args.no_widget else [True] if args.widget_only else [False, True]
    for widget in modes:
        batches = args.widget_batches if widget else args.batches
        r = run(args.classes, batches, args.warmup, args.sample, args.pretrace, args.traced, args.top, widget)
        print()
        print(
            f"{'with' if widget else 'without'} widget, {batches:,} batches: {r['seconds']:.1f} s; "
            f"RSS {r['rss_start']:.1f} -> "
            f"{r['rss_end']:.1f} MiB after the warm-up, slope {r['slope']:.2f} MiB per 10^4 batches; "
            f"anonymous {r['anon_start']:.1f} -> {r['anon_end']:.1f} MiB, "
            f"slope {r['anon_slope']:.2f} MiB per 10^4 batches"
            + (f"; {r['messages']:,} widget messages" if widget else "")
        )
        print(
            f"  traced over {args.traced:,} batches: {r['bytes_per_batch']:,.0f} bytes and "
            f"{r['blocks_per_batch']:.1f} blocks retained per batch; top lines (bytes, blocks per batch):"
        )
        for frame, size, count in r["top"]:
            print(f"  {size:>9,.1f} {count:>7.2f}  {short(frame)}")
    print(f"\nload average at the end (1/5/15 min): {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
