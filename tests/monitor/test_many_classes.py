"""K = 1,000 classes, some with 0, 1, 5 or 50 calibration rows, end to end with the defaults.

A class too rare for a Mondrian threshold or a per-class test is handled by rule (full sets for
that class; no test, with a notice), never by an exception from a default the user did not ask
for: calibrate, observe, label late, save and load, and the dashboard's data all go through.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import calwatch as cw
from calwatch.widget import dashboard_datasets, view_datasets, view_state

K = 1000
COUNTS = {0: 100, 1: 300, 5: 300, 50: 300}  # calibration rows per class -> how many classes


def _model_outputs(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    logits = rng.normal(size=(y.size, K)).astype(np.float32)
    logits[np.arange(y.size), y] += 4.0
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def calibration() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000)
    per_class = np.concatenate([np.full(n, c) for c, n in COUNTS.items()])
    rng.shuffle(per_class)  # which class gets how many calibration rows
    y = np.repeat(np.arange(K), per_class)
    return _model_outputs(y, rng), y, per_class


def test_thousand_classes_with_rare_ones_end_to_end(calibration, tmp_path):
    P_cal, y_cal, per_class = calibration
    mon = cw.Monitor(
        calibrators={
            "by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=3),
            "raps": cw.SplitConformalClassifier(score="raps", alpha=0.1),
        }
    )
    mon.calibrate(probs=P_cal, y=y_cal)

    # Classes without a per-class test are named, not refused: 0, 1 and 5 rows give no finite
    # threshold at α = 0.1 (⌈(n+1)·0.9⌉ > n), 50 rows do.
    untested = np.flatnonzero(per_class < 9)
    notices = mon.notices()
    by_class_rules = notices.filter(notices["calibrator"] == "by-class").rows(named=True)
    full_sets, no_test = sorted(by_class_rules, key=lambda r: r["detector"] is not None)
    assert full_sets["detector"] is None and full_sets["classes"] == len(untested)  # in every set
    assert no_test["detector"] == "by-class: class coverage drop" and no_test["classes"] == len(untested)
    assert "fewer than 9 calibration rows" in no_test["message"]
    assert notices.height == 2  # the marginal calibrators apply no such rule
    assert mon.status()["classes_untested"] == len(untested)

    rng = np.random.default_rng(7)
    ids_and_labels = []
    for b in range(4):
        y = rng.choice(K, size=400)
        ids = np.arange(b * 400, (b + 1) * 400)
        mon.observe(probs=_model_outputs(y, rng), ids=ids)
        ids_and_labels.append((ids, y))
    for ids, y in ids_and_labels[::-1]:  # labels late, newest batch first
        report = mon.label(ids, y)
        assert report.matched == 400
    summary = mon.summary()
    assert summary["n_labelled"].sum() == 3 * 1600
    # A class with no calibration row always gets its full share of the sets: covered.
    with pytest.raises(ValueError, match="batches must be a tuple of batch numbers"):
        mon.class_coverage("by-class")  # type: ignore[arg-type]
    by_class = mon.class_coverage(by_batch=False).filter(pl.col("calibrator") == "by-class")
    rare = by_class.filter(pl.col("class").is_in([str(c) for c in untested.tolist()]))
    assert rare["n_labelled"].sum() > 0 and (rare["n_covered"] == rare["n_labelled"]).all()

    path = tmp_path / "k1000"
    mon.save(path)
    back = cw.Monitor.load(path)
    assert back.summary().equals(summary)
    assert back.notices().equals(notices)
    assert back.status() == mon.status()
    # The dashboard's data builds at K = 1,000 (the views draw what the monitor holds).
    data = view_datasets(back, dashboard_data=True) | dashboard_datasets(back)
    assert data["batches"] and data["overview"]
    lines = view_state(back)["_notices"]  # the widget's status line says why, on hover
    assert len(lines) == 2 and all(line.startswith("by-class: ") for line in lines)
    # and the stream goes on after loading, the per-class test included
    y = rng.choice(K, size=400)
    back.observe(probs=_model_outputs(y, rng), ids=np.arange(1600, 2000), y=y)
    assert back.status()["rows_labelled"] == 2000
