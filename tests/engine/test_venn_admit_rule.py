"""The Clopper-Pearson admission rule of Venn-ADMIT (issue 17; docs/venn-admit.md), by hand.

A category of ``n`` calibration rows, all labelled ``ŷ``, and a test point of weight ``w = 1``
counted as a miss: ``n`` successes in ``n + 1`` trials. The one-sided Clopper-Pearson lower
bound at level ``ℓ`` is the ``ℓ`` quantile of ``Beta(n, 2)``, whose CDF is
``F_n(p) = p^n·(n + 1 − n·p)``. So the bound is ``≥ 0.9`` iff ``F_n(0.9) = 0.9^n·(1 + 0.1·n) ≤ ℓ``.

Toy table, α = 0.1, δ = 0.15 over m = 3 candidate categories: ``ℓ = 0.05``.

====  ======  ==============  ======================  ===========================
cat   n = n_ŷ  Venn p̲ = n/(n+1)  F_n(0.9)             CP bound (ℓ = 0.05)
====  ======  ==============  ======================  ===========================
A     40      0.9756          0.9^40·5 = 0.07390      0.88945 (< 0.9: rejected)
B     60      0.9836          0.9^60·7 = 0.01258      0.92458 (≥ 0.9: admitted)
C     100     0.9901          0.9^100·11 = 0.000292   0.95389 (admitted)
====  ======  ==============  ======================  ===========================

The paper's rule (``p̲ ≥ 0.9``) admits A as well: a 40-row category that looks perfect is
exactly the small-category winner's curse the issue measured.
"""

import math

import numpy as np
import pytest

from calwatch.engine.venn_admit.admit import VennAdmit, auto_kappa
from calwatch.engine.venn_admit.bands import venn_bounds, venn_cp_lower
from calwatch.engine.venn_admit.results import VennAdmitResult

Fitted = tuple[VennAdmit, tuple[np.ndarray, np.ndarray, np.ndarray]]
ALPHA, DELTA, M = 0.1, 0.15, 3
LEVEL = DELTA / M  # 0.05


def _beta_n2_cdf(n: int, p: float) -> float:
    """CDF of Beta(n, 2) at p."""
    return p**n * (n + 1 - n * p)


def test_toy_category_table_by_hand() -> None:
    n = np.array([40, 60, 100])
    assert [round(0.9**k * (1 + 0.1 * k), 6) for k in (40, 60, 100)] == [0.073904, 0.012579, 0.000292]
    bound = venn_cp_lower(n, n, np.ones(3), LEVEL)
    np.testing.assert_allclose(bound, [0.8894469, 0.9245780, 0.9538927], atol=1e-6)
    for k, b in zip(n.tolist(), bound.tolist(), strict=True):
        assert _beta_n2_cdf(k, b) == pytest.approx(LEVEL, abs=1e-12)  # it is the ℓ quantile of Beta(n, 2)
    assert (bound >= 1 - ALPHA).tolist() == [False, True, True]
    venn = venn_bounds(n, n, np.ones(3))[0]
    np.testing.assert_allclose(venn, [40 / 41, 60 / 61, 100 / 101])
    assert (venn >= 1 - ALPHA).all(), "the paper's raw p̲ admits all three, A included"
    assert (bound <= venn).all()


def test_degenerate_categories() -> None:
    # no row labelled ŷ, or ψ' = 0 (w = inf): nothing can be claimed
    out = venn_cp_lower(np.array([5, 50]), np.array([0, 50]), np.array([1.0, np.inf]), LEVEL)
    assert out.tolist() == [0.0, 0.0]
    # a heavier test point (w = 3) lowers the bound: n successes in n + 3 trials
    light, heavy = venn_cp_lower(np.array([60, 60]), np.array([60, 60]), np.array([1.0, 3.0]), LEVEL)
    assert heavy < light


def test_minimum_category_size_by_hand() -> None:
    # smallest n with 0.9^n (1 + 0.1 n) ≤ ℓ: 45 at ℓ = 0.05, 53 at ℓ = 0.1/4
    smallest = {lvl: next(k for k in range(1, 500) if _beta_n2_cdf(k, 0.9) <= lvl) for lvl in (0.05, 0.025)}
    assert smallest == {0.05: 45, 0.025: 53}
    va = VennAdmit(alpha=ALPHA, delta=DELTA)
    va.n_candidates_ = M
    assert va.min_category_size() == 45
    va.n_candidates_ = 4
    va.delta = 0.1
    assert va.min_category_size() == 53
    paper = VennAdmit(alpha=ALPHA, bound="venn")
    assert paper.min_category_size() == 9  # n/(n+1) ≥ 0.9 from n = 9


