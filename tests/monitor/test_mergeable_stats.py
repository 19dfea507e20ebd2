"""Every kind's batch statistics are a monoid: a batch's statistics are the merge of its parts'.

One real labelled batch (scikit-learn's bundled handwritten digits, a logistic regression trained
on other digits) goes through a monitor with a calibrator of every kind. Hypothesis then splits
the batch's rows into random parts, sends labels in random events (some rows relabelled, some
parts labelled before others, some rows never), and checks that the statistics the monitor
holds for the whole batch equal the merge of the parts' statistics computed by each kind alone,
merged in a random grouping. Counts must be equal; float sums agree to 1e-12 relative.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_diabetes, load_digits
from sklearn.linear_model import LinearRegression, LogisticRegression

import calwatch as cw
from calwatch.engine.selective.calibrator import BaselineSelector
from calwatch.engine.venn_admit.admit import VennAdmit
from calwatch.kinds import KINDS, kind_of
from calwatch.kinds.regression import RegressionBatchStats

BATCH = 240


def _digits():
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order].astype(np.float32) / 16.0, y[order]
    model = LogisticRegression(max_iter=300).fit(X[:700], y[:700])
    logits = model.decision_function(X)
    return X, y, logits


@pytest.fixture(scope="module")
def observed():
    """A monitor with a calibrator of every kind, and one observed, unlabelled real batch."""
    X, y, logits = _digits()
    ref, cal, batch = slice(0, 700), slice(700, 1300), slice(1300, 1300 + BATCH)
    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps-random": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=3),
            "by-class": cw.SplitConformalClassifier(score="lac", alpha=0.2, mondrian="label"),
            "aci": cw.Adaptive(cw.SplitConformalClassifier(score="lac", alpha=0.1)),
            "pac": cw.PACConfidenceSets(epsilon=0.1, delta=0.05),
            "risk": cw.RiskEstimator(),
            "top2-risk": cw.RiskEstimator(method="temperature", top_k=2),
            "selective": BaselineSelector("confidence", coverage=0.7),
            # paper 000's raw Venn rule: this synthetic calibration set is too small for the
            # default Clopper-Pearson rule to admit anything, and this test needs admitted rows
            "admit": VennAdmit(
                alpha=0.2, k=10, kappa=2, weighted=False, bound="venn", epochs=5, progress=False
            ),
        },
        shift=None,
    )
    mon.calibrate(logits=logits[cal], embeddings=X[cal], y=y[cal], reference=(X[ref], logits[ref], y[ref]))
    mon.observe(logits=logits[batch], embeddings=X[batch], ids=list(range(BATCH)))
    kinds = {type(kind_of(c)).__name__ for c in mon.calibrators.values()}
    assert kinds == {type(k).__name__ for k in KINDS if k.task == "classification"}, "every kind is covered"
    summary = mon.summary()
    admit = summary.filter(calibrator="admit")
    assert 0 < admit["admitted_share"][0] < 1 and 1 < admit["mean_set_size"][0] < 10, (
        "admission is not trivial"
    )
    kept = summary.filter(calibrator="selective")["kept_share"][0]
    assert 0 < kept < 1
    return mon, y[batch]


def _bracketing(draw, n):
    """A random way to merge ``n`` ordered parts: a binary tree over them (as nested pairs)."""

    def tree(lo, hi):
        if hi - lo == 1:
            return lo
        cut = draw(st.integers(lo + 1, hi - 1))
        return (tree(lo, cut), tree(cut, hi))

    return tree(0, n)


def _merge_tree(tree, parts):
    if isinstance(tree, int):
        return parts[tree]
    return _merge_tree(tree[0], parts).merge(_merge_tree(tree[1], parts))


@st.composite
def stream_of_labels(draw, n_rows=BATCH, n_classes=10):
    """A split of the rows into parts (some perhaps empty), label events over them, a merge order."""
    n_parts = draw(st.integers(1, 6))
    part_of = np.asarray(draw(st.lists(st.integers(0, n_parts - 1), min_size=n_rows, max_size=n_rows)))
    events = []
    for _ in range(draw(st.integers(0, 5))):
        rows = draw(st.sets(st.integers(0, n_rows - 1), min_size=1, max_size=n_rows))
        wrong = draw(st.booleans())  # a label later corrected: every row of the event gets a relabel
        events.append((np.asarray(sorted(rows)), wrong, draw(st.integers(1, n_classes - 1))))
    return n_parts, part_of, events, _bracketing(draw, n_parts)


def _labels_of(events, y):
    """The label each event gives each of its rows (a wrong one shifted by ``offset``)."""
    return [(rows, (y[rows] + offset) % 10 if wrong else y[rows]) for rows, wrong, offset in events]


def _assert_same(a, b):
    row_a, row_b = a.to_row(), b.to_row()
    assert row_a.keys() == row_b.keys()
    for name, value in row_a.items():
        other = row_b[name]
        if isinstance(value, float) or (isinstance(value, list) and value and isinstance(value[0], float)):
            np.testing.assert_allclose(value, other, rtol=1e-12, atol=1e-12, err_msg=name)
        else:
            assert value == other, name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=stream_of_labels())
def test_a_batch_is_the_merge_of_its_parts_labels_included(observed, stream):
    mon, y = observed
    n_parts, part_of, events, bracketing = stream
    record = mon.batch_records[0]
    saved_stats, saved_labels = copy.deepcopy(record.stats), record.rows.labels.copy()
    saved_counter = mon._stream.rows_labelled
    try:
        for rows, labels in _labels_of(events, y):
            mon.label(rows.tolist(), mon.classes_[labels])
        K = len(mon.classes_)
        for key, cal in mon.calibrators.items():
            kind = kind_of(cal)
            results = kind.results_of(record.rows, key, cal)
            if hasattr(results, "level"):  # the level a batch's sets were taken at lives in its statistics
                results = replace(results, level=saved_stats[key].alpha_level)
            if hasattr(results, "threshold"):
                results = replace(results, threshold=saved_stats[key].threshold)
            parts = []
            for p in range(n_parts):  # a part may hold no row: its statistics are empty()
                rows_p = np.flatnonzero(part_of == p)
                stats = kind.observed(results.take(rows_p), K)
                current = np.full(BATCH, -1)
                for rows, labels in _labels_of(events, y):  # the part sees the events that touch it
                    mine = np.isin(rows, rows_p)
                    rows_e, labels_e = rows[mine], labels[mine]
                    if not rows_e.size:
                        continue
                    delta = kind.labelled(results.take(rows_e), record.rows.probs[rows_e], labels_e)
                    had = current[rows_e] >= 0
                    if had.any():
                        old = rows_e[had]
                        undo = kind.labelled(results.take(old), record.rows.probs[old], current[old], sign=-1)
                        delta = delta.merge(undo)
                    stats = stats.merge(delta)
                    current[rows_e] = labels_e
                parts.append(stats)
            merged = _merge_tree(bracketing, parts) if len(parts) > 1 else parts[0]
            _assert_same(record.stats[key], merged)
            # However the labels came (relabels included), the statistics are those of the final labels.
            final = np.flatnonzero(record.rows.labels >= 0)
            at_once = kind.observed(results, K).merge(
                kind.labelled(results.take(final), record.rows.probs[final], record.rows.labels[final])
            )
            _assert_same(record.stats[key], at_once)
            _assert_same(record.stats[key], kind.stats_type.empty(K).merge(record.stats[key]))
            _assert_same(record.stats[key], record.stats[key].merge(kind.stats_type.empty(K)))
            assert record.stats[key].check(BATCH) == []
    finally:
        record.stats, record.rows.labels[:] = saved_stats, saved_labels
        mon._stream.rows_labelled = saved_counter


@pytest.fixture(scope="module")
def regression_observed():
    X, y = load_diabetes(return_X_y=True)
    model = LinearRegression().fit(X[:200], y[:200])
    mon = cw.Monitor(
        calibrators={
            "mcc": cw.ModularConformalCalibrator(prediction="point", interpolation="random", seed=0)
        },
        task="regression",
        shift=None,
    )
    mon.calibrate(pred=model.predict(X[200:330]), y=y[200:330])
    mon.observe(pred=model.predict(X[330 : 330 + 100]), ids=list(range(100)))
    return mon, y[330:430]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    part_of=st.lists(st.integers(0, 3), min_size=100, max_size=100),
    events=st.lists(st.tuples(st.sets(st.integers(0, 99), min_size=1), st.booleans()), max_size=4),
    data=st.data(),
)
def test_regression_batch_is_the_merge_of_its_parts(regression_observed, part_of, events, data):
    mon, y = regression_observed
    record = mon.batch_records[0]
    saved_stats, saved_y = copy.deepcopy(record.stats), record.rows.regression["y"].copy()
    saved_labels, saved_counter = record.rows.labels.copy(), mon._stream.rows_labelled
    part_of = np.asarray(part_of)
    labelled = [
        (np.asarray(sorted(rows)), y[sorted(rows)] + (7.5 if wrong else 0.0)) for rows, wrong in events
    ]
    try:
        for rows, values in labelled:
            mon.label(rows.tolist(), values)
        cal = mon.calibrators["mcc"]
        kind = kind_of(cal)
        results = kind.results_of(record.rows, "mcc", cal)
        parts = []
        for p in sorted(set(part_of.tolist())):
            rows_p = np.flatnonzero(part_of == p)
            stats = kind.observed(results.take(rows_p), 0)
            current = np.full(100, np.nan)
            for rows, values in labelled:
                mine = np.isin(rows, rows_p)
                rows_e, values_e = rows[mine], values[mine]
                if not rows_e.size:
                    continue
                delta = kind.labelled(results.take(rows_e), None, values_e)
                had = ~np.isnan(current[rows_e])
                if had.any():
                    old = rows_e[had]
                    delta = delta.merge(kind.labelled(results.take(old), None, current[old], sign=-1))
                stats = stats.merge(delta)
                current[rows_e] = values_e
            parts.append(stats)
        merged = _merge_tree(_bracketing(data.draw, len(parts)), parts) if len(parts) > 1 else parts[0]
        whole = record.stats["mcc"]
        assert (whole.n_rows, whole.n_labelled, whole.levels) == (
            merged.n_rows,
            merged.n_labelled,
            merged.levels,
        )
        np.testing.assert_array_equal(whole.pit_counts, merged.pit_counts)
        np.testing.assert_array_equal(whole.covered, merged.covered)
        np.testing.assert_allclose(whole.width_sum, merged.width_sum, rtol=1e-12)
        assert math.isclose(whole.crps_sum, merged.crps_sum, rel_tol=1e-12, abs_tol=1e-9)
        assert whole.merge(RegressionBatchStats.empty()) == whole
    finally:
        record.stats, record.rows.regression["y"][:] = saved_stats, saved_y
        record.rows.labels[:], mon._stream.rows_labelled = saved_labels, saved_counter
