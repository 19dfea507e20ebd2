"""Adaptive conformal inference: ACI steps by hand, both variants, the edges, the identity."""

import math

import numpy as np
import pytest

from calwatch.engine.conformal.adaptive import Adaptive, ConformalLevels, CoverLimits, LevelSets
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.errors import NotFittedError

from ..synthetic import softmax_data

# Four calibration rows; LAC scores 1 − p_y: .3, .6, .5, .4 -> sorted .3 .4 .5 .6, n = 4.
# Level α takes s_(k), k = ⌈5(1 − α)⌉: α = .4 -> k = 3 -> .5; α = .34 -> ⌈3.3⌉ = 4 -> .6.
P_CAL = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
Y_CAL = np.array([0, 1, 2, 0])
# Test rows: [.55 .45 0] with label 1 (score .55, first score ≥ it is s_(4) = .6: rank 4, in
# the set iff k ≥ 4 iff α < 1 − 3/5 = .4) three times, then label 0 (score .45, rank 3: in iff
# α < 1 − 2/5 = .6).
P_TEST = np.array([[0.55, 0.45, 0.0]] * 4)
Y_TEST = np.array([1, 1, 1, 0])


def lac(alpha=0.4, **kwargs):
    return SplitConformalClassifier(score="lac", alpha=alpha, **kwargs)


def test_one_aci_step_by_hand():
    # α = .1, γ = .05, α_1 = .1: a miss -> .1 + .05·(.1 − 1) = .055; a hit -> .055 + .005 = .06
    aci = Adaptive(lac(alpha=0.1), gamma=0.05).fit(P_CAL, Y_CAL)
    sets = np.array([[True, False, False], [True, False, False]])
    aci.update(sets, np.array([1, 0]))
    assert aci.alpha_t_ == pytest.approx(0.06, abs=1e-15)
    h = aci.history()
    assert h["alpha_t"].to_list() == [0.1, 0.1]  # both sets taken at one level (batched)
    np.testing.assert_allclose(h["alpha_next"].to_numpy(), [0.055, 0.06], atol=1e-15)
    assert h["covered"].to_list() == [False, True]
    assert h["coverage"].to_list() == [0.0, 0.5]


def test_row_by_row_variant_by_hand():
    aci = Adaptive(lac(allow_empty=True), gamma=0.1).fit(P_CAL, Y_CAL)
    limits = aci.levels_.cover_limits(P_TEST, Y_TEST)
    np.testing.assert_allclose(limits, [0.4, 0.4, 0.4, 0.6], atol=1e-9)
    aci.update(P_TEST, Y_TEST)
    h = aci.history()
    # α_1 = .4 (miss: k = 3 < 4) -> .4 + .1(.4 − 1) = .34 (hit: k = 4) -> .38 (hit: ⌈3.1⌉ = 4)
    # -> .42 (label 0, rank 3: ⌈2.9⌉ = 3, hit) -> .46
    np.testing.assert_allclose(h["alpha_t"].to_numpy(), [0.4, 0.34, 0.38, 0.42], atol=1e-12)
    assert h["covered"].to_list() == [False, True, True, True]
    assert aci.alpha_t_ == pytest.approx(0.46, abs=1e-12)
    # identity: mean(err) − α = 1/4 − .4 = −.15 = (α_1 − α_5)/(γT) = (.4 − .46)/(.1·4)
    assert aci.long_run_gap() == pytest.approx(-0.15, abs=1e-12)
    assert (aci.alpha_1_ - aci.alpha_t_) / (aci.gamma * aci.n_updates_) == pytest.approx(-0.15, abs=1e-12)
    assert aci.coverage_ == 0.75


