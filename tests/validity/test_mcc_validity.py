"""Monte Carlo check of modular conformal calibration's guarantee on real data (ALGORITHMS.md §3, §8).

Data: ggplot2 diamonds, log price. Paper 001's base predictors (small torch networks, one shared
architecture: point, interval, quantile-4, quantile-10, Gaussian distribution, a 5-network deep
ensemble) are trained once on 60% of a 20,000-row subsample and their predictions on the other
40% (P = 8,000 rows, the pool) are cached (``calwatch.datasets.regression.regression_pool``). Each of
R = 50 splits (``numpy.random.default_rng(20240611)``) draws n = 2,000 calibration and N = 2,000
test rows from the pool without replacement; every recalibrator is refitted per split.

What is checked, for every prediction type (and both distribution scores) with linear and
random interpolation:

- PIT calibration. Given the calibration set, ``C_j = P(PIT ≤ p_j)`` is not exactly ``p_j``, so the
  *debiased* PIT error of a perfectly conformal recalibrator averages to
  ``E0 = expected_pit_calibration_error(n, N, pool_size=P) = 8.32e-5`` (for random interpolation
  exactly, for linear to O(n⁻²); M = 100 levels), not to 0. The null distribution of one split's
  error is simulated by the same pipeline on i.i.d. continuous labels (distribution-free for
  random interpolation: only ranks matter), which also confirms E0. Assertion: the mean over
  the R splits is within 3.5 null sds of the mean, ``|mean − E0| ≤ 3.5 · sd_null / √R``
  (3.5 rather than 3 because 16 configurations are tested on the same splits: a family-wise
  false-alarm rate below 1% even if they were independent). Power: the base Gaussian's own PIT
  ``Φ((y − μ)/σ)`` (a network trained by Gaussian NLL, already fairly calibrated) averages 1.7e-3,
  over 20 tolerances above E0.
- 90% central credible intervals: the mean coverage over R splits is 0.90 within
  ``min(0.01, 3.5 sd)``, the sd derived from the order statistics (covariance
  ``i(n+1−j)/((n+1)²(n+2))``, times ``(P+1)/(P−n)`` for sampling from a finite pool) plus the test
  rows' hypergeometric noise, divided by √R (about 0.0014).
- Split conformal intervals (absolute residual, normalised residual, CQR) at α = 0.1 cover
  ``1 − ⌊(n+1)α⌋/(n+1) = 0.90005`` on average, within 3.5 sd computed the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pytest
from scipy.special import ndtr

from calwatch.datasets.regression import regression_pool
from calwatch.engine.conformal.regression import SplitConformalRegressor
from calwatch.engine.regression.calibrator import ModularConformalCalibrator
from calwatch.engine.regression.metrics import expected_pit_calibration_error, pit_calibration_error

pytestmark = pytest.mark.slow

SEED = 20240611
REPETITIONS = 50
N_CAL = 2_000
N_TEST = 2_000
LEVELS = 100
LEVEL = 0.9
Z = 3.5
PREDICTORS = (
    ("point", None),
    ("interval", None),
    ("quantile-4", None),
    ("quantile-10", None),
    ("distribution", "z"),
    ("distribution", "cdf"),
    ("ensemble", "z"),
    ("ensemble", "cdf"),
)
INTERPOLATIONS = ("linear", "random")
CONFIGS = [(p, s, i) for p, s in PREDICTORS for i in INTERPOLATIONS]
CONFORMAL = {"absolute": "point", "normalized": "distribution", "cqr": "interval"}

FloatArray = npt.NDArray[np.float64]


@dataclass
class Results:
    pool_size: int
    ece: dict[tuple[str, str | None, str], list[float]] = field(default_factory=dict)
    coverage: dict[tuple[str, str | None, str], list[float]] = field(default_factory=dict)
    conformal: dict[str, list[float]] = field(default_factory=dict)
    null_ece: list[float] = field(default_factory=list)
    raw_ece: list[float] = field(default_factory=list)


@pytest.fixture(scope="module")
def results() -> Results:
    pool = regression_pool("diamonds", seed=0, max_rows=20_000, progress=False)
    P = pool.y.shape[0]
    rng = np.random.default_rng(SEED)
    synthetic = rng.standard_normal(P)  # the null: i.i.d. continuous labels, point prediction 0
    out = Results(pool_size=P)
    for _ in range(REPETITIONS):
        order = rng.permutation(P)
        cal, test = order[:N_CAL], order[N_CAL : N_CAL + N_TEST]
        y_cal, y_test = pool.y[cal], pool.y[test]
        for predictor, score, interpolation in CONFIGS:
            mcc = ModularConformalCalibrator(
                score=score,
                interpolation=interpolation,
                seed=int(rng.integers(2**31)),
                **pool.calibrator_options(predictor),
            )
            F = mcc.fit(pool.take(predictor, cal), y_cal).predict(pool.take(predictor, test))
            key = (predictor, score, interpolation)
            out.ece.setdefault(key, []).append(
                pit_calibration_error(F.cdf(y_test), n_levels=LEVELS, debiased=True)
            )
            lo, hi = F.interval(LEVEL).T
            out.coverage.setdefault(key, []).append(float(np.mean((lo <= y_test) & (y_test <= hi))))
        for score, predictor in CONFORMAL.items():
            c = SplitConformalRegressor(score=score, alpha=1 - LEVEL).fit(pool.take(predictor, cal), y_cal)
            lo, hi = c.predict_interval(pool.take(predictor, test)).T
            out.conformal.setdefault(score, []).append(float(np.mean((lo <= y_test) & (y_test <= hi))))
        null = ModularConformalCalibrator(interpolation="random", seed=int(rng.integers(2**31)))
        G = null.fit(np.zeros(N_CAL), synthetic[cal]).predict(np.zeros(N_TEST))
        out.null_ece.append(pit_calibration_error(G.cdf(synthetic[test]), n_levels=LEVELS, debiased=True))
        mu, sd = pool.take("distribution", test).T
        out.raw_ece.append(pit_calibration_error(ndtr((y_test - mu) / sd), n_levels=LEVELS, debiased=True))
    return out


def _order_stat_cov(i: FloatArray, j: FloatArray, n: int, P: int) -> FloatArray:
    """Cov(U_(i), U_(j)) of the population CDF at calibration order statistics (i, j in 0..n+1)."""
    a, b = np.minimum(i, j), np.maximum(i, j)
    fpc = (P + 1.0) / (P - n)
    out: FloatArray = fpc * a * (n + 1 - b) / ((n + 1.0) ** 2 * (n + 2.0))
    return out


def coverage_sd(level_lo: float, level_hi: float, n: int, N: int, P: int) -> float:
    """sd of one split's coverage of ``{PIT ∈ [level_lo, level_hi)}`` (random interpolation, exact)."""

    def weights(p: float) -> tuple[np.ndarray, np.ndarray]:
        a = p * (n + 1)
        k = math.floor(a + 1e-9)
        f = a - k
        return np.array([k, k + 1], dtype=float), np.array([1 - f, f])

    ki, wi = weights(level_hi)
    kj, wj = weights(level_lo)
    idx = np.concatenate([ki, kj])
    w = np.concatenate([wi, -wj])  # D = C_hi − C_lo
    var_d = float(w @ _order_stat_cov(idx[:, None], idx[None, :], n, P) @ w)
    d = level_hi - level_lo
    test_noise = (d * (1 - d) - var_d) / N * (P - n - N) / (P - n - 1)
    return math.sqrt(var_d + test_noise)


