"""Exact binomial intervals for rates (coverage, error, admitted accuracy)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def clopper_pearson(
    successes: npt.ArrayLike, trials: npt.ArrayLike, confidence: float = 0.95
) -> tuple[FloatArray, FloatArray]:
    """Exact (Clopper-Pearson) binomial confidence interval for ``successes / trials``.

    Vectorised; rows with ``trials == 0`` get ``(nan, nan)``.

    Examples
    --------
    >>> lo, hi = clopper_pearson([9], [10])
    >>> round(float(lo[0]), 4), round(float(hi[0]), 4)
    (0.555, 0.9975)
    """
    from scipy.stats import beta  # scipy.stats costs ~0.3 s to import: only when an interval is asked for

    k = np.atleast_1d(np.asarray(successes, dtype=np.float64))
    n = np.atleast_1d(np.asarray(trials, dtype=np.float64))
    tail = (1.0 - confidence) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(k > 0, beta.ppf(tail, k, n - k + 1), 0.0)
        hi = np.where(k < n, beta.ppf(1.0 - tail, k + 1, n - k), 1.0)
    empty = n <= 0
    lo = np.where(empty, np.nan, lo)
    hi = np.where(empty, np.nan, hi)
    return lo.astype(np.float64), hi.astype(np.float64)
