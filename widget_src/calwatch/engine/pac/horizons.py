"""Horizon forecasts for the PAC regression sets: accumulated variances (paper 003 §3.6, App. C).

This module builds a trajectory forecast ``N(x̄_{1:H}, blockdiag(Σ̃_1, …, Σ̃_H))`` from one-step
forecasts, with the accumulated variances ``Σ̃_t = Σ_{s<t} Σ(x̄_s)``, for
:class:`~calwatch.engine.pac.sets.PACGaussianRegression` to fit and predict on; one step's set
is then ``Ellipsoids.marginal`` of the trajectory's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def accumulate_variance(step_covariances: Any, *, axis: int = 1) -> FloatArray:
    """Accumulated variances ``Σ̃_t = Σ(x̄_0) + … + Σ(x̄_{t−1})`` (paper 003 §3.6).

    Parameters
    ----------
    step_covariances : array-like
        One-step forecast (co)variances ``Σ(x̄_s)`` for ``s = 0..H−1`` along ``axis``: shape
        ``(m, H)`` of variances for a scalar state, or ``(m, H, d, d)`` of covariances.
    axis : int
        The horizon axis.

    Returns
    -------
    ndarray
        Same shape; entry ``t − 1`` along ``axis`` is ``Σ̃_t``, the variance of ``x_t``.

    Examples
    --------
    >>> accumulate_variance(np.array([[1.0, 2.0, 3.0]]))
    array([[1., 3., 6.]])
    """
    arr = np.asarray(step_covariances, dtype=np.float64)
    if arr.ndim < 2:
        msg = f"step_covariances must have a row axis and a horizon axis; got shape {arr.shape}"
        raise ValueError(msg)
    if not np.isfinite(arr).all():
        msg = "step_covariances contains NaN or inf"
        raise ValueError(msg)
    if arr.ndim == 2 and (arr < 0).any():
        msg = "step variances must be ≥ 0"
        raise ValueError(msg)
    out: FloatArray = np.cumsum(arr, axis=axis)
    return out


def trajectory_gaussian(
    step_means: Any, step_covariances: Any, *, accumulate: bool = True
) -> tuple[FloatArray, FloatArray]:
    """The trajectory forecast ``N(x̄_{1:H}, blockdiag(Σ̃_1, …, Σ̃_H))`` of paper 003 App. C.

    Parameters
    ----------
    step_means : array-like of shape (m, H) or (m, H, d)
        The mean trajectory ``x̄_1..x̄_H`` (``x̄_{t+1} = μ(x̄_t)``).
    step_covariances : array-like of shape (m, H) or (m, H, d, d)
        One-step (co)variances ``Σ(x̄_0)..Σ(x̄_{H−1})`` (variances, not sds, for a scalar state).
    accumulate : bool
        Use ``Σ̃_t`` (:func:`accumulate_variance`, the paper's "A"); ``False`` uses ``Σ(x̄_{t−1})``.

    Returns
    -------
    mean : ndarray of shape (m, H·d)
        Time-major flattening (step 1's ``d`` coordinates first).
    cov : ndarray of shape (m, H·d, H·d)
        Block-diagonal covariance.

    Examples
    --------
    Fit :class:`~calwatch.engine.pac.sets.PACGaussianRegression` on ``(mean, cov)`` and the flattened observed
    trajectories; ``predict_sets(...).marginal(range((t − 1) * d, t * d))`` is the set for
    ``x_t`` (the projection of the trajectory set: same radius, shape ``T·Σ̃_t``).

    >>> mean, cov = trajectory_gaussian(np.zeros((1, 3)), np.array([[1.0, 1.0, 2.0]]))
    >>> np.diagonal(cov[0]).tolist()
    [1.0, 2.0, 4.0]
    """
    mu = np.asarray(step_means, dtype=np.float64)
    cov = np.asarray(step_covariances, dtype=np.float64)
    if mu.ndim == 2:
        m, H = mu.shape
        d = 1
        if cov.shape != (m, H):
            msg = (
                f"step_covariances must have shape {(m, H)} (variances) for means {mu.shape}; got {cov.shape}"
            )
            raise ValueError(msg)
        cov = cov[:, :, None, None]
        mu = mu[:, :, None]
    elif mu.ndim == 3:
        m, H, d = mu.shape
        if cov.shape != (m, H, d, d):
            msg = f"step_covariances must have shape {(m, H, d, d)} for means {mu.shape}; got {cov.shape}"
            raise ValueError(msg)
    else:
        msg = f"step_means must have shape (m, H) or (m, H, d); got {mu.shape}"
        raise ValueError(msg)
    blocks = accumulate_variance(cov, axis=1) if accumulate else cov
    if not np.isfinite(mu).all():
        msg = "step_means contains NaN or inf"
        raise ValueError(msg)
    full = np.zeros((m, H * d, H * d), dtype=np.float64)
    for t in range(H):
        full[:, t * d : (t + 1) * d, t * d : (t + 1) * d] = blocks[:, t]
    return mu.reshape(m, H * d), full


__all__ = ["accumulate_variance", "trajectory_gaussian"]
