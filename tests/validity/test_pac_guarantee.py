"""Monte Carlo check of the PAC guarantee ``P[L(C) > ε] < δ`` on real data (ALGORITHMS.md §4, §8).

Data: ggplot2 diamonds, a gradient-boosting model's probabilities of ``cut`` (5 classes) on the
32,364 diamonds it was not trained on (``calwatch.datasets.diamonds_cut_task(seed=0)``); their
logarithms are the logits (``softmax(log p) = p``).

Population. Paper 003's guarantee is over i.i.d. draws of the calibration set from a
distribution ``D`` and concerns the *true* error ``L(C) = P_D(y ∉ C(x))``. Here ``D`` is the
uniform distribution on the pool: every calibration set is drawn from it i.i.d. (with
replacement, so repeated rows, i.e. ties, occur as they would in real data), and ``L(C)`` is the
exact error over the whole pool. A held-out test set would add binomial noise of sd
``sqrt(L(1−L)/m)`` around ``L`` and blur "``L > ε``" near ε; computing ``L`` on the population
removes that noise, so the only randomness left is that of the R draws.

Design: R = 500 draws with ``numpy.random.default_rng(20240605)``; in each, 500 rows fit the
temperature (passed as ``temperature_data``, paper 003's ``Z'_train``) and n = 2,000 other rows
calibrate; ε = 0.1, δ = 0.1 (so a violation is common enough to measure: ``k* = 182`` and
``P[Binomial(2000, 0.1) ≤ 182] = 0.0948``).

What is checked (tolerances derived next to each assertion):

- The guarantee: the share of draws with ``L > ε`` is at most ``δ`` plus 3 binomial sd.
- Exactness of the mechanism: for the paper's set ``{f ≥ e^{−T̂}}`` (without ``ŷ``), given the
  temperature, ``L > ε`` happens exactly when at most ``k*`` calibration rows have
  ``φ = −log f ≥ T*`` (``T*`` = the smallest threshold with ``L ≤ ε``), an event of probability
  ``e_r = P[Binomial(n, p*_r) ≤ k*]`` with ``p*_r = P_D(φ ≥ T*)`` computable on the pool. The
  observed share must match ``mean(e_r)`` two-sided.
- Power: the naive threshold ``k = ⌊εn⌋ = 200`` (no PAC margin) violates in about half of the
  draws, computed the same way, and clearly more often than δ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pytest
from scipy.stats import binom

from calwatch.datasets import diamonds_cut_task
from calwatch.engine.pac.sets import PACConfidenceSets, binomial_k_star, vc_k_star

pytestmark = pytest.mark.slow

SEED = 20240605
REPETITIONS = 500
N_CAL = 2_000
N_TEMPERATURE = 500
EPSILON = 0.1
DELTA = 0.1
Z = 3.0
NAIVE_K = math.floor(EPSILON * N_CAL)  # 200: the empirical-risk threshold without a PAC margin

VARIANTS = {
    "binomial+temperature": {"bound": "binomial", "temperature": True},
    "binomial": {"bound": "binomial", "temperature": False},
    "vc+temperature": {"bound": "vc", "temperature": True},
}


@dataclass
class Runs:
    """Per-draw results of one variant."""

    error: list[float] = field(default_factory=list)  # L of the engine's sets (with ŷ)
    raw_error: list[float] = field(default_factory=list)  # L of the paper's sets (no ŷ)
    naive_error: list[float] = field(default_factory=list)  # L of the k = ⌊εn⌋ threshold
    expected: list[float] = field(default_factory=list)  # e_r = P[Bin(n, p*) ≤ k*]
    naive_expected: list[float] = field(default_factory=list)
    identity_ok: list[bool] = field(default_factory=list)
    mean_size: list[float] = field(default_factory=list)

    def share(self, name: str) -> float:
        return float(np.mean(np.asarray(getattr(self, name)) > EPSILON))


def _p_star(log_f_pool: npt.NDArray[np.float64]) -> tuple[float, float]:
    """``(v*, p*)``: ``v* = −T*`` and ``p* = P_D(log f ≤ v*)`` on the pool.

    ``L(T) = #{φ > T}/N ≤ ε`` ⇔ at most ``M = ⌊εN⌋`` pool rows have ``log f < −T``; the
    smallest such ``T`` is ``T* = −v*`` with ``v*`` the ``(M+1)``-th smallest ``log f``.
    """
    N = log_f_pool.shape[0]
    M = N // 10  # ⌊εN⌋ for ε = 1/10, in integers
    v_star = float(np.partition(log_f_pool, M)[M])
    return v_star, float(np.count_nonzero(log_f_pool <= v_star)) / N


def run_monte_carlo() -> dict[str, Runs]:
    """The R draws for every variant (about 8 s on one core)."""
    task = diamonds_cut_task(seed=0)
    logits, y = np.log(task.probs), task.labels
    N = y.shape[0]
    rows = np.arange(N)
    rng = np.random.default_rng(SEED)
    results = {name: Runs() for name in VARIANTS}
    for _ in range(REPETITIONS):
        draw = rng.integers(0, N, size=N_TEMPERATURE + N_CAL)  # i.i.d. from the pool
        temp, cal = draw[:N_TEMPERATURE], draw[N_TEMPERATURE:]
        for name, options in VARIANTS.items():
            runs = results[name]
            pac = PACConfidenceSets(epsilon=EPSILON, delta=DELTA, **options)  # type: ignore[arg-type]
            tdata = (logits[temp], y[temp]) if options["temperature"] else None
            pac.fit(logits[cal], y[cal], temperature_data=tdata)
            sets = pac.predict_sets(logits)
            log_f_pool = pac.predict_log_proba(logits)[rows, y]
            v_star, p_star = _p_star(log_f_pool)
            runs.error.append(float(np.mean(~sets[rows, y])))
            raw_error = float(np.mean(log_f_pool < -pac.threshold_))
            runs.raw_error.append(raw_error)
            runs.mean_size.append(float(sets.sum(axis=1).mean()))
            runs.expected.append(float(binom.cdf(pac.k_star_, N_CAL, p_star)))
            # the proof's identity: L > ε ⇔ at most k* calibration rows have φ ≥ T*
            log_f_cal = log_f_pool[cal]
            runs.identity_ok.append(
                (raw_error > EPSILON) == (np.count_nonzero(log_f_cal <= v_star) <= pac.k_star_)
            )
            naive = float(np.partition(log_f_cal, NAIVE_K)[NAIVE_K])
            runs.naive_error.append(float(np.mean(log_f_pool < naive)))
            runs.naive_expected.append(float(binom.cdf(NAIVE_K, N_CAL, p_star)))
    return results


@pytest.fixture(scope="module")
def monte_carlo() -> dict[str, Runs]:
    return run_monte_carlo()


def test_k_star_of_the_design() -> None:
    # The module docstring's numbers: k* = 182, P[Bin(2000, 0.1) ≤ 182] = 0.0948 < δ and
    # P[Bin(2000, 0.1) ≤ 183] = 0.1084 ≥ δ; VC: 38.
    assert binomial_k_star(N_CAL, EPSILON, DELTA) == 182
    assert float(binom.cdf(182, N_CAL, EPSILON)) == pytest.approx(0.0948, abs=1e-4)
    assert float(binom.cdf(183, N_CAL, EPSILON)) == pytest.approx(0.1084, abs=1e-4)
    assert vc_k_star(N_CAL, EPSILON, DELTA) == 38


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_violation_share_is_at_most_delta(monte_carlo: dict[str, Runs], variant: str) -> None:
    runs = monte_carlo[variant]
    share = runs.share("error")
    # Each draw violates independently with probability ≤ δ, so the share over R = 500 draws has
    # sd ≤ sqrt(δ(1−δ)/R) = sqrt(0.09/500) = 0.0134; 3 sd above δ is 0.140.
    tol = Z * math.sqrt(DELTA * (1 - DELTA) / REPETITIONS)
    assert share <= DELTA + tol, f"{variant}: {share:.3f} of draws had L > ε (bound {DELTA + tol:.3f})"
    # The engine's sets add ŷ to the paper's: never more error.
    assert (np.asarray(runs.error) <= np.asarray(runs.raw_error)).all()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_violations_follow_theorem_1_exactly(monte_carlo: dict[str, Runs], variant: str) -> None:
    runs = monte_carlo[variant]
    assert all(runs.identity_ok), f"{variant}: L > ε without ≤ k* calibration rows at φ ≥ T*"
    e = np.asarray(runs.expected)
    # Theorem 1's bound holds draw by draw: p* ≥ ε, so e_r ≤ P[Bin(n, ε) ≤ k*] < δ.
    assert (e < DELTA).all()
    share, expected = runs.share("raw_error"), float(e.mean())
    # Two-sided: the R indicators are independent Bernoulli(e_r); the share has sd
    # sqrt(Σ e_r(1−e_r))/R (≈ 0.0131 for e ≈ 0.095; ≈ 0 for VC, whose k* = 38 makes e_r ~ 1e-37).
    sd = math.sqrt(float(np.sum(e * (1 - e)))) / REPETITIONS
    assert abs(share - expected) <= Z * sd + 1e-12, (
        f"{variant}: share {share:.4f} vs {expected:.4f} ± {Z * sd:.4f}"
    )


def test_the_bound_is_not_vacuous(monte_carlo: dict[str, Runs]) -> None:
    runs = monte_carlo["binomial+temperature"]
    naive_share, pac_share = runs.share("naive_error"), runs.share("raw_error")
    e = np.asarray(runs.naive_expected)
    expected = float(e.mean())  # ≈ P[Bin(2000, 0.1) ≤ 200] = 0.52
    sd = math.sqrt(float(np.sum(e * (1 - e)))) / REPETITIONS  # ≈ 0.022
    assert abs(naive_share - expected) <= Z * sd, (naive_share, expected, sd)
    # The naive threshold violates ε in about half the draws: far above δ + 3 sd (0.140) and
    # above the PAC sets' share by more than 3 sd of the difference (≤ sqrt(0.022² + 0.0134²)).
    assert naive_share > DELTA + Z * math.sqrt(DELTA * (1 - DELTA) / REPETITIONS)
    assert naive_share - pac_share > Z * math.hypot(sd, math.sqrt(DELTA * (1 - DELTA) / REPETITIONS))


def test_direct_bound_gives_smaller_sets_than_vc(monte_carlo: dict[str, Runs]) -> None:
    # Paper 003 Fig. 1(a) on this data: the VC bound's smaller k* (38 vs 182) gives larger sets.
    # Not a theorem; means over 500 draws (sd of a draw's mean size ≈ 0.02).
    with_t = float(np.mean(monte_carlo["binomial+temperature"].mean_size))
    vc = float(np.mean(monte_carlo["vc+temperature"].mean_size))
    assert vc > with_t + 0.1, (vc, with_t)
