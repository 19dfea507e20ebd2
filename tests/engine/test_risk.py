"""RiskEstimator (paper 004): InvCP by hand, top-k, edge cases, the calibration methods, errors."""

import math

import numpy as np
import pytest

from calwatch.engine.errors import NotFittedError
from calwatch.engine.risk.estimator import RISK_METHODS, RiskEstimator, invcp_gamma

from ..synthetic import softmax_data

# Five calibration rows. Deterministic APS score s = mass ranked at or above the true label:
#   A [.5 .3 .2]    y=0  s = .5
#   B [.6 .3 .1]    y=1  s = .6 + .3 = .9   (label ranked 2nd)
#   C [.7 .2 .1]    y=0  s = .7
#   D [.4 .35 .25]  y=1  s = .4 + .35 = .75 (label ranked 2nd)
#   E [.8 .15 .05]  y=0  s = .8
# sorted: s_(1..5) = .5 .7 .75 .8 .9, n = 5, n + 1 = 6.
P_CAL = np.array([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.7, 0.2, 0.1], [0.4, 0.35, 0.25], [0.8, 0.15, 0.05]])
Y_CAL = np.array([0, 1, 0, 1, 0])


def test_invcp_five_point_hand_computed():
    r = RiskEstimator(method="invcp").fit(P_CAL, Y_CAL)
    np.testing.assert_allclose(r.calibration_scores_, [0.5, 0.7, 0.75, 0.8, 0.9], atol=1e-15)
    assert r.n_calibration_ == 5 and r.n_classes_ == 3
    # top-1: s* = p_max. γ = min{i : s_(i) ≥ s*}, α = 1 − γ/6.
    test = np.array(
        [
            [0.72, 0.2, 0.08],  # s* = .72: first score ≥ .72 is s_(3) = .75 -> γ = 3, α = 3/6
            [0.85, 0.1, 0.05],  # s* = .85: s_(5) = .9 -> γ = 5, α = 1/6
            [0.7, 0.2, 0.1],  # s* = .7 equals s_(2) (row C, bit for bit): ≥ -> γ = 2, α = 4/6
            [0.6, 0.25, 0.15],  # s* = .6: s_(2) = .7 -> γ = 2, α = 4/6
            [0.45, 0.35, 0.2],  # s* = .45 below every score -> γ = 1, α = 5/6
            [0.95, 0.03, 0.02],  # s* = .95 above every score -> γ = n + 1 = 6, α = 0
        ]
    )
    expected = np.array([3, 1, 4, 4, 5, 0]) / 6
    np.testing.assert_allclose(r.row_risk(test), expected, rtol=0, atol=1e-15)
    assert r.estimate(test) == pytest.approx(expected.mean(), abs=1e-15)  # 17/36


def test_invcp_gamma_direction_and_ties():
    # The paper (004 Alg. 1, Eq. 12) and ALGORITHMS.md §5 agree: scores sorted ascending,
    # γ = min{i : s_(i) ≥ s*}, α = 1 − γ/(n+1). A larger s* (more mass in the output) means
    # a larger γ and a smaller risk: s* above every score gives γ = n+1 and α = 0; s* at or
    # below the smallest score gives γ = 1 and α = n/(n+1). A tie counts as "reached".
    s = np.array([0.5, 0.7, 0.75, 0.8, 0.9])
    assert invcp_gamma(s, np.array([0.95, 0.9, 0.9000001, 0.5, 0.1, 0.7])).tolist() == [6, 5, 6, 1, 1, 2]
    repeated = np.array([0.4, 0.6, 0.6, 0.6, 0.8])
    assert invcp_gamma(repeated, np.array([0.6, 0.61, 0.59])).tolist() == [2, 5, 2]


def test_invcp_top_k_hand_computed():
    # top-2: s* = p_(1) + p_(2), the mass down to the last label of the set.
    r = RiskEstimator(method="invcp", top_k=2).fit(P_CAL, Y_CAL)
    test = np.array(
        [
            [0.6, 0.3, 0.1],  # s* = .6 + .3, bit for bit B's score s_(5): γ = 5, α = 1/6
            [0.5, 0.27, 0.23],  # s* = .77: s_(4) = .8 -> γ = 4, α = 2/6
            [0.4, 0.3, 0.3],  # s* = .7 (= .4 + .3): first score ≥ it is .7 or .75 -> see below
            [0.35, 0.33, 0.32],  # s* = .68: s_(2) = .7 -> γ = 2, α = 4/6
            [0.5, 0.45, 0.05],  # s* = .95 above every score -> α = 0
        ]
    )
    risk = r.row_risk(test)
    gamma_row3 = 2 if 0.4 + 0.3 <= 0.7 else 3  # .4 + .3 rounds to .7 or one ulp above it
    expected = 1.0 - np.array([5, 4, gamma_row3, 2, 6]) / 6
    np.testing.assert_allclose(risk, expected, rtol=0, atol=1e-15)


