"""Binned calibration error, Brier, selective versions, Eq. 16 threshold, curves (paper 002 App. B.1)."""

import math

import numpy as np
import pytest

from calwatch.engine.metrics import selective_calibration_error as reexported
from calwatch.engine.metrics.calibration import (
    DEFAULT_COVERAGES,
    binned_calibration_error,
    brier_score,
    calibration_error,
    coverage_threshold,
    default_bins,
    equal_mass_bin_index,
    keep_count,
    reduce_probabilities,
    selective_auc,
    selective_brier_score,
    selective_calibration_error,
    selective_curve,
)

# Seven rows, three bins by rank, as numpy.array_split cuts 7 into 3: sizes 3, 2, 2.
#   sorted r: .10 .20 .30 | .50 .60 | .80 .90
#   outcome:   0   1   0  |  1   0  |  1   1
#   ȳ_k:        1/3       |   1/2   |   1
#   r̄_k:        .2        |   .55   |  .85
#   |gap|:      2/15      |   .05   |  .15
R7 = np.array([0.5, 0.1, 0.9, 0.3, 0.6, 0.2, 0.8])
Y7 = np.array([1, 0, 1, 0, 0, 1, 1])
GAPS7 = np.array([2 / 15, 0.05, 0.15])
SIZES7 = np.array([3, 2, 2])


def test_binned_error_hand_computed_three_norms():
    l1 = float(np.dot(SIZES7, GAPS7) / 7)  # (3·2/15 + 2·.05 + 2·.15)/7 = .8/7
    l2 = math.sqrt(float(np.dot(SIZES7, GAPS7**2) / 7))
    assert l1 == pytest.approx(0.8 / 7, abs=1e-15)
    assert binned_calibration_error(R7, Y7, norm="l1", bins=3) == pytest.approx(l1, abs=1e-15)
    assert binned_calibration_error(R7, Y7, norm="l2", bins=3) == pytest.approx(l2, abs=1e-15)
    assert binned_calibration_error(R7, Y7, norm="linf", bins=3) == pytest.approx(0.15, abs=1e-15)
    # one bin: |4/7 − 3.4/7| = .6/7
    assert binned_calibration_error(R7, Y7, norm="l1", bins=1) == pytest.approx(0.6 / 7, abs=1e-15)
    # more bins than rows: one row per bin, ℓ1 = mean |y − r|
    assert binned_calibration_error(R7, Y7, norm="l1", bins=50) == pytest.approx(
        np.mean(np.abs(Y7 - R7)), abs=1e-15
    )


def test_bin_sizes_follow_array_split():
    for n, m in ((7, 3), (10, 4), (30, 15), (1000, 15), (5, 5)):
        expected = np.concatenate(
            [np.full(p.shape[0], k) for k, p in enumerate(np.array_split(np.arange(n), m))]
        )
        np.testing.assert_array_equal(equal_mass_bin_index(n, m), expected)


def test_default_bin_count_is_min_15_and_n_over_25():
    assert [default_bins(n) for n in (1, 24, 25, 49, 50, 374, 375, 10**6)] == [1, 1, 1, 1, 2, 14, 15, 15]
    # n = 50 -> 2 bins of 25: first half r = .2 with 5 positives, second r = .8 with 25
    r = np.r_[np.full(25, 0.2), np.full(25, 0.8)]
    y = np.r_[np.ones(5), np.zeros(20), np.ones(25)]
    assert binned_calibration_error(r, y, norm="linf") == pytest.approx(0.2, abs=1e-15)  # |1 − .8|
    assert binned_calibration_error(r, y, norm="l1") == pytest.approx(0.1, abs=1e-15)  # (0 + .2)/2


def test_ties_are_cut_by_input_order():
    # four equal confidences, two bins: the first two rows in input order form bin 1
    r = np.full(4, 0.5)
    assert binned_calibration_error(r, [1, 1, 0, 0], norm="linf", bins=2) == pytest.approx(0.5)
    assert binned_calibration_error(r, [1, 0, 1, 0], norm="linf", bins=2) == pytest.approx(0.0)


