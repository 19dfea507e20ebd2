"""PAC confidence sets (ALGORITHMS.md §4, paper 003): k*, thresholds, ties, Gaussian sets, errors."""

import math
import time
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import log_softmax

from calwatch.engine.calibration.maps import TemperatureScaling
from calwatch.engine.errors import NotFittedError
from calwatch.engine.pac.sets import (
    Ellipsoids,
    PACConfidenceSets,
    PACGaussianRegression,
    PACInfeasibleError,
    accumulate_variance,
    binomial_k_star,
    binomial_min_n,
    pac_k_star,
    probabilities_to_logits,
    trajectory_gaussian,
    vc_alpha,
    vc_k_star,
    vc_min_n,
)

LOG_2PI = math.log(2 * math.pi)


# ------------------------------------------------------------------------------ k* (Eq. 8)
def exact_k_star(n, epsilon, delta):
    """max{k : Σ_{i≤k} C(n,i) ε^i (1−ε)^(n−i) < δ} by a direct sum in exact rationals."""
    eps, dlt = Fraction(epsilon), Fraction(delta)  # the floats exactly as the code sees them
    total, best = Fraction(0), None
    for k in range(n + 1):
        total += math.comb(n, k) * eps**k * (1 - eps) ** (n - k)
        if total < dlt:
            best = k
        else:
            break
    return best


@pytest.mark.parametrize(
    ("n", "epsilon", "delta"),
    [
        (1, 0.5, 0.75),
        (10, 0.1, 0.5),
        (20, 0.2, 0.1),
        (30, 0.3, 0.2),
        (50, 0.1, 0.05),
        (100, 0.05, 0.01),
        (200, 0.2, 1e-3),
        (300, 0.01, 0.5),
        (500, 0.1, 1e-5),
        (397, 0.37, 0.123),
        (1500, 0.01, 1e-5),
    ],
)
def test_binomial_k_star_matches_an_exact_sum(n, epsilon, delta):
    expected = exact_k_star(n, epsilon, delta)
    assert expected is not None
    assert binomial_k_star(n, epsilon, delta) == expected
    assert pac_k_star(n, epsilon, delta, "binomial") == expected


def test_binomial_k_star_hand_computed():
    # n = 10, ε = 0.1: P(X = 0) = 0.9^10 = 0.3486784401 < 0.5; P(X ≤ 1) = 0.3486784401 + 0.387420489
    # = 0.7360989291 ≥ 0.5, so k* = 0 for δ = 0.5 and k* = 1 for δ = 0.75.
    assert binomial_k_star(10, 0.1, 0.5) == 0
    assert binomial_k_star(10, 0.1, 0.75) == 1
    # n = 20, ε = 0.2: P(X ≤ 0) = 0.011529, P(X ≤ 1) = 0.069175, P(X ≤ 2) = 0.206085.
    assert binomial_k_star(20, 0.2, 0.1) == 1
    assert binomial_k_star(20, 0.2, 0.21) == 2
    # n = 20, ε = 0.5: P(X ≤ 3) = 1351/2^20 = 0.0012884, P(X ≤ 4) = 6196/2^20 = 0.0059090.
    assert binomial_k_star(20, 0.5, 0.005) == 3


def test_k_star_zero_boundary_is_strict():
    # 0.8^20 = 0.011529215: δ just above gives k* = 0, δ at or below it is infeasible.
    assert binomial_k_star(20, 0.2, 0.011530) == 0
    with pytest.raises(PACInfeasibleError):
        binomial_k_star(20, 0.2, 0.011529)


def test_k_star_exact_tie_with_delta_is_not_feasible():
    # n = 10, ε = 1/2: P(X ≤ 1) = 11/1024 exactly, a float. The bound needs "< δ", so δ = 11/1024
    # gives k* = 0 (P(X = 0) = 1/1024), and the next float above it gives k* = 1.
    delta = 11 / 1024
    assert binomial_k_star(10, 0.5, delta) == 0
    assert binomial_k_star(10, 0.5, math.nextafter(delta, 1.0)) == 1


