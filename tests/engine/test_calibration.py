"""Calibration maps: temperature, Platt, histogram binning, isotonic (hand-computed cases)."""

import math

import numpy as np
import pytest

from calwatch.engine.calibration.binning import equal_mass_edges, top_k_confidence, top_k_correct
from calwatch.engine.calibration.maps import (
    HistogramBinning,
    IsotonicCalibration,
    PlattScaling,
    TemperatureScaling,
    fit_sigmoid,
    platt_targets,
    temperature_nll,
)
from calwatch.engine.conformal.scores import aps_scores, descending_order
from calwatch.engine.errors import NotFittedError

from ..synthetic import softmax_data


# ------------------------------------------------------------------------ temperature
def test_temperature_hand_computed_two_over_ln2():
    # Logits [2,0],[0,2],[2,0] with labels 0,1,1: rows 1-2 are right with p = σ(2/T), row 3
    # is wrong with p = 1 − σ(2/T). NLL(T) = −[2 log s + log(1 − s)], s = σ(2/T); its
    # derivative in s, −2/s + 1/(1 − s), vanishes at s = 2/3, so σ(2/T) = 2/3, i.e.
    # 2/T = log((2/3)/(1/3)) = ln 2 and T = 2/ln 2 = 2.8853900817779268.
    logits = np.array([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    ts = TemperatureScaling().fit(logits, np.array([0, 1, 1]))
    assert ts.temperature_ == pytest.approx(2.0 / math.log(2.0), rel=1e-5)
    expected_nll = -(2.0 * math.log(2.0 / 3.0) + math.log(1.0 / 3.0)) / 3.0
    assert ts.nll_ == pytest.approx(expected_nll, rel=1e-10)
    probs = ts.transform(logits)
    np.testing.assert_allclose(probs[0], [2.0 / 3.0, 1.0 / 3.0], rtol=1e-5)


def test_temperature_fast_objective_matches_reference_nll():
    P, y = softmax_data(2_000, K=6, seed=1, scale=3.0)
    logits = np.log(P) * 1.7  # an over-confident model: T ≈ 1.7
    ts = TemperatureScaling().fit(logits, y)
    assert ts.nll_ == pytest.approx(temperature_nll(logits, y, ts.temperature_), rel=1e-12)
    assert ts.temperature_ == pytest.approx(1.7, rel=0.1)
    for t in (ts.temperature_ * 0.98, ts.temperature_ * 1.02):  # a minimum, not just a value
        assert temperature_nll(logits, y, t) > ts.nll_


# ---------------------------------------------------------------------------- Platt
def test_platt_targets_are_platts_smoothed_labels():
    t = platt_targets(np.array([True, True, True, False]))
    np.testing.assert_allclose(t, [4 / 5, 4 / 5, 4 / 5, 1 / 3])  # (3+1)/(3+2), 1/(1+2)


def test_platt_binary_hand_computed():
    # Four rows at p₁ = 1/3 (log-odds −ln 2) with one positive, four at p₁ = 2/3 (+ln 2) with
    # three. N₊ = N₋ = 4: Platt targets 5/6 and 1/6, so the mean targets per group are
    # (5/6 + 3/6)/4 = 1/3 and (15/6 + 1/6)/4 = 2/3. Two groups, two parameters: the fit is
    # exact, σ(−a ln2 + b) = 1/3 and σ(a ln2 + b) = 2/3, i.e. a = 1, b = 0.
    P = np.array([[2 / 3, 1 / 3]] * 4 + [[1 / 3, 2 / 3]] * 4)
    y = np.array([1, 0, 0, 0, 1, 1, 1, 0])
    platt = PlattScaling().fit(P, y)
    np.testing.assert_allclose(platt.coef_, [1.0], atol=1e-9)
    np.testing.assert_allclose(platt.intercept_, [0.0], atol=1e-9)
    np.testing.assert_allclose(platt.transform(P), P, atol=1e-9)
    # The same rows as binary logits [0, z₁]: the score is z₁ − z₀, the same log-odds.
    logits = np.column_stack([np.zeros(8), np.log(P[:, 1] / P[:, 0])])
    by_logits = PlattScaling(input="logits").fit(logits, y)
    np.testing.assert_allclose(by_logits.coef_, [1.0], atol=1e-9)


def test_fit_sigmoid_matches_scikit_learn():
    from sklearn.calibration import _sigmoid_calibration

    rng = np.random.default_rng(4)
    scores = rng.normal(size=3_000)
    positive = rng.uniform(size=3_000) < 1 / (1 + np.exp(-(1.5 * scores - 0.4)))
    a, b = fit_sigmoid(scores, platt_targets(positive))
    sk_a, sk_b = _sigmoid_calibration(scores, positive.astype(int))  # σ(−(a·s + b)) convention
    assert a == pytest.approx(-sk_a, rel=1e-5)
    assert b == pytest.approx(-sk_b, rel=1e-5, abs=1e-6)


def test_fit_sigmoid_separable_data_stays_finite():
    a, b = fit_sigmoid(np.array([-2.0, -1.0, 1.0, 2.0]), platt_targets(np.array([False, False, True, True])))
    assert math.isfinite(a) and math.isfinite(b) and a > 0


def test_fit_sigmoid_constant_scores():
    a, b = fit_sigmoid(np.full(4, 0.3), np.array([0.2, 0.2, 0.8, 0.8]))
    assert a == 0.0 and b == pytest.approx(0.0)


def test_platt_multiclass_one_vs_rest_renormalised():
    P, y = softmax_data(3_000, K=4, seed=2, scale=2.0)
    sharp = np.exp(np.log(P) * 2.0)
    sharp /= sharp.sum(axis=1, keepdims=True)  # over-confident by a factor 2 in log space
    platt = PlattScaling().fit(sharp, y)
    assert platt.coef_.shape == (4,) and platt.intercept_.shape == (4,)
    # each slope ≈ 1/2 undoes it (observed .475-.482); on the calibrated P the slopes are ≈ 1
    assert np.all((platt.coef_ > 0.4) & (platt.coef_ < 0.6))
    assert np.all(np.abs(PlattScaling().fit(P, y).coef_ - 1.0) < 0.1)
    out = platt.transform(sharp)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-12)
    assert np.mean(out.argmax(axis=1) == sharp.argmax(axis=1)) > 0.97  # OvR may reorder a few
    by_logits = PlattScaling(input="logits").fit(np.log(sharp), y)
    assert by_logits.transform(np.log(sharp)).shape == (3_000, 4)


def test_platt_errors():
    with pytest.raises(ValueError, match="input must be one of"):
        PlattScaling(input="scores")  # type: ignore[arg-type]
    with pytest.raises(NotFittedError, match="not fitted"):
        PlattScaling().transform(np.array([[0.5, 0.5]]))
    with pytest.raises(ValueError, match="must hold probabilities"):  # logits given as probs
        PlattScaling().fit(np.array([[2.0, 0.0], [0.0, 2.0]]), np.array([0, 1]))
    with pytest.raises(ValueError, match="rows must sum to 1"):
        PlattScaling().fit(np.array([[0.2, 0.2], [0.5, 0.5]]), np.array([0, 1]))
    with pytest.raises(ValueError, match="NaN or inf"):
        PlattScaling(input="logits").fit(np.array([[np.inf, 0.0], [0.0, 1.0]]), np.array([0, 1]))
    platt = PlattScaling().fit(np.array([[0.6, 0.4], [0.3, 0.7]]), np.array([0, 1]))
    with pytest.raises(ValueError, match="fitted on 2 classes"):
        platt.transform(np.array([[0.2, 0.3, 0.5]]))
    with pytest.raises(ValueError, match="labels outside"):
        PlattScaling().fit(np.array([[0.6, 0.4], [0.3, 0.7]]), np.array([0, 2]))


# ---------------------------------------------------------------------- top-k helpers
def test_top_k_confidence_is_bitwise_the_aps_score_of_rank_k():
    P, _ = softmax_data(500, K=7, seed=3)
    P[:50, :3] = P[:50, [0]]  # exact ties
    P /= P.sum(axis=1, keepdims=True)
    order = descending_order(P)
    aps = aps_scores(P)
    for k in (1, 2, 3, 6):
        at_rank_k = aps[np.arange(500), order[:, k - 1]]
        assert np.array_equal(top_k_confidence(P, k), at_rank_k)


def test_top_k_correct_breaks_ties_by_class_index():
    P = np.array([[0.4, 0.4, 0.2], [0.4, 0.4, 0.2], [0.2, 0.3, 0.5]])
    assert top_k_correct(P, np.array([0, 1, 1]), 1).tolist() == [True, False, False]
    assert top_k_correct(P, np.array([0, 1, 1]), 2).tolist() == [True, True, True]


# -------------------------------------------------------------------- histogram binning
def test_equal_mass_edges_hand_computed():
    # sorted .35 .4 | .5 .6 | .7 .9: edges at (.4 + .5)/2 = .45 and (.6 + .7)/2 = .65
    np.testing.assert_allclose(equal_mass_edges(np.array([0.9, 0.35, 0.6, 0.4, 0.7, 0.5]), 3), [0.45, 0.65])
    # n = 7, M = 3: ⌊7/3⌋ = 2 and ⌊14/3⌋ = 4 rows below the edges: bins of 2, 2, 3
    c = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    np.testing.assert_allclose(equal_mass_edges(c, 3), [0.25, 0.45])
    # more bins than rows: one bin per row
    np.testing.assert_allclose(equal_mass_edges(np.array([0.6, 0.8]), 15), [0.7])
    # a tie across a split is not cut: the repeated edge is merged (3 bins -> 2)
    np.testing.assert_allclose(equal_mass_edges(np.array([0.5, 0.6, 0.6, 0.6, 0.6, 0.9]), 3), [0.6])


def test_histogram_equal_mass_hand_computed():
    # top-label confidences .65 .6 .55 .8 .7 .9, correct ✓ ✗ ✓ ✓ ✗ ✓; sorted, two per bin:
    # {.55 ✓, .6 ✗} | {.65 ✓, .7 ✗} | {.8 ✓, .9 ✓}; edges (.6+.65)/2 = .625, (.7+.8)/2 = .75
    P = np.array([[0.65, 0.35], [0.6, 0.4], [0.55, 0.45], [0.2, 0.8], [0.3, 0.7], [0.1, 0.9]])
    hb = HistogramBinning(bins=3).fit(P, np.array([0, 1, 0, 1, 0, 1]))
    np.testing.assert_allclose(hb.edges_, [0.0, 0.625, 0.75, 1.0])
    np.testing.assert_allclose(hb.values_, [0.5, 0.5, 1.0])
    assert hb.counts_.tolist() == [2, 2, 2] and hb.bins_ == 3
    test = np.array([[0.51, 0.49], [0.625, 0.375], [0.74, 0.26], [0.99, 0.01]])
    np.testing.assert_allclose(hb.transform(test), [0.5, 0.5, 0.5, 1.0])  # .625 is on an edge: above


def test_histogram_equal_width_empty_bins_take_nearest_lower_first():
    # bins of width .25: [0,.25) [.25,.5) [.5,.75) [.75,1]; confidences .6 .7 (✓ ✗) and .95 (✓)
    P = np.array([[0.6, 0.4], [0.3, 0.7], [0.05, 0.95]])
    hb = HistogramBinning(bins=4, strategy="equal-width").fit(P, np.array([0, 0, 1]))
    assert hb.counts_.tolist() == [0, 0, 2, 1]
    # bins 0 and 1 are empty; their nearest non-empty bin is bin 2 (accuracy 1/2)
    np.testing.assert_allclose(hb.values_, [0.5, 0.5, 0.5, 1.0])
    hb2 = HistogramBinning(bins=5, strategy="equal-width").fit(
        np.array([[0.5, 0.5], [0.9, 0.1]]), np.array([1, 0])
    )
    # bins [.4,.6) ✗ and [.8,1] ✓; the empty bin [.6,.8) is as near to both: the lower one wins
    assert hb2.counts_.tolist() == [0, 0, 1, 0, 1]
    np.testing.assert_allclose(hb2.values_, [0.0, 0.0, 0.0, 0.0, 1.0])


def test_histogram_top_k_calibrates_set_confidence():
    P = np.array([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.4, 0.35, 0.25], [0.7, 0.2, 0.1]])
    y = np.array([2, 1, 0, 2])  # top-2 sets {0,1}: ✗ ✓ ✓ ✗
    hb = HistogramBinning(bins=1, top_k=2).fit(P, y)
    np.testing.assert_allclose(hb.values_, [0.5])
    np.testing.assert_allclose(hb.transform(P), 0.5)


