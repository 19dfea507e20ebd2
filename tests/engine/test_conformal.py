"""SplitConformalClassifier: hand-computed cases, Mondrian, the κ guard, p-values, errors."""

import math

import numpy as np
import pytest

from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.errors import NotFittedError

from ..synthetic import softmax_data

P_CAL = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
Y_CAL = np.array([0, 1, 2, 0])


def test_lac_hand_computed():
    # scores 1 − p_y: .3, .6, .5, .4; rank ⌈5 · 0.6⌉ = 3 -> q̂ = .5
    c = SplitConformalClassifier(score="lac", alpha=0.4).fit(P_CAL, Y_CAL)
    assert c.quantiles_ == pytest.approx(0.5)
    sets = c.predict_sets(np.array([[0.55, 0.45, 0.0], [0.5, 0.5, 0.0], [0.34, 0.33, 0.33]]))
    assert sets.tolist() == [
        [True, False, False],
        [True, True, False],  # both scores 1 − .5 = .5 ≤ q̂
        [True, False, False],  # nothing reaches p ≥ .5: the top class is still included
    ]


def test_aps_hand_computed():
    # APS (u = 1) scores of the true labels: .7, .9, .5, .6 -> q̂ = third smallest = .7
    c = SplitConformalClassifier(score="aps", alpha=0.4, randomized=False).fit(P_CAL, Y_CAL)
    assert c.quantiles_ == pytest.approx(0.7)
    sets = c.predict_sets(np.array([[0.6, 0.1, 0.3], [0.3, 0.3, 0.4]]))
    # row 1: cumulative .6 (0), .9 (2), 1.0 (1) -> {0}; row 2: .4 (2), .7 (0), 1.0 (1) -> {2, 0}
    assert sets.tolist() == [[True, False, False], [True, False, True]]


def test_raps_hand_computed():
    # RAPS λ = .2, k_reg = 1: true-label scores .7, .9 + .2, .5, .6 -> q̂ = .7
    c = SplitConformalClassifier(score="raps", alpha=0.4, raps_lambda=0.2, raps_k_reg=1, randomized=False)
    c.fit(P_CAL, Y_CAL)
    assert c.quantiles_ == pytest.approx(0.7)
    # [.45, .35, .2]: scores .45, .8 + .2, 1 + .4 -> only the top class
    assert c.predict_sets(np.array([[0.45, 0.35, 0.2]])).tolist() == [[True, False, False]]


def test_threshold_infinite_when_too_few_rows_gives_full_sets():
    c = SplitConformalClassifier(score="lac", alpha=0.1).fit(P_CAL, Y_CAL)  # ⌈5 · .9⌉ = 5 > 4
    assert c.quantiles_ == math.inf
    assert c.predict_sets(P_CAL).all()


P_BIN = np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7], [0.45, 0.55]])
Y_BIN = np.array([0, 0, 0, 1, 1])


def test_mondrian_by_label_hand_computed():
    # class 0 scores .1, .2, .4 -> rank ⌈4 · .5⌉ = 2 -> .2; class 1 scores .3, .45 -> rank 2 -> .45
    c = SplitConformalClassifier(score="lac", alpha=0.5, mondrian="label").fit(P_BIN, Y_BIN)
    assert c.quantiles_ == pytest.approx({0: 0.2, 1: 0.45})
    assert c.category_counts_ == {0: 3, 1: 2}
    sets = c.predict_sets(np.array([[0.75, 0.25], [0.4, 0.6], [0.85, 0.15], [0.5, 0.5]]))
    assert sets.tolist() == [[True, False], [False, True], [True, False], [True, False]]


def test_kappa_guard_gives_the_small_class_every_time():
    c = SplitConformalClassifier(score="lac", alpha=0.5, mondrian="label", kappa=3).fit(P_BIN, Y_BIN)
    assert c.quantiles_[1] == math.inf and c.quantiles_[0] == pytest.approx(0.2)
    assert c.predict_sets(np.array([[0.99, 0.01]])).tolist() == [[True, True]]


def test_mondrian_by_category_and_unseen_category():
    cats = np.array(["a", "a", "a", "b", "b"])
    c = SplitConformalClassifier(score="lac", alpha=0.5).fit(P_BIN, Y_BIN, categories=cats)
    # a: scores .1, .2, .4 -> .2; b: scores .3, .45 -> .45
    assert c.quantiles_ == pytest.approx({"a": 0.2, "b": 0.45})
    sets = c.predict_sets(np.array([[0.7, 0.3]] * 3), categories=np.array(["a", "b", "zzz"]))
    assert sets.tolist() == [[True, False], [True, False], [True, True]]
    with pytest.raises(ValueError, match="categories is required"):
        c.predict_sets(np.array([[0.7, 0.3]]))


