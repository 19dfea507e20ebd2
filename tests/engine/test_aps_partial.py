"""APS/RAPS from a partial order (top blocks) equal the full sort, bit for bit.

The partial path (``scores.prediction_sets``, ``scores.label_scores`` and through them
``SplitConformalClassifier.fit`` / ``predict_sets``) must give exactly the booleans and floats of
the full-sort definition ``class_scores(P, ...) <= thresholds``. Hypothesis draws probability
matrices mixing the rows that stress it: exact ties (rounded probabilities, uniform rows, runs of
zeros, so ties straddle the block boundary), a dominant class, near-uniform rows, and tiny tails
(where the randomised score dips by an ulp along the ranks); thresholds are drawn *at* actual
scores and one ulp either side. K = 3 and 10 take the full path (the equality is then the
definition); K = 65, 200 and 1000 the partial one, with small row chunks so that the block
widening (and its jump to wider blocks when a chunk is mostly undecided) runs too.
"""

from __future__ import annotations

import copy
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calwatch.engine.conformal import scores
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.conformal.quantiles import conformal_quantile
from calwatch.engine.conformal.scores import (
    class_scores,
    descending_order,
    label_scores,
    prediction_sets,
    rank_sum_label_scores,
)

N_CLASSES = (3, 10, 65, 200, 1000)
STYLES = ("sparse", "dominant", "near-uniform", "rounded", "uniform", "zeros", "tiny-tail")


def _rows(rng: np.random.Generator, m: int, K: int, styles: list[str]) -> np.ndarray:
    """``m`` probability rows of ``K`` classes, each of a style drawn from ``styles``."""
    P = np.empty((m, K))
    for i in range(m):
        style = styles[int(rng.integers(len(styles)))]
        if style == "sparse":
            p = rng.dirichlet(np.full(K, 0.05))
        elif style == "dominant":
            p = rng.dirichlet(np.full(K, 0.5)) * 0.1
            p[rng.integers(K)] += 0.9
        elif style == "near-uniform":
            p = 1.0 + 1e-3 * rng.standard_normal(K) ** 2
        elif style == "rounded":  # few distinct values: ties everywhere, across the block boundary
            p = np.round(rng.dirichlet(np.full(K, 0.3)), 2) + 0.01 * (rng.random(K) < 0.5)
        elif style == "uniform":
            p = np.ones(K)
        elif style == "zeros":  # a few classes carry everything; the rest tie at exactly 0
            p = np.zeros(K)
            live = rng.choice(K, size=int(rng.integers(1, min(K, 40) + 1)), replace=False)
            p[live] = rng.dirichlet(np.ones(live.shape[0]))
        else:  # tiny-tail: one class ~1, the rest ~1e-17: (1 − u)·p rounds, scores dip by an ulp
            p = 10.0 ** rng.uniform(-19, -15, size=K)
            p[rng.integers(K)] = 1.0
        P[i] = p / p.sum()
    return P


@st.composite
def problems(draw: st.DrawFn) -> dict:
    K = draw(st.sampled_from(N_CLASSES))
    m = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    styles = draw(st.lists(st.sampled_from(STYLES), min_size=1, max_size=3, unique=True))
    rng = np.random.default_rng(seed)
    return {
        "K": K,
        "rng": rng,
        "P": _rows(rng, m, K, styles),
        "score": draw(st.sampled_from(("aps", "raps"))),
        "randomized": draw(st.booleans()),
        "raps_lambda": draw(st.sampled_from((0.0, 1e-6, 0.001, 0.01, 0.1, 0.5))),
        "raps_k_reg": draw(st.integers(0, 40)),
        "chunk": draw(st.sampled_from((2048, scores._CHUNK_ENTRIES))),
    }


