"""GroupConditionalConformal: a hand-computed case, errors, and the Mondrian and marginal special cases."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calwatch.engine.conformal import GroupConditionalConformal
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.conformal.quantiles import conformal_quantile
from calwatch.engine.errors import NotFittedError

from ..synthetic import softmax_data

# Ten calibration rows, probabilities in eighths (exact in binary), LAC scores s = 1 − p_y in eighths:
#   row  P·8      y  s·8   A  B
#   0    7 1 0    0  1     x
#   1    1 6 1    1  2     x
#   2    4 3 1    0  4     x
#   3    2 1 5    2  3     x  x
#   4    6 1 1    0  2     x  x
#   5    4 3 1    1  5     x  x
#   6    5 1 2    2  6        x
#   7    1 7 0    1  1        x
#   8    6 1 1    2  7        x
#   9    0 0 8    2  0              (in no group)
P_CAL = (
    np.array(
        [
            [7, 1, 0],
            [1, 6, 1],
            [4, 3, 1],
            [2, 1, 5],
            [6, 1, 1],
            [4, 3, 1],
            [5, 1, 2],
            [1, 7, 0],
            [6, 1, 1],
            [0, 0, 8],
        ]
    )
    / 8
)
Y_CAL = np.array([0, 1, 0, 2, 0, 1, 2, 1, 2, 2])
GROUPS_CAL = np.zeros((10, 2), dtype=bool)
GROUPS_CAL[0:6, 0] = True  # A = rows 0-5
GROUPS_CAL[3:9, 1] = True  # B = rows 3-8
ALPHA = 0.3


def _fitted(**kwargs):
    return GroupConditionalConformal(score="lac", alpha=ALPHA, **kwargs).fit(P_CAL, Y_CAL, GROUPS_CAL)


def test_hand_computed_thresholds_and_sets():
    c = _fitted()
    # A: n = 6, rank ⌈7 · 0.7⌉ = 5 of 1 2 2 3 4 5 (eighths) -> 4/8 = .5
    # B: n = 6, rank 5 of 1 2 3 5 6 7 -> 6/8 = .75
    # all 10 rows: rank ⌈11 · 0.7⌉ = 8 of 0 1 1 2 2 3 4 5 6 7 -> 5/8 = .625 (rows in no group)
    assert c.thresholds_.tolist() == [0.5, 0.75]
    assert c.group_sizes_.tolist() == [6, 6]
    assert c.marginal_threshold_ == 0.625
    assert (c.n_groups_, c.n_classes_, c.n_calibration_, c.n_ungrouped_) == (2, 3, 10, 1)
    # LAC set at threshold T: {c : p_c ≥ 1 − T}, plus the top class.
    P = np.array([[4, 3, 1], [4, 3, 1], [5, 2, 1], [5, 2, 1], [3, 3, 2]]) / 8
    groups = np.array([[1, 0], [1, 1], [0, 1], [0, 0], [1, 0]], dtype=bool)
    assert c.row_thresholds(groups).tolist() == [0.5, 0.75, 0.75, 0.625, 0.5]
    assert c.predict_sets(P, groups).tolist() == [
        [True, False, False],  # A, T = .5: p ≥ .5 -> {0}
        [True, True, False],  # A and B, T = max(.5, .75) = .75: p ≥ .25 -> {0, 1}
        [True, True, False],  # B, T = .75: p ≥ .25 -> {0, 1}
        [True, False, False],  # no group, T = .625: p ≥ .375 -> {0}
        [True, False, False],  # A, T = .5: no p ≥ .5, the top class (first of the tie) is added
    ]
    # Marginal split conformal gives row 0 (in A, the easy group) T = .625 and {0, 1}: the group's
    # own threshold is smaller, not the max with the marginal one.
    marginal = SplitConformalClassifier(score="lac", alpha=ALPHA).fit(P_CAL, Y_CAL)
    assert marginal.quantiles_ == 0.625
    assert marginal.predict_sets(P[:1]).tolist() == [[True, True, False]]


def test_a_group_too_small_for_the_level_gets_full_sets():
    groups = np.column_stack([GROUPS_CAL, np.arange(10) >= 8])  # C = rows 8-9: ⌈3 · 0.7⌉ = 3 > 2
    c = GroupConditionalConformal(score="lac", alpha=ALPHA).fit(P_CAL, Y_CAL, groups)
    assert c.thresholds_.tolist() == [0.5, 0.75, math.inf]
    assert c.group_sizes_.tolist() == [6, 6, 2]
    sets = c.predict_sets(
        np.array([[0.9, 0.1, 0.0], [0.9, 0.1, 0.0]]), np.array([[1, 0, 1], [1, 0, 0]], dtype=bool)
    )
    assert sets.tolist() == [[True, True, True], [True, False, False]]


def test_min_group_rows_and_empty_groups_give_infinite_thresholds():
    groups = np.column_stack([GROUPS_CAL, np.zeros(10, dtype=bool)])  # an empty group
    c = GroupConditionalConformal(score="lac", alpha=ALPHA, min_group_rows=7).fit(P_CAL, Y_CAL, groups)
    assert c.thresholds_.tolist() == [math.inf, math.inf, math.inf]  # 6 < 7 rows; 0 rows
    assert c.group_sizes_.tolist() == [6, 6, 0]
    assert c.marginal_threshold_ == 0.625  # the marginal threshold has no guard
    assert GroupConditionalConformal(score="lac", alpha=ALPHA, min_group_rows=6).fit(
        P_CAL, Y_CAL, GROUPS_CAL
    ).thresholds_.tolist() == [0.5, 0.75]


def test_aps_uses_deterministic_scores():
    c = GroupConditionalConformal(score="aps", alpha=ALPHA).fit(P_CAL, Y_CAL, GROUPS_CAL)
    ref = SplitConformalClassifier(score="aps", alpha=ALPHA, randomized=False).fit(P_CAL, Y_CAL)
    scores = ref.label_scores(P_CAL, Y_CAL)  # u = 1: mass ranked at or above the label
    assert scores.tolist() == [0.875, 0.75, 0.5, 0.625, 0.75, 0.875, 0.875, 0.875, 1.0, 1.0]
    # A: rank 5 of .5 .625 .75 .75 .875 .875 -> .875; B: rank 5 of .625 .75 .875 .875 .875 1 -> .875
    assert c.thresholds_.tolist() == [0.875, 0.875]
    assert c.marginal_threshold_ == ref.quantiles_ == 0.875


def test_promise_repr_and_state_round_trip():
    assert GroupConditionalConformal(alpha=0.1).promise == (
        "coverage ≥ 90% within each group; rows in no group: the marginal threshold"
    )
    groups = np.column_stack([GROUPS_CAL, np.arange(10) >= 8])
    c = GroupConditionalConformal(score="lac", alpha=ALPHA, min_group_rows=2).fit(P_CAL, Y_CAL, groups)
    assert c.promise == "coverage ≥ 70% within each of the 3 groups; rows in no group: the marginal threshold"
    assert repr(c) == "GroupConditionalConformal(score='lac', alpha=0.3, min_group_rows=2)"
    arrays, info = c.state()
    json.dumps(info)
    back = GroupConditionalConformal.from_state(arrays, json.loads(json.dumps(info)))
    assert back.thresholds_.tolist() == [0.5, 0.75, math.inf]
    assert back.group_sizes_.tolist() == [6, 6, 2]
    assert (back.marginal_threshold_, back.n_ungrouped_, back.min_group_rows) == (
        0.625,
        0,
        2,
    )  # row 9 is in C
    P, _ = softmax_data(50, K=3, seed=1)
    member = np.random.default_rng(1).uniform(size=(50, 3)) < 0.4
    assert np.array_equal(back.predict_sets(P, member), c.predict_sets(P, member))
    with pytest.raises(ValueError, match="not a GroupConditionalConformal state"):
        GroupConditionalConformal.from_state(arrays, {**info, "version": 99})
    with pytest.raises(ValueError, match="missing"):
        GroupConditionalConformal.from_state({"thresholds": arrays["thresholds"]}, info)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"score": "raps"}, ValueError, "score must be one of"),
        ({"alpha": 1.5}, ValueError, "alpha must be in"),
        ({"alpha": "0.1"}, TypeError, "alpha must be a number"),
        ({"min_group_rows": -1}, ValueError, "min_group_rows must be an integer"),
        ({"min_group_rows": 2.5}, ValueError, "min_group_rows must be an integer"),
        ({"mondrian": "label"}, TypeError, "unexpected keyword"),
    ],
)
def test_bad_options(kwargs, error, message):
    with pytest.raises(error, match=message):
        GroupConditionalConformal(**kwargs)


@pytest.mark.parametrize(
    ("P", "y", "groups", "error", "message"),
    [
        (P_CAL, Y_CAL, GROUPS_CAL.astype(int), TypeError, "groups must be a boolean array"),
        (P_CAL, Y_CAL, GROUPS_CAL[:, 0], ValueError, r"groups must be a 2-D .* pass groups\[:, None\]"),
        (P_CAL, Y_CAL, GROUPS_CAL[:9], ValueError, "groups has 9 rows but P_cal has 10"),
        (P_CAL, Y_CAL, np.zeros((10, 0), dtype=bool), ValueError, "at least one group"),
        (P_CAL * 2, Y_CAL, GROUPS_CAL, ValueError, "P_cal"),
        (P_CAL[:, :1], Y_CAL, GROUPS_CAL, ValueError, "P_cal must have at least 2 columns"),
        (P_CAL, Y_CAL[:9], GROUPS_CAL, ValueError, "y_cal has 9 labels but there are 10 rows"),
        (P_CAL, Y_CAL + 1, GROUPS_CAL, ValueError, "y_cal holds labels outside"),
    ],
)
def test_fit_errors_name_the_argument(P, y, groups, error, message):
    with pytest.raises(error, match=message):
        GroupConditionalConformal().fit(P, y, groups)


def test_predict_errors_name_the_argument():
    c = _fitted()
    P = np.array([[0.5, 0.25, 0.25]] * 3)
    with pytest.raises(ValueError, match=r"groups has 3 groups .* fitted on 2"):
        c.predict_sets(P, np.ones((3, 3), dtype=bool))
    with pytest.raises(ValueError, match="groups has 2 rows but P has 3"):
        c.predict_sets(P, np.ones((2, 2), dtype=bool))
    with pytest.raises(TypeError, match="groups must be a boolean array"):
        c.predict_sets(P, np.ones((3, 2)))
    with pytest.raises(ValueError, match="P rows must sum to 1"):
        c.predict_sets(P * 0.5, np.ones((3, 2), dtype=bool))
    with pytest.raises(ValueError, match="fitted on 3 classes"):
        c.predict_sets(np.array([[0.5, 0.5]] * 3), np.ones((3, 2), dtype=bool))
    with pytest.raises(ValueError, match="groups has 3 groups"):
        c.row_thresholds(np.ones((3, 3), dtype=bool))
    fresh = GroupConditionalConformal()
    with pytest.raises(NotFittedError, match="not fitted"):
        fresh.predict_sets(P, np.ones((3, 2), dtype=bool))
    with pytest.raises(NotFittedError, match="not fitted"):
        fresh.state()


def test_data_frames_of_boolean_columns_are_accepted():
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame({"A": GROUPS_CAL[:, 0], "B": GROUPS_CAL[:, 1]})
    c = GroupConditionalConformal(score="lac", alpha=ALPHA).fit(P_CAL, Y_CAL, frame)
    assert c.thresholds_.tolist() == [0.5, 0.75]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 400),
    n_categories=st.integers(1, 6),
    score=st.sampled_from(["lac", "aps"]),
    alpha=st.sampled_from([0.05, 0.1, 0.2, 0.5]),
    min_rows=st.integers(0, 30),
)
def test_disjoint_groups_covering_every_row_are_mondrian(seed, n, n_categories, score, alpha, min_rows):
    P, y = softmax_data(n + 200, K=4, seed=seed % 10_000)
    rng = np.random.default_rng(seed)
    categories = rng.integers(0, n_categories, size=n + 200)  # some may have no calibration row
    one_hot = categories[:, None] == np.arange(n_categories)[None, :]
    cal, test = slice(0, n), slice(n, None)
    group = GroupConditionalConformal(score=score, alpha=alpha, min_group_rows=min_rows)
    group.fit(P[cal], y[cal], one_hot[cal])
    mondrian = SplitConformalClassifier(
        score=score, alpha=alpha, randomized=False, mondrian="category", kappa=min_rows
    ).fit(P[cal], y[cal], categories[cal])
    expected = [mondrian.quantiles_.get(k, math.inf) for k in range(n_categories)]
    assert group.thresholds_.tolist() == expected
    assert np.array_equal(
        group.predict_sets(P[test], one_hot[test]), mondrian.predict_sets(P[test], categories[test])
    )


@pytest.mark.parametrize("score", ["lac", "aps"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_group_of_every_row_is_split_conformal(score, seed):
    P, y = softmax_data(700, K=5, seed=seed)
    everyone = np.ones((700, 1), dtype=bool)
    group = GroupConditionalConformal(score=score, alpha=0.1).fit(P[:500], y[:500], everyone[:500])
    marginal = SplitConformalClassifier(score=score, alpha=0.1, randomized=False).fit(P[:500], y[:500])
    assert group.thresholds_[0] == group.marginal_threshold_ == marginal.quantiles_
    assert np.array_equal(group.predict_sets(P[500:], everyone[500:]), marginal.predict_sets(P[500:]))


@pytest.mark.parametrize("score", ["lac", "aps"])
def test_sets_contain_each_groups_own_split_conformal_set(score):
    # The heart of the guarantee: for a row in g, C(x) ⊇ the split conformal set fitted on g's rows alone.
    P, y = softmax_data(1_500, K=6, seed=7)
    member = np.random.default_rng(7).uniform(size=(1_500, 4)) < [0.5, 0.3, 0.1, 0.02]
    cal, test = slice(0, 1_000), slice(1_000, None)
    c = GroupConditionalConformal(score=score, alpha=0.1).fit(P[cal], y[cal], member[cal])
    sets = c.predict_sets(P[test], member[test])
    for g in range(4):
        rows = member[cal, g]
        alone = SplitConformalClassifier(score=score, alpha=0.1, randomized=False)
        if rows.sum() == 0:
            continue
        alone.fit(P[cal][rows], y[cal][rows])
        inside = member[test, g]
        own = alone.predict_sets(P[test][inside])
        assert not (own & ~sets[inside]).any()
        scores = alone.label_scores(P[cal][rows], y[cal][rows])
        assert c.thresholds_[g] == conformal_quantile(scores, 0.1)
    assert c.group_sizes_.tolist() == member[cal].sum(axis=0).tolist()
    assert c.n_ungrouped_ == int((~member[cal].any(axis=1)).sum())


def test_row_thresholds_in_chunks_match_the_direct_maximum(monkeypatch):
    import calwatch.engine.conformal.group_conditional as module

    monkeypatch.setattr(module, "_CHUNK_ENTRIES", 7)  # several chunks, one ragged
    P, y = softmax_data(300, K=3, seed=3)
    member = np.random.default_rng(3).uniform(size=(300, 3)) < 0.3
    c = GroupConditionalConformal(alpha=0.2).fit(P[:200], y[:200], member[:200])
    got = c.row_thresholds(member[200:])
    direct = np.where(member[200:], c.thresholds_, -np.inf).max(axis=1)
    direct[~member[200:].any(axis=1)] = c.marginal_threshold_
    assert np.array_equal(got, direct)
