"""Prediction logs from real tasks, and the in-memory monitor that a table path must equal.

The scale paths (``observe_table``, Spark, Dask) promise the statistics of an in-memory monitor
that observed the same rows bucket by bucket with ``observe`` and took the same labels with
``label``: these helpers build both sides and compare them (integer counts exactly, float sums
to 1e-12 relative, since the order of additions differs).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

import calwatch as cw

FloatArray = npt.NDArray[np.float64]
#: Columns that legitimately differ: when a batch was observed, and whether its rows are in memory.
DIFFERENT_BY_DESIGN = ("observed_at", "in_window")


@dataclass(frozen=True)
class Task:
    """A real classification task: calibration and test probabilities with their labels."""

    name: str
    P_cal: FloatArray
    y_cal: npt.NDArray[np.intp]
    P: FloatArray
    y: npt.NDArray[np.intp]

    @property
    def K(self) -> int:  # noqa: N802 - the number of classes is K throughout
        return int(self.P.shape[1])


@functools.cache
def real_task(name: str = "digits") -> Task:
    """scikit-learn's bundled ``digits`` (K = 10) or ``breast_cancer`` (K = 2), logistic regression."""
    from sklearn.datasets import load_breast_cancer, load_digits

    X, y = (load_digits if name == "digits" else load_breast_cancer)(return_X_y=True)
    return fitted_task(name, X, y, seed=7)


def fitted_task(name: str, X: Any, y: Any, *, seed: int) -> Task:
    """A logistic regression fitted on a third of the shuffled rows; the rest halved: calibration, test."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    order = np.random.default_rng(seed).permutation(len(y))
    X, y = X[order], y[order]
    n_fit = len(y) // 3
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=0.05)).fit(
        X[:n_fit], y[:n_fit]
    )
    P = model.predict_proba(X[n_fit:])
    half = P.shape[0] // 2
    rest = y[n_fit:]
    return Task(name, P[:half], rest[:half], P[half:], rest[half:])


def calibrators(*, category: bool = True) -> dict[str, Any]:
    """Every calibrator a table takes: LAC, APS (the default: randomised, ``u`` keyed by row id)
    marginal and by label, LAC by category, a risk estimator."""
    out: dict[str, Any] = {
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
        "aps-by-label": cw.SplitConformalClassifier(score="aps", alpha=0.2, mondrian="label"),
        "risk": cw.RiskEstimator(method="temperature"),
    }
    if category:
        out["lac-by-cat"] = cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="category", kappa=5)
    return out


def calibrated(task: Task, *, category: bool = True, shift: Any = None) -> cw.Monitor:
    """A monitor with :func:`calibrators` fitted on the task's calibration rows."""
    mon = cw.Monitor(calibrators=calibrators(category=category), shift=shift, window=10**9)
    cats = categories_of(task.P_cal) if category else None
    mon.calibrate(probs=task.P_cal, y=task.y_cal, categories=cats)
    return mon


def categories_of(P: FloatArray) -> npt.NDArray[np.str_]:
    """A Mondrian category from the model's confidence: ``"sure"`` or ``"unsure"``."""
    return np.where(P.max(axis=1) > 0.8, "sure", "unsure")


def log_frame(
    P: FloatArray, ids: Sequence[Hashable], buckets: Sequence[Any], labels: Sequence[Any] | None = None,
    *, list_column: bool = False,
) -> pl.DataFrame:  # fmt: skip
    """A prediction log: ``id``, ``bucket``, ``p0..p{K-1}`` (or one list column ``probs``), ``cat``, ``y``."""
    columns: dict[str, Any] = {"id": list(ids), "bucket": list(buckets)}
    if list_column:
        columns["probs"] = pl.Series("probs", P.tolist(), dtype=pl.List(pl.Float64))
    else:
        columns |= {f"p{k}": P[:, k] for k in range(P.shape[1])}
    columns["cat"] = categories_of(P)
    if labels is not None:
        columns["y"] = pl.Series("y", list(labels), dtype=pl.Int64)
    return pl.DataFrame(columns)


def prob_names(K: int) -> list[str]:
    return [f"p{k}" for k in range(K)]


def replay(mon: cw.Monitor, frame: pl.DataFrame, *, label: bool = True) -> None:
    """Observe ``frame`` in memory, bucket by bucket in sorted order (its known labels at once)."""
    K = len(mon.classes_)
    for bucket in sorted(frame.get_column("bucket").unique().to_list()):
        part = frame.filter(pl.col("bucket") == bucket)
        P = (
            part.select(prob_names(K)).to_numpy()
            if "p0" in part.columns
            else np.asarray(part["probs"].to_list())
        )
        mon.observe(probs=P, ids=part["id"].to_list(), categories=part["cat"].to_numpy(), name=str(bucket))
        if label and "y" in part.columns:
            known = part.filter(pl.col("y").is_not_null())
            if known.height:
                mon.label(known["id"].to_list(), known["y"].to_numpy())


def assert_same_statistics(table: cw.Monitor, memory: cw.Monitor) -> None:
    """Both monitors' summaries, class coverage and counters agree (floats to 1e-12 relative)."""
    for view in ("summary", "class_coverage"):
        a = getattr(table, view)().drop(DIFFERENT_BY_DESIGN, strict=False)
        b = getattr(memory, view)().drop(DIFFERENT_BY_DESIGN, strict=False)
        assert a.columns == b.columns, view
        assert a.height == b.height, view
        for name in a.columns:
            left, right = a[name], b[name]
            if left.dtype.is_float():
                x, y = left.to_numpy(), right.to_numpy()
                assert np.array_equal(np.isnan(x), np.isnan(y)), (view, name)
                ok = ~np.isnan(x)
                np.testing.assert_allclose(x[ok], y[ok], rtol=1e-12, atol=1e-15, err_msg=f"{view}.{name}")
            else:
                assert left.to_list() == right.to_list(), (view, name)
    sa, sb = table.status(), memory.status()
    for key in ("rows_seen", "rows_labelled", "rows_pending", "batches", "labels_unmatched"):
        assert sa[key] == sb[key], (key, sa[key], sb[key])


def bucket_values(kind: str, codes: np.ndarray) -> list[Any]:
    """Bucket values of one type for bucket codes: integers, strings or dates."""
    if kind == "int":
        return [int(c) for c in codes]
    if kind == "str":
        return [f"day-{int(c)}" for c in codes]
    return [date(2026, 3, 1) + timedelta(days=int(c)) for c in codes]
