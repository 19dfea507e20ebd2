"""Modular conformal calibration (ALGORITHMS.md §3, paper 001): interpolations and calibrated CDFs.

The 5-point example: point predictions μ = 0 and labels (−2, 0, 1, 3, 6), so the sorted calibration
scores are s = (−2, 0, 1, 3, 6), n = 5, and the knots sit at levels i/6.
"""

import json
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import ndtri

from calwatch.engine.errors import NotFittedError
from calwatch.engine.regression.calibrator import CalibratedCDF, ModularConformalCalibrator
from calwatch.engine.regression.interpolation import (
    LinearInterpolation,
    NAFInterpolation,
    NaiveInterpolation,
    RandomInterpolation,
    linear_knots,
)
from calwatch.engine.regression.scores import CDFPrediction

S5 = np.array([-2.0, 0.0, 1.0, 3.0, 6.0])
REAL = (-math.inf, math.inf)
NAF_FAST = {"naf_epochs": 300, "naf_units": 50, "progress": False}


def five_point(interpolation="linear", **options):
    return ModularConformalCalibrator(prediction="point", interpolation=interpolation, **options).fit(
        np.zeros(5), S5
    )


# ------------------------------------------------------------------ interpolations, by hand
def test_naive_interpolation_counts_scores_at_or_below():
    q = NaiveInterpolation(S5, REAL)
    s = np.array([-3.0, -2.0, 0.5, 3.0, 10.0])
    np.testing.assert_allclose(q.cdf(s), [0, 1 / 6, 2 / 6, 4 / 6, 5 / 6])
    # inf{s : q(s) ≥ p}: k = ⌈6p⌉ → s_(k); p = 0 → −inf, k > 5 → +inf
    np.testing.assert_array_equal(
        q.ppf(np.array([0.0, 1 / 6, 0.5, 0.6, 0.8, 0.9])), [-np.inf, -2.0, 1.0, 3.0, 6.0, np.inf]
    )
    assert q.improper_mass() == (0.0, 1 / 6)
    with pytest.raises(ValueError, match="step CDF"):
        q.density(s)


def test_linear_interpolation_knots_values_inverse_and_density():
    # mean gap (6 − (−2))/4 = 2: end knots (−4, 0) and (8, 1)
    x, level = linear_knots(S5, REAL)
    np.testing.assert_allclose(x, [-4, -2, 0, 1, 3, 6, 8])
    np.testing.assert_allclose(level, np.arange(7) / 6)
    q = LinearInterpolation(S5, REAL)
    s = np.array([-5.0, -3.0, 0.5, 2.0, 7.0, 9.0])
    np.testing.assert_allclose(q.cdf(s), [0, 1 / 12, 5 / 12, 7 / 12, 11 / 12, 1])
    np.testing.assert_allclose(q.ppf(np.array([0.0, 0.5, 0.75, 1.0])), [-4.0, 1.0, 4.5, 8.0])
    # slopes (1/6)/width: on (1, 3) 1/12, on (3, 6) 1/18, zero outside the end knots
    np.testing.assert_allclose(q.density(np.array([2.0, 4.0, -4.5, 8.5])), [1 / 12, 1 / 18, 0, 0])


def test_linear_interpolation_merges_ties_and_clamps_to_the_score_range():
    x, level = linear_knots(np.array([1.0, 2.0, 2.0, 7.0]), REAL)  # tie at levels 2/5, 3/5 → 1/2
    np.testing.assert_allclose(x, [-1, 1, 2, 7, 9])
    np.testing.assert_allclose(level, [0, 0.2, 0.5, 0.8, 1])
    x, level = linear_knots(np.array([0.1, 0.5, 0.95]), (0.0, 1.0))  # gap .425: ends clamp to 0, 1
    np.testing.assert_allclose(x, [0.0, 0.1, 0.5, 0.95, 1.0])
    np.testing.assert_allclose(level, [0, 0.25, 0.5, 0.75, 1])
    with pytest.raises(ValueError, match="2 distinct calibration scores"):
        linear_knots(np.array([3.0, 3.0]), REAL)