def test_binary_and_top_label_reduction():
    P2 = np.column_stack([1 - R7, R7])
    assert calibration_error(P2, Y7, norm="linf", bins=3) == pytest.approx(0.15, abs=1e-15)
    # three classes: r = max p, outcome = 1{y = ŷ}; row 3 ties .4/.4 -> ŷ = 0
    P3 = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.4, 0.4, 0.2], [0.1, 0.1, 0.8]])
    y3 = np.array([0, 2, 1, 2])
    r, o = reduce_probabilities(P3, y3)
    np.testing.assert_allclose(r, [0.7, 0.5, 0.4, 0.8], atol=1e-15)  # rows renormalised: 1 ulp
    assert o.tolist() == [1.0, 0.0, 0.0, 1.0]
    # one bin: |2/4 − 2.4/4| = .1 ; Brier: (.09 + .25 + .16 + .04)/4 = .135
    assert calibration_error(P3, y3, norm="l2") == pytest.approx(0.1, abs=1e-15)
    assert brier_score(P3, y3) == pytest.approx(0.135, abs=1e-15)
    # a binary model read as top-label: r = max(p, 1 − p), outcome = correct
    r_top, o_top = reduce_probabilities(P2, Y7, kind="top-label")
    np.testing.assert_allclose(r_top, np.maximum(R7, 1 - R7))
    assert o_top.tolist() == ((R7 > 0.5).astype(int) == Y7).astype(float).tolist()  # tie .5/.5 -> class 0
    with pytest.raises(ValueError, match="2 columns"):
        calibration_error(P3, y3, kind="binary")


def test_selective_versions_filter_then_rebin():
    P2 = np.column_stack([1 - R7, R7])
    kept = np.array([True, False, True, False, True, True, True])  # r = .5 .9 .6 .2 .8
    expected = binned_calibration_error(R7[kept], Y7[kept], norm="l2")
    assert selective_calibration_error(P2, Y7, kept) == expected
    assert reexported(P2, Y7, kept, norm="linf") == binned_calibration_error(R7[kept], Y7[kept], norm="linf")
    # one bin of 5 (y = 1 1 0 1 1): ȳ = 4/5, r̄ = 3/5 -> .2
    assert selective_calibration_error(P2, Y7, kept, norm="linf") == pytest.approx(0.2, abs=1e-15)
    assert selective_brier_score(P2, Y7, kept) == pytest.approx(
        np.mean((R7[kept] - Y7[kept]) ** 2), abs=1e-15
    )
    assert selective_calibration_error(P2, Y7, np.ones(7, bool)) == calibration_error(P2, Y7)
    with pytest.raises(ValueError, match="keeps no row"):
        selective_calibration_error(P2, Y7, np.zeros(7, bool))
    with pytest.raises(TypeError, match="boolean"):
        selective_calibration_error(P2, Y7, kept.astype(int))
    with pytest.raises(ValueError, match="length 7"):
        selective_brier_score(P2, Y7, kept[:5])


