"""One monitor fed by 1, 2 and 4 producer threads while a labeller and a reader use it.

10⁶ rows in batches of 1,000 (K = 10, LAC + randomised APS + Mondrian-by-label LAC, default
shift detectors), split evenly between the producers; a labeller labels each batch once the
next one has arrived; a reader calls ``summary()``, ``class_coverage()``, ``warnings()`` and
``rows(window=5000)`` in turn, in a loop. Prints rows/s of the producers and the reader's
latency over all four reads (median and p95) while the writes run, next to a single thread
doing the same observe/label calls with no reader (the serial baseline). Calls are serialised
by the monitor's lock, so more producers do not add throughput: what this shows is that they
cost nothing either, and how long a reader waits.

Run: ``python benchmarks/bench_concurrency.py [--rows 1000000] [--batch 1000]``.
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
import time
from collections.abc import Sequence

import numpy as np

import calwatch as cw
from _common import machine_line, three_set_calibrators_monitor
from _common import softmax_rows as _softmax_rows

K = 10


def softmax_rows(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return _softmax_rows(n, K, rng)


def make_monitor() -> cw.Monitor:
    mon: cw.Monitor = three_set_calibrators_monitor(K)
    return mon


def run(producers: int, rows: int, batch: int, *, reader: bool) -> tuple[float, list[float]]:
    """Rows/s of the producers and the reader's call latencies (seconds)."""
    mon = make_monitor()
    n_batches = rows // batch
    data = [softmax_rows(batch, np.random.default_rng(1 + b)) for b in range(min(n_batches, 64))]
    due: queue.Queue[tuple[list[str], np.ndarray] | None] = queue.Queue()
    done = threading.Event()
    latencies: list[float] = []

    def produce(p: int) -> None:
        for b in range(p, n_batches, producers):
            P, y = data[b % len(data)]
            ids = [f"{b}-{i}" for i in range(batch)]
            mon.observe(probs=P, ids=ids)
            due.put((ids, y))

    def label() -> None:
        held = None
        while True:
            item = due.get()
            if item is None:
                break
            if held is not None:
                mon.label(*held)
            held = item
        if held is not None:
            mon.label(*held)

    reads = (mon.summary, mon.class_coverage, mon.warnings, lambda: mon.rows(window=5_000))

    def read() -> None:
        while not done.is_set():
            for call in reads:  # what a notebook user looks at, in turn
                t = time.perf_counter()
                call()
                latencies.append(time.perf_counter() - t)
                time.sleep(0.005)

    labeller = threading.Thread(target=label)
    reader_thread = threading.Thread(target=read)
    labeller.start()
    if reader:
        reader_thread.start()
    start = time.perf_counter()
    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    due.put(None)
    labeller.join()
    elapsed = time.perf_counter() - start
    done.set()
    if reader:
        reader_thread.join()
    assert mon.status()["rows_seen"] == n_batches * batch
    return n_batches * batch / elapsed, latencies


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1_000)
    args = parser.parse_args(argv)
    loadavg = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"{args.rows:,} rows in batches of {args.batch:,}, K = {K}, 3 set calibrators, default detectors")
    print(machine_line(loadavg))
    print(f"{'producers':<22}{'rows/s':>12}{'vs serial':>11}{'reader p50 ms':>15}{'reader p95 ms':>15}")
    serial, _ = run(1, args.rows, args.batch, reader=False)
    print(f"{'1, no reader (serial)':<22}{serial:>12,.0f}{1.0:>11.2f}{'-':>15}{'-':>15}")
    for producers in (1, 2, 4):
        rate, lat = run(producers, args.rows, args.batch, reader=True)
        p50, p95 = (1000 * float(np.percentile(lat, q)) for q in (50, 95))
        print(f"{producers:<22}{rate:>12,.0f}{rate / serial:>11.2f}{p50:>15.1f}{p95:>15.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