def test_histogram_recovers_a_known_miscalibration():
    # A model whose true accuracy at confidence c is c²: binning must report ≈ c² per bin.
    rng = np.random.default_rng(7)
    c = rng.uniform(0.5, 1.0, size=40_000)
    y = (rng.uniform(size=c.shape) >= c**2).astype(int)  # class 0 is predicted; right iff y = 0
    P = np.column_stack([c, 1 - c])
    hb = HistogramBinning(bins=10).fit(P, y)
    edges = zip(hb.edges_[:-1], hb.edges_[1:], strict=True)
    mean_square = np.array([np.mean(c[(c >= lo) & (c < hi)] ** 2) for lo, hi in edges])
    # each bin holds 4,000 rows: the binomial sd of its accuracy is ≤ sqrt(.25/4000) = .0079;
    # 4 sd = .032 (10 bins: a false alarm about once in 1,500 runs)
    np.testing.assert_allclose(hb.values_, mean_square, rtol=0, atol=0.032)


def test_histogram_errors():
    with pytest.raises(ValueError, match="bins must be an integer"):
        HistogramBinning(bins=0)
    with pytest.raises(ValueError, match="strategy must be one of"):
        HistogramBinning(strategy="quantile")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k must be an integer"):
        HistogramBinning(top_k=0)
    with pytest.raises(NotFittedError, match="HistogramBinning is not fitted"):
        HistogramBinning().transform(np.array([[0.5, 0.5]]))
    with pytest.raises(ValueError, match="top_k=2 must be smaller than the number of classes"):
        HistogramBinning(top_k=2).fit(np.array([[0.6, 0.4]]), np.array([0]))