def _thresholds(rng: np.random.Generator, full_scores: np.ndarray, shape: str) -> np.ndarray:
    """Thresholds at actual scores, one ulp below or above, or at ±inf; of the given shape."""
    m, K = full_scores.shape
    count = {"marginal": 1, "row": m, "class": K}[shape]
    row = np.arange(m) if shape == "row" else rng.integers(m, size=count)  # "row": its own scores
    picked = full_scores[row, rng.integers(K, size=count)]
    nudge = rng.integers(-1, 2, size=count)
    picked = np.where(nudge < 0, np.nextafter(picked, -np.inf), picked)
    picked = np.where(nudge > 0, np.nextafter(picked, np.inf), picked)
    picked[rng.random(count) < 0.05] = np.inf
    picked[rng.random(count) < 0.02] = -np.inf
    return picked.reshape((1, K) if shape == "class" else (count, 1))


@settings(max_examples=60, deadline=None)
@given(problem=problems(), shape=st.sampled_from(("marginal", "row", "class")))
def test_prediction_sets_equal_the_full_sort(problem, shape):
    P, rng = problem["P"], problem["rng"]
    u = rng.uniform(size=P.shape[0]) if problem["randomized"] else None
    options = {"u": u, "raps_lambda": problem["raps_lambda"], "raps_k_reg": problem["raps_k_reg"]}
    full_scores = class_scores(P, problem["score"], **options)
    thresholds = _thresholds(rng, full_scores, shape)
    with mock.patch.object(scores, "_CHUNK_ENTRIES", problem["chunk"]):
        fast = prediction_sets(P, problem["score"], thresholds, **options)
    assert np.array_equal(fast, full_scores <= thresholds)


@settings(max_examples=40, deadline=None)
@given(problem=problems())
def test_label_scores_equal_the_full_sort(problem):
    P, rng = problem["P"], problem["rng"]
    m, K = P.shape
    u = rng.uniform(size=m) if problem["randomized"] else None
    options = {"u": u, "raps_lambda": problem["raps_lambda"], "raps_k_reg": problem["raps_k_reg"]}
    # Labels mostly among the likely classes (as calibration labels are), some anywhere.
    y = np.where(rng.random(m) < 0.7, P.argmax(axis=1), rng.integers(K, size=m))
    with mock.patch.object(scores, "_CHUNK_ENTRIES", problem["chunk"]):
        fast = label_scores(P, y, problem["score"], **options)
    assert np.array_equal(fast, class_scores(P, problem["score"], **options)[np.arange(m), y])


def _reference_sets(clf, P, categories, rng):
    """The full-sort definition of ``clf.predict_sets``, drawing ``u`` from ``rng`` as it does."""
    m = P.shape[0]
    if clf.mode_ == "marginal":
        thresholds = np.full((1, 1), clf.quantiles_)
    elif clf.mode_ == "label":
        thresholds = np.array([[clf.quantiles_[c] for c in range(P.shape[1])]])
    else:
        thresholds = np.array([[clf.quantiles_.get(c, np.inf)] for c in categories.tolist()])
    u = rng.uniform(size=m) if clf.randomized else None
    full_scores = class_scores(P, clf.score, u=u, raps_lambda=clf.raps_lambda_, raps_k_reg=clf.raps_k_reg_)
    if clf.top_class == "calibrated" and not clf.allow_empty:  # the top class scores 0
        full_scores[np.arange(m), P.argmax(axis=1)] = 0.0
    sets = full_scores <= thresholds
    if not clf.allow_empty:
        top = P.argmax(axis=1)
        if clf.mode_ == "label":
            sets[np.arange(m), top] = True
        else:
            empty = ~sets.any(axis=1)
            sets[empty, top[empty]] = True
    return sets


