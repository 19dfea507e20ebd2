"""Prediction logs with slice columns, and the in-memory monitor a table path must equal, slices included.

A monitor calibrated with ``meta=`` counts its batches per slice (``mon.slices()``, the
``SliceStore``'s epochs). A table path given the same columns by name (``observe_table(...,
meta=[...])``, Spark, Dask) must leave the counts that ``observe(meta=)`` bucket by bucket and
``label`` leave: integers, so exactly (:func:`assert_same_slices`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

import calwatch as cw
from tests.scale.logs import DIFFERENT_BY_DESIGN, Task, calibrators, categories_of, prob_names

#: The slice columns of :func:`slice_meta`: text with nulls, integers, booleans, floats with NaN.
META = ["carrier", "hour", "flag", "dist"]


def slice_meta(rng: np.random.Generator, n: int) -> pl.DataFrame:
    """Slice columns for ``n`` rows (random, so slices differ in coverage only by chance)."""
    carrier = rng.choice(["AA", "B6", "DL", "UA"], n).astype(object)
    carrier[rng.uniform(size=n) < 0.05] = None
    return pl.DataFrame(
        {
            "carrier": pl.Series(carrier.tolist(), dtype=pl.String),
            "hour": rng.integers(5, 23, n),
            "flag": rng.uniform(size=n) < 0.3,
            "dist": np.where(rng.uniform(size=n) < 0.05, np.nan, rng.gamma(2.0, 300.0, n)),
        }
    )


def slicing_monitor(task: Task) -> cw.Monitor:
    """Every table calibrator (:func:`~tests.scale.logs.calibrators`), calibrated with slice columns.

    With two calibrators by slice besides (``groups_from``): Mondrian by ``carrier``, and
    group-conditional over ``carrier`` and ``flag``, whose groups the kernel derives from the
    table's slice columns as ``observe(meta=)`` does from the batch's.
    """
    by_slice = {
        "by_carrier": cw.SplitConformalClassifier(score="lac", alpha=0.2, groups_from="carrier"),
        "groups": cw.GroupConditionalConformal(score="aps", alpha=0.2, groups_from=["carrier", "flag"]),
    }
    mon = cw.Monitor(calibrators={**calibrators(), **by_slice}, shift=None, window=10**9)
    meta = slice_meta(np.random.default_rng(17), task.P_cal.shape[0])
    mon.calibrate(probs=task.P_cal, y=task.y_cal, categories=categories_of(task.P_cal), meta=meta)
    return mon


def replay_sliced(mon: cw.Monitor, frame: pl.DataFrame) -> None:
    """Observe ``frame`` in memory bucket by bucket (sorted) with its slice columns, then its labels."""
    K = len(mon.classes_)
    for bucket in sorted(frame.get_column("bucket").unique().to_list()):
        part = frame.filter(pl.col("bucket") == bucket)
        mon.observe(
            probs=part.select(prob_names(K)).to_numpy(), ids=part["id"].to_list(),
            categories=part["cat"].to_numpy(), name=str(bucket), meta=part.select(META),
        )  # fmt: skip
        if "y" in part.columns:
            known = part.filter(pl.col("y").is_not_null())
            if known.height:
                mon.label(known["id"].to_list(), known["y"].to_numpy())


def slice_view(mon: cw.Monitor) -> tuple[Any, ...]:
    """What a refused call must leave as it was: summary, status, slices and the store's epochs."""
    store = mon._slices
    assert store is not None
    return (
        mon.summary().drop(DIFFERENT_BY_DESIGN, strict=False),
        mon.status(),
        mon.slices(min_rows=1),
        (list(store.starts), list(store.lengths), [e.copy() for e in store.epochs]),
    )


def assert_unchanged(mon: cw.Monitor, before: tuple[Any, ...]) -> None:
    """``mon`` shows what :func:`slice_view` saw (its slice counts included)."""
    after = slice_view(mon)
    assert_frame_equal(after[0], before[0], check_exact=True)
    assert after[1] == before[1]
    assert_frame_equal(after[2], before[2], check_exact=True)
    assert after[3][:2] == before[3][:2]
    assert all(np.array_equal(a, b) for a, b in zip(after[3][2], before[3][2], strict=True))


def assert_same_slices(table: cw.Monitor, memory: cw.Monitor) -> None:
    """Both monitors' slices and slice stores agree exactly (counts are integers)."""
    assert_frame_equal(table.slices(min_rows=1), memory.slices(min_rows=1), check_exact=True)
    a, b = table._slices, memory._slices
    assert a is not None and b is not None
    assert (a.starts, a.lengths) == (b.starts, b.lengths)
    for x, y in zip(a.epochs, b.epochs, strict=True):
        np.testing.assert_array_equal(x, y)