def test_random_interpolation_by_hand():
    q = RandomInterpolation(S5, REAL)
    u = np.full(4, 0.25)
    # s = 0.5: (2 + .25)/6; s = 1 (a score): (2 + .25·2)/6; below all: .25/6; above all: 5.25/6
    np.testing.assert_allclose(
        q.cdf(np.array([0.5, 1.0, -5.0, 10.0]), u), [2.25 / 6, 2.5 / 6, 0.25 / 6, 5.25 / 6]
    )
    # k = ⌈6p − u⌉: p=.5 → ⌈2.75⌉ = 3 → s_(3) = 1; p=.95 → ⌈5.45⌉ = 6 → +inf; p=.01 → 0 → −inf
    np.testing.assert_array_equal(
        q.ppf(np.array([0.5, 0.95, 0.01, 0.5]), np.array([0.25, 0.25, 0.25, 0.0])),
        [1.0, np.inf, -np.inf, 1.0],
    )
    lo, hi = q.improper_mass(u)
    np.testing.assert_allclose(lo, 0.25 / 6)
    np.testing.assert_allclose(hi, 0.75 / 6)


def test_random_interpolation_with_ties_counts_equal_scores():
    q = RandomInterpolation(np.array([1.0, 2.0, 2.0, 7.0]), REAL)
    np.testing.assert_allclose(q.cdf(np.array([2.0]), np.array([0.5])), [(1 + 0.5 * 3) / 5])


def test_random_interpolation_pit_is_exactly_uniform_even_with_ties():
    # Vovk et al. 2020: for exchangeable scores the smoothed PIT is U(0, 1), ties included
    rng = np.random.default_rng(5)
    reps, n = 10_000, 9
    y = rng.integers(0, 4, size=(reps, n + 1)).astype(float)  # four values: many ties
    pit = np.empty(reps)
    for r in range(reps):
        q = RandomInterpolation(np.sort(y[r, :n]), REAL)
        pit[r] = q.cdf(y[r, n:], rng.uniform(size=1))[0]
    # P(PIT ≤ t) = t; the binomial sd at t is sqrt(t(1−t)/reps) ≤ 0.005: allow 4 sd
    for t in (0.1, 0.25, 0.5, 0.8, 0.95):
        assert abs((pit <= t).mean() - t) < 4 * math.sqrt(t * (1 - t) / reps)
    # the naive (step) PIT is not: it never exceeds n/(n+1) = 0.9, so P(PIT ≤ 0.9) = 1, 20 sd off
    naive = np.array([NaiveInterpolation(np.sort(row[:n]), REAL).cdf(row[n:])[0] for row in y[:2_000]])
    assert (naive <= 0.9).mean() == 1.0


# ------------------------------------------------------------------ calibrated CDFs, by hand
def test_calibrated_cdf_of_point_predictions_by_hand():
    F = five_point().predict(np.array([10.0, -1.0]))
    np.testing.assert_allclose(F.cdf(np.array([10.5, -0.5])), [5 / 12, 5 / 12])
    np.testing.assert_allclose(F.ppf(0.75), [14.5, 3.5])
    np.testing.assert_allclose(F.interval(2 / 3), [[8.0, 16.0], [-3.0, 5.0]])
    np.testing.assert_allclose(F.pdf(np.array([12.0, 3.0])), [1 / 12, 1 / 18])  # s = 2 and s = 4
    # S is a mixture of uniforms on the six knot gaps (mass 1/6 each): E[S] = 10/6, Var = 11.5
    np.testing.assert_allclose(F.mean(), [10 + 5 / 3, -1 + 5 / 3])
    np.testing.assert_allclose(F.std(), [math.sqrt(11.5)] * 2)
    np.testing.assert_allclose(F.support(), [[6.0, 18.0], [-5.0, 7.0]])
    # (m, k) and (1, k) arguments give k values per row
    np.testing.assert_allclose(F.cdf(np.array([[10.0, 11.0], [-1.0, 0.0]])), [[2 / 6, 3 / 6]] * 2)
    np.testing.assert_allclose(F.ppf(np.array([[0.5, 1.0]])), [[11.0, 18.0], [0.0, 7.0]])


