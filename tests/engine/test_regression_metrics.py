"""Hand-computed regression metrics and split conformal regression intervals (ALGORITHMS.md §3, 001 §5.1)."""

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import ndtri

from calwatch.engine.conformal.regression import SplitConformalRegressor
from calwatch.engine.errors import NotFittedError
from calwatch.engine.regression.calibrator import ModularConformalCalibrator
from calwatch.engine.regression.interpolation import LinearInterpolation, RandomInterpolation
from calwatch.engine.regression.metrics import (
    crps,
    evaluate_cdf,
    expected_pit_calibration_error,
    interval_coverage,
    interval_width,
    negative_log_likelihood,
    pit_calibration_error,
)


def exact_gaussian(mu, sd, n=999):
    """A calibrated CDF that is exactly N(mu, sd²): cdf scores i/(n+1) make q the identity."""
    y_cal = ndtri(np.arange(1, n + 1) / (n + 1))
    mcc = ModularConformalCalibrator(prediction="distribution", score="cdf").fit(
        np.tile([0.0, 1.0], (n, 1)), y_cal
    )
    return mcc.predict(np.column_stack([mu, sd]))


# ------------------------------------------------------------------ PIT calibration error
def test_pit_error_by_hand():
    pit = np.array([0.1, 0.2, 0.6, 0.8])
    # levels (.25, .5, .75, 1): p̂ = (.5, .5, .75, 1); squared gaps (.0625, 0, 0, 0)
    assert pit_calibration_error(pit, n_levels=4) == pytest.approx(0.0625 / 4)
    # debiased: minus p̂(1 − p̂)/(N − 1) = (.25, .25, .1875, 0)/3 per term
    want = (0.0625 - 0.25 / 3 - 0.25 / 3 - 0.1875 / 3) / 4
    assert pit_calibration_error(pit, n_levels=4, debiased=True) == pytest.approx(want)


def test_pit_error_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 2"):
        pit_calibration_error(np.array([0.5]))
    with pytest.raises(ValueError, match="n_levels"):
        pit_calibration_error(np.array([0.5, 0.6]), n_levels=0)


def test_expected_pit_error_by_hand():
    # n = 1, M = 2 levels (.5, 1): C_.5 = U_(1) with Var = 1·1/(2²·3) = 1/12; C_1 = 1 has Var 0
    assert expected_pit_calibration_error(1, 10, n_levels=2) == pytest.approx(1 / 24)
    # n = 3, M = 1 level at p = 1: always 0
    assert expected_pit_calibration_error(3, 10, n_levels=1) == 0.0
    # ≈ (1/M) Σ p(1−p) / (n+2) = 0.16665/(n+2) for M = 100
    assert expected_pit_calibration_error(2_000, 2_000) * 2_002 == pytest.approx(0.16665, rel=2e-3)
    with pytest.raises(ValueError, match="pool_size must be at least"):
        expected_pit_calibration_error(100, 100, pool_size=150)


@pytest.mark.parametrize("pool", [None, 300])
def test_expected_pit_error_matches_simulation(pool):
    # random interpolation on i.i.d. continuous scores, from an infinite population or a finite pool
    rng = np.random.default_rng(8)
    n, N, reps, M = 50, 60, 6_000, 10
    values = np.empty(reps)
    population = rng.standard_normal(pool) if pool else None
    for r in range(reps):
        if population is None:
            cal, test = rng.standard_normal(n), rng.standard_normal(N)
        else:
            order = rng.permutation(pool)
            cal, test = population[order[:n]], population[order[n : n + N]]
        q = RandomInterpolation(np.sort(cal), (-np.inf, np.inf))
        values[r] = pit_calibration_error(q.cdf(test, rng.uniform(size=N)), n_levels=M, debiased=True)
    want = expected_pit_calibration_error(n, N, pool_size=pool, n_levels=M)
    # the mean of `reps` draws has sd values.std()/sqrt(reps); allow 4 sd
    assert abs(values.mean() - want) < 4 * values.std() / math.sqrt(reps)
    # and the non-debiased error would be far off (it adds the test rows' binomial noise)
    assert abs(values.mean() + 0.16 / N - want) > 4 * values.std() / math.sqrt(reps)