def test_invcp_is_searchsorted_not_a_loop_and_matches_the_definition():
    P, y = softmax_data(2_000, K=6, seed=11)
    P_test, _ = softmax_data(3_000, K=6, seed=12)
    for k in (1, 2, 4):
        r = RiskEstimator(method="invcp", top_k=k).fit(P, y)
        s = r.calibration_scores_
        s_star = -np.sort(-P_test, axis=1)[:, :k].sum(axis=1)
        # direct O(nm) definition: α = #{i : s_i ≥ s*}/(n+1); allow ulp differences in s*
        direct = (s[None, :] >= s_star[:, None] - 1e-12).sum(axis=1) / (s.shape[0] + 1)
        direct_strict = (s[None, :] >= s_star[:, None] + 1e-12).sum(axis=1) / (s.shape[0] + 1)
        risk = r.row_risk(P_test)
        assert np.all((risk <= direct + 1e-12) & (risk >= direct_strict - 1e-12))
        assert np.mean(direct - direct_strict > 0) < 0.01  # the ulp window rarely matters


def test_softmax_is_one_minus_top_k_mass():
    P, y = softmax_data(1_000, K=5, seed=5)
    for k in (1, 2, 4):
        r = RiskEstimator(method="softmax", top_k=k).fit(P, y)
        expected = 1.0 - np.sort(P, axis=1)[:, -k:].sum(axis=1)
        np.testing.assert_allclose(r.row_risk(P), np.clip(expected, 0, 1), atol=1e-15)
        assert r.estimate(P) == pytest.approx(float(np.mean(expected)), abs=1e-12)
    hand = RiskEstimator(method="softmax").fit(P_CAL, Y_CAL)
    assert hand.estimate(P_CAL) == pytest.approx(1 - (0.5 + 0.6 + 0.7 + 0.4 + 0.8) / 5)  # .4
    assert RiskEstimator(method="softmax", top_k=2).fit(P_CAL, Y_CAL).estimate(P_CAL) == pytest.approx(
        1 - (0.8 + 0.9 + 0.9 + 0.75 + 0.95) / 5  # .14
    )


def test_temperature_risk_equals_softmax_of_scaled_log_probabilities():
    P, y = softmax_data(4_000, K=5, seed=6, scale=2.0)
    sharp = P**2.5
    sharp /= sharp.sum(axis=1, keepdims=True)
    P_zero = sharp.copy()
    P_zero[:10, -1] = 0.0  # exact zeros: the logit is log(0 + 1e-12), as in scikit-learn
    P_zero /= P_zero.sum(axis=1, keepdims=True)
    for k in (1, 3):
        r = RiskEstimator(method="temperature", top_k=k).fit(sharp, y)
        temperature = r.calibrator_.temperature_
        assert abs(temperature - 2.5) < 0.25  # the model is over-confident by 2.5 in log space
        logits = np.log(P_zero + 1e-12) / temperature
        q = np.exp(logits - logits.max(axis=1, keepdims=True))
        q /= q.sum(axis=1, keepdims=True)
        expected = 1.0 - np.sort(q, axis=1)[:, -k:].sum(axis=1)
        np.testing.assert_allclose(r.row_risk(P_zero), expected, atol=1e-12)