def test_batched_variant_by_hand():
    aci = Adaptive(lac(allow_empty=True), gamma=0.1).fit(P_CAL, Y_CAL)
    sets = aci.predict_sets(P_TEST)  # all at α = .4: q̂ = .5, scores (.45, .55, 1) -> {0}
    assert sets.tolist() == [[True, False, False]] * 4
    aci.update(sets, Y_TEST)
    # three misses then a hit, all judged at .4: .4 -> .34 -> .28 -> .22 -> .26
    np.testing.assert_allclose(aci.history()["alpha_next"].to_numpy(), [0.34, 0.28, 0.22, 0.26], atol=1e-12)
    assert aci.long_run_gap() == pytest.approx(0.75 - 0.4, abs=1e-12)  # = (.4 − .26)/(.1·4)
    assert aci.max_batch_rows_ == 4
    assert aci.long_run_bound() == pytest.approx((0.6 + 0.1 * 4) / (0.1 * 4))


def test_levels_match_the_calibrator_at_its_own_alpha():
    P, y = softmax_data(1200, K=4, seed=3)
    for kwargs in [
        {},
        {"allow_empty": True},
        {"mondrian": "label"},
        {"score": "aps", "randomized": False},
        {"score": "raps", "randomized": False},
    ]:
        cal = SplitConformalClassifier(alpha=0.1, **kwargs)
        aci = Adaptive(cal).fit(P[:600], y[:600])
        np.testing.assert_array_equal(
            aci.predict_sets(P[600:]), cal.predict_sets(P[600:]), err_msg=str(kwargs)
        )
        q = aci.levels_.threshold(0.1)
        expected = cal.quantiles_ if not isinstance(cal.quantiles_, dict) else list(cal.quantiles_.values())
        np.testing.assert_array_equal(q, expected)


def test_cover_limits_agree_with_sets_at_every_level():
    P, y = softmax_data(1000, K=5, seed=4)
    for kwargs in [
        {},
        {"allow_empty": True},
        {"mondrian": "label", "kappa": 150},
        {"score": "aps", "randomized": False},
    ]:
        cal = SplitConformalClassifier(alpha=0.1, **kwargs)
        levels = Adaptive(cal).fit(P[:500], y[:500]).levels_
        limits = levels.cover_limits(P[500:], y[500:])
        for a in [-0.3, 0.0, 0.001, 0.02, 0.1, 0.25, 0.5, 0.9, 0.999, 1.0, 1.5]:
            covered = levels.sets_at_alpha(P[500:], a)[np.arange(500), y[500:]]
            np.testing.assert_array_equal(covered, a < limits, err_msg=f"{kwargs} α={a}")


def test_edges_full_sets_below_zero_empty_or_top_class_above_one():
    P, y = softmax_data(400, K=4, seed=5)
    empty_ok = Adaptive(lac(alpha=0.1, allow_empty=True)).fit(P[:200], y[:200]).levels_
    top_only = Adaptive(lac(alpha=0.1)).fit(P[:200], y[:200]).levels_
    assert empty_ok.sets_at_alpha(P[200:], 0.0).all()
    assert empty_ok.sets_at_alpha(P[200:], -1.0).all()
    assert empty_ok.sets_at_alpha(P[200:], 1 / 201 - 1e-6).all()  # ⌈201(1 − α)⌉ = 201 > n
    assert not empty_ok.sets_at_alpha(P[200:], 1.0).any()
    assert not empty_ok.sets_at_alpha(P[200:], 3.0).any()
    top = top_only.sets_at_alpha(P[200:], 1.0)
    assert (top.sum(axis=1) == 1).all() and (top.argmax(axis=1) == P[200:].argmax(axis=1)).all()


def test_row_by_row_slow_path_matches_fast_path():
    class OnlySets:  # a calibrator offering sets_at_alpha and nothing else
        def __init__(self):
            self.alpha = 0.1
            self.inner = lac(alpha=0.1)

        def fit(self, P, y):
            self.inner.fit(P, y)
            self.levels = ConformalLevels.from_calibrator(self.inner, P, y)
            return self

        def sets_at_alpha(self, P, alpha):
            return self.levels.sets_at_alpha(P, alpha)

    P, y = softmax_data(900, K=3, seed=6)
    slow = Adaptive(OnlySets(), gamma=0.02).fit(P[:300], y[:300])
    fast = Adaptive(lac(alpha=0.1), gamma=0.02).fit(P[:300], y[:300])
    assert isinstance(slow.levels_, LevelSets) and not isinstance(slow.levels_, CoverLimits)
    slow.update(P[300:], y[300:])
    fast.update(P[300:], y[300:])
    np.testing.assert_allclose(slow.history()["alpha_t"].to_numpy(), fast.history()["alpha_t"].to_numpy())
    assert slow.alpha_t_ == pytest.approx(fast.alpha_t_)