def test_null_simulation_matches_the_closed_form(results: Results) -> None:
    E0 = expected_pit_calibration_error(N_CAL, N_TEST, pool_size=results.pool_size, n_levels=LEVELS)
    null = np.asarray(results.null_ece)
    # the simulated null mean estimates E0 with sd sd_null/√R
    assert abs(null.mean() - E0) <= Z * null.std(ddof=1) / math.sqrt(REPETITIONS)
    # power: the uncalibrated Gaussian's PIT error (mean 1.7e-3) is over 10 tolerances above E0
    assert np.mean(results.raw_ece) > E0 + 10 * Z * null.std(ddof=1) / math.sqrt(REPETITIONS)


@pytest.mark.parametrize(("predictor", "score", "interpolation"), CONFIGS)
def test_recalibrated_pit_error_is_at_its_null_mean(
    results: Results, predictor, score, interpolation
) -> None:
    E0 = expected_pit_calibration_error(N_CAL, N_TEST, pool_size=results.pool_size, n_levels=LEVELS)
    tolerance = Z * np.std(results.null_ece, ddof=1) / math.sqrt(REPETITIONS)
    mean = float(np.mean(results.ece[(predictor, score, interpolation)]))
    assert abs(mean - E0) <= tolerance, f"mean debiased ECE {mean:.3g}, E0 {E0:.3g} ± {tolerance:.2g}"


@pytest.mark.parametrize(("predictor", "score", "interpolation"), CONFIGS)
def test_credible_intervals_cover_ninety_percent(results: Results, predictor, score, interpolation) -> None:
    sd = coverage_sd(0.05, 0.95, N_CAL, N_TEST, results.pool_size) / math.sqrt(REPETITIONS)
    tolerance = min(0.01, Z * sd)
    mean = float(np.mean(results.coverage[(predictor, score, interpolation)]))
    assert abs(mean - LEVEL) <= tolerance, f"coverage {mean:.4f}, 0.90 ± {tolerance:.4f}"


@pytest.mark.parametrize("score", list(CONFORMAL))
def test_split_conformal_intervals_cover(results: Results, score) -> None:
    n, alpha = N_CAL, 1 - LEVEL
    expected = 1 - math.floor((n + 1) * alpha) / (n + 1)  # 0.90005
    # coverage of a conformal interval is U_(k) with k = ⌈(n+1)(1−α)⌉: the same sd with one level
    sd = coverage_sd(0.0, expected, n, N_TEST, results.pool_size) / math.sqrt(REPETITIONS)
    mean = float(np.mean(results.conformal[score]))
    assert abs(mean - expected) <= Z * sd, f"coverage {mean:.4f}, {expected:.5f} ± {Z * sd:.4f}"