def _mp_binomial_cdf(k, n, p):
    """P[Binomial(n, p) ≤ k] in 30-digit arithmetic, summing pmf terms down from k."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(30):
        p = mpmath.mpf(p)
        q = 1 - p
        log_term = (
            mpmath.loggamma(n + 1) - mpmath.loggamma(k + 1) - mpmath.loggamma(n - k + 1)
            + k * mpmath.log(p) + (n - k) * mpmath.log(q)
        )  # fmt: skip
        term = mpmath.exp(log_term)
        total = term
        for i in range(k, 0, -1):
            term = term * i / (n - i + 1) * q / p
            total += term
            if term < total * mpmath.mpf(10) ** -25:
                break
        return total


def test_binomial_k_star_for_ten_million_rows_is_fast_exact_and_monotone():
    start = time.perf_counter()
    k = binomial_k_star(10**7, 0.01, 1e-5)
    assert time.perf_counter() - start < 1.0  # O(log n) CDF calls; ~2 ms here
    assert k == 98_660
    # Independent 30-digit check that k* is the largest feasible k.
    assert _mp_binomial_cdf(k, 10**7, 0.01) < 1e-5 <= _mp_binomial_cdf(k + 1, 10**7, 0.01)
    # More rows can only allow more misses (Binomial(n+1, ε) dominates Binomial(n, ε)).
    ns = [10**7 - 100_000, 10**7 - 1, 10**7, 10**7 + 1, 10**7 + 100_000]
    ks = [binomial_k_star(n, 0.01, 1e-5) for n in ns]
    assert ks == sorted(ks)
    assert ks[0] < ks[2] < ks[-1]


def test_infeasible_binomial_bound_names_the_smallest_n():
    # (1 − ε)^n < δ ⇔ n > log δ / log(1 − ε) = −11.5129 / −0.0100503 = 1145.5, so n ≥ 1146.
    assert binomial_min_n(0.01, 1e-5) == 1146
    assert binomial_k_star(1146, 0.01, 1e-5) == 0
    with pytest.raises(PACInfeasibleError, match=r"infeasible.*n ≥ 1,146") as info:
        binomial_k_star(1145, 0.01, 1e-5)
    assert isinstance(info.value, ValueError)
    assert info.value.n_required == 1146
    assert info.value.n == 1145


def test_vc_bound_hand_computed():
    # n = 2000, ε = δ = 0.1: log 4000 + 1 − log 0.025 = 8.294050 + 1 + 3.688879 = 12.982929;
    # sqrt(12.982929 / 2000) = 0.0805696, α = 0.0194304, α n = 38.86 → k* = 38.
    assert vc_alpha(2000, 0.1, 0.1) == pytest.approx(0.0194304, abs=1e-7)
    assert vc_k_star(2000, 0.1, 0.1) == 38
    assert pac_k_star(2000, 0.1, 0.1, "vc") == 38
    assert binomial_k_star(2000, 0.1, 0.1) > 38  # the direct bound is tighter (paper 003 App. A.2)
    # α ≥ 0 needs n ε² ≥ log 2n + 1 + log(4/δ): 12.52 ≥ 12.5155 at n = 1252, 12.51 < 12.5147 at 1251.
    assert vc_min_n(0.1, 0.1) == 1252
    assert vc_k_star(1252, 0.1, 0.1) == 0
    with pytest.raises(PACInfeasibleError, match=r"VC bound.*n ≥ 1,252") as info:
        vc_k_star(1251, 0.1, 0.1)
    assert info.value.n_required == 1252


def test_vc_infeasible_where_the_paper_says():
    # Paper 003 §4: the VC bound gives no set for ImageNet's n = 20,000, ε = 0.01, δ = 1e-5.
    with pytest.raises(PACInfeasibleError, match="binomial bound needs only n ≥ 1,146"):
        vc_k_star(20_000, 0.01, 1e-5)
    assert binomial_k_star(20_000, 0.01, 1e-5) == 142


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, float("nan")])
def test_levels_must_be_in_the_open_unit_interval(bad):
    with pytest.raises(ValueError, match=r"epsilon must be in \(0, 1\)"):
        binomial_k_star(100, bad, 0.1)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\)"):
        vc_k_star(100, 0.1, bad)
    with pytest.raises(ValueError, match=r"epsilon must be in \(0, 1\)"):
        PACConfidenceSets(epsilon=bad)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\)"):
        PACGaussianRegression(delta=bad)


def test_argument_types_and_names():
    with pytest.raises(TypeError, match="epsilon must be a number"):
        PACConfidenceSets(epsilon="0.1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be a positive integer"):
        binomial_k_star(0, 0.1, 0.1)
    with pytest.raises(TypeError, match="n must be a positive integer"):
        binomial_k_star(10.0, 0.1, 0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bound must be one of"):
        PACConfidenceSets(bound="hoeffding")  # type: ignore[arg-type]


# ------------------------------------------------------------------- classification sets
def two_class_logits(f0):
    """Logits [logit f0, 0]: softmax gives class 0 the probability f0."""
    f0 = np.asarray(f0, dtype=np.float64)
    return np.stack([np.log(f0) - np.log1p(-f0), np.zeros_like(f0)], axis=1)


# n = 20, ε = 0.5, δ = 0.005 → k* = 3 (P(X ≤ 3) = 0.0012884 < δ ≤ P(X ≤ 4) = 0.0059090).
N_HAND, EPS_HAND, DELTA_HAND = 20, 0.5, 0.005


def test_threshold_is_the_k_plus_first_smallest_probability():
    f = np.array([0.1, 0.2, 0.3, 0.35, 0.4] + [0.9] * 15)
    pac = PACConfidenceSets(epsilon=EPS_HAND, delta=DELTA_HAND, temperature=False)
    pac.fit(two_class_logits(f), np.zeros(N_HAND, dtype=int))
    # sorted f: .1 .2 .3 .35 ...; the (k*+1) = 4th is 0.35 → T̂ = −log 0.35 = 1.0498221
    assert pac.k_star_ == 3
    assert pac.k_effective_ == 3
    assert pac.threshold_ == pytest.approx(1.0498221, rel=1e-7)
    assert pac.n_calibration_ == N_HAND
    assert pac.temperature_ == 1.0
    sets = pac.predict_sets(two_class_logits(f))
    assert int((~sets[:, 0]).sum()) == 3  # exactly k* calibration rows miss


def test_threshold_with_ties_decrements_k_star():
    # sorted f: .1 .2 .3 .3 .3 .9 …; k* = 3, the 4th value 0.3 equals the 3rd, so k* drops to 2
    # (the 3rd, 0.3, is greater than the 2nd, 0.2). T̂ = −log 0.3 = 1.2039728 either way; only
    # 2 calibration rows are outside their sets.
    f = np.array([0.1, 0.2, 0.3, 0.3, 0.3] + [0.9] * 15)
    pac = PACConfidenceSets(epsilon=EPS_HAND, delta=DELTA_HAND, temperature=False)
    pac.fit(two_class_logits(f), np.zeros(N_HAND, dtype=int))
    assert pac.k_star_ == 3
    assert pac.k_effective_ == 2
    assert pac.threshold_ == pytest.approx(1.2039728, rel=1e-7)
    sets = pac.predict_sets(two_class_logits(f))
    assert sets[:, 0].tolist() == [False, False] + [True] * 18  # all three tied rows are in
    # a new row at f = 0.3 is in, at 0.29 out (class 1, at 0.71, is its top class: in)
    assert pac.predict_sets(two_class_logits([0.3, 0.29])).tolist() == [[True, True], [False, True]]


def test_all_rows_tied_and_the_top_class_fills_an_empty_set():
    # K = 3, every calibration row [log 3, 0, 0] with y = 0: f = 3/5 = 0.6 everywhere, so
    # k* = 3 decrements to 0 and T̂ = −log 0.6 = 0.5108256.
    logits = np.tile([math.log(3.0), 0.0, 0.0], (N_HAND, 1))
    pac = PACConfidenceSets(epsilon=EPS_HAND, delta=DELTA_HAND, temperature=False)
    pac.fit(logits, np.zeros(N_HAND, dtype=int))
    assert (pac.k_star_, pac.k_effective_) == (3, 0)
    assert pac.threshold_ == pytest.approx(0.5108256, rel=1e-7)
    rows = np.array([[math.log(3.0), 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 5.0, 5.0], [0.0, 9.0, 0.0]])
    assert pac.predict_sets(rows).tolist() == [
        [True, False, False],  # f = 0.6 ≥ 0.6
        [True, False, False],  # 1/3 each: the paper's set is empty; ŷ = class 0 (lowest index)
        [False, True, False],  # 0.4966 twice: empty, ŷ = class 1
        [False, True, False],  # f = 0.9998 ≥ 0.6
    ]


def numpy_pac_sets(logits, T, log_threshold):
    """{y : log softmax(z/T)_y ≥ −T̂} ∪ {argmax}, written independently of the engine."""
    log_f = log_softmax(logits / T, axis=1)
    sets = log_f >= log_threshold
    sets[np.arange(len(logits)), log_f.argmax(axis=1)] = True
    return sets


@pytest.mark.parametrize("bound", ["binomial", "vc"])
def test_sets_match_a_numpy_reference_and_contain_the_top_class(bound):
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6_000, 6)) * 2.5
    y = rng.integers(0, 6, size=6_000)
    pac = PACConfidenceSets(epsilon=0.1, delta=0.05, bound=bound).fit(logits, y)
    assert pac.k_star_ == pac_k_star(pac.n_calibration_, 0.1, 0.05, bound)
    test = rng.normal(size=(3_000, 6)) * 2.5
    sets = pac.predict_sets(test)
    reference = numpy_pac_sets(test, pac.temperature_, -pac.threshold_)
    # scipy's log_softmax and the engine may round differently: allow disagreement only
    # within 1e-12 of the threshold.
    diff = sets != reference
    log_f = log_softmax(test / pac.temperature_, axis=1)
    assert np.all(np.abs(log_f[diff] + pac.threshold_) < 1e-12)
    assert sets[np.arange(3_000), test.argmax(axis=1)].all()
    assert sets.dtype == bool
    assert sets.shape == (3_000, 6)


def test_calibration_rows_outside_their_sets_number_k_effective():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(4_000, 5)) * 2
    y = rng.integers(0, 5, size=4_000)
    pac = PACConfidenceSets(epsilon=0.05, delta=1e-3, temperature=False).fit(logits, y)
    log_f = pac.predict_log_proba(logits)[np.arange(4_000), y]
    assert int(np.count_nonzero(log_f < -pac.threshold_)) == pac.k_effective_ == pac.k_star_
    # the (k*+1)-th row is in its own set: same arithmetic at fit and predict
    at_threshold = np.flatnonzero(log_f == -pac.threshold_)
    assert at_threshold.size >= 1
    assert pac.predict_sets(logits[at_threshold])[np.arange(at_threshold.size), y[at_threshold]].all()


def test_temperature_data_is_used_and_all_calibration_rows_serve_the_bound():
    rng = np.random.default_rng(1)
    z_t, y_t = rng.normal(size=(500, 4)) * 3, rng.integers(0, 4, size=500)
    z, y = rng.normal(size=(2_000, 4)) * 3, rng.integers(0, 4, size=2_000)
    pac = PACConfidenceSets(epsilon=0.1, delta=0.05).fit(z, y, temperature_data=(z_t, y_t))
    assert pac.temperature_ == TemperatureScaling().fit(z_t, y_t).temperature_
    assert pac.temperature_ > 1.5  # random labels: the fitted T flattens the logits
    assert (pac.n_calibration_, pac.n_temperature_) == (2_000, 500)
    assert pac.k_star_ == binomial_k_star(2_000, 0.1, 0.05)


def test_without_temperature_data_a_seeded_fifth_fits_the_temperature():
    rng = np.random.default_rng(2)
    z, y = rng.normal(size=(2_000, 4)) * 3, rng.integers(0, 4, size=2_000)
    pac = PACConfidenceSets(epsilon=0.1, delta=0.05, seed=11).fit(z, y)
    assert (pac.n_calibration_, pac.n_temperature_) == (1_600, 400)
    assert pac.k_star_ == binomial_k_star(1_600, 0.1, 0.05)
    rows = np.sort(np.random.default_rng(11).permutation(2_000)[:400])
    assert pac.temperature_ == TemperatureScaling().fit(z[rows], y[rows]).temperature_
    again = PACConfidenceSets(epsilon=0.1, delta=0.05, seed=11).fit(z, y)
    assert again.threshold_ == pac.threshold_  # reproducible
    other = PACConfidenceSets(epsilon=0.1, delta=0.05, seed=12).fit(z, y)
    assert other.temperature_ != pac.temperature_


def test_temperature_false_uses_every_row_and_t_equal_one():
    rng = np.random.default_rng(2)
    z, y = rng.normal(size=(300, 3)), rng.integers(0, 3, size=300)
    pac = PACConfidenceSets(epsilon=0.1, delta=0.05, temperature=False).fit(z, y)
    assert (pac.temperature_, pac.n_calibration_, pac.n_temperature_) == (1.0, 300, 0)
    with pytest.raises(ValueError, match="temperature_data was given but temperature=False"):
        PACConfidenceSets(temperature=False).fit(z, y, temperature_data=(z, y))


def test_infeasible_fit_says_how_many_rows_to_pass():
    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(1_000, 3)), rng.integers(0, 3, size=1_000)
    # 20% split: 800 rows remain < 1146; 1432 − round(286.4) = 1146 is the first total that works
    with pytest.raises(PACInfeasibleError, match=r"pass at least 1,432 rows") as info:
        PACConfidenceSets(epsilon=0.01, delta=1e-5).fit(z, y)
    assert info.value.n_required == 1_432
    with pytest.raises(PACInfeasibleError, match=r"n ≥ 1,146"):
        PACConfidenceSets(epsilon=0.01, delta=1e-5, temperature=False).fit(z, y)
    z2, y2 = rng.normal(size=(1_432, 3)), rng.integers(0, 3, size=1_432)
    assert PACConfidenceSets(epsilon=0.01, delta=1e-5).fit(z2, y2).k_star_ == 0


def test_classification_errors_and_lifecycle():
    pac = PACConfidenceSets(epsilon=0.1, delta=0.1)
    with pytest.raises(NotFittedError, match="not fitted yet: call fit"):
        pac.predict_sets(np.zeros((2, 3)))
    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(500, 3)), rng.integers(0, 3, size=500)
    pac.fit(z, y)
    with pytest.raises(ValueError, match="has 4 columns but the calibrator was fitted on 3 classes"):
        pac.predict_sets(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="NaN or inf"):
        pac.predict_sets(np.array([[0.0, np.nan, 1.0]]))
    with pytest.raises(ValueError, match="labels outside the known classes"):
        PACConfidenceSets(epsilon=0.1, delta=0.1).fit(z, y + 1)
    with pytest.raises(ValueError, match="temperature_data logits has 4 columns"):
        PACConfidenceSets(epsilon=0.1, delta=0.1).fit(z, y, temperature_data=(np.zeros((5, 4)), y[:5]))
    with pytest.raises(TypeError, match=r"temperature_data must be a pair \(logits, y\)"):
        PACConfidenceSets(epsilon=0.1, delta=0.1).fit(z, y, temperature_data=z)


def test_public_attributes():
    pac = PACConfidenceSets(epsilon=0.05, delta=1e-3, bound="vc")
    assert PACConfidenceSets.input_kind == "logits"
    assert pac.target_coverage == pytest.approx(0.95)
    assert (pac.epsilon, pac.delta, pac.bound) == (0.05, 1e-3, "vc")
    assert repr(pac) == ("PACConfidenceSets(epsilon=0.05, delta=0.001, bound='vc', temperature=True, seed=0)")


def test_probabilities_to_logits_round_trips_and_keeps_zeros_finite():
    P = np.array([[0.7, 0.3, 0.0], [0.2, 0.5, 0.3]])
    logits = probabilities_to_logits(P)
    assert np.isfinite(logits).all()
    assert np.allclose(np.exp(log_softmax(logits, axis=1)), P, atol=1e-300)


# ------------------------------------------------------------------------ Gaussian sets
def test_gaussian_interval_hand_computed():
    # mean 0, sd 1, y with |y| = 5, 4, 3, 2, then 16 rows at ±0.5: φ = log √(2π) + y²/2, so
    # ascending f is descending |y| and the (k*+1) = 4th is |y| = 2: T̂ = 0.9189385 + 2 = 2.9189385.
    y = np.array([5.0, -4.0, 3.0, -2.0] + [0.5, -0.5] * 8)
    reg = PACGaussianRegression(epsilon=EPS_HAND, delta=DELTA_HAND, temperature=False)
    reg.fit(np.zeros(N_HAND), np.ones(N_HAND), y)
    assert (reg.k_star_, reg.k_effective_) == (3, 3)
    assert reg.threshold_ == pytest.approx(0.5 * LOG_2PI + 2.0, rel=1e-12)
    mean, sd = np.array([0.0, 1.0, 3.0, 3.0]), np.array([1.0, 2.0, math.e**2, 10.0])
    # ρ² = 2T̂ − log 2π − 2 log sd: sd 1 → 4 (ρ = 2); sd 2 → 4 − 1.3862944 = 2.6137056
    # (ρ = 1.6166959, half-width 3.2333918, the paper's σ sqrt(2(T̂ − log(σ√(2π)))));
    # sd e² → 0 (a point); sd 10 → −0.6051702 < 0: the paper's set is empty, ours is {μ}.
    intervals = reg.predict_sets(mean, sd)
    assert isinstance(intervals, np.ndarray)
    assert intervals == pytest.approx(
        np.array([[-2.0, 2.0], [1 - 3.2333918, 1 + 3.2333918], [3.0, 3.0], [3.0, 3.0]]), abs=1e-6
    )
    assert reg.set_sizes(mean, sd) == pytest.approx([4.0, 6.4667836, 0.0, 0.0], abs=1e-6)
    assert reg.set_sizes(mean, sd, measure="frobenius") == pytest.approx([2.0, 3.2333918, 0.0, 0.0], abs=1e-6)
    assert reg.contains(mean, sd, np.array([1.99, 1 + 3.3, 3.0, 3.5])).tolist() == [True, False, True, False]
    # the calibration rows: exactly k* = 3 outside (|y| = 5, 4, 3); |y| = 2 is on the boundary, in
    assert int((~reg.contains(np.zeros(N_HAND), np.ones(N_HAND), y)).sum()) == 3


def test_gaussian_temperature_is_the_variance_multiplier_mle():
    # temperature rows: mean 0, sd 1, residuals 1, 2, 3 → T = mean(r²)/d = 14/3 = 4.6666667
    tdata = (np.zeros(3), np.ones(3), np.array([1.0, -2.0, 3.0]))
    y = np.array([5.0, -4.0, 3.0, -2.0] + [0.5, -0.5] * 8)
    reg = PACGaussianRegression(epsilon=EPS_HAND, delta=DELTA_HAND)
    reg.fit(np.zeros(N_HAND), np.ones(N_HAND), y, temperature_data=tdata)
    assert reg.temperature_ == pytest.approx(14 / 3)
    # same ordering of rows (all sd equal), so the set for sd 1 is still |y| ≤ 2
    assert reg.predict_sets(np.zeros(1), np.ones(1)) == pytest.approx(np.array([[-2.0, 2.0]]))
    split = PACGaussianRegression(epsilon=0.1, delta=0.1).fit(
        np.zeros(3_000), np.ones(3_000), np.arange(3_000) % 7
    )
    assert (split.n_calibration_, split.n_temperature_) == (2_400, 600)


def ellipse_rows():
    # Σ = diag(4, 1), μ = 0; y = (2·r, 0) has Mahalanobis r². Rows with r = 5, 4, 3, 2, then 1.
    r = np.array([5.0, 4.0, 3.0, 2.0] + [1.0] * 16)
    y = np.stack([2 * r, np.zeros_like(r)], axis=1)
    return np.zeros((N_HAND, 2)), np.tile(np.diag([4.0, 1.0]), (N_HAND, 1, 1)), y


def test_gaussian_ellipsoid_hand_computed():
    mean, cov, y = ellipse_rows()
    reg = PACGaussianRegression(epsilon=EPS_HAND, delta=DELTA_HAND, temperature=False).fit(mean, cov, y)
    # φ = log 2π + ½ log 4 + r²/2; the 4th largest is r = 2: T̂ = 1.8378771 + 0.6931472 + 2 = 4.5310242
    assert reg.threshold_ == pytest.approx(LOG_2PI + math.log(2.0) + 2.0, rel=1e-12)
    assert reg.n_dims_ == 2
    sets = reg.predict_sets(np.zeros((2, 2)), np.stack([np.diag([4.0, 1.0]), np.eye(2)]))
    assert isinstance(sets, Ellipsoids)
    # ρ² = 2T̂ − 2 log 2π − log det Σ: diag(4, 1) → 4 (ρ = 2); identity → 4 + log 4 = 5.3862944
    assert sets.radius == pytest.approx([2.0, 2.3208392], abs=1e-6)
    # volume π ρ² sqrt(det Σ): 8π = 25.1327412 and 5.3862944 π = 16.9216...; ‖Λ‖_F = ρ sqrt(tr Σ)
    assert sets.volume() == pytest.approx([8 * math.pi, 5.3862944 * math.pi], abs=1e-5)
    assert sets.frobenius() == pytest.approx([2 * math.sqrt(5.0), 2.3208392 * math.sqrt(2.0)], abs=1e-6)
    assert reg.set_sizes(np.zeros((1, 2)), np.diag([4.0, 1.0])) == pytest.approx([8 * math.pi])
    assert sets.bounding_box()[0] == pytest.approx(np.array([[-4.0, 4.0], [-2.0, 2.0]]))
    points = np.array([[3.9, 0.0], [0.0, 2.4]])
    assert sets.contains(points).tolist() == [True, False]  # r² = 3.8025 ≤ 4; 5.76 > 5.3862944
    shared = reg.contains(np.zeros((2, 2)), np.diag([4.0, 1.0]), points)
    assert shared.tolist() == [True, False]
    one = sets.marginal([1])
    assert (one.center.shape, one.shape[0].tolist(), one.radius[0]) == ((2, 1), [[1.0]], 2.0)


def test_accumulated_variance_hand_computed():
    assert accumulate_variance(np.array([[1.0, 2.0, 3.0]])).tolist() == [[1.0, 3.0, 6.0]]
    s0, s1 = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[1.0, 0.5], [0.5, 1.0]])
    acc = accumulate_variance(np.stack([s0, s1])[None])
    assert acc[0, 1].tolist() == [[2.0, 0.5], [0.5, 3.0]]  # Σ̃_2 = Σ(x̄_0) + Σ(x̄_1)
    mean, cov = trajectory_gaussian(np.array([[[1.0, 2.0], [3.0, 4.0]]]), np.stack([s0, s1])[None])
    assert mean.tolist() == [[1.0, 2.0, 3.0, 4.0]]
    assert cov[0].tolist() == [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 2.0, 0.0, 0.0],
        [0.0, 0.0, 2.0, 0.5],
        [0.0, 0.0, 0.5, 3.0],
    ]
    _, plain = trajectory_gaussian(np.zeros((1, 2, 2)), np.stack([s0, s1])[None], accumulate=False)
    assert plain[0, 2:, 2:].tolist() == s1.tolist()
    with pytest.raises(ValueError, match="variances must be ≥ 0"):
        accumulate_variance(np.array([[1.0, -1.0]]))


def test_horizon_sets_per_step_are_projections_with_accumulated_shape():
    # Scalar random walk: x_t = x_{t−1} + N(0, 1), H = 3, so Var(x_t) = t exactly: the
    # accumulated variances are the true ones and T ≈ 1.
    rng = np.random.default_rng(0)
    n, H = 4_000, 3
    paths = np.cumsum(rng.normal(size=(n, H)), axis=1)
    mean, cov = trajectory_gaussian(np.zeros((n, H)), np.ones((n, H)))
    reg = PACGaussianRegression(epsilon=0.1, delta=0.05).fit(mean, cov, paths)
    # E[r²] = H = 3 even though the steps are correlated (Cov(x_s, x_t) = min(s, t)), so
    # E[T] ≈ 1; Var(r²) = 3·2 + 2·(1 + 2/3 + 4/3) = 12, so T = mean(r²)/3 over the 800
    # temperature rows has sd sqrt(12/800)/3 = 0.041: 3 sd = 0.123.
    assert reg.temperature_ == pytest.approx(1.0, abs=0.123)
    sets = reg.predict_sets(mean[:1], cov[:1])
    assert isinstance(sets, Ellipsoids)
    for t in (1, 2, 3):
        step = sets.marginal([t - 1])
        assert step.shape[0, 0, 0] == pytest.approx(reg.temperature_ * t)
        assert step.radius[0] == sets.radius[0]


def test_gaussian_errors():
    reg = PACGaussianRegression(epsilon=0.1, delta=0.1, temperature=False)
    with pytest.raises(NotFittedError, match="not fitted yet"):
        reg.predict_sets(np.zeros(2), np.ones(2))
    reg.fit(np.zeros(50), np.ones(50), np.linspace(-2, 2, 50))
    with pytest.raises(ValueError, match="fitted on 1-D forecasts"):
        reg.predict_sets(np.zeros((2, 2)), np.tile(np.eye(2), (2, 1, 1)))
    with pytest.raises(ValueError, match="standard deviations must be > 0"):
        reg.predict_sets(np.zeros(2), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="one standard deviation per row"):
        reg.predict_sets(np.zeros(2), np.ones(3))
    mean, cov, y = ellipse_rows()
    bad = cov.copy()
    bad[1] = [[1.0, 2.0], [2.0, 1.0]]  # symmetric, eigenvalues 3 and −1
    with pytest.raises(ValueError, match="positive definite; row 1 is not"):
        PACGaussianRegression(epsilon=EPS_HAND, delta=DELTA_HAND, temperature=False).fit(mean, bad, y)
    asym = cov.copy()
    asym[0, 0, 1] = 0.5
    with pytest.raises(ValueError, match="must be symmetric"):
        PACGaussianRegression(epsilon=EPS_HAND, delta=DELTA_HAND, temperature=False).fit(mean, asym, y)
    with pytest.raises(ValueError, match="measure must be"):
        reg.set_sizes(np.zeros(2), np.ones(2), measure="area")  # type: ignore[arg-type]
    with pytest.raises(PACInfeasibleError, match="n ≥"):
        PACGaussianRegression(epsilon=0.01, delta=1e-5, temperature=False).fit(
            np.zeros(50), np.ones(50), np.zeros(50)
        )
