"""KNNIndex (faiss wrapper) and the KNN approximation / localizer of paper 000 (Eq. 2-3, 8, App. C)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calwatch.engine.errors import NotFittedError
from calwatch.engine.knn import KNNIndex, check_embeddings
from calwatch.engine.venn_admit.approximation import (
    ApproximationParams,
    approximation_logits,
    fit_approximation,
)
from calwatch.engine.venn_admit.localizer import (
    LocalizerSupport,
    category_mass,
    fit_localizer,
    localizer_logits,
)


def brute_force(ref: np.ndarray, Q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact neighbours in float64, ties by lower index."""
    D = np.sqrt(((Q[:, None, :].astype(np.float64) - ref[None, :, :].astype(np.float64)) ** 2).sum(-1))
    order = np.lexsort((np.broadcast_to(np.arange(ref.shape[0]), D.shape), D), axis=-1)[:, :k]
    return np.take_along_axis(D, order, axis=1), order


# ----------------------------------------------------------------------------- KNNIndex
def test_flat_search_matches_numpy_brute_force() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(500, 16)).astype(np.float32) * 10
    Q = rng.normal(size=(60, 16)).astype(np.float32) * 10
    dist, idx = KNNIndex().fit(ref).search(Q, k=7)
    want_d, want_i = brute_force(ref, Q, 7)
    assert dist.dtype == np.float64 and idx.dtype == np.int64
    np.testing.assert_array_equal(idx, want_i)
    # both are float64 sums of squared float32 coordinates: agree to rounding
    np.testing.assert_allclose(dist, want_d, rtol=1e-12)