# ------------------------------------------------------------------ CRPS, NLL
def test_crps_of_a_uniform_distribution_by_hand():
    # point predictions 0, calibration labels (−1, 0, 1): uniform on [−2, 2] (knots at levels i/4)
    F = ModularConformalCalibrator().fit(np.zeros(3), np.array([-1.0, 0.0, 1.0])).predict(np.zeros(3))
    y = np.array([0.0, 2.0, 5.0])
    # CRPS = E|X − y| − E|X − X'|/2 with E|X − X'| = (b − a)/3 = 4/3 for U(−2, 2):
    # at 0: E|X| = 1 → 1/3; at 2: E|X − 2| = 2 → 4/3; at 5: E|X − 5| = 5 → 13/3
    np.testing.assert_allclose(crps(F, y), [1 / 3, 4 / 3, 13 / 3], rtol=1e-5)


def test_crps_and_nll_of_an_exact_gaussian_match_closed_forms():
    mu, sd = np.array([0.0, 10.0, -3.0]), np.array([1.0, 0.5, 2.0])
    F = exact_gaussian(mu, sd)
    y = np.array([0.3, 9.0, 1.0])
    z = (y - mu) / sd
    closed = sd * (z * (2 * stats.norm.cdf(z) - 1) + 2 * stats.norm.pdf(z) - 1 / math.sqrt(math.pi))
    np.testing.assert_allclose(crps(F, y), closed, rtol=1e-4)
    np.testing.assert_allclose(crps(F, y, n_levels=4_000), closed, rtol=1e-5)
    np.testing.assert_allclose(negative_log_likelihood(F, y), -stats.norm.logpdf(y, mu, sd), rtol=1e-9)


def test_crps_clips_improper_tails_to_the_support():
    F = ModularConformalCalibrator(interpolation="random").fit(np.zeros(3), np.array([-1.0, 0.0, 1.0]))
    G = F.predict(np.zeros(1), u=np.array([0.5]))
    # masses 1/8 at −∞ and +∞ sit at ±1; mass 1/4 at −1, 0, 1 each: steps of F at −1, 0, 1 with
    # F = 1/8, 3/8, 5/8, 7/8 in between, clipped so F = 0 below −1 and 1 above 1:
    # ∫(F − 1{t ≥ 0})² = (3/8)² + (3/8)² = 0.28125
    assert crps(G, np.zeros(1), n_levels=8_000)[0] == pytest.approx(0.28125, rel=1e-3)


