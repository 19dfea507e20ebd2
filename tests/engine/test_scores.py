"""Hand-computed nonconformity scores (ALGORITHMS.md §1)."""

import numpy as np
import pytest

from calwatch.engine.conformal.scores import aps_scores, class_scores, label_ranks, label_scores, lac_scores

P = np.array([[0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [0.1, 0.6, 0.3]])


def test_lac_is_one_minus_probability():
    np.testing.assert_allclose(lac_scores(P)[0], [0.5, 0.7, 0.8])


def test_aps_deterministic_is_mass_ranked_at_or_above():
    s = aps_scores(P)
    np.testing.assert_allclose(s[0], [0.5, 0.8, 1.0])
    # tie between classes 0 and 1: the lower index ranks first
    np.testing.assert_allclose(s[1], [0.4, 0.8, 1.0])
    np.testing.assert_allclose(s[2], [1.0, 0.6, 0.9])


def test_aps_randomised_uses_u_times_own_mass():
    s = aps_scores(P, u=np.array([0.5, 0.0, 1.0]))
    np.testing.assert_allclose(s[0], [0.25, 0.65, 0.9])  # 0 + .5*.5, .5 + .5*.3, .8 + .5*.2
    np.testing.assert_allclose(s[1], [0.0, 0.4, 0.8])
    np.testing.assert_allclose(s[2], [1.0, 0.6, 0.9])


def test_raps_adds_rank_penalty_beyond_k_reg():
    s = class_scores(P, "raps", raps_lambda=0.1, raps_k_reg=1)
    np.testing.assert_allclose(s[0], [0.5, 0.9, 1.2])  # ranks 1, 2, 3 -> penalties 0, .1, .2


def test_label_scores_equal_class_scores_bitwise():
    rng = np.random.default_rng(3)
    Q = rng.dirichlet(np.ones(7), size=500)
    y = rng.integers(0, 7, size=500)
    for score in ("lac", "aps", "raps"):
        full = class_scores(Q, score, raps_lambda=0.05, raps_k_reg=2)
        got = label_scores(Q, y, score, raps_lambda=0.05, raps_k_reg=2)
        assert np.array_equal(got, full[np.arange(500), y])


def test_label_ranks_one_based_with_index_ties():
    assert label_ranks(P, np.array([1, 1, 0])).tolist() == [2, 2, 3]
    assert label_ranks(P, np.array([0, 0, 1])).tolist() == [1, 1, 1]


@pytest.mark.parametrize("score", ["aps", "raps"])
def test_top_class_score_is_at_most_its_probability_plus_nothing(score):
    top = class_scores(P, score, raps_lambda=0.3, raps_k_reg=1)[np.arange(3), P.argmax(axis=1)]
    np.testing.assert_allclose(top, P.max(axis=1))


def test_descending_order_equals_a_stable_sort_on_tie_heavy_rows():
    from calwatch.engine.conformal.scores import descending_order

    rng = np.random.default_rng(5)
    for K in (2, 3, 10, 70):
        Q = rng.integers(0, 4, size=(2000, K)).astype(float) + 1.0  # many exact ties
        Q /= Q.sum(axis=1, keepdims=True)
        assert np.array_equal(descending_order(Q), np.argsort(-Q, axis=1, kind="stable"))
        reference = np.cumsum(np.take_along_axis(Q, np.argsort(-Q, axis=1, kind="stable"), 1), 1)
        expected = np.empty_like(reference)
        np.put_along_axis(expected, np.argsort(-Q, axis=1, kind="stable"), reference, axis=1)
        np.testing.assert_allclose(aps_scores(Q), expected, rtol=0, atol=1e-12)
