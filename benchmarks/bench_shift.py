"""Conformal test martingale speed: calwatch's vectorised update vs a pure-Python per-row loop.

Streams ``n_stream`` scores (default 1,000,000) in batches of ``batch`` rows (1,000) after
``n_cal`` calibration scores (10,000) through
:class:`calwatch.engine.shift.detectors.ConformalTestMartingale` (exact smoothed p-values against every
earlier row, simple-jumper martingale, CUSUM and Shiryaev–Roberts, one polars frame per batch),
on one core: the BLAS/OpenMP thread counts are set to 1 before numpy is imported. Scores are
N(0, 1) draws, exchangeable, so the change statistics restart at c = 100 every ~100 rows, the
busiest case for them.

The reference is the straightforward per-row loop in plain Python (``bisect.insort`` into a
sorted list, the three bets updated one row at a time in log space). Its per-row cost grows
with the bag (each insertion moves O(N) list pointers), so it is timed on the first and on the
last ``python_rows`` rows (20,000 each) and its whole-stream rate estimated from the two; its
p-values and martingale must equal calwatch's (1e-12, and 1e-9 in log space) or the run is
broken (exit code 1). Target: calwatch ≥ 500,000 rows/s; a
miss prints FAIL and leaves the exit code 0.

Run: ``python benchmarks/bench_shift.py [--repeats R] [--n-cal N] [--n-stream M] [--batch B]``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import bisect  # noqa: E402
import gc  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

from calwatch.engine.shift.detectors import ConformalTestMartingale  # noqa: E402

FloatArray = npt.NDArray[np.float64]

TARGET_ROWS_PER_S = 500_000
THRESHOLD = 100.0
JUMP = 0.01


def python_loop(
    bag_so_far: FloatArray, stream: FloatArray, rng: np.random.Generator
) -> tuple[list[float], list[float]]:
    """Per-row reference: smoothed p-value, simple jumper, CUSUM and SR; returns p and log S.

    ``bag_so_far`` is every score before ``stream`` (the martingale starts afresh at S = 1).
    """
    bag = sorted(bag_so_far.tolist())
    capital = [1 / 3, 1 / 3, 1 / 3]
    log_s, log_cusum, log_sr = 0.0, 0.0, -math.inf
    log_c = math.log(THRESHOLD)
    p_out, s_out = [], []
    for score in stream.tolist():
        theta = rng.random()
        bisect.insort(bag, score)
        n = len(bag)
        lo, hi = bisect.bisect_left(bag, score), bisect.bisect_right(bag, score)
        p = ((n - hi) + theta * (hi - lo)) / n
        pool = JUMP / 3 * sum(capital)
        bets = [
            ((1 - JUMP) * capital[0] + pool) * (1.5 - p),
            ((1 - JUMP) * capital[1] + pool),
            ((1 - JUMP) * capital[2] + pool) * (0.5 + p),
        ]
        factor = bets[0] + bets[1] + bets[2]
        capital = [bets[0] / factor, bets[1] / factor, bets[2] / factor]
        log_f = math.log(factor)
        log_s += log_f
        log_cusum = log_f + max(0.0, log_cusum)
        # log(1 + R) from log R, without overflow
        grown = 0.0 if log_sr == -math.inf else max(0.0, log_sr) + math.log1p(math.exp(-abs(log_sr)))
        log_sr = log_f + grown
        if log_cusum >= log_c:
            log_cusum = 0.0
        if log_sr >= log_c:
            log_sr = -math.inf
        p_out.append(p)
        s_out.append(log_s)
    return p_out, s_out


def calwatch_stream(
    cal: FloatArray, stream: FloatArray, batch: int, seed: int
) -> tuple[float, FloatArray, FloatArray]:
    """Seconds to fit and stream everything; the p-values and log S (natural log)."""
    gc.collect()
    start = time.perf_counter()
    m = ConformalTestMartingale(threshold=THRESHOLD, jump=JUMP, seed=seed).fit(cal)
    frames = [m.update(stream[i : i + batch]) for i in range(0, stream.shape[0], batch)]
    seconds = time.perf_counter() - start
    p = np.concatenate([f["p_value"].to_numpy() for f in frames])
    log_s = np.concatenate([f["log10_martingale"].to_numpy() for f in frames]) * math.log(10.0)
    return seconds, p, log_s


def main(argv: Sequence[str] | None = None) -> int:
    """Time both, print rows/s and the ratio; 0 unless calwatch disagrees with the loop."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3, help="timed calwatch runs (default 3)")
    parser.add_argument("--n-cal", type=int, default=10_000)
    parser.add_argument("--n-stream", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--python-rows", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.batch < 1 or args.n_cal < 1 or args.n_stream < 1:
        parser.error("--repeats, --batch, --n-cal and --n-stream must be at least 1")
    rng = np.random.default_rng(args.seed)
    cal = rng.normal(size=args.n_cal)
    stream = rng.normal(size=args.n_stream)
    python_rows = min(args.python_rows, args.n_stream)

    # The loop's cost grows with the bag (list insertion moves O(N) pointers): time it on the
    # first rows (bag ≈ n_cal) and on the last rows (bag ≈ n_cal + n_stream); it must agree with
    # calwatch on both (p-values on both, log S from the start, where both begin at S = 1).
    head = stream[:python_rows]
    start = time.perf_counter()
    p_head, s_head = python_loop(cal, head, np.random.default_rng(args.seed))
    python_head = time.perf_counter() - start
    tail_rng = np.random.default_rng(args.seed)
    tail_rng.random(args.n_stream - python_rows)  # θ of the rows before the tail
    before_tail = np.concatenate([cal, stream[: args.n_stream - python_rows]])
    start = time.perf_counter()
    p_tail, _ = python_loop(before_tail, stream[args.n_stream - python_rows :], tail_rng)
    python_tail = time.perf_counter() - start
    seconds = []
    p = log_s = np.empty(0)
    for _ in range(args.repeats):
        elapsed, p, log_s = calwatch_stream(cal, stream, args.batch, args.seed)
        seconds.append(elapsed)
    p_error = max(
        float(np.max(np.abs(p[:python_rows] - np.asarray(p_head)))),
        float(np.max(np.abs(p[args.n_stream - python_rows :] - np.asarray(p_tail)))),
    )
    s_error = float(np.max(np.abs(log_s[:python_rows] - np.asarray(s_head))))
    ok = p_error <= 1e-12 and s_error <= 1e-9

    median = statistics.median(seconds)
    rate = args.n_stream / median
    head_rate, tail_rate = python_rows / python_head, python_rows / python_tail
    # Per-row time grows about linearly with the bag: the whole stream costs the mean of the two.
    python_rate = 2.0 / (1.0 / head_rate + 1.0 / tail_rate)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(
        f"\nConformal test martingale: {args.n_cal:,} calibration + {args.n_stream:,} streamed rows in "
        f"batches of {args.batch:,}, one core (threads = 1); c = {THRESHOLD:g}, J = {JUMP}"
    )
    print(f"numpy {np.__version__}, python {sys.version.split()[0]}, load average (1/5/15 min): {load}")
    header = f"{'implementation':<44} {'seconds':>9} {'rows/s':>12}"
    print(header)
    print("-" * len(header))
    print(f"{f'calwatch, whole stream (median of {args.repeats})':<44} {median:9.3f} {rate:12,.0f}")
    print(f"{f'pure Python loop, first {python_rows:,} rows':<44} {python_head:9.3f} {head_rate:12,.0f}")
    print(f"{f'pure Python loop, last {python_rows:,} rows':<44} {python_tail:9.3f} {tail_rate:12,.0f}")
    whole = "pure Python loop, whole stream (estimated)"
    print(f"{whole:<44} {args.n_stream / python_rate:9.1f} {python_rate:12,.0f}")
    verdict = "PASS" if rate >= TARGET_ROWS_PER_S else "FAIL"
    print(
        f"calwatch / Python loop: {rate / python_rate:.1f}× over the stream "
        f"({rate / head_rate:.1f}× against its fastest, first rows); "
        f"target ≥ {TARGET_ROWS_PER_S:,} rows/s: {verdict}"
    )
    print(
        f"agreement with the loop: max |Δp| = {p_error:.1e} (first and last rows), "
        f"max |Δ log S| = {s_error:.1e} (first rows) ({'ok' if ok else 'MISMATCH'})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