def test_sets_always_contain_top_class_and_randomised_is_reproducible():
    P, y = softmax_data(3000, 6, seed=0)
    for score in ("lac", "aps", "raps"):
        a = SplitConformalClassifier(score=score, alpha=0.3, randomized=True, seed=5).fit(P, y)
        b = SplitConformalClassifier(score=score, alpha=0.3, randomized=True, seed=5).fit(P, y)
        Pt, _ = softmax_data(500, 6, seed=1)
        sa, sb = a.predict_sets(Pt), b.predict_sets(Pt)
        assert sa[np.arange(500), Pt.argmax(axis=1)].all()
        assert np.array_equal(sa, sb)


@pytest.mark.parametrize("mondrian", [None, "label"])
@pytest.mark.parametrize("score", ["lac", "aps", "raps"])
def test_p_value_above_alpha_iff_in_set(score, mondrian):
    P, y = softmax_data(2000, 5, seed=2)
    c = SplitConformalClassifier(score=score, alpha=0.1, mondrian=mondrian, randomized=False).fit(P, y)
    Pt, _ = softmax_data(1000, 5, seed=3)
    sets, pv = c.predict_sets(Pt), c.p_values(Pt)
    assert pv.dtype == np.float64 and pv.shape == Pt.shape
    top = np.zeros_like(sets)
    top[np.arange(1000), Pt.argmax(axis=1)] = True
    assert np.array_equal(sets & ~top, (pv > 0.1) & ~top)


def test_p_values_category_mondrian_hand_computed():
    cats = np.array(["a", "a", "a", "b", "b"])
    c = SplitConformalClassifier(score="lac", alpha=0.5).fit(P_BIN, Y_BIN, categories=cats)
    pv = c.p_values(np.array([[0.8, 0.2], [0.8, 0.2]]), categories=np.array(["a", "b"]))
    # a: scores {.1, .2, .4}; class 0 score .2 -> (1 + 2)/4; class 1 score .8 -> 1/4
    # b: scores {.3, .45}; class 0 score .2 -> (1 + 2)/3; class 1 -> 1/3
    np.testing.assert_allclose(pv, [[3 / 4, 1 / 4], [3 / 3, 1 / 3]])