# ------------------------------------------------------------------------- isotonic
def test_isotonic_hand_computed_pava():
    # confidences .55 .7 .8 .9, correct 1 1 0 1: pool-adjacent-violators pools .7/.8 to .5,
    # then .55 with them to (1+1+0)/3 = 2/3; .9 stays 1.
    P = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.45, 0.55]])
    iso = IsotonicCalibration().fit(P, np.array([0, 1, 1, 1]))
    out = iso.transform(np.array([[0.55, 0.45], [0.8, 0.2], [0.9, 0.1], [0.99, 0.01], [0.51, 0.49]]))
    np.testing.assert_allclose(out, [2 / 3, 2 / 3, 1.0, 1.0, 2 / 3])  # clipped beyond the ends


def test_isotonic_is_monotone_in_confidence():
    P, y = softmax_data(5_000, K=5, seed=8, scale=2.5)
    iso = IsotonicCalibration().fit(P, y)
    grid = np.linspace(0.2, 1.0, 400)
    rest = (1 - grid)[:, None] / 4 * np.ones((1, 4))
    out = iso.transform(np.column_stack([grid, rest]))
    assert np.all(np.diff(out) >= 0) and out.min() >= 0 and out.max() <= 1
    iso3 = IsotonicCalibration(top_k=3).fit(P, y)
    assert np.all(np.diff(iso3.transform(P[np.argsort(top_k_confidence(P, 3))])) >= 0)


def test_isotonic_errors():
    with pytest.raises(NotFittedError, match="IsotonicCalibration is not fitted"):
        IsotonicCalibration().transform(np.array([[0.5, 0.5]]))
    with pytest.raises(ValueError, match="top_k must be an integer"):
        IsotonicCalibration(top_k=1.5)  # type: ignore[arg-type]
    iso = IsotonicCalibration().fit(np.array([[0.6, 0.4], [0.3, 0.7]]), np.array([0, 0]))
    with pytest.raises(ValueError, match="fitted on 2 classes"):
        iso.transform(np.array([[0.2, 0.3, 0.5]]))