@pytest.mark.parametrize("seed", range(5))
def test_threshold_attains_coverage_on_its_rows_and_is_the_largest(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    scores = rng.integers(0, 20, size=n).astype(float) / 7  # many ties
    for xi in np.r_[DEFAULT_COVERAGES, 0.333, 0.999, 1e-6]:
        tau = coverage_threshold(scores, xi)
        share = np.mean(scores >= tau)
        assert share >= xi  # Eq. 16's constraint, on the tuning rows themselves
        above = scores[scores > tau]
        if above.size:  # the next larger candidate τ' breaks the constraint: τ̂ is the sup
            assert np.mean(scores >= above.min()) < xi


def test_threshold_hand_computed_and_rounding():
    s = np.array([0.9, 0.1, 0.5, 0.7, 0.3])
    assert [coverage_threshold(s, xi) for xi in (0.2, 0.4, 0.6, 0.61, 0.8, 1.0)] == [
        0.9,
        0.7,
        0.5,
        0.3,
        0.3,
        0.1,
    ]
    assert keep_count(0.6, 5) == 3  # 0.6·5 = 3.0000000000000004 in floating point
    assert keep_count(0.7, 10) == 7 and keep_count(0.05, 20) == 1
    with pytest.raises(ValueError, match=r"coverage must be in \(0, 1\]"):
        coverage_threshold(s, 0.0)
    with pytest.raises(ValueError, match=r"coverage must be in \(0, 1\]"):
        coverage_threshold(s, 1.5)


def test_curve_of_constant_scores_is_the_full_model_and_auc_is_trapezoid():
    rng = np.random.default_rng(0)
    p1 = rng.uniform(size=500)
    y = (rng.uniform(size=500) < p1**1.5).astype(int)  # miscalibrated
    P = np.column_stack([1 - p1, p1])
    xi, values = selective_curve(P, y, np.zeros(500))
    np.testing.assert_array_equal(xi, DEFAULT_COVERAGES)
    np.testing.assert_allclose(values, calibration_error(P, y))
    assert selective_auc(xi, values) == pytest.approx(0.95 * calibration_error(P, y), rel=1e-12)
    # an oracle-like selector keeps the rows with the smallest |p − p^1.5| first
    xi, better = selective_curve(P, y, -np.abs(p1 - p1**1.5), norm="linf")
    assert better[0] < values[0]
    xb, brier = selective_curve(P, y, np.zeros(500), metric="brier", coverages=[1.0, 0.5])
    assert xb.tolist() == [0.5, 1.0] and brier == pytest.approx(brier_score(P, y))
    assert selective_auc([0.0, 1.0, 0.5], [0.0, 2.0, 1.0]) == pytest.approx(1.0)


def test_curve_thresholds_on_the_evaluated_rows():
    # scores 4 3 2 1, ξ = .5: keep rows 0 and 1 only; Brier (.04 + .04)/2
    P = np.array([[0.2, 0.8], [0.8, 0.2], [0.4, 0.6], [0.7, 0.3]])
    _, v = selective_curve(
        P, np.array([1, 0, 0, 1]), np.array([4.0, 3.0, 2.0, 1.0]), metric="brier", coverages=[0.5]
    )
    assert v[0] == pytest.approx(0.04)


def test_input_errors_name_the_argument():
    with pytest.raises(ValueError, match="norm must be one of"):
        binned_calibration_error(R7, Y7, norm="l3")
    with pytest.raises(ValueError, match="outcome must hold 0/1"):
        binned_calibration_error(R7, Y7 * 2)
    with pytest.raises(ValueError, match=r"confidence must lie in \[0, 1\]"):
        binned_calibration_error(R7 + 1, Y7)
    with pytest.raises(ValueError, match="outcome has 6 entries"):
        binned_calibration_error(R7, Y7[:6])
    with pytest.raises(ValueError, match="bins must be an integer"):
        binned_calibration_error(R7, Y7, bins=0)
    with pytest.raises(ValueError, match="kind must be one of"):
        calibration_error(np.column_stack([1 - R7, R7]), Y7, kind="top")
    with pytest.raises(ValueError, match="rows must sum to 1"):
        brier_score(np.array([[0.5, 0.6]]), [0])
    with pytest.raises(ValueError, match="metric must be"):
        selective_curve(np.array([[0.5, 0.5]]), [0], [1.0], metric="acc")
    with pytest.raises(ValueError, match="coverages must be"):
        selective_curve(np.array([[0.5, 0.5]]), [0], [1.0], coverages=[0.0, 0.5])
    with pytest.raises(ValueError, match="scores contains NaN"):
        coverage_threshold([np.nan, 1.0], 0.5)
    with pytest.raises(ValueError, match="at least two coverages"):
        selective_auc([0.5], [0.1])