def test_raps_tuning_picks_parameters_and_keeps_coverage():
    P, y = softmax_data(5000, 10, seed=4, scale=1.0)
    for tune in ("size", "adapt"):
        c = SplitConformalClassifier(score="raps", alpha=0.1, tune=tune, seed=1).fit(P, y)
        assert c.n_calibration_ == 4000
        assert 0 <= c.raps_k_reg_ <= 10 and c.raps_lambda_ > 0
        Pt, yt = softmax_data(20000, 10, seed=5, scale=1.0)
        coverage = c.predict_sets(Pt)[np.arange(20000), yt].mean()
        # one split: sd ≈ sqrt(.09/4002) + sqrt(.09/20000) ≈ .0068; 4 sd below target
        assert coverage >= 0.9 - 4 * 0.0068


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"score": "bogus"}, "score must be one of"),
        ({"alpha": 1.5}, "alpha must be in"),
        ({"alpha": 0}, "alpha must be in"),
        ({"mondrian": "class"}, "mondrian must be"),
        ({"kappa": -1}, "kappa must be"),
        ({"raps_lambda": -0.1}, "raps_lambda must be"),
        ({"tune": "size"}, "needs score='raps'"),
    ],
)
def test_bad_options_rejected_in_constructor(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SplitConformalClassifier(**kwargs)


def test_options_are_keyword_only():
    with pytest.raises(TypeError):
        SplitConformalClassifier("lac", 0.1)  # type: ignore[misc]


def test_unfitted_use_raises():
    c = SplitConformalClassifier()
    with pytest.raises(NotFittedError, match="not fitted"):
        c.predict_sets(P_CAL)
    with pytest.raises(NotFittedError, match="not fitted"):
        c.p_values(P_CAL)


@pytest.mark.parametrize(
    ("P", "y", "error", "message"),
    [
        (np.array([[0.5, np.nan], [0.5, 0.5]]), [0, 1], ValueError, "P_cal contains NaN"),
        (np.array([[0.5, 0.6], [0.5, 0.5]]), [0, 1], ValueError, "row 0 sums to 1.1"),
        (np.array([[1.5, -0.5], [0.5, 0.5]]), [0, 1], ValueError, r"in \[0, 1\]"),
        (np.array([0.5, 0.5]), [0], ValueError, "2-D array"),
        (np.array([["a", "b"]]), [0], TypeError, "numeric"),
        (np.array([[0.5, 0.5], [0.5, 0.5]]), [0, 2], ValueError, "outside the known classes"),
        (np.array([[0.5, 0.5], [0.5, 0.5]]), [0], ValueError, "1 labels but there are 2 rows"),
        (np.array([[0.5, 0.5], [0.5, 0.5]]), [0.5, 1], ValueError, "integer"),
    ],
)
def test_bad_input_names_the_argument(P, y, error, message):
    with pytest.raises(error, match=message):
        SplitConformalClassifier().fit(P, np.asarray(y))


def test_wrong_number_of_classes_at_predict():
    c = SplitConformalClassifier(score="lac", alpha=0.4).fit(P_CAL, Y_CAL)
    with pytest.raises(ValueError, match="fitted on 3 classes"):
        c.predict_sets(np.array([[0.5, 0.5]]))


def test_allow_empty_returns_the_plain_conformal_set():
    c = SplitConformalClassifier(score="lac", alpha=0.4, allow_empty=True).fit(P_CAL, Y_CAL)
    # q̂ = .5: no class of [.34, .33, .33] reaches p ≥ .5, so the set is empty
    assert c.predict_sets(np.array([[0.34, 0.33, 0.33], [0.55, 0.45, 0.0]])).tolist() == [
        [False, False, False],
        [True, False, False],
    ]
    assert "allow_empty=True" in repr(c)


def test_top_class_calibrated_hand_computed():
    # Deterministic APS with the top class's score counted as 0: rows 0, 2, 3 are right (score 0),
    # row 1 scores .5 + .4 = .9. Sorted 0, 0, 0, .9: α = .4 takes s_(3) = 0 (only the top class);
    # α = .2 takes s_(⌈5 · .8⌉) = s_(4) = .9.
    P = np.array([[0.6, 0.1, 0.3], [0.3, 0.3, 0.4]])
    tight = SplitConformalClassifier(score="aps", alpha=0.4, randomized=False, top_class="calibrated")
    assert tight.fit(P_CAL, Y_CAL).quantiles_ == 0.0
    assert tight.predict_sets(P).tolist() == [[True, False, False], [False, False, True]]
    assert tight.label_scores(P_CAL, Y_CAL).tolist() == [0.0, pytest.approx(0.9), 0.0, 0.0]
    wide = SplitConformalClassifier(score="aps", alpha=0.2, randomized=False, top_class="calibrated")
    assert wide.fit(P_CAL, Y_CAL).quantiles_ == pytest.approx(0.9)
    # row 0: top class 0 (score 0), class 2 at .9 ≤ .9, class 1 at 1.0; row 1: top 2, class 0 at .7
    assert wide.predict_sets(P).tolist() == [[True, False, True], [True, False, True]]
    assert wide.class_scores(P)[:, [0, 2]].tolist() == [[0.0, pytest.approx(0.9)], [pytest.approx(0.7), 0.0]]


def test_defaults_randomise_aps_and_raps_with_the_top_class_calibrated():
    aps, raps, lac = (SplitConformalClassifier(score=s) for s in ("aps", "raps", "lac"))
    assert (aps.randomized, aps.top_class) == (True, "calibrated")
    assert (raps.randomized, raps.top_class) == (True, "calibrated")
    assert (lac.randomized, lac.top_class) == (False, "added")
    assert repr(aps) == "SplitConformalClassifier(score='aps', alpha=0.1)"
    det = SplitConformalClassifier(score="aps", randomized=False)
    assert det.top_class == "added" and "randomized=False" in repr(det)
    with pytest.raises(ValueError, match="top_class must be None with allow_empty=True"):
        SplitConformalClassifier(score="aps", top_class="added", allow_empty=True)
    with pytest.raises(ValueError, match="top_class must be None, 'calibrated' or 'added'"):
        SplitConformalClassifier(score="aps", top_class="always")  # type: ignore[arg-type]