def test_nll_needs_a_density():
    F = ModularConformalCalibrator(interpolation="naive").fit(np.zeros(3), np.array([-1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="step CDF"):
        negative_log_likelihood(F.predict(np.zeros(1)), np.zeros(1))


def test_evaluate_cdf_reports_every_metric():
    F = exact_gaussian(np.zeros(4), np.ones(4))
    y = np.array([-1.0, 0.0, 0.5, 5.0])
    m = evaluate_cdf(F, y)
    assert m["std"] == pytest.approx(1.0)
    assert m["ci_width"] == pytest.approx(2 * 1.959963984540054)
    assert m["width"] == pytest.approx(2 * 1.6448536269514722)
    assert m["coverage"] == 0.75
    assert m["nll_inf_share"] == 0.0
    assert m["nll"] == pytest.approx(float(np.mean(-stats.norm.logpdf(y))))
    R = ModularConformalCalibrator(interpolation="random").fit(np.zeros(3), np.array([-1.0, 0.0, 1.0]))
    r = evaluate_cdf(R.predict(np.zeros(2)), np.zeros(2))
    assert r["std"] == math.inf and math.isnan(r["nll"])


def test_interval_coverage_and_width():
    intervals = np.array([[0.0, 1.0], [2.0, 4.0], [-np.inf, 0.0]])
    assert interval_coverage(intervals, np.array([1.0, 5.0, -7.0])) == pytest.approx(2 / 3)
    np.testing.assert_array_equal(interval_width(intervals), [1.0, 2.0, np.inf])
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        interval_coverage(intervals, np.zeros(2))


def test_linear_interpolation_partial_moments_by_hand():
    # knots (-4,0) (-2,1/6) (0,2/6) (1,3/6) (3,4/6) (6,5/6) (8,1), cut at 0.5: segment masses
    q = LinearInterpolation(np.array([-2.0, 0.0, 1.0, 3.0, 6.0]), (-np.inf, np.inf))
    P, M1, M2 = q.partial_moments((0.5,), "identity")
    np.testing.assert_allclose(P, [2 / 6 + 1 / 12, 1 / 12 + 3 / 6])
    # E[S 1{S ≤ .5}] = (1/6)(−3) + (1/6)(−1) + (1/12)(.25); the rest sums to 10/6 overall
    np.testing.assert_allclose(M1[0], -4 / 6 + 0.25 / 12)
    np.testing.assert_allclose(M1.sum(), 10 / 6)
    np.testing.assert_allclose(M2.sum(), 257 / 18)


# ------------------------------------------------------------------ split conformal regression
def test_absolute_residual_intervals_by_hand():
    c = SplitConformalRegressor(score="absolute", alpha=0.25).fit(
        np.zeros(4), np.array([1.0, -2.0, 0.5, 3.0])
    )
    assert c.quantile_ == 3.0  # scores .5, 1, 2, 3: rank ⌈5 · .75⌉ = 4
    np.testing.assert_array_equal(c.predict_interval(np.array([10.0, -1.0])), [[7.0, 13.0], [-4.0, 2.0]])


def test_normalised_residual_intervals_by_hand():
    pred = np.array([[0.0, 1.0], [0.0, 2.0], [1.0, 0.5], [2.0, 4.0]])
    y = np.array([1.0, 3.0, 2.0, 0.0])  # scores 1, 1.5, 2, 0.5
    c = SplitConformalRegressor(score="normalized", alpha=0.4).fit(pred, y)
    assert c.quantile_ == 1.5  # rank ⌈5 · .6⌉ = 3
    np.testing.assert_array_equal(c.predict_interval(np.array([[5.0, 2.0]])), [[2.0, 8.0]])


def test_cqr_intervals_by_hand_can_shrink():
    pred = np.array([[0.0, 10.0]] * 4)
    y = np.array([5.0, 4.0, 6.0, 9.0])  # scores max(l − y, y − u): −5, −4, −4, −1
    c = SplitConformalRegressor(score="cqr", alpha=0.25).fit(pred, y)
    assert c.quantile_ == -1.0  # rank 4
    np.testing.assert_array_equal(c.predict_interval(np.array([[0.0, 10.0]])), [[1.0, 9.0]])


def test_conformal_quantile_is_infinite_for_too_few_rows():
    c = SplitConformalRegressor(score="absolute", alpha=0.1).fit(np.zeros(5), np.ones(5))
    assert c.quantile_ == math.inf
    np.testing.assert_array_equal(c.predict_interval(np.zeros(1)), [[-np.inf, np.inf]])


def test_conformal_regression_errors():
    with pytest.raises(ValueError, match="score must be one of"):
        SplitConformalRegressor(score="quantile")
    with pytest.raises(ValueError, match="alpha"):
        SplitConformalRegressor(alpha=1.5)
    with pytest.raises(NotFittedError):
        SplitConformalRegressor().predict_interval(np.zeros(2))
    with pytest.raises(ValueError, match="pred must be a 2-D array"):
        SplitConformalRegressor(score="cqr").fit(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match=r"shape \(m, 2\), columns \(lower, upper\)"):
        SplitConformalRegressor(score="cqr").fit(np.zeros((3, 3)), np.zeros(3))
    with pytest.raises(ValueError, match="sd column must be positive"):
        SplitConformalRegressor(score="normalized").fit(np.array([[0.0, 0.0]]), np.zeros(1))
    with pytest.raises(ValueError, match="y has 2 labels but pred has 3 rows"):
        SplitConformalRegressor().fit(np.zeros(3), np.zeros(2))


def test_mcc_central_interval_of_point_predictions_with_naive_interpolation_is_two_sided_conformal():
    # paper 001 Theorem 2: with naive interpolation the central (1−α) credible interval of the
    # residual score is [s_(⌈(n+1)α/2⌉), s_(⌈(n+1)(1−α/2)⌉)], the two-sided split conformal interval
    rng = np.random.default_rng(9)
    n = 199
    residuals = rng.standard_t(3, size=n)
    F = ModularConformalCalibrator(interpolation="naive").fit(np.zeros(n), residuals).predict(np.array([5.0]))
    s = np.sort(residuals)
    lo_rank, hi_rank = math.ceil(200 * 0.05), math.ceil(200 * 0.95)  # 10 and 190
    np.testing.assert_allclose(F.interval(0.9), [[5.0 + s[lo_rank - 1], 5.0 + s[hi_rank - 1]]])
