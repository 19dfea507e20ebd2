"""The monitor's rows/s with its default shift detectors, against the same monitor without any.

The issue's setting: 1,000-row batches, labels one batch late, calibrators ``aps`` and ``lac``
Mondrian-by-label, Dirichlet(0.3) probabilities, at K = 10, 100 and 1,000 classes. Each
configuration streams the same pre-generated batches with ``shift=None`` and with
``shift="default"`` (a label-free confidence martingale, a conformity martingale and a
coverage-drop test per calibrator, and a coverage-drop test per class for the Mondrian one),
alternating, and keeps the median of the repeats. Targets: the defaults cost at most 2× at
K = 10 and 1.5× at K = 100 and 1,000. A second table splits the default detectors' time per
batch.

Run: ``python benchmarks/bench_detectors.py [--batches 200] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import calwatch as cw
from _common import machine_line, median

TARGETS = {10: 2.0, 100: 1.5, 1000: 1.5}
BATCH = 1_000


def make_rows(K: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    P = rng.dirichlet(np.full(K, 0.3), size=n)
    y = (P.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1)
    return P, np.minimum(y, K - 1)


def make_monitor(K: int, shift: str | None, calibration: tuple[np.ndarray, np.ndarray]) -> cw.Monitor:
    mon = cw.Monitor(
        calibrators={
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
        },
        shift=shift,
    )
    return mon.calibrate(probs=calibration[0], y=calibration[1])


def stream(mon: cw.Monitor, data: list[tuple[np.ndarray, np.ndarray]], n_batches: int) -> float:
    """Seconds to observe ``n_batches`` batches, labelling each once the next has arrived."""
    previous = None
    start = time.perf_counter()
    for b in range(n_batches):
        P, y = data[b % len(data)]
        ids = np.arange(b * BATCH, (b + 1) * BATCH)
        mon.observe(probs=P, ids=ids)
        if previous is not None:
            mon.label(*previous)
        previous = (ids, y)
    return time.perf_counter() - start


def time_detectors(mon: cw.Monitor) -> dict[str, float]:
    """Wrap each detector's observe/labelled to add up its time (seconds) by detector name."""
    spent: dict[str, float] = defaultdict(float)
    assert mon.shift_watch is not None
    for detector in mon.shift_watch.detectors:
        for method in ("observe", "labelled"):
            inner = getattr(detector, method)

            def timed(*args: Any, _inner: Callable[..., Any] = inner, _name: str = detector.name) -> Any:
                start = time.perf_counter()
                out = _inner(*args)
                spent[_name] += time.perf_counter() - start
                return out

            setattr(detector, method, timed)
    return spent


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=200, help="batches per run (default 200)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--classes", type=int, nargs="*", default=[10, 100, 1000])
    args = parser.parse_args(argv)
    loadavg = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        f"Default shift detectors vs none: {args.batches} batches of {BATCH:,} rows, labels one batch "
        "late, aps + lac by label, Dirichlet(0.3)"
    )
    print(machine_line(loadavg))
    print(
        f"{'K':>6}{'none rows/s':>14}{'default rows/s':>16}{'ratio':>8}{'target':>8}"
        f"{'label ms none':>15}{'label ms default':>18}  result"
    )
    splits: dict[int, dict[str, float]] = {}
    for K in args.classes:
        rng = np.random.default_rng(K)
        calibration = make_rows(K, max(10_000, 20 * K), rng)
        data = [make_rows(K, BATCH, rng) for _ in range(16)]
        make_monitor(K, "default", calibration)  # compile (or load) the detector kernels once
        seconds: dict[str | None, list[float]] = {None: [], "default": []}
        label_ms: dict[str | None, list[float]] = {None: [], "default": []}
        for _ in range(args.repeats):
            for shift in (None, "default"):
                mon = make_monitor(K, shift, calibration)
                seconds[shift].append(stream(mon, data, args.batches))
                ids = np.arange(args.batches * BATCH, (args.batches + 1) * BATCH)
                mon.observe(probs=data[0][0], ids=ids)
                observed = time.perf_counter()
                mon.label(ids, data[0][1])
                label_ms[shift].append(1000 * (time.perf_counter() - observed))
        none_rate = args.batches * BATCH / median(seconds[None])
        default_rate = args.batches * BATCH / median(seconds["default"])
        ratio = none_rate / default_rate
        verdict = "ok" if ratio <= TARGETS.get(K, 1.5) else "FAIL"
        print(
            f"{K:>6}{none_rate:>14,.0f}{default_rate:>16,.0f}{ratio:>8.2f}{TARGETS.get(K, 1.5):>8.1f}"
            f"{median(label_ms[None]):>15.2f}{median(label_ms['default']):>18.2f}  {verdict}"
        )
        mon = make_monitor(K, "default", calibration)
        spent = time_detectors(mon)
        stream(mon, data, args.batches)
        splits[K] = {name: 1000 * s / args.batches for name, s in spent.items()}
    print("\nDefault detectors' time per 1,000-row batch (ms), by detector")
    names = sorted({name for split in splits.values() for name in split})
    print(f"{'detector':<38}" + "".join(f"{'K=' + str(K):>10}" for K in splits))
    for name in names:
        print(f"{name:<38}" + "".join(f"{splits[K].get(name, float('nan')):>10.3f}" for K in splits))
    totals = {K: sum(split.values()) for K, split in splits.items()}
    print(f"{'all detectors':<38}" + "".join(f"{totals[K]:>10.3f}" for K in splits))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
