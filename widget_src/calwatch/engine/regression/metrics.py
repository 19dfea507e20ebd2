"""Metrics of predictive distributions for regression (ALGORITHMS.md §3; paper 001 §6).

- :func:`negative_log_likelihood`: ``−log pdf(y)`` per row (``inf`` outside a bounded support);
- :func:`crps`: the continuous ranked probability score ``∫ (F(t) − 1{t ≥ y})² dt`` per row, in
  its quantile form ``2 ∫₀¹ ρ_p(y − F⁻¹(p)) dp`` (Laio & Tamea 2007; ``ρ_p`` the pinball loss)
  by the midpoint rule on ``K`` levels;
- :func:`pit_calibration_error`: ``(1/M) Σ_j (p̂_j − p_j)²`` over ``p_j = j/M``, ``p̂_j`` the share of
  PIT values ``≤ p_j``, and the debiased form that subtracts ``p̂_j(1 − p̂_j)/(N − 1)`` per term
  (unbiased for ``(P(PIT ≤ p_j) − p_j)²`` given the predictor);
- :func:`expected_pit_calibration_error`: what the debiased error averages to under exact
  conformal calibration, because the calibration set itself is random;
- :func:`interval_coverage`, :func:`interval_width`, and :func:`evaluate_cdf` for all of the
  above (STD, 95% CI width, NLL, CRPS, ECE, coverage) on one batch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from calwatch.engine.regression.scores import as_float_array

if TYPE_CHECKING:
    from calwatch.engine.regression.calibrator import CalibratedCDF

FloatArray = npt.NDArray[np.float64]

#: Levels of the CRPS's midpoint rule (error ~1e-6 of the scale for a Gaussian, see the tests).
CRPS_LEVELS = 1_000
#: Levels ``p_j = j/M`` of the PIT calibration error.
PIT_LEVELS = 100


def _labels(F: CalibratedCDF, y: Any) -> FloatArray:
    labels = as_float_array(y, "y", ndim=1)
    if labels.shape[0] != F.n_rows:
        msg = f"y has {labels.shape[0]} labels but the distribution has {F.n_rows} rows"
        raise ValueError(msg)
    return labels


def negative_log_likelihood(F: CalibratedCDF, y: Any) -> FloatArray:
    """``−log pdf(y_i | x_i)`` per row (continuous CDFs only; ``inf`` where the density is 0).

    Raises
    ------
    ValueError
        For step CDFs (naive, random interpolation), which have no density.
    """
    return -F.logpdf(_labels(F, y))


def crps(F: CalibratedCDF, y: Any, *, n_levels: int = CRPS_LEVELS, block_size: int = 4_000_000) -> FloatArray:
    """CRPS per row, ``(2/K) Σ_k ρ_{p_k}(y − F⁻¹(p_k))`` with ``p_k = (k − ½)/K``.

    ``ρ_p(e) = e·(p − 1{e < 0})``. Quantiles of improper CDFs (naive and random interpolation put
    mass ``≤ 1/(n+1)`` at ``±∞``) are clipped to :meth:`CalibratedCDF.support`, i.e. the tail mass
    sits at the extreme calibration score: the integral over all labels would be infinite.
    Levels are processed a few at a time, so memory stays near ``block_size`` floats.

    Examples
    --------
    >>> from calwatch.engine.regression.calibrator import ModularConformalCalibrator
    >>> F = ModularConformalCalibrator().fit(np.zeros(3), np.array([-1.0, 0.0, 1.0])).predict(np.zeros(1))
    >>> round(float(crps(F, np.zeros(1))[0]), 4)  # uniform on [-2, 2] at its centre: 1 − 2/3
    0.3333
    """
    labels = _labels(F, y)
    if int(n_levels) != n_levels or n_levels < 2:
        msg = f"n_levels must be an integer ≥ 2; got {n_levels!r}"
        raise ValueError(msg)
    p = (np.arange(int(n_levels), dtype=np.float64) + 0.5) / n_levels
    bounds = None if F.proper else F.support()
    out = np.zeros(F.n_rows)
    for start in range(0, p.shape[0], max(1, block_size // F.n_rows)):
        levels = p[start : start + max(1, block_size // F.n_rows)]
        Q = F.ppf(levels[None, :])
        if bounds is not None:
            Q = np.clip(Q, bounds[:, :1], bounds[:, 1:])
        err = labels[:, None] - Q
        out += np.sum(err * (levels - (err < 0)), axis=1)
    result: FloatArray = (2.0 / n_levels) * out
    return result


def pit_calibration_error(pit: Any, *, n_levels: int = PIT_LEVELS, debiased: bool = False) -> float:
    """Calibration error of PIT values, ``(1/M) Σ_{j=1..M} (p̂_j − p_j)²`` with ``p_j = j/M``.

    ``debiased=True`` subtracts ``p̂_j(1 − p̂_j)/(N − 1)`` from each term: for PIT values that are
    independent given the predictor, each term is then unbiased for ``(P(PIT ≤ p_j) − p_j)²``, so
    a calibrated predictor scores 0 on average (the value can be negative).

    Examples
    --------
    >>> pit_calibration_error(np.array([0.1, 0.2, 0.6, 0.8]), n_levels=4)  # p̂ = (.5, .5, .75, 1)
    0.015625
    """
    values = as_float_array(pit, "pit", ndim=1)
    N = values.shape[0]
    if N < 2:
        msg = f"pit needs at least 2 values; got {N}"
        raise ValueError(msg)
    if int(n_levels) != n_levels or n_levels < 1:
        msg = f"n_levels must be a positive integer; got {n_levels!r}"
        raise ValueError(msg)
    levels = np.arange(1, int(n_levels) + 1, dtype=np.float64) / n_levels
    p_hat = np.searchsorted(np.sort(values), levels, side="right") / N
    terms = (p_hat - levels) ** 2
    if debiased:
        terms = terms - p_hat * (1.0 - p_hat) / (N - 1)
    return float(np.mean(terms))


def expected_pit_calibration_error(
    n_cal: int, n_test: int, *, pool_size: int | None = None, n_levels: int = PIT_LEVELS
) -> float:
    """Mean of the *debiased* PIT calibration error under exact conformal calibration.

    Even a perfectly calibrated recalibrator has a positive expected debiased error, because the
    calibration set is random: given it, ``C_j = P(PIT ≤ p_j | calibration set)`` is not exactly
    ``p_j``. For random interpolation (Vovk et al. 2020) and continuous scores,
    ``C_j = (1 − f)·U_(k) + f·U_(k+1)`` with ``k = ⌊p_j(n+1)⌋``, ``f = p_j(n+1) − k`` and ``U_(i)``
    the population CDF at the ``i``-th calibration score: uniform order statistics, with
    ``Cov(U_(i), U_(j)) = i(n+1−j)/((n+1)²(n+2))`` for ``i ≤ j``, so ``E[C_j] = p_j`` and the debiased
    term averages to ``Var(C_j)``; the result is ``(1/M) Σ_j Var(C_j) ≈ 1/(6(n+2))``.

    With ``pool_size = P`` the calibration and test rows are drawn without replacement from a
    finite pool of ``P`` rows: the gaps between calibration scores are then Dirichlet-multinomial,
    which multiplies every covariance by ``(P+1)/(P−n)``, and the test rows' hypergeometric noise
    leaves ``−E[C_j(1 − C_j)]/(P − n − 1)`` in each debiased term. Linear interpolation matches
    this to ``O(n⁻²)`` (it interpolates the score instead of the probability between knots).

    Parameters
    ----------
    n_cal, n_test : int
        Calibration and test rows of one split.
    pool_size : int, optional
        ``P`` for draws without replacement from a finite pool (``None``: an infinite population).
    n_levels : int
        ``M``, as in :func:`pit_calibration_error`.

    Examples
    --------
    >>> round(expected_pit_calibration_error(2_000, 2_000) * 6 * 2_002, 3)
    0.999
    """
    n = int(n_cal)
    if n < 1 or int(n_test) < 2:
        msg = f"n_cal must be ≥ 1 and n_test ≥ 2; got {n_cal!r}, {n_test!r}"
        raise ValueError(msg)
    fpc = 1.0
    if pool_size is not None:
        P = int(pool_size)
        if n + int(n_test) > P:
            msg = f"pool_size must be at least n_cal + n_test = {n + int(n_test)}; got {pool_size!r}"
            raise ValueError(msg)
        fpc = (P + 1.0) / (P - n)
    p = np.arange(1, int(n_levels) + 1, dtype=np.float64) / n_levels
    a = p * (n + 1.0)
    k = np.floor(a + 1e-9)
    f = np.clip(a - k, 0.0, 1.0)
    c = fpc / ((n + 1.0) ** 2 * (n + 2.0))
    var = c * ((1 - f) ** 2 * k * (n + 1 - k) + f**2 * (k + 1) * (n - k) + 2 * f * (1 - f) * k * (n - k))
    var = np.maximum(var, 0.0)
    terms = var
    if pool_size is not None:
        terms = var - (p * (1.0 - p) - var) / (int(pool_size) - n - 1.0)
    return float(np.mean(terms))


def interval_coverage(intervals: Any, y: Any) -> float:
    """Share of rows with ``lower ≤ y ≤ upper``; ``intervals`` of shape ``(m, 2)``."""
    bounds = as_float_array(intervals, "intervals", ndim=2, allow_inf=True)
    labels = as_float_array(y, "y", ndim=1)
    if bounds.shape != (labels.shape[0], 2):
        msg = f"intervals must have shape ({labels.shape[0]}, 2) to match y; got {bounds.shape}"
        raise ValueError(msg)
    return float(np.mean((bounds[:, 0] <= labels) & (labels <= bounds[:, 1])))


def interval_width(intervals: Any) -> FloatArray:
    """``upper − lower`` per row."""
    bounds = as_float_array(intervals, "intervals", ndim=2, allow_inf=True)
    if bounds.shape[1] != 2:
        msg = f"intervals must have shape (m, 2); got {bounds.shape}"
        raise ValueError(msg)
    out: FloatArray = bounds[:, 1] - bounds[:, 0]
    return out


def evaluate_cdf(
    F: CalibratedCDF,
    y: Any,
    *,
    ci_level: float = 0.95,
    coverage_level: float = 0.9,
    n_levels: int = PIT_LEVELS,
    crps_levels: int = CRPS_LEVELS,
) -> dict[str, float]:
    """Paper 001's metrics of one batch, as named floats.

    Keys: ``std`` (mean predicted sd; ``inf`` for improper CDFs), ``ci_width`` (mean width of the
    central ``ci_level`` interval), ``nll`` (mean ``−log pdf``; ``inf`` if any row falls outside a
    bounded support, ``nan`` for step CDFs), ``nll_finite`` (the mean over rows with positive
    density), ``nll_inf_share`` (the share of the others), ``crps``, ``ece`` and ``ece_debiased``
    (:func:`pit_calibration_error`), ``coverage`` and ``width`` of the central ``coverage_level``
    interval.
    """
    labels = _labels(F, y)
    out: dict[str, float] = {"std": float(np.mean(F.std())) if F.proper else math.inf}
    out["ci_width"] = float(np.mean(interval_width(F.interval(ci_level))))
    if F.continuous:
        nll = negative_log_likelihood(F, labels)
        finite = np.isfinite(nll)
        out["nll"] = float(np.mean(nll))
        out["nll_finite"] = float(np.mean(nll[finite])) if finite.any() else math.nan
        out["nll_inf_share"] = float(1.0 - finite.mean())
    else:
        out["nll"] = out["nll_finite"] = out["nll_inf_share"] = math.nan
    out["crps"] = float(np.mean(crps(F, labels, n_levels=crps_levels)))
    pit = F.cdf(labels)
    out["ece"] = pit_calibration_error(pit, n_levels=n_levels)
    out["ece_debiased"] = pit_calibration_error(pit, n_levels=n_levels, debiased=True)
    bounds = F.interval(coverage_level)
    out["coverage"] = interval_coverage(bounds, labels)
    out["width"] = float(np.mean(interval_width(bounds)))
    return out


__all__ = [
    "CRPS_LEVELS",
    "PIT_LEVELS",
    "crps",
    "evaluate_cdf",
    "expected_pit_calibration_error",
    "interval_coverage",
    "interval_width",
    "negative_log_likelihood",
    "pit_calibration_error",
]