def test_identity_and_bound_hold_on_any_sequence():
    # An adversarial, non-exchangeable stream: the labels of the second half are shuffled.
    P, y = softmax_data(6000, K=4, seed=7)
    y_stream = y[1000:].copy()
    y_stream[2500:] = np.random.default_rng(0).permutation(y_stream[2500:])
    aci = Adaptive(lac(alpha=0.1, allow_empty=True), gamma=0.01).fit(P[:1000], y[:1000])
    for start in range(0, 5000, 250):  # row by row, in several calls
        aci.update(P[1000 + start : 1250 + start], y_stream[start : start + 250])
    T = aci.n_updates_
    assert T == 5000
    assert aci.long_run_gap() == pytest.approx((aci.alpha_1_ - aci.alpha_t_) / (aci.gamma * T), abs=1e-12)
    bound = (max(0.1, 0.9) + 0.01) / (0.01 * T)
    assert aci.long_run_bound() == pytest.approx(bound)
    assert abs(aci.long_run_gap()) <= bound
    lo, hi = aci.alpha_range_
    assert lo >= -0.01 and hi <= 1.01


def test_alpha_start_and_target_attributes():
    aci = Adaptive(lac(alpha=0.2), gamma=0.01, alpha_start=0.05)
    assert aci.alpha == 0.2 and aci.target_coverage == pytest.approx(0.8)
    aci.fit(P_CAL, Y_CAL)
    assert aci.alpha_t_ == 0.05 and aci.alpha_range_ == (0.05, 0.05)
    assert Adaptive(lac(alpha=0.2), alpha=0.3).alpha == 0.3
    assert aci.history().height == 0 and math.isnan(aci.coverage_) and aci.long_run_bound() == math.inf


def test_errors():
    with pytest.raises(ValueError, match="gamma"):
        Adaptive(lac(), gamma=0.0)
    with pytest.raises(ValueError, match="alpha"):
        Adaptive(object())
    with pytest.raises(NotFittedError, match="fit"):
        Adaptive(lac()).predict_sets(P_CAL)

    class NoLevels:
        alpha = 0.1

        def fit(self, P, y):
            return self

    no_levels = Adaptive(NoLevels())
    with pytest.raises(TypeError, match="sets_at_alpha"):
        no_levels.fit(P_CAL, Y_CAL)
    by_category = SplitConformalClassifier(alpha=0.1, mondrian="category")
    with pytest.raises(ValueError, match="categories"):
        ConformalLevels.from_calibrator(by_category.fit(P_CAL, Y_CAL, categories=[0, 0, 1, 1]), P_CAL, Y_CAL)
    aci = Adaptive(lac()).fit(P_CAL, Y_CAL)
    with pytest.raises(ValueError, match="2-D"):
        aci.update(np.array([True, False]), np.array([0, 1]))


# ----------------------------------------------------------------- corrected labels (issue 36.5)
def test_a_correction_by_hand():
    # α = .1, γ = .05, α_1 = .1, both sets {0}. Labels 1, 2 (two misses):
    # .1 + .05·(.1 − 1)·2 = .01. Correcting row 0 to 0 (miss -> hit) and row 1 to 1 (miss ->
    # miss) adds .05·((1 − 0) + (1 − 1)) = .05: .06 = .1 + .05·(.1 − 0) + .05·(.1 − 1), the
    # level of the final labels 0, 1 (a hit, then a miss).
    aci = Adaptive(lac(alpha=0.1), gamma=0.05).fit(P_CAL, Y_CAL)
    sets = np.array([[True, False, False], [True, False, False]])
    aci.update(sets, np.array([1, 2]))
    assert aci.alpha_t_ == pytest.approx(0.01, abs=1e-15)
    aci.correct(sets, np.array([1, 2]), np.array([0, 1]))
    assert aci.alpha_t_ == pytest.approx(0.06, abs=1e-15)
    assert aci.n_updates_ == 2 and aci.coverage_ == 0.5  # a correction is not a new row
    # the identity with the final labels: mean(err) − α = .5 − .1 = (α_1 − α_3)/(γT) = .04/.1
    assert aci.long_run_gap() == pytest.approx(0.4, abs=1e-12)
    assert (aci.alpha_1_ - aci.alpha_t_) / (aci.gamma * aci.n_updates_) == pytest.approx(0.4, abs=1e-12)
    assert aci.alpha_range_ == pytest.approx((0.01, 0.1))
    # the history keeps the rows as they were fed back
    np.testing.assert_allclose(aci.history()["alpha_next"].to_numpy(), [0.055, 0.01], atol=1e-15)


