"""A Monitor fed batch by batch, labels one batch late, agrees with the engine (ALGORITHMS.md §8).

Data: the diamonds ``cut`` pool (``calwatch.datasets.diamonds_cut_task(seed=0)``, 32,364 rows,
5 classes). One split drawn with ``numpy.random.default_rng(20240602)``: n = 5,000 calibration
rows, the other 27,364 streamed in batches of 2,500 (the last one 2,364); α = 0.1. The labels
of batch ``b`` arrive right after batch ``b + 1`` is observed; the last batch's at the end.

Checks: every batch's counts in ``summary()``, ``set_size_counts()`` and ``class_coverage()``
equal what the engine gives for the same rows directly (exact integers), labels are pending
until they arrive, and the whole stream's coverage is within the derived tolerance of 1 − α.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest

import calwatch as cw
from calwatch.datasets import diamonds_cut_task

pytestmark = pytest.mark.slow

SEED = 20240602
N_CAL = 5_000
BATCH = 2_500
ALPHA = 0.1
Z = 3.0

CALIBRATORS: dict[str, dict[str, Any]] = {
    "lac": {"score": "lac"},
    "aps": {"score": "aps", "randomized": False},  # the sets of before issue 17: top class added
    "aps-randomized": {"score": "aps", "randomized": True, "top_class": "added", "seed": 7},
    "lac-by-label": {"score": "lac", "mondrian": "label"},
}


def split_sd(n: int, m: int) -> float:
    """sd of one split's observed coverage: Beta(n+1−l, l) of the threshold, binomial of m rows.

    Coverage given the n calibration scores is Beta(n+1−l, l), l = ⌊(n+1)α⌋, mean μ = 1 −
    l/(n+1), variance μ(1−μ)/(n+2); m test rows add binomial variance μ(1−μ)/m.
    """
    mu = 1.0 - math.floor((n + 1) * ALPHA + 1e-9) / (n + 1)
    return math.sqrt(mu * (1.0 - mu) * (1.0 / (n + 2) + 1.0 / m))


def _batches(m: int) -> list[npt.NDArray[np.intp]]:
    return [np.arange(start, min(start + BATCH, m)) for start in range(0, m, BATCH)]


@pytest.fixture(scope="module")
def streamed() -> dict[str, Any]:
    task = diamonds_cut_task(seed=0)
    names = np.asarray(task.classes)
    order = np.random.default_rng(SEED).permutation(task.probs.shape[0])
    cal, test = order[:N_CAL], order[N_CAL:]
    P_cal, y_cal = task.probs[cal], task.labels[cal]
    P_test, y_test, ids_test = task.probs[test], task.labels[test], task.rows[test]

    mon = cw.Monitor(
        calibrators={key: cw.SplitConformalClassifier(alpha=ALPHA, **kw) for key, kw in CALIBRATORS.items()},
        classes=list(task.classes),
    )
    mon.calibrate(probs=P_cal, y=names[y_cal])
    pending_checks: list[bool] = []
    label_reports = []
    batches = _batches(P_test.shape[0])
    for b, rows in enumerate(batches):
        mon.observe(probs=P_test[rows], ids=ids_test[rows], name=f"batch {b}")
        fresh = mon.summary((b,))
        pending_checks.append(
            bool((fresh["n_labelled"] == 0).all() and (fresh["n_pending"] == len(rows)).all())
            and fresh["coverage"].null_count() == fresh.height
        )
        if b > 0:
            previous = batches[b - 1]
            label_reports.append(mon.label(ids_test[previous], names[y_test[previous]]))
    label_reports.append(mon.label(ids_test[batches[-1]], names[y_test[batches[-1]]]))

    # The engine, directly, on the same batches with the same row ids (a randomised calibrator
    # draws each row's uniform from its id, as the monitor's copy does).
    direct: dict[str, list[npt.NDArray[np.bool_]]] = {}
    for key, kw in CALIBRATORS.items():
        engine = cw.SplitConformalClassifier(alpha=ALPHA, **kw).fit(P_cal, y_cal)
        direct[key] = [engine.predict_sets(P_test[rows], ids=ids_test[rows]) for rows in batches]
    return {
        "monitor": mon,
        "direct": direct,
        "batches": batches,
        "y_test": y_test,
        "classes": task.classes,
        "pending_checks": pending_checks,
        "label_reports": label_reports,
    }


def test_labels_are_pending_until_they_arrive(streamed: dict[str, Any]) -> None:
    assert all(streamed["pending_checks"])
    batches = streamed["batches"]
    for b, report in enumerate(streamed["label_reports"]):
        assert (report.matched, report.unmatched, report.relabelled) == (len(batches[b]), 0, 0)
        assert report.batches == (b,)
    status = streamed["monitor"].status()
    assert status["rows_seen"] == status["rows_labelled"] == 27_364
    assert status["rows_pending"] == 0
    assert status["labels_unmatched"] == 0


def test_batch_counts_match_the_engine_exactly(streamed: dict[str, Any]) -> None:
    mon, direct, batches, y_test = (
        streamed["monitor"],
        streamed["direct"],
        streamed["batches"],
        streamed["y_test"],
    )
    summary = mon.summary()
    assert summary.height == len(batches) * len(CALIBRATORS)
    sizes = mon.set_size_counts()
    for key, per_batch in direct.items():
        mine = summary.filter(pl.col("calibrator") == key).sort("batch")
        covered, sizes_direct = [], []
        for rows, sets in zip(batches, per_batch, strict=True):
            covered.append(int(sets[np.arange(len(rows)), y_test[rows]].sum()))
            sizes_direct.append(np.bincount(sets.sum(axis=1), minlength=sets.shape[1] + 1))
        assert mine["n_labelled"].to_list() == [len(rows) for rows in batches]
        assert mine["n_covered"].to_list() == covered, key
        got_sizes = sizes.filter(pl.col("calibrator") == key)
        for b, expected in enumerate(sizes_direct):
            rows_b = got_sizes.filter(pl.col("batch") == b)
            counts = np.zeros_like(expected)
            counts[rows_b["size"].to_numpy()] = rows_b["count"].to_numpy()
            assert counts.tolist() == expected.tolist(), (key, b)


def test_class_coverage_matches_the_engine_exactly(streamed: dict[str, Any]) -> None:
    mon, direct, batches, y_test = (
        streamed["monitor"],
        streamed["direct"],
        streamed["batches"],
        streamed["y_test"],
    )
    classes = list(streamed["classes"])
    table = mon.class_coverage(by_batch=False)
    K = len(classes)
    for key, per_batch in direct.items():
        covered = np.zeros(K, dtype=np.int64)
        for rows, sets in zip(batches, per_batch, strict=True):
            hit = sets[np.arange(len(rows)), y_test[rows]]
            covered += np.bincount(y_test[rows][hit], minlength=K)
        labelled = np.bincount(y_test, minlength=K)
        mine = table.filter(pl.col("calibrator") == key)
        by_class = dict(
            zip(mine["class"].to_list(), zip(mine["n_labelled"], mine["n_covered"], strict=True), strict=True)
        )
        assert by_class == {c: (int(labelled[k]), int(covered[k])) for k, c in enumerate(classes)}, key


def test_stream_coverage_is_within_the_binomial_tolerance(streamed: dict[str, Any]) -> None:
    summary = streamed["monitor"].summary()
    totals = summary.group_by("calibrator").agg(pl.col("n_covered").sum(), pl.col("n_labelled").sum())
    coverage = {
        row["calibrator"]: row["n_covered"] / row["n_labelled"] for row in totals.iter_rows(named=True)
    }
    m = int(totals["n_labelled"][0])
    # One split: sd = sqrt(μ(1−μ)(1/(n+2) + 1/m)) = 0.0046 for n = 5,000, m = 27,364; 3 sd ≈ 0.014.
    tol = Z * split_sd(N_CAL, m)
    for key, value in coverage.items():
        # Every calibrator's sets contain a conformal set: one-sided in general.
        assert value >= 1 - ALPHA - tol, (key, value, tol)
    # LAC's sets rarely need the added top class: two-sided (see test_conformal_coverage.py).
    assert abs(coverage["lac"] - (1 - ALPHA)) <= tol, coverage["lac"]


def test_mondrian_stream_covers_every_class(streamed: dict[str, Any]) -> None:
    mon = streamed["monitor"]
    table = mon.class_coverage(by_batch=False).filter(pl.col("calibrator") == "lac-by-label")
    n_cal = mon.calibration_["class_counts"]
    assert table.height == len(n_cal) == 5
    # Per class, a split conformal problem with n_c calibration and m_c test rows:
    # sd = sqrt(μ(1−μ)(1/(n_c+2) + 1/m_c)), one-sided 3 sd (≈ 0.08 for Fair, n_c ≈ 150).
    for row in table.iter_rows(named=True):
        n_c, m_c = n_cal[row["class"]], row["n_labelled"]
        assert row["coverage"] >= 1 - ALPHA - Z * split_sd(n_c, m_c), (row, n_c)