def test_calibrated_cdf_of_interval_predictions_scales_the_scores():
    # interval [0, 2] on every calibration row; labels 2·S5 give the scores S5 again
    mcc = ModularConformalCalibrator(prediction="interval").fit(np.tile([0.0, 2.0], (5, 1)), 2 * S5)
    np.testing.assert_allclose(mcc.scores_, S5)
    F = mcc.predict(np.array([[1.0, 5.0]]))  # y = 1 + 4·s
    np.testing.assert_allclose(F.ppf(0.75), [1 + 4 * 4.5])
    np.testing.assert_allclose(F.mean(), [1 + 4 * 5 / 3])
    np.testing.assert_allclose(F.std(), [4 * math.sqrt(11.5)])
    np.testing.assert_allclose(F.pdf(np.array([1 + 4 * 2.0])), [1 / 12 / 4])


def test_naive_and_random_calibrated_cdfs_are_improper_steps():
    F = five_point("naive").predict(np.array([10.0]))
    np.testing.assert_allclose(F.cdf(np.array([11.0])), [3 / 6])
    assert F.ppf(0.9)[0] == np.inf and F.mean()[0] == np.inf and F.std()[0] == np.inf
    assert not F.proper and not F.continuous
    with pytest.raises(ValueError, match="step CDF"):
        F.pdf(np.array([1.0]))
    R = five_point("random").predict(np.array([10.0]), u=np.array([0.25]))
    np.testing.assert_allclose(R.cdf(np.array([10.5])), [2.25 / 6])
    assert math.isnan(R.mean()[0]) and R.std()[0] == np.inf


def test_exact_gaussian_when_the_calibration_scores_are_evenly_spaced():
    # cdf scores i/(n+1) make the linear interpolation the identity on [0, 1]: F = N(μ, σ²) exactly
    n, mu, sd = 999, 3.0, 2.0
    y_cal = mu + sd * ndtri(np.arange(1, n + 1) / (n + 1))
    mcc = ModularConformalCalibrator(prediction="distribution", score="cdf").fit(
        np.tile([mu, sd], (n, 1)), y_cal
    )
    F = mcc.predict(np.array([[0.0, 1.0], [10.0, 0.5]]))
    y = np.array([0.7, 9.0])
    np.testing.assert_allclose(F.cdf(y), stats.norm.cdf(y, [0.0, 10.0], [1.0, 0.5]), atol=1e-12)
    np.testing.assert_allclose(F.pdf(y), stats.norm.pdf(y, [0.0, 10.0], [1.0, 0.5]), rtol=1e-9)
    np.testing.assert_allclose(F.ppf(0.975), [1.959963984540054, 10 + 0.5 * 1.959963984540054], rtol=1e-12)
    np.testing.assert_allclose(F.mean(), [0.0, 10.0], atol=1e-12)  # the probit moments in closed form
    np.testing.assert_allclose(F.std(), [1.0, 0.5], rtol=1e-12)


CASES = [
    ("point", None, "linear"),
    ("interval", None, "linear"),
    ("quantile", None, "linear"),
    ("distribution", "cdf", "linear"),
    ("distribution", "z", "linear"),
    ("ensemble", "z", "linear"),
    ("ensemble", "cdf", "linear"),
    ("quantile", None, "naf"),  # NAF on a few types: its fit is the slow part
    ("distribution", "cdf", "naf"),
    ("ensemble", "z", "naf"),
]


