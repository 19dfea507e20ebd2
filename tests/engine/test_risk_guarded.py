"""RiskEstimator(method="guarded"): the band's arithmetic by hand, the split, the errors."""

import math

import numpy as np
import pytest

from calwatch.engine.risk.band import bernstein_halfwidth, variance_bound
from calwatch.engine.risk.estimator import RiskEstimator

from ..synthetic import softmax_data


def _constant_confidence_rows():
    # 2,000 binary rows all at p = [.8, .2]: isotonic regression on one confidence value is the
    # fitting part's accuracy. The held-out part is the first n_H = 1,000 rows of numpy's
    # seeded permutation (seed 0); 150 of them miss, and 200 of the 1,000 fitting rows miss.
    n = 2000
    P = np.tile([[0.8, 0.2]], (n, 1))
    order = np.random.default_rng(0).permutation(n)
    y = np.zeros(n, dtype=int)
    y[order[:150]] = 1  # held-out misses
    y[order[1000:1200]] = 1  # fitting misses
    return P, y


def test_guarded_band_hand_computed():
    P, y = _constant_confidence_rows()
    r = RiskEstimator(method="guarded", holdout=0.5, seed=0, delta=0.05).fit(P, y)
    # fitting part: 800 of 1,000 correct, so r(.8) = .8 and every row's risk is .2
    assert r.n_holdout_ == 1000
    np.testing.assert_allclose(r.row_risk(P[:3]), [0.2, 0.2, 0.2], rtol=0, atol=1e-15)
    # held out, D = Z − .2: 150 rows of .8 and 850 of −.2: μ̂_H = .15 − .2 = −.05,
    # mean D² = (150·.64 + 850·.04)/1000 = .13; σ̄² = .13 + sqrt(log(3/.05)/2000) = .1752457
    assert r.holdout_bias_ == pytest.approx(-0.05, abs=1e-12)
    assert r.variance_bound_ == pytest.approx(0.1752457, abs=1e-7)
    # L = log(6/.05) = 4.787492, bL/3 = 3.191661 (b = 2);
    # t_1000 = (3.191661 + sqrt(10.18670 + 2·1000·.1752457·4.787492)) / 1000 = .0442789
    # t_250  = (3.191661 + sqrt(10.18670 + 2·250·.1752457·4.787492)) / 250  = .0956816
    assert r.band_halfwidth(1000) == pytest.approx(2 * 0.0442789, abs=1e-7)
    assert r.band_halfwidth(250) == pytest.approx(0.0442789 + 0.0956816, abs=1e-7)
    # a batch of 250 rows: α̂ = .2, centre α̂ + μ̂_H = .15, band .15 ± .1399605
    batch = P[:250]
    assert r.estimate(batch) == pytest.approx(0.2, abs=1e-12)
    low, high = r.band(batch)
    assert low == pytest.approx(0.0100395, abs=1e-7)
    assert high == pytest.approx(0.2899605, abs=1e-7)


def test_band_helpers_hand_computed_and_clipped():
    assert variance_bound(0.1, 1000, 0.05) == pytest.approx(0.1 + math.sqrt(math.log(60) / 2000), rel=1e-12)
    assert variance_bound(0.99, 10, 0.05) == 1.0  # E D² ≤ 1 always
    # Bernstein at σ² = 0: only the range term, 2·(2 L / 3)/n
    assert bernstein_halfwidth(100, 0.0, 0.05) == pytest.approx(4 * math.log(120) / 300, rel=1e-12)
    # more rows, a narrower band; a larger variance, a wider one
    assert bernstein_halfwidth(4000, 0.1, 0.05) < bernstein_halfwidth(1000, 0.1, 0.05)
    assert bernstein_halfwidth(1000, 0.2, 0.05) > bernstein_halfwidth(1000, 0.1, 0.05)
    P, y = softmax_data(400, K=3, seed=3)
    r = RiskEstimator(method="guarded").fit(P, y)
    low, high = r.band(P[:5])  # five rows: a band of little use, clipped to [0, 1]
    assert (low, high) == (0.0, 1.0)


def test_guarded_split_is_seeded_and_the_promise_names_the_level():
    P, y = softmax_data(1000, K=4, seed=5)
    a = RiskEstimator(method="guarded", seed=1).fit(P, y)
    b = RiskEstimator(method="guarded", seed=1).fit(P, y)
    c = RiskEstimator(method="guarded", seed=2).fit(P, y)
    assert a.holdout_bias_ == b.holdout_bias_ and a.variance_bound_ == b.variance_bound_
    assert (a.holdout_bias_, a.variance_bound_) != (c.holdout_bias_, c.variance_bound_)
    assert RiskEstimator(method="guarded", holdout=0.3).fit(P, y).n_holdout_ == 300
    assert a.promise == "calibrated estimate with a 95% band"
    assert RiskEstimator(method="guarded", delta=0.01).promise == "calibrated estimate with a 99% band"
    assert repr(a) == "RiskEstimator(method='guarded', top_k=1, delta=0.05, holdout=0.5, seed=1)"


def test_guarded_errors_name_the_argument():
    with pytest.raises(ValueError, match="delta must be a number in"):
        RiskEstimator(method="guarded", delta=1.0)
    with pytest.raises(ValueError, match="holdout must be a number in"):
        RiskEstimator(method="guarded", holdout=0.0)
    with pytest.raises(ValueError, match="seed must be an integer"):
        RiskEstimator(method="guarded", seed=-1)
    with pytest.raises(ValueError, match="one to hold out"):
        RiskEstimator(method="guarded", holdout=0.4).fit(np.array([[0.6, 0.4], [0.3, 0.7]]), np.array([0, 1]))
    P, y = softmax_data(200, K=3, seed=1)
    with pytest.raises(ValueError, match="needs method='guarded'"):
        RiskEstimator(method="isotonic").fit(P, y).band(P)
    with pytest.raises(ValueError, match="m must be an integer"):
        RiskEstimator(method="guarded").fit(P, y).band_halfwidth(0)