@settings(max_examples=40, deadline=None)
@given(
    problem=problems(),
    alpha=st.floats(0.02, 0.5),
    mondrian=st.sampled_from((None, "label", "category")),
    allow_empty=st.booleans(),
    n_cal=st.integers(20, 120),
    score=st.sampled_from(("lac", "aps", "raps")),
)
def test_calibrator_equals_the_full_sort_and_draws_alike(problem, alpha, mondrian, allow_empty, n_cal, score):
    P, rng, K = problem["P"], problem["rng"], problem["K"]
    m = P.shape[0]
    P_cal = _rows(rng, n_cal, K, list(STYLES))
    cdf = np.cumsum(P_cal, axis=1)
    y_cal = np.minimum((cdf < rng.uniform(size=(n_cal, 1))).sum(axis=1), K - 1)
    cats_cal = rng.integers(0, 3, size=n_cal) if mondrian == "category" else None
    cats = rng.integers(0, 4, size=m) if mondrian == "category" else None  # 3: never calibrated
    clf = SplitConformalClassifier(
        score=score,
        alpha=alpha,
        mondrian=mondrian,
        randomized=problem["randomized"],
        raps_lambda=problem["raps_lambda"],
        raps_k_reg=problem["raps_k_reg"],
        allow_empty=allow_empty,
        seed=int(rng.integers(1000)),
    )
    with mock.patch.object(scores, "_CHUNK_ENTRIES", problem["chunk"]):
        clf.fit(P_cal, y_cal, cats_cal)
        # fit: the calibration scores (so the thresholds) are the full sort's.
        fit_rng = np.random.default_rng(clf.seed)
        u_cal = fit_rng.uniform(size=n_cal) if clf.randomized else None
        scores_cal = class_scores(
            P_cal, clf.score, u=u_cal, raps_lambda=clf.raps_lambda_, raps_k_reg=clf.raps_k_reg_
        )
        s_cal = scores_cal[np.arange(n_cal), y_cal]
        if clf.top_class == "calibrated" and not allow_empty:  # the default for randomised scores
            s_cal = np.where(y_cal == P_cal.argmax(axis=1), 0.0, s_cal)
        if mondrian is None:
            assert clf.quantiles_ == conformal_quantile(s_cal, alpha)
        for key, sorted_scores in clf._sorted_scores.items():
            group = slice(None) if key is None else (y_cal if mondrian == "label" else cats_cal) == key
            assert np.array_equal(sorted_scores, np.sort(s_cal[group]))
        # predict: the same sets, and the calibrator's random stream left where the reference's is.
        reference_rng = copy.deepcopy(clf._predict_rng)
        got = clf.predict_sets(P, cats)
        want = _reference_sets(clf, P, cats, reference_rng)
    assert np.array_equal(got, want)
    assert clf._predict_rng.bit_generator.state == reference_rng.bit_generator.state


@settings(max_examples=40, deadline=None)
@given(problem=problems(), special_u=st.booleans())
def test_scores_never_decrease_along_the_ranks_in_floating_point(problem, special_u):
    """What the partial path rests on: ``fl(fl(c_j − fl((1−u)·p_j)) + e_j)`` is non-decreasing in j.

    ``c_j`` only grows, ``(1−u)·p_j`` only shrinks (the ranks sort ``p`` down), the penalty only
    grows, and every rounding is monotone; so the set of a row with one threshold is a prefix of
    its ranks, exactly, and the block's last score bounds every later one.
    """
    P, rng = problem["P"], problem["rng"]
    m = P.shape[0]
    u = None
    if problem["randomized"]:
        u = rng.choice([0.0, 1e-17, 0.5, 1.0 - 1e-16, 1.0], size=m) if special_u else rng.uniform(size=m)
    full_scores = class_scores(
        P, problem["score"], u=u, raps_lambda=problem["raps_lambda"], raps_k_reg=problem["raps_k_reg"]
    )
    by_rank = np.take_along_axis(full_scores, descending_order(P), axis=1)
    assert not (np.diff(by_rank, axis=1) < 0).any()


