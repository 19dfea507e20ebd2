"""Stream 10 million rows through a Monitor and show that memory stays flat.

Raw rows are kept only for the window (default 100,000 rows); per-batch statistics for the whole
stream. Prints resident memory at checkpoints, the peak RSS, and the throughput.

Run: ``python benchmarks/bench_monitor_memory.py [--rows 10000000] [--batch 1000]``.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import psutil

import calwatch as cw
from _common import softmax_rows


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--window", type=int, default=100_000)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    K = args.classes
    P_cal, y_cal = softmax_rows(20_000, K, rng)
    pool = [softmax_rows(args.batch, K, rng) for _ in range(16)]  # reused: data generation is not measured
    mon = cw.Monitor(
        calibrators={
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
            "lac-by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
        },
        window=args.window,
    )
    mon.calibrate(probs=P_cal, y=y_cal)
    n_batches = args.rows // args.batch
    checkpoints = sorted({n_batches // 100, n_batches // 10, n_batches // 2, n_batches} - {0})
    print(
        f"streaming {n_batches * args.batch:,} rows in {n_batches:,} batches of {args.batch:,}, "
        f"K={K}, 2 calibrators, labels one batch late, window {args.window:,} rows"
    )
    print(f"{'rows':>12} {'RSS MiB':>9} {'rows in window':>15} {'rows/s':>10}")
    base_rss = rss_mib()
    start = time.perf_counter()
    previous: tuple[range, np.ndarray] | None = None
    for b in range(n_batches):
        P, y = pool[b % len(pool)]
        ids = range(b * args.batch, (b + 1) * args.batch)
        mon.observe(probs=P, ids=ids)
        if previous is not None:
            mon.label(*previous)
        previous = (ids, y)
        if b + 1 in checkpoints:
            elapsed = time.perf_counter() - start
            status = mon.status()
            print(
                f"{status['rows_seen']:>12,} {rss_mib():>9.1f} {status['rows_in_window']:>15,} "
                f"{status['rows_seen'] / elapsed:>10,.0f}"
            )
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    summary = mon.summary()
    print(
        f"peak RSS {peak:.1f} MiB (started at {base_rss:.1f} MiB after calibration); "
        f"{elapsed:.1f} s, {n_batches * args.batch / elapsed:,.0f} rows/s; "
        f"summary frame {summary.height:,} rows, {summary.estimated_size() / 2**20:.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
