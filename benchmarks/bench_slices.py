"""What slice columns cost: ``observe`` (and ``label``) with 10 slice columns against none, in one run.

Two monitors of the same calibrators (LAC, randomised APS and Mondrian-by-label LAC, K = 10,
calibrated on 10,000 rows) take the same batches of 1,000 rows, alternately, so both see the
same load on the machine; one was calibrated with 10 slice columns (``meta=``: 4 text columns of
3 to 100 values, 1 boolean, 1 date and 4 numeric ones; 95 cells of single values and 45 pairs
within the budget, see :mod:`calwatch.stream.slices`) and takes each batch's 10 columns as a
polars frame; the other takes none. Each batch's labels come one batch late (``label``). Printed:
the median time of ``observe`` and of ``label`` per batch for each, their ratio, and what the
slice counts hold at the end and would hold at 10⁷ rows (their epochs grow as ``log₂`` of the
batches). Run with and without the default shift detectors (which cost both monitors the same).

Run: ``python benchmarks/bench_slices.py [--batches 300] [--batch 1000]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import statistics
import time
from collections.abc import Sequence

import numpy as np
import polars as pl

import calwatch as cw
from _common import machine_line, softmax_rows

K = 10
#: observe with 10 slice columns (45 pairs, 3 calibrators) should cost at most this many times
#: observe without, detectors off (the strictest comparison: with the default detectors both
#: monitors pay for them too and the ratio is smaller). About 1.4 ms a 1,000-row batch: encoding
#: the columns (~0.7 ms, a third of it the text and date columns) and counting 55 tables' cells
#: (~0.7 ms, four ``bincount`` over 55,000 cells).
TARGET_RATIO = 3.0


def slice_columns(n: int, rng: np.random.Generator) -> pl.DataFrame:
    """Ten slice columns of the kinds a user slices by: text, a flag, a date, numbers."""
    start = dt.date(2013, 1, 1)
    return pl.DataFrame({
        "carrier": rng.choice([f"C{i}" for i in range(16)], n),
        "origin": rng.choice(["EWR", "JFK", "LGA"], n),
        "dest": rng.choice([f"D{i:03d}" for i in range(100)], n),
        "segment": rng.choice(["new", "returning", "staff", "partner", "trial"], n),
        "mobile": rng.uniform(size=n) < 0.4,
        "day": [start + dt.timedelta(days=int(d)) for d in rng.integers(0, 365, n)],
        "hour": rng.integers(5, 23, n),
        "distance": rng.gamma(2.0, 400.0, n),
        "age": np.where(rng.uniform(size=n) < 0.02, np.nan, rng.normal(40, 12, n)),
        "score": rng.uniform(size=n),
    })  # fmt: skip


def calibrators() -> dict[str, object]:
    return {
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=1),
        "by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
    }


def run(batches: int, batch: int, shift: str | None) -> dict[str, float]:
    """Median seconds per batch of observe and label, with and without slices, and the counts' size."""
    rng = np.random.default_rng(0)
    P_cal, y_cal = softmax_rows(10_000, K, rng)
    meta_cal = slice_columns(10_000, rng)
    plain = cw.Monitor(calibrators=calibrators(), shift=shift)  # type: ignore[arg-type]
    plain.calibrate(probs=P_cal, y=y_cal)
    sliced = cw.Monitor(calibrators=calibrators(), shift=shift)  # type: ignore[arg-type]
    sliced.calibrate(probs=P_cal, y=y_cal, meta=meta_cal)
    pool = [(*softmax_rows(batch, K, rng), slice_columns(batch, rng)) for _ in range(16)]
    times: dict[str, list[float]] = {"observe": [], "observe_sliced": [], "label": [], "label_sliced": []}
    held: tuple[range, np.ndarray] | None = None
    for b in range(batches):
        P, y, meta = pool[b % len(pool)]
        ids = range(b * batch, (b + 1) * batch)
        order = [(plain, "", None), (sliced, "_sliced", meta)]
        if b % 2:
            order.reverse()  # neither monitor always goes first
        for mon, suffix, columns in order:
            start = time.perf_counter()
            if columns is None:
                mon.observe(probs=P, ids=ids)
            else:
                mon.observe(probs=P, ids=ids, meta=columns)
            times["observe" + suffix].append(time.perf_counter() - start)
            if held is not None:
                start = time.perf_counter()
                mon.label(*held)
                times["label" + suffix].append(time.perf_counter() - start)
        held = (ids, y)
    store = sliced._slices
    assert store is not None
    held_bytes = sum(e.nbytes for e in store.epochs)
    per_epoch = store.epochs[0].nbytes
    epochs_at_1e7 = max_epochs(10_000_000 // batch)
    # the slice counts agree with the monitor's own: every row and label counted once per column
    frame = sliced.slices(by="origin", min_rows=1)
    labelled = int(frame.filter(pl.col("calibrator") == "lac")["n_labelled"].sum())
    assert labelled == sliced.status()["rows_labelled"]
    return {
        **{name: statistics.median(values) for name, values in times.items()},
        "cells": float(store.encoding.n_cells),
        "pairs": float(len(store.encoding.pairs)),
        "epochs": float(len(store.epochs)),
        "held_mib": held_bytes / 2**20,
        "mib_at_1e7": epochs_at_1e7 * per_epoch / 2**20,
    }


def max_epochs(n_batches: int, per_length: int = 4) -> int:
    """Epochs the slice counts keep at most after ``n_batches`` batches (lengths 1, 2, 4, …)."""
    return per_length * (math.floor(math.log2(max(n_batches, 1))) + 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1_000)
    args = parser.parse_args(argv)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    size = f"{args.batches} batches of {args.batch:,} rows, K = {K}"
    print(f"observe and label, 10 slice columns vs none: {size}")
    print(machine_line(load))
    header = (
        f"{'detectors':<10} {'observe ms':>11} {'+slices ms':>11} {'ratio':>6} {'label ms':>9} "
        f"{'+slices ms':>11} {'ratio':>6}  observe ratio ≤ {TARGET_RATIO}× without detectors"
    )
    print(header)
    for shift in (None, "default"):
        r = run(args.batches, args.batch, shift)
        ratio = r["observe_sliced"] / r["observe"]
        label_ratio = r["label_sliced"] / r["label"]
        verdict = ("PASS" if ratio <= TARGET_RATIO else "FAIL") if shift is None else ""
        observe = f"{1e3 * r['observe']:>11.2f} {1e3 * r['observe_sliced']:>11.2f} {ratio:>6.2f}"
        label = f"{1e3 * r['label']:>9.2f} {1e3 * r['label_sliced']:>11.2f} {label_ratio:>6.2f}"
        print(f"{shift or 'none':<10} {observe} {label}  {verdict}")
    print(
        f"slice counts: {int(r['cells']):,} cells ({int(r['pairs'])} pairs), 3 calibrators; "
        f"{int(r['epochs'])} epochs held after {args.batches} batches = {r['held_mib']:.2f} MiB; "
        f"at 10^7 rows ({10_000_000 // args.batch:,} batches) at most {max_epochs(10_000_000 // args.batch)} "
        f"epochs = {r['mib_at_1e7']:.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