@pytest.mark.parametrize(("prediction", "score", "interpolation"), CASES)
def test_ppf_inverts_cdf_and_moments_match_brute_force(prediction, score, interpolation):
    rng = np.random.default_rng(1)
    n, m = 400, 6
    mu = rng.normal(size=n + m)
    sd = np.exp(0.3 * rng.normal(size=n + m))
    y = mu + sd * rng.standard_t(5, size=n + m)
    levels = None
    if prediction == "point":
        pred = mu
    elif prediction == "interval":
        pred = np.column_stack([mu - 1.5 * sd, mu + 1.5 * sd])
    elif prediction == "quantile":
        levels = [0.1, 0.3, 0.5, 0.9]
        pred = mu[:, None] + sd[:, None] * ndtri(np.array(levels))[None, :]
    elif prediction == "distribution":
        pred = np.column_stack([mu, sd])
    else:
        pred = [np.column_stack([mu, sd]), np.column_stack([mu + 0.2, 1.3 * sd]), mu]

    def rows(a, sl):
        return [p[sl] for p in a] if isinstance(a, list) else a[sl]

    opts = NAF_FAST if interpolation == "naf" else {}
    mcc = ModularConformalCalibrator(
        prediction=prediction, score=score, interpolation=interpolation, quantile_levels=levels, **opts
    ).fit(rows(pred, slice(None, n)), y[:n])
    F = mcc.predict(rows(pred, slice(n, None)))
    inside = F.support()
    grid = np.linspace(0.02, 0.98, 25)
    yq = F.ppf(grid[None, :])
    assert np.all(np.diff(yq, axis=1) > 0)
    np.testing.assert_allclose(F.cdf(yq), np.broadcast_to(grid, yq.shape), atol=1e-9)
    probe = np.clip(yq + 0.01, inside[:, :1], inside[:, 1:])
    np.testing.assert_allclose(F.ppf(F.cdf(probe)), probe, rtol=1e-8, atol=1e-8)
    # mean and sd against E[Y^k] = ∫ F⁻¹(Φ(t))^k φ(t) dt by the trapezoid rule on 12,001 points
    # of [−6, 6] (the substitution p = Φ(t) resolves the tails that a grid in p cuts off)
    t = np.linspace(-6.0, 6.0, 12_001)
    w = stats.norm.pdf(t) * (t[1] - t[0])
    w[[0, -1]] /= 2
    Q = F.ppf(stats.norm.cdf(t)[None, :])
    mean_bf = Q @ w / w.sum()
    sd_bf = np.sqrt(((Q - mean_bf[:, None]) ** 2) @ w / w.sum())
    # ensembles: trapezoid quadrature on 513 nodes, whose error on the kinked F⁻¹ of a linear
    # interpolation is ~5e-4 of the sd; the other types have closed-form moments
    tol = 1e-3 if prediction == "ensemble" else 1e-4
    np.testing.assert_allclose(F.mean(), mean_bf, rtol=tol, atol=tol)
    np.testing.assert_allclose(F.std(), sd_bf, rtol=tol)
    # the density is the derivative of the CDF (central differences between the knots)
    h = 1e-6
    probe = yq + 0.0123
    numeric = (F.cdf(probe + h) - F.cdf(probe - h)) / (2 * h)
    np.testing.assert_allclose(F.pdf(probe), numeric, rtol=1e-4, atol=1e-7)


def test_callable_cdf_prediction_with_linear_interpolation():
    rng = np.random.default_rng(2)
    n = 300
    loc = rng.normal(size=n + 3)
    y = loc + rng.standard_t(4, size=n + 3)
    pred = CDFPrediction.from_scipy(stats.t(df=4, loc=loc[:n]))
    mcc = ModularConformalCalibrator(prediction="distribution", score="cdf").fit(pred, y[:n])
    F = mcc.predict(CDFPrediction.from_scipy(stats.t(df=4, loc=loc[n:])))
    q = F.ppf(np.array([[0.2, 0.7]]))
    np.testing.assert_allclose(F.cdf(q), [[0.2, 0.7]] * 3, atol=1e-10)
    assert np.all(F.pdf(q) > 0)
    assert np.all(np.isfinite(F.mean())) and np.all(F.std() > 0)
    with pytest.raises(TypeError, match="cannot be split into rows"):
        F[0]


