"""Gaussian forecasts for the PAC regression sets: validation, Mahalanobis terms, temperature.

This module turns forecasts ``N(μ(x), Σ(x))`` (a mean and a standard deviation per row in 1-D,
a mean and a covariance matrix in d-D) into the numbers
:class:`~calwatch.engine.pac.sets.PACGaussianRegression` needs: checked arrays, each outcome's
squared Mahalanobis distance ``r²`` and ``log det Σ``, and the closed-form temperature
``T = mean(r²)/d`` of ``N(μ, T·Σ)`` (paper 003 Eq. 5 for a Gaussian).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]


def _check_matrix(a: Any, name: str, shape: tuple[int, ...]) -> FloatArray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.shape != shape:
        msg = f"{name} must have shape {shape}; got {arr.shape}"
        raise ValueError(msg)
    if not np.isfinite(arr).all():
        msg = f"{name} contains NaN or inf"
        raise ValueError(msg)
    return arr


def _mahalanobis(diff: FloatArray, cov: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(r², log det Σ)`` per row for ``diff`` (m, d) and ``cov`` (m, d, d) or (d, d).

    Raises ``ValueError`` naming the first row whose covariance is not positive definite.
    """
    try:
        L = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        covs = cov if cov.ndim == 3 else cov[None]
        bad = np.flatnonzero(np.linalg.eigvalsh(covs).min(axis=1) <= 0)
        row = int(bad[0]) if bad.size else 0
        msg = f"covariance must be symmetric positive definite; row {row} is not"
        raise ValueError(msg) from None
    logdet = 2.0 * np.log(np.diagonal(L, axis1=-2, axis2=-1)).sum(axis=-1)
    if cov.ndim == 2:
        solved = np.linalg.solve(L, diff.T).T
        logdet = np.full(diff.shape[0], float(logdet))
    else:
        solved = np.linalg.solve(L, diff[:, :, None])[:, :, 0]
    r2: FloatArray = np.einsum("ij,ij->i", solved, solved)
    return r2, np.asarray(logdet, dtype=np.float64)


@dataclass(frozen=True)
class _GaussianBatch:
    """Validated Gaussian forecasts: mean (m, d); scale: sd (m,) in 1-D, cov (m|·, d, d) in d-D."""

    mean: FloatArray
    scale: FloatArray
    one_d: bool

    @property
    def m(self) -> int:
        return int(self.mean.shape[0])

    @property
    def d(self) -> int:
        return 1 if self.one_d else int(self.mean.shape[1])

    def terms(self, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``(r², log det Σ)`` of each row's ``y``."""
        if self.one_d:
            r = (y - self.mean) / self.scale
            return r * r, 2.0 * np.log(self.scale)
        return _mahalanobis(y - self.mean, self.scale)

    def logdet(self) -> FloatArray:
        if self.one_d:
            out: FloatArray = 2.0 * np.log(self.scale)
            return out
        sign, logdet = np.linalg.slogdet(self.scale)
        if (sign <= 0).any():
            row = int(np.flatnonzero(np.atleast_1d(sign) <= 0)[0])
            msg = f"covariance must be symmetric positive definite; row {row} is not"
            raise ValueError(msg)
        return np.broadcast_to(np.asarray(logdet, dtype=np.float64), (self.m,))


def _check_gaussian(mean: Any, scale: Any, *, name: str, d: int | None) -> _GaussianBatch:
    """Validate ``(mean, sd)`` in 1-D or ``(mean, cov)`` in d-D; ``d`` is the fitted dimension."""
    mu = np.asarray(mean, dtype=np.float64)
    sc = np.asarray(scale, dtype=np.float64)
    if mu.ndim not in (1, 2) or mu.shape[0] == 0:
        msg = f"{name} means must have shape (m,) for 1-D or (m, d) for d-D forecasts; got {mu.shape}"
        raise ValueError(msg)
    if not (np.isfinite(mu).all() and np.isfinite(sc).all()):
        msg = f"{name} means or scales contain NaN or inf"
        raise ValueError(msg)
    m = mu.shape[0]
    if mu.ndim == 1:
        if d not in (None, 0):
            msg = f"{name}: fitted on {d}-D forecasts (means of shape (m, {d})); got 1-D means {mu.shape}"
            raise ValueError(msg)
        if sc.shape != (m,):
            msg = f"{name}: 1-D forecasts need one standard deviation per row, shape ({m},); got {sc.shape}"
            raise ValueError(msg)
        if (sc <= 0).any():
            msg = f"{name} standard deviations must be > 0; found {float(sc.min()):.6g}"
            raise ValueError(msg)
        return _GaussianBatch(mu, sc, one_d=True)
    dim = mu.shape[1]
    if d is not None and dim != d:
        what = "1-D forecasts (means of shape (m,))" if d == 0 else f"{d}-D forecasts"
        msg = f"{name}: fitted on {what}; got means of shape {mu.shape}"
        raise ValueError(msg)
    if sc.shape not in ((m, dim, dim), (dim, dim)):
        msg = (
            f"{name}: d-D forecasts need covariance matrices of shape ({m}, {dim}, {dim}) or a "
            f"shared ({dim}, {dim}); got {sc.shape}"
        )
        raise ValueError(msg)
    asym = np.abs(sc - np.swapaxes(sc, -1, -2)).max()
    if asym > 1e-10 * max(1.0, float(np.abs(sc).max())):
        msg = f"{name} covariance matrices must be symmetric (largest |Σ − Σᵀ| = {asym:.3g})"
        raise ValueError(msg)
    return _GaussianBatch(mu, sc, one_d=False)


def _take(batch: _GaussianBatch, rows: IntArray) -> _GaussianBatch:
    scale = batch.scale if (not batch.one_d and batch.scale.ndim == 2) else batch.scale[rows]
    return _GaussianBatch(batch.mean[rows], scale, batch.one_d)


def _gaussian_temperature(batch: _GaussianBatch, y: FloatArray) -> float:
    """MLE of ``T`` in ``N(μ, T Σ)``: ``mean(r²) / d``."""
    r2, _ = batch.terms(y)
    T = float(np.mean(r2)) / batch.d
    if not T > 0.0:
        msg = "cannot fit a temperature: every outcome equals its forecast mean (r² = 0)"
        raise ValueError(msg)
    return T
