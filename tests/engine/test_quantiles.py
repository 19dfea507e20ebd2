"""Hand-computed conformal quantiles and p-values (ALGORITHMS.md §0-1)."""

import math

import numpy as np

from calwatch.engine.conformal.quantiles import conformal_quantile, conformal_rank, p_values_against


def test_rank_is_ceil_of_n_plus_one_times_level():
    assert conformal_rank(4, 0.4) == 3  # ⌈5 · 0.6⌉
    assert conformal_rank(9, 0.1) == 9  # ⌈10 · 0.9⌉
    assert conformal_rank(19, 0.1) == 18
    # 1000 · (1 − 0.059) is 941.0000000000001 in floating point: still the 941st order statistic
    assert 1000 * (1 - 0.059) > 941
    assert conformal_rank(999, 0.059) == 941
    assert conformal_rank(124, 0.176) == 103  # 103.00000000000001 in floating point
    assert conformal_rank(10, 0.1) == 10  # ⌈9.9⌉


def test_quantile_is_an_order_statistic_never_interpolated():
    s = np.array([0.4, 0.1, 0.3, 0.2])
    assert conformal_quantile(s, 0.4) == 0.3
    assert conformal_quantile(s, 0.2) == 0.4  # rank ⌈5·0.8⌉ = 4
    assert conformal_quantile(np.arange(1.0, 11.0), 0.1) == 10.0


def test_quantile_is_infinite_when_rank_exceeds_n():
    assert conformal_quantile(np.arange(8.0), 0.1) == math.inf  # ⌈9 · 0.9⌉ = 9 > 8
    assert conformal_quantile(np.array([]), 0.1) == math.inf


def test_p_values_deterministic():
    cal = np.array([0.1, 0.2, 0.3, 0.4])
    got = p_values_against(cal, np.array([0.25, 0.4, 0.0, 0.9]))
    np.testing.assert_allclose(got, [3 / 5, 2 / 5, 5 / 5, 1 / 5])


def test_p_values_randomised_ties():
    cal = np.array([0.1, 0.3, 0.3, 0.4])
    # s = 0.3: one score above, two equal -> (1 + θ·(2 + 1)) / 5
    got = p_values_against(cal, np.array([0.3, 0.3]), theta=np.array([0.5, 1.0]))
    np.testing.assert_allclose(got, [(1 + 0.5 * 3) / 5, (1 + 3) / 5])


def test_randomised_p_values_are_uniform_under_exchangeability():
    rng = np.random.default_rng(11)
    n, reps = 9, 20_000
    scores = rng.integers(0, 4, size=(reps, n + 1)).astype(float)  # many ties
    p = np.array([p_values_against(np.sort(row[:n]), row[n:], rng.uniform(size=1))[0] for row in scores])
    # P(p ≤ t) = t exactly; binomial sd at t is sqrt(t(1−t)/reps) ≤ 0.0036: allow 4 sd
    for t in (0.1, 0.3, 0.5, 0.8):
        assert abs((p <= t).mean() - t) < 4 * math.sqrt(t * (1 - t) / reps)