def test_hand_computed_distances_and_tie_order() -> None:
    ref = np.array([[3.0, 4.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    dist, idx = KNNIndex().fit(ref).search(np.array([[0.0, 0.0]]), k=4)
    # distances 5, 1, 1, 0: the two rows at distance 1 are ordered by index
    assert idx.tolist() == [[3, 1, 2, 0]]
    assert dist.tolist() == [[0.0, 1.0, 1.0, 5.0]]


def test_result_does_not_depend_on_the_batch() -> None:
    # faiss uses a BLAS path for >= 20 queries and a SIMD path below: the exact recomputation
    # makes a row's distances identical however it is batched.
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(300, 24)).astype(np.float32) + 5
    Q = rng.normal(size=(40, 24)).astype(np.float32) + 5
    index = KNNIndex(batch_size=7).fit(ref)
    d_all, i_all = index.search(Q, k=5)
    d_one, i_one = index.search(Q[13:14], k=5)
    assert np.array_equal(d_all[13:14], d_one) and np.array_equal(i_all[13:14], i_one)


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_approximate_indexes_return_sorted_true_distances(kind: str) -> None:
    rng = np.random.default_rng(2)
    centres = rng.normal(size=(10, 8)) * 5
    ref = (centres[rng.integers(0, 10, 2000)] + rng.normal(size=(2000, 8))).astype(np.float32)
    Q = (centres[rng.integers(0, 10, 50)] + rng.normal(size=(50, 8))).astype(np.float32)
    index = KNNIndex(kind=kind, ivf_nprobe=64).fit(ref)  # type: ignore[arg-type]
    dist, idx = index.search(Q, k=5)
    true = np.sqrt(((Q[:, None, :].astype(np.float64) - ref[idx].astype(np.float64)) ** 2).sum(-1))
    np.testing.assert_allclose(dist, true, rtol=1e-12)
    assert np.all(np.diff(dist, axis=1) >= 0)
    # the same index built twice gives the same neighbours (single-threaded HNSW build, seeded IVF)
    again = KNNIndex(kind=kind, ivf_nprobe=64).fit(ref).search(Q, k=5)[1]  # type: ignore[arg-type]
    assert np.array_equal(idx, again)


def test_search_validation() -> None:
    index = KNNIndex()
    with pytest.raises(NotFittedError, match="not fitted"):
        index.search(np.zeros((1, 2)), k=1)
    index.fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 3\]"):
        index.search(np.zeros((1, 2)), k=4)
    with pytest.raises(ValueError, match="has 3 dimensions but the reference embeddings have 2"):
        index.search(np.zeros((1, 3)), k=1)
    with pytest.raises(ValueError, match="NaN or inf"):
        index.search(np.array([[0.0, math.nan]]), k=1)
    with pytest.raises(ValueError, match="kind must be one of"):
        KNNIndex(kind="lsh")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_size must be an integer"):
        KNNIndex(batch_size=0)


def test_check_embeddings() -> None:
    out = check_embeddings([[1, 2], [3, 4]])
    assert out.dtype == np.float32 and out.flags.c_contiguous
    with pytest.raises(ValueError, match="2-D"):
        check_embeddings(np.zeros(3))
    with pytest.raises(ValueError, match="empty"):
        check_embeddings(np.zeros((0, 3)))
    with pytest.raises(TypeError, match="numeric"):
        check_embeddings(np.array([["a"]]))
    with pytest.raises(ValueError, match=r"NaN or inf \(first in row 1"):
        check_embeddings(np.array([[0.0], [1e300]]))  # overflows float32


# ------------------------------------------------------------------ approximation (Eq. 2-3)
def test_approximation_logits_hand_computed() -> None:
    # Two neighbours at distances 0 and η·ln 3: weights e^0 : e^{-ln 3} = 3/4 : 1/4.
    eta = 2.0
    dist = np.array([[1.0, 1.0 + eta * math.log(3.0)]])
    idx = np.array([[0, 1]])
    tanh_ref = np.array([[0.8, -0.4, 0.0], [-0.2, 0.6, 0.4]], dtype=np.float32)
    y_ref = np.array([0, 2])
    params = ApproximationParams(beta=np.array([0.1, 0.0, -0.1]), gamma=np.array([0.5, 1.0, 2.0]), eta=eta)
    a = approximation_logits(params, dist, idx, tanh_ref, y_ref)
    # class 0: 0.1 + 3/4·(0.8 + 0.5) + 1/4·(−0.2 − 0.5)
    # class 1: 0.0 + 3/4·(−0.4 − 1.0) + 1/4·(0.6 − 1.0)
    # class 2: −0.1 + 3/4·(0.0 − 2.0) + 1/4·(0.4 + 2.0)
    want = [
        0.1 + 0.75 * 1.3 + 0.25 * -0.7,
        0.75 * -1.4 + 0.25 * -0.4,
        -0.1 + 0.75 * -2.0 + 0.25 * 2.4,
    ]
    np.testing.assert_allclose(a[0], want, rtol=1e-6)  # tanh values stored as float32


def test_localizer_logits_and_category_mass_hand_computed() -> None:
    # Support rows on a line at distances 0, 0, ln 2, ln 2, ln 2 and 50 from the query, η' = 1:
    # kernel 1, 1, 1/2, 1/2, 1/2, e^-50; Z = 3.5 (+ e^-50).
    support = np.array([[0.0], [0.0], [math.log(2)], [-math.log(2)], [math.log(2)], [50.0]], np.float32)
    Q = np.zeros((1, 1), np.float32)
    values = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 2.0], [1.0, 1.0], [9.0, 9.0]])
    out = localizer_logits(LocalizerSupport(support, k=None), 1.0, Q, values)
    # (1·[1,0] + 1·[0,1] + ½·[2,0] + ½·[0,2] + ½·[1,1]) / 3.5 = [2.5, 2.5] / 3.5
    np.testing.assert_allclose(out[0], [2.5 / 3.5, 2.5 / 3.5], rtol=1e-6)
    # category: support rows with key 7 and d in [0.5, 1.5] -> rows 0 and 2 (row 1 has d = 2)
    key = np.array([7, 7, 7, 3, 7, 7], dtype=np.int64)
    d = np.array([1.0, 2.0, 1.5, 1.0, 0.4, 1.0])
    for k in (None, 5):  # dense, and top-5 (row 5 is the one left out)
        sup = LocalizerSupport(support, k=k)
        mass = category_mass(sup, 1.0, Q, np.array([7]), np.array([0.5]), np.array([1.5]), key, d)
        # rows 0 (kernel 1) and 2 (½) are in; row 5 (key 7, d 1.0) has kernel e^-50 ≈ 0
        np.testing.assert_allclose(mass, [1.5 / 3.5], rtol=1e-6)