def test_calibration_methods_fix_an_overconfident_model():
    # A calibrated model made over-confident (probabilities squared and renormalised): the
    # softmax estimate is far too low; every calibration method must bring it to the truth.
    P, y = softmax_data(40_000, K=4, seed=9, scale=1.5)
    sharp = P**2
    sharp /= sharp.sum(axis=1, keepdims=True)
    cal, test = slice(0, 20_000), slice(20_000, None)
    for k in (1, 2):
        ranks = (sharp[test] > sharp[test][np.arange(20_000), y[test]][:, None]).sum(axis=1) + 1
        observed = float(np.mean(ranks > k))
        smx = RiskEstimator(method="softmax", top_k=k).fit(sharp[cal], y[cal]).estimate(sharp[test])
        assert observed - smx > 0.05  # the miscalibration is large (≈ .12 for k = 1)
        for method in ("temperature", "platt", "histogram", "isotonic"):
            est = RiskEstimator(method=method, top_k=k).fit(sharp[cal], y[cal]).estimate(sharp[test])
            # binomial sd of the observed rate on 20,000 rows ≤ .0035; the calibrators
            # themselves are fitted on 20,000 rows: allow .015 (≥ 4 sd)
            assert est == pytest.approx(observed, abs=0.015), (method, k, est, observed)


def test_platt_histogram_isotonic_use_top_k_confidence():
    r = RiskEstimator(method="histogram", top_k=2, bins=1).fit(P_CAL, Y_CAL)
    # top-2 sets: A {0,1} ✓ (y=0), B {0,1} ✓, C ✓, D {0,1} ✓, E ✓ -> accuracy 1, risk 0
    np.testing.assert_allclose(r.row_risk(P_CAL), 0.0)
    r1 = RiskEstimator(method="histogram", top_k=1, bins=1).fit(P_CAL, Y_CAL)
    np.testing.assert_allclose(r1.row_risk(P_CAL), 2 / 5)  # B and D miss with top-1
    iso = RiskEstimator(method="isotonic").fit(P_CAL, Y_CAL)
    # confidences .4 ✗, .5 ✓, .6 ✗, .7 ✓, .8 ✓ -> PAVA: .4 -> 0, {.5, .6} -> .5, .7 -> 1, .8 -> 1
    np.testing.assert_allclose(iso.row_risk(P_CAL), [0.5, 0.5, 0.0, 1.0, 0.0])
    platt = RiskEstimator(method="platt").fit(P_CAL, Y_CAL)
    assert math.isfinite(platt.platt_coef_) and platt.platt_coef_ > 0  # risk falls with confidence
    risk = platt.row_risk(np.array([[0.4, 0.3, 0.3], [0.9, 0.05, 0.05]]))
    assert risk[0] > risk[1]


@pytest.mark.parametrize("method", RISK_METHODS)
def test_every_method_is_label_free_bounded_and_repr(method):
    P, y = softmax_data(600, K=4, seed=10)
    r = RiskEstimator(method=method, top_k=2).fit(P[:300], y[:300])
    risk = r.row_risk(P[300:])
    assert risk.shape == (300,) and risk.dtype == np.float64
    assert np.all((risk >= 0) & (risk <= 1))
    assert r.estimate(P[300:]) == pytest.approx(float(risk.mean()))
    assert r.kind == "risk" == RiskEstimator.kind
    assert repr(r).startswith(f"RiskEstimator(method={method!r}, top_k=2")


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="method must be one of"):
        RiskEstimator(method="conformal")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k must be an integer ≥ 1"):
        RiskEstimator(top_k=0)
    with pytest.raises(ValueError, match="top_k must be an integer ≥ 1"):
        RiskEstimator(top_k=True)
    with pytest.raises(ValueError, match="bins must be an integer ≥ 1"):
        RiskEstimator(method="histogram", bins=0)
    with pytest.raises(ValueError, match="strategy must be one of"):
        RiskEstimator(strategy="quantile")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        RiskEstimator("invcp")  # type: ignore[misc]  # keyword-only
    with pytest.raises(ValueError, match="top_k=3 must be smaller than the number of classes"):
        RiskEstimator(top_k=3).fit(P_CAL, Y_CAL)
    with pytest.raises(NotFittedError, match="RiskEstimator is not fitted yet"):
        RiskEstimator().row_risk(P_CAL)
    with pytest.raises(NotFittedError, match="call fit"):
        RiskEstimator(method="softmax").estimate(P_CAL)
    r = RiskEstimator().fit(P_CAL, Y_CAL)
    with pytest.raises(ValueError, match="fitted on 3 classes"):
        r.row_risk(np.array([[0.5, 0.5]]))
    with pytest.raises(ValueError, match="y_cal has 4 labels but there are 5 rows"):
        RiskEstimator().fit(P_CAL, Y_CAL[:4])
    with pytest.raises(ValueError, match="P_cal rows must sum to 1"):
        RiskEstimator().fit(P_CAL * 0.9, Y_CAL)
