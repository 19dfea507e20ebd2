"""Weighted split conformal: the weighted quantile with its +∞ atom, ESS, weights, sets, errors."""

import math

import numpy as np
import pytest

from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.conformal.quantiles import conformal_quantile
from calwatch.engine.conformal.weighted import (
    WeightedConformalClassifier,
    domain_weights,
    effective_sample_size,
    weighted_conformal_quantile,
)
from calwatch.engine.errors import NotFittedError

from ..synthetic import softmax_data

# Five calibration scores with weights; W = Σw = 8, cumulative C = 3 4 5 7 8.
SCORES = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
WEIGHTS = np.array([3.0, 1.0, 1.0, 2.0, 1.0])


def test_weighted_quantile_by_hand_with_the_infinity_atom():
    # α = .25: q̂(x) = s_(k), k the first index with C_k ≥ .75·(W + w(x)), i.e. the first
    # score whose mass p_i = w_i / (W + w(x)) accumulates to .75; the rest sits on +∞.
    test_w = [0.0, 1.0, 4 / 3, 2.0, 3.0, 8 / 3 + 0.01]
    q = weighted_conformal_quantile(SCORES, WEIGHTS, test_w, alpha=0.25)
    # w = 0:    target .75·8 = 6       -> C_4 = 7 is the first ≥ 6      -> .4
    # w = 1:    target .75·9 = 6.75    -> C_4 = 7                        -> .4
    # w = 4/3:  target .75·28/3 = 7    -> C_4 = 7 reaches it exactly (a tie counts) -> .4
    # w = 2:    target .75·10 = 7.5    -> C_5 = 8                        -> .5
    # w = 3:    target .75·11 = 8.25 > W = 8: the calibration mass 8/11 < .75 -> +∞
    # w = 8/3 + .01: just past the point where the atom p_{n+1} = w/(8 + w) exceeds .25 -> +∞
    assert q.tolist() == [0.4, 0.4, 0.4, 0.5, math.inf, math.inf]


def test_weighted_quantile_is_scale_free():
    q1 = weighted_conformal_quantile(SCORES, WEIGHTS, [1.0, 2.0], alpha=0.25)
    q2 = weighted_conformal_quantile(SCORES, WEIGHTS * 1e-7, [1e-7, 2e-7], alpha=0.25)
    np.testing.assert_array_equal(q1, q2)


@pytest.mark.parametrize("n", [1, 4, 9, 19, 99, 1000])
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.4])
def test_unit_weights_give_the_split_conformal_quantile(n, alpha):
    scores = np.sort(np.random.default_rng(n).uniform(size=n))
    q = weighted_conformal_quantile(scores, np.ones(n), [1.0], alpha)
    assert q[0] == conformal_quantile(scores, alpha)


def test_effective_sample_size_by_hand():
    assert effective_sample_size(WEIGHTS) == 4.0  # 8² / (9 + 1 + 1 + 4 + 1) = 64/16
    assert effective_sample_size(np.ones(7)) == 7.0
    assert effective_sample_size([1.0, 1.0, 2.0]) == pytest.approx(16 / 6)
    assert effective_sample_size([0.0, 0.0]) == 0.0


def test_domain_weights_by_hand():
    # odds p/(1 − p) = 1 and 3, times n_cal/n_win = 100/50 = 2
    assert domain_weights([0.5, 0.75], 100, 50).tolist() == [2.0, 6.0]
    w = domain_weights([0.0, 1.0], 10, 10)  # clipped to [1e-6, 1 − 1e-6]
    assert w[0] == pytest.approx(1e-6 / (1 - 1e-6)) and w[1] == pytest.approx((1 - 1e-6) / 1e-6)


@pytest.mark.parametrize("kwargs", [{}, {"score": "aps"}, {"score": "raps"}, {"allow_empty": True}])
def test_without_a_domain_window_it_is_split_conformal(kwargs):
    P, y = softmax_data(1500, K=4, seed=11)
    X = np.random.default_rng(0).normal(size=(1500, 3))
    wc = WeightedConformalClassifier(alpha=0.1, **kwargs).fit(P[:700], y[:700], X[:700])
    sc = SplitConformalClassifier(alpha=0.1, randomized=False, **kwargs).fit(P[:700], y[:700])
    np.testing.assert_array_equal(wc.predict_sets(P[700:], X[700:]), sc.predict_sets(P[700:]))
    assert wc.effective_sample_size_ == 700 and not wc.ess_below_floor_
    assert (wc.quantiles(X[700:]) == sc.quantiles_).all()


def test_domain_classifier_weights_follow_the_shift():
    # Calibration features uniform on [0, 1], window uniform on [0.5, 1.5]: w(x) = dP_win/dP_cal
    # is 0 below .5 and 1 (times n_cal/n_win, = 1 here) on [.5, 1] for the calibration rows.
    rng = np.random.default_rng(12)
    P, y = softmax_data(2000, K=3, seed=12)
    X_cal = rng.uniform(0, 1, size=(2000, 1))
    X_win = rng.uniform(0.5, 1.5, size=(2000, 1))
    for domain in ("boosting", "logistic"):
        wc = WeightedConformalClassifier(alpha=0.1, domain=domain).fit(P, y, X_cal).update_domain(X_win)
        w = wc.calibration_weights_
        low, high = w[X_cal[:, 0] < 0.4], w[X_cal[:, 0] > 0.6]
        assert np.median(low) < 0.25 < 0.5 < np.median(high), domain
        # about half the rows carry the weight: ESS well below n, far above the floor
        assert 300 < wc.effective_sample_size_ < 1500, domain
        assert not wc.ess_below_floor_
        # a row beyond the calibration range is heavy: its own +∞ atom makes its set full
        far = wc.weights(np.array([[1.45]]))
        assert far[0] > 1
    strict = WeightedConformalClassifier(alpha=0.1, floor=1900, domain="logistic")
    assert strict.fit(P, y, X_cal).update_domain(X_win).ess_below_floor_


def test_a_lone_heavy_test_row_gets_the_full_set():
    P, y = softmax_data(200, K=3, seed=13)
    X = np.linspace(0, 1, 200)[:, None]
    wc = WeightedConformalClassifier(alpha=0.1, domain="logistic").fit(P, y, X)
    wc.update_domain(np.full((50, 1), 5.0))  # the window lies far beyond every calibration row
    sets = wc.predict_sets(P[:3], np.full((3, 1), 5.0))
    assert sets.all()  # w(x) dwarfs W: p_{n+1} > α, so q̂ = +∞
    assert np.isinf(wc.quantiles(np.full((1, 1), 5.0))).all()


def test_errors():
    P, y = softmax_data(50, K=3, seed=14)
    X = np.zeros((50, 2))
    with pytest.raises(ValueError, match="domain"):
        WeightedConformalClassifier(domain="forest")
    with pytest.raises(ValueError, match="score"):
        WeightedConformalClassifier(score="nope")
    with pytest.raises(ValueError, match="floor"):
        WeightedConformalClassifier(floor=-1)
    with pytest.raises(NotFittedError, match="fit"):
        WeightedConformalClassifier().predict_sets(P, X)
    wc = WeightedConformalClassifier().fit(P, y, X)
    with pytest.raises(ValueError, match="features"):
        wc.update_domain(np.zeros((10, 3)))
    with pytest.raises(ValueError, match="rows"):
        wc.predict_sets(P, X[:10])
    with pytest.raises(ValueError, match="NaN"):
        wc.update_domain(np.full((10, 2), np.nan))
    with pytest.raises(TypeError, match="numeric"):
        WeightedConformalClassifier().fit(P, y, np.array([["a"]] * 50))