@pytest.mark.parametrize("first", [0, 40, 95])
def test_class_thresholds_with_ties_across_the_block(first):
    """Uniform rows: the partition's top block is any 32 of the tied classes, the full sort's is
    classes 0..31. Only a few classes have a finite threshold; whichever the block holds, a
    tied position whose score is under the largest threshold sends the row to the full sort."""
    K = 100
    P = np.full((4, K), 1.0 / K)
    thresholds = np.full((1, K), -np.inf)
    thresholds[0, first : first + 5] = 0.05
    full_scores = class_scores(P, "aps")
    fast = prediction_sets(P, "aps", thresholds)
    assert np.array_equal(fast, full_scores <= thresholds)
    assert fast.sum() == (4 * 5 if first == 0 else 0)


def test_deep_sets_fall_back_to_the_full_sort():
    """Deterministic APS on peaked rows reaches hundreds of classes: every row needs the full sort."""
    rng = np.random.default_rng(0)
    logits = 2.0 * rng.standard_t(3, size=(300, 1000))
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    full_scores = class_scores(P, "aps")
    q = float(np.quantile(full_scores.max(axis=1), 0.5))
    with mock.patch.object(scores, "_CHUNK_ENTRIES", 20_000):
        fast = prediction_sets(P, "aps", q)
    assert np.array_equal(fast, full_scores <= q)
    assert fast.sum(axis=1).mean() > 100


def test_small_k_and_lac_keep_the_full_path():
    """At K ≤ PARTIAL_MIN_CLASSES (and for LAC at any K) no partition is made."""
    rng = np.random.default_rng(1)
    P = rng.dirichlet(np.ones(10), size=50)
    with mock.patch.object(scores, "_top_block", side_effect=AssertionError("partial path used")):
        assert np.array_equal(prediction_sets(P, "aps", 0.8), class_scores(P, "aps") <= 0.8)
        Q = rng.dirichlet(np.ones(300), size=5)
        assert np.array_equal(prediction_sets(Q, "lac", 0.9), class_scores(Q, "lac") <= 0.9)


@pytest.mark.parametrize("K", [10, 255, 256, 300])
def test_the_top_class_goes_to_empty_sets_only(K):
    """LAC's empty rows get their top class (by the lowest index among ties); others are as they are."""
    rng = np.random.default_rng(K)
    P = rng.dirichlet(np.full(K, 0.3), size=200)
    P[:5] = 1.0 / K  # uniform rows: the top class is class 0
    y = rng.integers(K, size=200)
    clf = SplitConformalClassifier(score="lac", alpha=0.3).fit(P, y)
    q = float(np.quantile(1.0 - P.max(axis=1), 0.5))  # about half the rows empty
    clf.quantiles_ = q
    lac_scores = 1.0 - P
    plain = lac_scores <= q
    empty = ~plain.any(axis=1)
    assert 50 < empty.sum() < 150
    want = plain.copy()
    want[empty, P[empty].argmax(axis=1)] = True
    assert np.array_equal(clf.predict_sets(P), want)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_rank_sum_label_scores_equal_label_scores_to_the_last_bits(data):
    # The sort-free score sums the same classes in another order: equal to a few ulps of the
    # score's size, ties between probabilities included (they decide which classes come first).
    K = data.draw(st.sampled_from([3, 10, 65, 200]))
    m = data.draw(st.integers(1, 40))
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(K, 0.3), size=m)
    if data.draw(st.booleans()):
        P = np.round(P, 2)
        P /= P.sum(axis=1, keepdims=True)
    y = rng.integers(0, K, m)
    u = rng.random(m) if data.draw(st.booleans()) else None
    score = data.draw(st.sampled_from(["aps", "raps"]))
    lam, k_reg = (0.01, 2) if score == "raps" else (0.0, 0)
    exact = label_scores(P, y, score, u=u, raps_lambda=lam, raps_k_reg=k_reg)
    fast = rank_sum_label_scores(P, y, score, u=u, raps_lambda=lam, raps_k_reg=k_reg)
    np.testing.assert_allclose(fast, exact, rtol=0, atol=8 * K * np.finfo(np.float64).eps)