def test_naf_on_the_five_point_example_fits_the_knots_within_its_epsilon():
    q = NAFInterpolation(S5, REAL, units=20, epochs=500, progress=False)
    err = np.abs(q.cdf(S5) - np.arange(1, 6) / 6)
    assert err.max() == pytest.approx(q.epsilon_) and q.epsilon_ < 0.02
    assert np.all(np.diff(q.cdf(np.linspace(-10, 15, 501))) >= 0)
    np.testing.assert_allclose(q.ppf(np.arange(1, 6) / 6), S5, atol=0.25)  # within ε / min density


def test_naf_fits_the_knots_and_is_a_smooth_proper_cdf():
    rng = np.random.default_rng(3)
    s = np.sort(rng.gamma(2.0, size=500))
    q = NAFInterpolation(s, REAL, epochs=500, progress=False)
    assert q.epsilon_ < 0.01  # max |q(s_(i)) − i/(n+1)|: Theorem 1's ε
    grid = np.linspace(-5, 30, 2_001)
    values = q.cdf(grid)
    assert np.all(np.diff(values) >= 0) and values[0] < 1e-3 and values[-1] > 1 - 1e-3
    np.testing.assert_allclose(q.ppf(q.cdf(s)), s, rtol=1e-9, atol=1e-9)
    h = 1e-6
    numeric = (q.cdf(grid + h) - q.cdf(grid - h)) / (2 * h)
    np.testing.assert_allclose(q.density(grid), numeric, rtol=1e-4, atol=1e-6)
    assert q.ppf(np.array([0.0]))[0] == -np.inf and q.ppf(np.array([1.0]))[0] == np.inf


def test_naf_on_cdf_scores_reaches_zero_and_one_at_the_range_ends():
    rng = np.random.default_rng(4)
    s = np.sort(rng.beta(2.0, 3.0, size=300))
    q = NAFInterpolation(s, (0.0, 1.0), epochs=300, progress=False)
    np.testing.assert_allclose(q.cdf(np.array([0.0, 1.0])), [0.0, 1.0])
    assert q.epsilon_ < 0.02
    assert q.support() == (0.0, 1.0)


# ------------------------------------------------------------------ the calibrator's lifecycle
def test_random_draws_are_seeded_fresh_per_batch_and_overridable():
    a, b = five_point("random", seed=7), five_point("random", seed=7)
    u1, u2 = a.predict(np.zeros(3)).u, a.predict(np.zeros(3)).u
    assert not np.allclose(u1, u2)
    np.testing.assert_array_equal(b.predict(np.zeros(3)).u, u1)
    np.testing.assert_array_equal(a.predict(np.zeros(2), u=[0.1, 0.9]).u, [0.1, 0.9])


@pytest.mark.parametrize("interpolation", ["linear", "naive", "random", "naf"])
def test_state_round_trip_is_json_and_reproduces_predictions(interpolation):
    rng = np.random.default_rng(6)
    mu, y = rng.normal(size=200), rng.normal(size=200)
    opts = NAF_FAST if interpolation == "naf" else {}
    mcc = ModularConformalCalibrator(prediction="point", interpolation=interpolation, seed=3, **opts).fit(
        mu, y
    )
    mcc.predict(np.zeros(4))  # advance the random generator: the state carries its position
    arrays, info = mcc.state()
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    clone = ModularConformalCalibrator.from_state(arrays, json.loads(json.dumps(info)))
    F, G = mcc.predict(np.zeros(5)), clone.predict(np.zeros(5))
    probe = np.linspace(-2, 2, 5)
    np.testing.assert_array_equal(F.cdf(probe), G.cdf(probe))
    np.testing.assert_array_equal(F.interval(0.8), G.interval(0.8))
    with pytest.raises(ValueError, match="not a ModularConformalCalibrator state"):
        ModularConformalCalibrator.from_state(arrays, {**info, "version": 99})