def test_a_correction_gives_the_level_of_a_stream_that_only_got_the_final_labels():
    P, y = softmax_data(4000, K=4, seed=11)
    corrected = Adaptive(lac(alpha=0.1), gamma=0.01).fit(P[:1000], y[:1000])
    final_only = Adaptive(lac(alpha=0.1), gamma=0.01).fit(P[:1000], y[:1000])
    wrong_only = Adaptive(lac(alpha=0.1), gamma=0.01).fit(P[:1000], y[:1000])
    for start in range(1000, 4000, 300):
        Pb, yb = P[start : start + 300], y[start : start + 300]
        sets = corrected.predict_sets(Pb)
        np.testing.assert_array_equal(sets, final_only.predict_sets(Pb))  # the sets taken after
        wrong = (yb + 1) % 4
        corrected.update(sets, wrong)  # wrong labels first...
        corrected.correct(sets, wrong, yb)  # ...corrected before the next sets are taken
        final_only.update(sets, yb)
        wrong_only.update(wrong_only.predict_sets(Pb), wrong)
        # Equal up to the float rounding of summing the same steps in another order: a few
        # hundred additions of terms ≤ 1 in size, each rounded by ≤ 2^-53 (so atol, not rtol:
        # α_t passes near 0).
        np.testing.assert_allclose(corrected.alpha_t_, final_only.alpha_t_, rtol=0, atol=1e-12)
        assert corrected.coverage_ == final_only.coverage_
    assert corrected.n_updates_ == final_only.n_updates_ == 3000
    assert abs(wrong_only.alpha_t_ - final_only.alpha_t_) > 1  # without the correction: far off


def test_a_correction_that_keeps_each_rows_miss_moves_nothing():
    aci = Adaptive(lac(alpha=0.1), gamma=0.05).fit(P_CAL, Y_CAL)
    sets = np.array([[True, True, False], [True, False, False], [True, False, False]])
    aci.update(sets, np.array([0, 1, 0]))
    state = (aci.alpha_t_, aci.coverage_, aci.alpha_range_)
    # same labels; 0 -> 1 in the set both times; 1 -> 2 out of it both times
    aci.correct(sets, np.array([0, 1, 0]), np.array([0, 1, 0]))
    aci.correct(sets, np.array([0, 1, 0]), np.array([1, 2, 0]))
    assert (aci.alpha_t_, aci.coverage_, aci.alpha_range_) == state  # exactly, not approximately


def test_a_correction_with_bad_input_changes_nothing():
    aci = Adaptive(lac(alpha=0.1), gamma=0.05).fit(P_CAL, Y_CAL)
    sets = np.array([[True, False, False], [True, False, False]])
    aci.update(sets, np.array([1, 2]))
    state = dict(vars(aci))
    with pytest.raises(ValueError, match="y_new"):
        aci.correct(sets, np.array([1, 2]), np.array([0, 3]))  # class 3 of 3
    with pytest.raises(ValueError, match="2-D boolean"):
        aci.correct(P_TEST[:2], np.array([1, 2]), np.array([0, 1]))  # probabilities, not sets
    with pytest.raises(ValueError, match="y_old"):
        aci.correct(sets, np.array([1]), np.array([0, 1]))
    assert vars(aci) == state
    with pytest.raises(NotFittedError, match="fit"):
        Adaptive(lac()).correct(sets, np.array([1, 2]), np.array([0, 1]))
