"""What the ``bench_*.py`` benchmarks share: timing, medians, the command line, the machine line."""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Seconds one call of ``fn`` takes (after a garbage collection), and its result."""
    gc.collect()
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def median(values: list[float]) -> float:
    """Median of the timings, ``nan`` when there are none."""
    return statistics.median(values) if values else math.nan


def fmt_ms(seconds: float, digits: int = 1) -> str:
    """Seconds as a right-aligned millisecond figure, ``—`` for ``nan``."""
    return "—" if math.isnan(seconds) else f"{1000 * seconds:8.{digits}f}"


def size_parser(description: str | None) -> argparse.ArgumentParser:
    """A parser with the options every speed benchmark takes (repeats and problem size)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (default 5)")
    parser.add_argument("--n-cal", type=int, default=20_000)
    parser.add_argument("--n-test", type=int, default=200_000)
    parser.add_argument("--n-classes", type=int, default=10)
    return parser


def parse_size_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, check ``--repeats`` and record the load average at the start (``args.loadavg``)."""
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    args.loadavg = os.getloadavg() if hasattr(os, "getloadavg") else None
    return args


def machine_line(loadavg: tuple[float, float, float] | None) -> str:
    """numpy and Python versions, CPUs and the load average, printed under every table title."""
    load = " / ".join(f"{x:.2f}" for x in loadavg) if loadavg else "n/a"
    return (
        f"numpy {np.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load average at start (1/5/15 min): {load}"
    )


def softmax_rows(n: int, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of a softmax over ``2·N(0, 1)`` logits and labels drawn from them (calibrated)."""
    logits = rng.normal(size=(n, K)) * 2.0
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1)
    return P, y


def three_set_calibrators_monitor(K: int = 10) -> Any:
    """A monitor with LAC, randomised APS and Mondrian-by-label LAC, calibrated on 10,000 rows."""
    import calwatch as cw

    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=1),
            "by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
        }
    )
    P, y = softmax_rows(10_000, K, np.random.default_rng(0))
    return mon.calibrate(probs=P, y=y)


def rss_split_mib(pid: int) -> tuple[float, float]:
    """A process's resident anonymous and file-backed memory (MiB), from ``/proc/<pid>/status``.

    Anonymous pages (the heap, numpy's arrays) can only leave memory through swap; file-backed
    ones (the monitor's paged history columns, shared libraries) the kernel reclaims under
    pressure. NaN where the split is not available (not Linux).
    """
    found = {"RssAnon": math.nan, "RssFile": math.nan}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in found:
                    found[key] = int(value.split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return found["RssAnon"], found["RssFile"]