def test_auto_kappa_rule() -> None:
    # min(1000, max(⌈(1−α)/α⌉, ⌊n_mc/(C(K+1))⌋))
    assert auto_kappa(1800, 2, 25, 0.1) == 1800 // 52 == 34
    assert auto_kappa(900, 10, 25, 0.1) == math.ceil(0.9 / 0.1) == 9
    assert auto_kappa(52_000, 2, 25, 0.1) == 1000
    assert auto_kappa(10**6, 2, 25, 0.1) == 1000
    assert auto_kappa(1000, 2, 25, 0.05) == 19


@pytest.fixture(scope="module")
def fitted() -> Fitted:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 8)) * 4

    def draw(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        y = rng.integers(0, 3, n)
        E = (centres[y] + rng.normal(size=(n, 8))).astype(np.float32)
        return E, E @ centres.T / 8, y

    va = VennAdmit(alpha=0.1, k=10, progress=False, epochs=5)
    va.fit(train=draw(1500), calibration=draw(3000))
    return va, draw(600)


def test_admission_is_the_bound_on_each_category(fitted: Fitted) -> None:
    va, (E, L, _) = fitted
    assert va.kappa_ == auto_kappa(1350, 3, 10, 0.1) == 40
    level = va.delta / va.n_candidates_
    for weighted in (True, False):
        res: VennAdmitResult = va.predict_arrays(E, L, weighted=weighted)
        single = ~np.isnan(res.p_lower)
        n_y = np.rint(res.p_lower[single] * (res.category_size[single] + res.weight[single])).astype(int)
        bound = venn_cp_lower(res.category_size[single], n_y, res.weight[single], level)
        assert (res.admitted[single] == (bound >= 0.9 - 1e-9)).all()
        assert not res.admitted[~single].any()
        paper = VennAdmit.from_state({**va.state(), "options": {**va.options(), "bound": "venn"}})
        loose = paper.predict_arrays(E, L, weighted=weighted).admitted
        assert (res.admitted <= loose).all(), "the bound only removes admitted rows"
    assert res.admitted.any()


def test_old_states_and_snapshots_keep_the_papers_rule(fitted: Fitted) -> None:
    va, (E, L, _) = fitted
    state = va.state()
    old_options = {k: v for k, v in va.options().items() if k not in ("bound", "delta")}
    old = VennAdmit.from_state({**state, "options": old_options | {"kappa": va.kappa_}})
    assert old.bound == "venn"
    paper = VennAdmit.from_state({**state, "options": {**va.options(), "bound": "venn"}})
    np.testing.assert_array_equal(old.predict_arrays(E, L).admitted, paper.predict_arrays(E, L).admitted)
    # a monitor snapshot decodes attributes: one written before issue 17 lacks these
    decoded = VennAdmit.from_state({**state, "options": old_options | {"kappa": va.kappa_}})
    for name in ("bound", "delta", "kappa_", "n_candidates_", "diagnostics_"):
        del decoded.__dict__[name]
    decoded._after_decode()
    assert decoded.bound == "venn" and decoded.kappa_ == va.kappa_
    assert decoded.diagnostics_["candidates"] == decoded.n_candidates_
    np.testing.assert_array_equal(decoded.predict_arrays(E, L).admitted, paper.predict_arrays(E, L).admitted)


def test_diagnostics_explain_a_weak_embedding(fitted: Fitted) -> None:
    va, _ = fitted
    g = va.diagnostics_
    assert set(g) >= {"kappa", "candidates", "full_share", "singleton_share", "min_category_size"}
    assert 0 <= g["calibration_admit_share"] <= g["singleton_share"] <= 1
    text = va.explain_rejections()
    assert "KNN agreement" in text and f"κ = {va.kappa_}" in text and "Try" in text


def test_candidate_count_leaves_out_keys_too_small_to_pass() -> None:
    # all-right sizes needed at δ/m = 0.1, 0.05, 0.0333, 0.025 (α = 0.1, w = 1): 37, 45, 50, 53
    need = [next(k for k in range(1, 500) if _beta_n2_cdf(k, 0.9) <= 0.1 / m) for m in (1, 2, 3, 4)]
    assert need == [37, 45, 50, 53]
    va = VennAdmit(alpha=0.1, delta=0.1)
    # keys of 100, 80, 30, 5 rows: at m = 1 two keys could pass (> 1); at m = 2 the same two (≤ 2)
    assert va._candidates(np.array([100, 80, 30, 5])) == 2
    # 100, 80, 60, 50, 5: m = 1, 2, 3 leave 4 keys able to pass; m = 4 (need 53) leaves 3 ≤ 4
    assert va._candidates(np.array([100, 80, 60, 50, 5])) == 4
    assert va._candidates(np.array([5, 3])) == 1
    assert va._candidates(np.zeros(0, dtype=np.int64)) == 1
