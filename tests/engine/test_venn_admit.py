"""Venn-ADMIT (paper 000, ALGORITHMS.md §2): hand-computed cases and properties of the fitted object.

The Monte Carlo validity test on real data (class-wise admitted accuracy ≥ 1 − α) lives with
the real-data preparation in ``tests/validity``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pytest

from calwatch.engine.conformal.quantiles import conformal_quantile
from calwatch.engine.errors import NotFittedError
from calwatch.engine.venn_admit.admit import SPLIT_MC, SPLIT_VP, VennAdmit
from calwatch.engine.venn_admit.bands import (
    AdmitCalibration,
    GroupedWindows,
    RankTree,
    VennCategories,
    band_radius,
    reliability_features,
    venn_bounds,
)
from calwatch.engine.venn_admit.baselines import (
    METHODS,
    admitted_accuracy,
    compare_methods,
    local_conformal_sets,
)
from calwatch.engine.venn_admit.localizer import LocalizerSupport, category_mass


# ------------------------------------------------------------------------ hand-computed
def test_q_counts_leading_matches_only() -> None:
    # Reference rows 0..4: model prediction and true label.
    ref_pred = np.array([1, 1, 1, 0, 1])
    ref_labels = np.array([1, 1, 0, 0, 1])  # row 2 is a model error
    idx = np.array(
        [
            [0, 1, 4, 0],  # all four predict 1 and are right -> q = K = 4
            [3, 0, 1, 4],  # nearest predicts 0 != ŷ = 1 -> q = 0
            [0, 2, 1, 4],  # second predicts ŷ but is wrong -> q = 1
            [0, 1, 2, 4],  # third fails; the fourth's match does not count -> q = 2
            [3, 0, 1, 4],  # ŷ = 0: nearest (row 3) predicts 0 and is right, then row 0 predicts 1 -> q = 1
        ]
    )
    dist = np.array([[0.5, 1, 2, 3], [0.25, 1, 2, 3], [1.5, 2, 2, 3], [0.0, 1, 2, 3], [2.0, 2, 2, 2]])
    q, d = reliability_features(dist, idx, np.array([1, 1, 1, 1, 0]), ref_pred, ref_labels)
    assert q.tolist() == [4, 0, 1, 2, 1]
    assert d.tolist() == [0.5, 0.25, 1.5, 0.0, 2.0]


def test_band_radius_hand_computed_and_too_few_rows() -> None:
    d = np.array([1.0, 2.0, 4.0, 10.0, 3.0])
    q = np.array([1, 2, 1, 1, 0])
    y_hat = np.array([0, 1, 1, 0, 0])
    y = np.array([0, 1, 1, 1, 0])  # row 3 wrong, row 4 has q = 0: ŝ from d = 1, 2, 4
    s_hat, omega = band_radius(d, q, y_hat, y, delta=0.5)
    assert s_hat == pytest.approx(math.sqrt(7 / 3), rel=1e-12)  # mean 7/3, squares 16/9+1/9+25/9, /2
    assert omega == pytest.approx(0.5 * math.sqrt(7 / 3), rel=1e-12)
    with pytest.raises(ValueError, match="needs ≥ 2 calibration rows"):
        band_radius(d, np.zeros(5, int), y_hat, y, delta=1.0)


def _admit_calibration(kappa: int) -> AdmitCalibration:
    # D_ca^mc: four rows of each label in the band q = 1, d ∈ [1.0, 1.3]; plus a label-1 row far
    # away (d = 5, score 0.0) and a label-0 row with q = 2 (score 0.9), both outside the band.
    q = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 2])
    d = np.array([1.0, 1.1, 1.2, 1.3, 1.0, 1.1, 1.2, 1.3, 5.0, 1.0])
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 0])
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.0, 0.9])
    return AdmitCalibration(q, d, y, scores, n_classes=2, alpha=0.4, omega=0.5, kappa=kappa)


def test_admit_sets_hand_computed() -> None:
    # α = 0.4, n_c = 4 per label: rank ⌈5·0.6⌉ = 3, so l̂_0 = 0.3 and l̂_1 = 0.7 (τ̂ = 0.7, 0.3).
    admit = _admit_calibration(kappa=0)
    probs = np.array([[0.75, 0.25], [0.65, 0.35], [0.7, 0.3], [0.35, 0.65], [0.6, 0.4]])
    y_hat = np.array([0, 0, 0, 1, 0])
    q = np.array([1, 1, 1, 1, 1])
    d = np.array([1.1, 1.1, 1.1, 1.1, 1.6])
    sets, guarded = admit.sets(probs, y_hat, q, d)
    assert not guarded.any()
    assert sets.tolist() == [
        [True, False],  # 1 − 0.25 = 0.75 > l̂_1 = 0.7
        [True, True],  # 0.65 ≤ 0.7
        [True, True],  # 1 − 0.3 = 0.7 = l̂_1: a tie is in
        [False, True],  # ŷ = 1; class 0: 1 − 0.35 = 0.65 > l̂_0 = 0.3
        # d = 1.6: band [1.1, 2.1] keeps label-1 scores 0.6, 0.7, 0.8 (n = 3, rank ⌈4·0.6⌉ = 3):
        # l̂_1 = 0.8 and 1 − 0.4 = 0.6 ≤ 0.8 (with the d = 1.0 row, l̂_1 would be 0.7, still in;
        # the far row with score 0 never counts)
        [True, True],
    ]


def test_admit_band_changes_the_quantile() -> None:
    admit = _admit_calibration(kappa=0)
    # class 1 score 1 − 0.22 = 0.78: out of the full band (l̂_1 = 0.7), in at d = 1.6 (l̂_1 = 0.8)
    sets, _ = admit.sets(
        np.array([[0.78, 0.22], [0.78, 0.22]]), np.array([0, 0]), np.array([1, 1]), np.array([1.1, 1.6])
    )
    assert sets[:, 1].tolist() == [False, True]


def test_kappa_guard_returns_the_full_set() -> None:
    probs = np.array([[0.75, 0.25]])
    one = (np.array([0]), np.array([1]), np.array([1.1]))
    sets, guarded = _admit_calibration(kappa=4).sets(probs, *one)  # both labels have 4 band rows
    assert sets.tolist() == [[True, False]] and not guarded[0]
    sets, guarded = _admit_calibration(kappa=5).sets(probs, *one)  # 4 < κ = 5: full set
    assert sets.tolist() == [[True, True]] and guarded[0]
    # q = 2: label 0 has one band row, label 1 none; with κ = 0 an empty label band has
    # l̂ = +∞ (rank ⌈1·0.6⌉ = 1 > 0) so that label is always in
    sets, guarded = _admit_calibration(kappa=0).sets(probs, np.array([0]), np.array([2]), np.array([1.0]))
    assert sets.tolist() == [[True, True]] and not guarded[0]


def test_venn_lower_probability_six_rows_unweighted_and_weighted() -> None:
    # D_ca^vp: key = q·C + ŷ for singleton ADMIT sets, −1 otherwise.
    key = np.array([5, 5, 5, 5, 5, -1], dtype=np.int64)
    d = np.array([1.0, 1.2, 0.9, 1.1, 3.0, 1.0])
    y = np.array([1, 1, 1, 0, 1, 1])
    cats = VennCategories(key, d, y, n_classes=2)
    # test row: key 5, band [0.8, 1.3], ŷ = 1 -> T = rows 0-3 (row 4 out of band, row 5 not a singleton)
    n_t, n_y = cats.counts(np.array([5]), np.array([0.8]), np.array([1.3]), np.array([1]))
    assert (int(n_t[0]), int(n_y[0])) == (4, 3)
    lower, upper = venn_bounds(n_t, n_y, np.array([1.0]))  # Alg. 4: p_c(1) = (3 + [c = 1]) / 5
    assert lower[0] == pytest.approx(3 / 5) and upper[0] == pytest.approx(4 / 5)
    # Alg. 3: localizer over the six rows at distances 0, ln 2, ln 2, ln 4, 0, 0 with η' = 1:
    # kernels 1, 1/2, 1/2, 1/4, 1, 1 (sum 4.25); ψ' = (1 + 1/2 + 1/2 + 1/4) / 4.25 = 9/17
    emb = np.array([[0.0], [math.log(2)], [-math.log(2)], [math.log(4)], [0.0], [0.0]], np.float32)
    psi = category_mass(
        LocalizerSupport(emb, k=None), 1.0, np.zeros((1, 1), np.float32),
        np.array([5]), np.array([0.8]), np.array([1.3]), key, d,
    )  # fmt: skip
    assert psi[0] == pytest.approx(9 / 17, rel=1e-6)
    w = 1.0 / psi
    lower, upper = venn_bounds(n_t, n_y, w)
    assert lower[0] == pytest.approx(3 / (4 + 17 / 9), rel=1e-6)  # 0.5094
    assert upper[0] == pytest.approx((3 + 17 / 9) / (4 + 17 / 9), rel=1e-6)  # 0.8302
    # ψ' = 0 (no localizer mass in the category): the lower probability is 0
    lower, upper = venn_bounds(n_t, n_y, np.array([math.inf]))
    assert (lower[0], upper[0]) == (0.0, 1.0)


def test_band_structures_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 64, 300):
        values = rng.integers(0, 12, n).astype(float)  # many ties
        tree = RankTree(values)
        lo = rng.integers(0, n + 1, 200)
        hi = np.maximum(lo, rng.integers(0, n + 1, 200))
        x = rng.integers(-1, 14, 200).astype(float)
        want = [int((values[a:b] < t).sum()) for a, b, t in zip(lo, hi, x, strict=True)]
        assert tree.count_less(lo, hi, x).tolist() == want
        keys = rng.integers(0, 4, n)
        dvals = rng.integers(0, 8, n).astype(float)
        windows = GroupedWindows(keys, dvals)
        qk, ql = rng.integers(0, 6, 100), rng.integers(-1, 9, 100).astype(float)
        qh = ql + rng.integers(0, 4, 100)
        start, stop = windows.window(qk, ql, qh)
        for i in range(100):
            got = sorted(windows.order[start[i] : stop[i]].tolist())
            assert got == np.flatnonzero((keys == qk[i]) & (dvals >= ql[i]) & (dvals <= qh[i])).tolist()


def test_local_conformal_sets_top_k_matches_definition() -> None:
    rng = np.random.default_rng(3)
    support_emb = rng.normal(size=(40, 3)).astype(np.float32)
    scores = rng.uniform(size=40).round(1)  # ties between scores
    E = rng.normal(size=(15, 3)).astype(np.float32)
    probs = rng.dirichlet(np.ones(4), size=15)
    D = np.sqrt(((E[:, None, :].astype(np.float64) - support_emb[None].astype(np.float64)) ** 2).sum(-1))
    for k, weight in itertools.product((None, 10), ("kernel", "ess")):
        sup = LocalizerSupport(support_emb, k=k)
        sets = local_conformal_sets(sup, 0.8, scores, E, probs, alpha=0.2, test_weight=weight)
        kernel = np.exp(-D / 0.8)
        if k is not None:  # only the k nearest support rows carry weight
            far = np.argsort(D, axis=1, kind="stable")[:, k:]
            np.put_along_axis(kernel, far, 0.0, axis=1)
        for i in range(15):
            atom = 1.0 if weight == "kernel" else (kernel[i] ** 2).sum() / kernel[i].sum()
            target = 0.8 * (kernel[i].sum() + atom)
            for c in range(4):
                below = kernel[i][scores < 1.0 - probs[i, c]].sum()
                assert sets[i, c] == (below < target * (1 + 1e-12)) or abs(below - target) < 1e-12 * target


def test_local_conformal_test_atom_hand_computed() -> None:
    # Two support rows at distances 2 and 2 + ln 3 (η' = 1), scores 0.1 and 0.3; α = 0.5.
    # Guan ("kernel"): K = e^-2, e^-2/3 (sum 0.180), atom 1: target 0.5·1.180 = 0.590 > any mass:
    # every class is in. "ess": ψ ∝ 1, 1/3 (sum 4/3), atom (1 + 1/9)/(4/3) = 5/6, target
    # 0.5·(4/3 + 5/6) = 13/12: a score of 0.2 (mass 1 below) is in, 0.35 (mass 4/3) is out.
    emb = np.array([[2.0], [2.0 + math.log(3.0)]], np.float32)
    probs = np.array([[0.8, 0.2], [0.65, 0.35]])  # test scores 0.2, 0.8 and 0.35, 0.65
    sup = LocalizerSupport(emb, k=None)
    args = (sup, 1.0, np.array([0.1, 0.3]), np.zeros((2, 1), np.float32), probs)
    assert local_conformal_sets(*args, alpha=0.5, test_weight="kernel").tolist() == [
        [True, True],
        [True, True],
    ]
    assert local_conformal_sets(*args, alpha=0.5, test_weight="ess").tolist() == [
        [True, False],
        [False, False],
    ]


# ------------------------------------------------------------------------ fitted object
def _world(seed: int, n: int, C: int = 3, dim: int = 8):
    """Clustered embeddings; the model's logits lean on the cluster's majority label."""
    rng = np.random.default_rng(1000)  # the same clusters for every draw
    centres = rng.normal(size=(12, dim)) * 3
    major = rng.integers(0, C, 12)
    purity = rng.uniform(0.8, 1.0, 12)
    draw = np.random.default_rng(seed)
    z = draw.integers(0, 12, n)
    E = (centres[z] + draw.normal(size=(n, dim))).astype(np.float32)
    y = np.where(draw.uniform(size=n) < purity[z], major[z], draw.integers(0, C, n))
    logits = 3.0 * np.eye(C)[major[z]] + draw.normal(size=(n, C))
    return E, logits, y


@pytest.fixture(scope="module")
def fitted() -> tuple[VennAdmit, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    va = VennAdmit(alpha=0.1, k=10, kappa=20, progress=False, epochs=5, localizer_k=200)
    va.fit(train=_world(1, 1500), calibration=_world(2, 3000))
    return va, _world(3, 500)


def test_results_are_consistent(fitted) -> None:
    va, (E, logits, _) = fitted
    r = va.predict_arrays(E, logits)
    m = E.shape[0]
    assert r.sets[np.arange(m), r.y_hat].all()  # ADMIT sets always contain ŷ^KNN
    assert r.q.min() >= 0 and r.q.max() <= va.k
    single = r.sets.sum(axis=1) == 1
    assert single.any() and r.admitted.any() and not single.all()  # the fixture exercises every path
    assert np.array_equal(np.isnan(r.p_lower), ~single)
    assert (r.p_lower[r.admitted] >= 0.9 - 1e-9).all() and not (r.admitted & ~single).any()
    assert (r.weight[single] >= 1.0).all()
    # Prop. 3: a test-point weight ≥ 1 can only lower p̲
    unweighted = va.predict_arrays(E, logits, weighted=False)
    assert (r.p_lower[single] <= unweighted.p_lower[single] + 1e-12).all()
    assert not (r.admitted & ~unweighted.admitted).any()
    qk = va.predict_arrays(E, logits, q_k_only=True)
    assert (qk.q[qk.admitted] == va.k).all() and not (qk.admitted & ~r.admitted).any()
    assert va.agreement(E, logits) == pytest.approx(float(np.mean(r.y_hat == r.y_model)))
    assert 0.0 <= va.agreement_ <= 1.0 and 0.0 <= va.localizer_agreement_ <= 1.0


def test_d_is_the_exact_nearest_distance(fitted) -> None:
    va, (E, logits, _) = fitted
    ref = va.state()["arrays"]["reference_embeddings"].astype(np.float64)
    brute = np.sqrt(((E[:50, None, :].astype(np.float64) - ref[None]) ** 2).sum(-1)).min(axis=1)
    np.testing.assert_allclose(va.predict_arrays(E[:50], logits[:50]).d, brute, rtol=1e-12)


def test_sets_and_categories_match_the_definitions(fitted) -> None:
    va, (E, logits, _) = fitted
    r = va.predict_arrays(E, logits, weighted=False)
    split, qc, dc = va.calibration_split_, va.calibration_q_, va.calibration_d_
    yc, pc = va.calibration_labels_, va.calibration_probs_knn_
    yhat_c = pc.argmax(axis=1)
    vp = np.flatnonzero(split == SPLIT_VP)
    vp_single = va._categories.key[np.arange(vp.size)] >= 0
    C = va.n_classes_
    for i in range(E.shape[0]):
        band = (qc == r.q[i]) & (dc >= r.d[i] - va.omega_) & (dc <= r.d[i] + va.omega_)
        expected = np.zeros(C, dtype=bool)
        counts = [int((band & (split == SPLIT_MC) & (yc == c)).sum()) for c in range(C)]
        if min(counts) < va.kappa:
            expected[:] = True
        else:
            for c in range(C):
                rows = band & (split == SPLIT_MC) & (yc == c)
                l_hat = conformal_quantile(1.0 - pc[rows, yc[rows]], va.alpha)
                expected[c] = 1.0 - r.probs[i, c] <= l_hat
        expected[r.y_hat[i]] = True
        assert np.array_equal(r.sets[i], expected), i
        if expected.sum() == 1:  # Venn category: vp rows of the band, same ŷ, singleton set
            cat = band[vp] & (yhat_c[vp] == r.y_hat[i]) & vp_single
            assert r.category_size[i] == int(cat.sum())
            n_y = int((cat & (yc[vp] == r.y_hat[i])).sum())
            assert r.p_lower[i] == pytest.approx(n_y / (cat.sum() + 1))


def test_vp_singletons_are_recomputed_from_the_definition(fitted) -> None:
    va, _ = fitted
    vp = np.flatnonzero(va.calibration_split_ == SPLIT_VP)
    probs = va.calibration_probs_knn_[vp]
    sets, _ = va._admit.sets(probs, probs.argmax(1), va.calibration_q_[vp], va.calibration_d_[vp])
    assert np.array_equal(va._categories.key >= 0, sets.sum(axis=1) == 1)


def test_fixed_seed_is_deterministic_and_state_round_trips(fitted) -> None:
    va, (E, logits, _) = fitted
    again = VennAdmit(alpha=0.1, k=10, kappa=20, progress=False, epochs=5, localizer_k=200)
    again.fit(train=_world(1, 1500), calibration=_world(2, 3000))
    restored = VennAdmit.from_state(va.state())
    a = va.predict_arrays(E, logits)
    for other in (again, restored):
        b = other.predict_arrays(E, logits)
        for field in a.__dataclass_fields__:
            assert np.array_equal(getattr(a, field), getattr(b, field), equal_nan=True), field
    other_seed = VennAdmit(alpha=0.1, k=10, kappa=20, progress=False, epochs=5, localizer_k=200, seed=1)
    other_seed.fit(train=_world(1, 1500), calibration=_world(2, 3000))
    assert not np.array_equal(other_seed.calibration_split_, va.calibration_split_)
    state = va.state()
    for value in state["arrays"].values():
        assert isinstance(value, np.ndarray) and value.dtype != object
    import json

    json.dumps({key: value for key, value in state.items() if key != "arrays"})


def test_predict_frame(fitted) -> None:
    va, (E, logits, _) = fitted
    frame = va.predict(E[:20], logits[:20])
    assert frame.columns == [
        "y_hat",
        "q",
        "d",
        "admit_set",
        "admitted",
        "p_lower",
        "p_upper",
        "category_size",
    ]
    assert frame.schema["admit_set"] == pl.List(pl.Int64) and frame.height == 20
    r = va.predict_arrays(E[:20], logits[:20])
    assert frame["admit_set"].to_list() == [np.flatnonzero(row).tolist() for row in r.sets]
    assert frame["admitted"].to_list() == r.admitted.tolist()


def test_compare_methods(fitted) -> None:
    va, (E, logits, y) = fitted
    results = compare_methods(va, E, logits)
    assert list(results) == list(METHODS)
    variants = va.predict_variants(E, logits)
    for name, res in results.items():
        assert res.sets[np.arange(E.shape[0]), res.prediction].all(), name
        if name.startswith("venn"):
            key = ("qk" in name, "unweighted" not in name)[::-1]
            assert np.array_equal(res.admitted, variants[key].admitted), name
        else:
            assert np.array_equal(res.admitted, res.sets.sum(axis=1) == 1), name
    assert np.array_equal(results["admit"].sets, variants[(True, False)].sets)
    table = admitted_accuracy(results, y)
    assert table.height == len(METHODS) * (va.n_classes_ + 1)
    with pytest.raises(ValueError, match="unknown methods"):
        compare_methods(va, E, logits, methods=("magic",))


# --------------------------------------------------------------------------- validation
def test_predict_before_fit() -> None:
    with pytest.raises(NotFittedError, match="not fitted"):
        VennAdmit().predict(np.zeros((1, 2)), np.zeros((1, 2)))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"alpha": 1.5}, "alpha must be in"),
        ({"k": 0}, "k must be an integer ≥ 1"),
        ({"k": "25"}, "k must be an integer ≥ 1"),
        ({"epochs": 2.5}, "epochs must be an integer ≥ 1"),
        ({"kappa": -1}, "kappa must be an integer ≥ 0"),
        ({"band_delta": 0.0}, "band_delta must be a finite number > 0"),
        ({"split": (0.5, 0.5, 0.0)}, "split must be three positive shares"),
        ({"localizer_k": 0}, "localizer_k must be an integer ≥ 1"),
        ({"index": "lsh"}, "index must be one of"),
    ],
)
def test_constructor_validation(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        VennAdmit(**options)


def test_fit_and_predict_validation(fitted) -> None:
    va, (E, logits, _) = fitted
    train, cal = _world(1, 200), _world(2, 300)
    fresh = VennAdmit(k=5, kappa=0, progress=False, epochs=1)
    with pytest.raises(TypeError, match="train must be a tuple"):
        fresh.fit(train=train[0], calibration=cal)
    with pytest.raises(ValueError, match=r"calibration\[0\] \(embeddings\) has 4 dimensions"):
        fresh.fit(train=train, calibration=(cal[0][:, :4], cal[1], cal[2]))
    bad_logits = cal[1].copy()
    bad_logits[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"calibration\[1\] \(logits\) contains NaN"):
        fresh.fit(train=train, calibration=(cal[0], bad_logits, cal[2]))
    with pytest.raises(ValueError, match=r"labels outside the known classes 0..2: \[7\]"):
        fresh.fit(train=train, calibration=(cal[0], cal[1], np.where(np.arange(300) == 5, 7, cal[2])))
    with pytest.raises(ValueError, match="embeddings have 200 rows but logits have 199"):
        fresh.fit(train=(train[0], train[1][:-1], train[2]), calibration=cal)
    with pytest.raises(ValueError, match="k=5 exceeds the 4 reference"):
        fresh.fit(train=(train[0][:4], train[1][:4], train[2][:4]), calibration=cal)
    with pytest.raises(ValueError, match="too few to split"):
        fresh.fit(train=train, calibration=(cal[0][:10], cal[1][:10], cal[2][:10]))
    with pytest.raises(ValueError, match="E has 3 rows but logits has 2"):
        va.predict(E[:3], logits[:2])
    with pytest.raises(ValueError, match="has 2 columns but the calibrator was fitted on 3 classes"):
        va.predict(E[:3], logits[:3, :2])
    with pytest.raises(ValueError, match="E has 7 dimensions but the reference embeddings have 8"):
        va.predict(E[:3, :7], logits[:3])
    with pytest.raises(ValueError, match="NaN or inf"):
        va.predict(np.where(np.arange(8) == 2, np.inf, E[:3]), logits[:3])
    with pytest.raises(ValueError, match="format"):
        VennAdmit.from_state({"format": "something else"})


def test_hnsw_reference_index_matches_flat_on_small_data(fitted) -> None:
    # 1,500 reference rows, efSearch 128: the graph search finds the exact 10 neighbours of every
    # test row here (deterministic: single-threaded build), so every per-row result is the same.
    va, (E, logits, _) = fitted
    hnsw = VennAdmit(alpha=0.1, k=10, kappa=20, progress=False, epochs=5, localizer_k=200, index="hnsw")
    hnsw.fit(train=_world(1, 1500), calibration=_world(2, 3000))
    a, b = va.predict_arrays(E, logits), hnsw.predict_arrays(E, logits)
    assert np.array_equal(a.q, b.q) and np.array_equal(a.d, b.d) and np.array_equal(a.sets, b.sets)
    assert np.array_equal(a.admitted, b.admitted)


def test_from_state_rejects_damaged_arrays(fitted) -> None:
    va, _ = fitted
    state = va.state()
    arrays = dict(state["arrays"])
    arrays["calibration_q"] = arrays["calibration_q"][:-1]
    with pytest.raises(ValueError, match="calibration_q has 2999 rows but calibration_embeddings has 3000"):
        VennAdmit.from_state({**state, "arrays": arrays})
    arrays = dict(state["arrays"], beta=np.zeros(2))
    with pytest.raises(ValueError, match=r"beta, gamma of shape \(3,\)"):
        VennAdmit.from_state({**state, "arrays": arrays})