# --------------------------------------------------------------------- training (App. C)
def _neighbour_problem(seed: int, n: int = 400, n_ref: int = 600, C: int = 3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(C, 6)) * 3
    y_ref = rng.integers(0, C, n_ref)
    ref = (centres[y_ref] + rng.normal(size=(n_ref, 6))).astype(np.float32)
    logits_ref = ref @ centres.T / 6 + rng.normal(size=(n_ref, C))
    y = rng.integers(0, C, n)
    E = (centres[y] + rng.normal(size=(n, 6))).astype(np.float32)
    targets = E @ centres.T / 6 + rng.normal(size=(n, C))
    dist, idx = KNNIndex().fit(ref).search(E, k=10)
    return dist, idx, np.tanh(logits_ref).astype(np.float32), y_ref, targets


def test_training_keeps_the_best_epoch_and_follows_the_masking_rule() -> None:
    dist, idx, tanh_ref, y_ref, targets = _neighbour_problem(0)
    fit_rows, dev_rows = np.arange(200), np.arange(200, 400)
    params, result = fit_approximation(
        dist, idx, tanh_ref, y_ref, targets, fit_rows, dev_rows, epochs=12, seed=3, progress=False
    )
    history = result.dev_disagreements
    assert len(history) == 12
    # the kept epoch is the first with the fewest dev disagreements ...
    assert result.best_epoch == int(np.argmin(history)) + 1
    # ... and its parameters are the ones returned: recount the disagreements with them
    a = approximation_logits(params, dist[dev_rows], idx[dev_rows], tanh_ref, y_ref)
    assert int((a.argmax(1) != targets[dev_rows].argmax(1)).sum()) == min(history)
    # masking: epoch e (1-based, e ≥ 2) trains on disagreeing rows only iff epoch e−1 set no
    # new minimum; epoch 1 trains on all rows
    expected = [False] + [history[e - 1] >= min(history[: e - 1], default=math.inf) for e in range(1, 12)]
    assert result.masked == expected
    assert params.eta > 0


def test_training_is_reproducible_for_a_seed() -> None:
    dist, idx, tanh_ref, y_ref, targets = _neighbour_problem(1)
    runs = [
        fit_approximation(
            dist, idx, tanh_ref, y_ref, targets, np.arange(200), np.arange(200, 400), epochs=4, seed=5,
            progress=False,
        )[0]
        for _ in range(2)
    ]  # fmt: skip
    assert np.array_equal(runs[0].beta, runs[1].beta) and np.array_equal(runs[0].gamma, runs[1].gamma)
    assert runs[0].eta == runs[1].eta


def test_localizer_training_keeps_the_best_temperature() -> None:
    targets = _neighbour_problem(2)[4]
    support_logits = targets[:300]  # any fixed logits of the support rows
    emb = np.random.default_rng(0).normal(size=(300, 6)).astype(np.float32)
    E = np.random.default_rng(1).normal(size=(100, 6)).astype(np.float32)
    for k in (50, None):
        sup = LocalizerSupport(emb, k=k)
        out_targets = localizer_logits(sup, 0.3, E, support_logits)  # realisable: η' = 0.3 is exact
        eta, result = fit_localizer(
            sup, E, support_logits, out_targets, np.arange(50), np.arange(50, 100), epochs=30, progress=False
        )
        # the returned η' is the kept epoch's: recount its dev disagreements
        dev = localizer_logits(sup, eta, E[50:], support_logits)
        assert int((dev.argmax(1) != out_targets[50:].argmax(1)).sum()) == min(result.dev_disagreements)
        # training reaches the realisable optimum's neighbourhood: at most 10 of 50 dev rows
        # disagree (the grid start alone lands within a factor 2 of η' = 0.3)
        assert min(result.dev_disagreements) <= 10, (k, result.dev_disagreements)