def test_sample_is_seeded_and_follows_the_distribution():
    F = five_point().predict(np.array([0.0, 100.0]))
    draws = F.sample(20_000, seed=1)
    assert draws.shape == (2, 20_000)
    np.testing.assert_array_equal(draws, F.sample(20_000, seed=1))
    # sample mean vs exact mean 5/3 (sd sqrt(11.5)/sqrt(20000) = 0.024): 4 sd
    np.testing.assert_allclose(draws.mean(axis=1), [5 / 3, 100 + 5 / 3], atol=4 * math.sqrt(11.5 / 20_000))


def test_predict_rows_gives_named_columns():
    mcc = five_point()
    rows = mcc.predict_rows(np.array([10.0, -1.0]), np.array([10.5, 20.0]), levels=(0.5, 0.9))
    assert set(rows) == {
        "median", "lower_50", "upper_50", "lower_90", "upper_90", "covered_50", "covered_90",
        "mean", "std", "pit", "crps", "nll",
    }  # fmt: skip
    np.testing.assert_allclose(rows["pit"], [5 / 12, 1.0])
    np.testing.assert_array_equal(rows["covered_90"], [1.0, 0.0])
    assert rows["nll"][1] == np.inf  # 20 is beyond the end knot at −1 + 8 = 7


def test_lifecycle_and_bad_input_errors():
    with pytest.raises(NotFittedError, match="call fit"):
        ModularConformalCalibrator().predict(np.zeros(2))
    with pytest.raises(ValueError, match="prediction must be one of"):
        ModularConformalCalibrator(prediction="mean")
    with pytest.raises(ValueError, match="interpolation must be one of"):
        ModularConformalCalibrator(interpolation="cubic")
    with pytest.raises(ValueError, match="applies to distribution predictions"):
        ModularConformalCalibrator(prediction="point", score="cdf")
    with pytest.raises(ValueError, match="needs quantile_levels"):
        ModularConformalCalibrator(prediction="quantile")
    with pytest.raises(ValueError, match="quantile_levels applies"):
        ModularConformalCalibrator(prediction="point", quantile_levels=[0.1, 0.9])
    with pytest.raises(ValueError, match="weights must be positive"):
        ModularConformalCalibrator(prediction="ensemble", weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="members must be"):
        ModularConformalCalibrator(prediction="ensemble", members=["gaussian"])
    with pytest.raises(ValueError, match="pred_cal has 3 rows but 5"):
        ModularConformalCalibrator().fit(np.zeros(3), S5)
    with pytest.raises(ValueError, match="y_cal contains NaN"):
        ModularConformalCalibrator().fit(np.zeros(2), np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="2 distinct calibration scores"):
        ModularConformalCalibrator().fit(np.zeros(3), np.ones(3))
    mcc = five_point()
    F = mcc.predict(np.zeros(2))
    with pytest.raises(ValueError, match=r"q must hold probabilities in \[0, 1\]"):
        F.ppf(1.5)
    with pytest.raises(ValueError, match=r"y must be a scalar, shape \(2,\)"):
        F.cdf(np.zeros(3))
    with pytest.raises(ValueError, match="level must be in"):
        F.interval(1.0)
    with pytest.raises(ValueError, match="u applies to interpolation='random'"):
        mcc.predict(np.zeros(2), u=[0.5, 0.5])
    with pytest.raises(ValueError, match="u must hold 2 values"):
        five_point("random").predict(np.zeros(2), u=[0.5, 1.5])
    with pytest.raises(ValueError, match="n must be a positive integer"):
        F.sample(0)
    assert isinstance(F[0], CalibratedCDF) and len(F[0]) == 1
