"""The finite-sample conformal quantile and conformal p-values (ALGORITHMS.md §0-1)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# (n + 1)(1 − α) is often an integer in exact arithmetic (n = 99, α = 0.1) but lands a few ulps
# above it in floating point; this slack keeps ⌈·⌉ from stepping one order statistic too far.
_ROUNDING_SLACK = 1e-9


def conformal_rank(n: int, alpha: float) -> int:
    """Rank ``⌈(n+1)(1−α)⌉`` of the order statistic used as the conformal quantile (1-based)."""
    return math.ceil((n + 1) * (1.0 - alpha) - _ROUNDING_SLACK)


def conformal_quantile(scores: FloatArray, alpha: float) -> float:
    """Finite-sample conformal quantile ``s_(⌈(n+1)(1−α)⌉)``, never interpolated.

    Returns ``+inf`` when the rank exceeds ``n`` (too few scores for level ``1−α``: the
    prediction set is then every class).

    Examples
    --------
    >>> conformal_quantile(np.array([0.3, 0.1, 0.2, 0.4]), alpha=0.4)  # rank ⌈5·0.6⌉ = 3
    0.3
    """
    n = int(scores.shape[0])
    k = conformal_rank(n, alpha)
    if k > n:
        return math.inf
    return float(np.partition(scores, k - 1)[k - 1])


def p_values_against(
    sorted_scores: FloatArray,
    test_scores: FloatArray,
    theta: FloatArray | None = None,
) -> FloatArray:
    """Conformal p-values of ``test_scores`` against sorted calibration scores.

    Deterministic: ``(1 + #{j : s_j ≥ s}) / (n + 1)``. With ``theta`` (uniform draws, same
    shape as ``test_scores``), the smoothed form ``(#{s_j > s} + θ·(#{s_j = s} + 1)) / (n + 1)``,
    exactly uniform under exchangeability. O(log n) per test score.
    """
    n = sorted_scores.shape[0]
    below = np.searchsorted(sorted_scores, test_scores, side="left")
    if theta is None:
        deterministic: FloatArray = (1.0 + (n - below)) / (n + 1.0)
        return deterministic
    not_above = np.searchsorted(sorted_scores, test_scores, side="right")
    greater = n - not_above
    equal = not_above - below
    smoothed: FloatArray = (greater + theta * (equal + 1.0)) / (n + 1.0)
    return smoothed
