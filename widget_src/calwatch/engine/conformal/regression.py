"""Split conformal prediction intervals for regression (paper 001 §5.1; Vovk et al. 2005; Romano et al. 2019).

:class:`SplitConformalRegressor` gives intervals with marginal coverage ``≥ 1 − α`` from three
nonconformity scores, each with the conformal quantile ``q̂ = s_(⌈(n+1)(1−α)⌉)`` of ALGORITHMS.md §0
(``+inf`` when the rank exceeds ``n``):

- ``"absolute"``: ``|y − μ|`` on point predictions ``(m,)``; interval ``μ ± q̂``;
- ``"normalized"``: ``|y − μ|/σ`` on ``(m, 2)`` (mean, sd or any difficulty estimate); ``μ ± q̂σ``;
- ``"cqr"``: ``max(l − y, y − u)`` on ``(m, 2)`` (lower, upper), conformalized quantile
  regression; ``[l − q̂, u + q̂]``.

Paper 001's Theorem 2 relates these to MCC: each is (up to ε) a credible interval of the MCC
distribution whose score is the signed version of the nonconformity score (``y − μ``,
``(y − μ)/σ``, the interval score); the central one is compared in ``benchmarks/mcc_table.py``.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import as_float_array, check_alpha
from calwatch.engine.conformal.quantiles import conformal_quantile
from calwatch.engine.errors import NotFittedError

FloatArray = npt.NDArray[np.float64]
RegressionScoreName = Literal["absolute", "normalized", "cqr"]

#: Nonconformity scores of :class:`SplitConformalRegressor`.
REGRESSION_SCORES: tuple[RegressionScoreName, ...] = ("absolute", "normalized", "cqr")


class SplitConformalRegressor:
    """Split conformal regression intervals (absolute residual, normalised residual or CQR).

    Parameters
    ----------
    score : {"absolute", "normalized", "cqr"}
        The nonconformity score; it fixes the prediction layout (see the module docstring).
    alpha : float
        Miscoverage; intervals cover with probability ``≥ 1 − alpha``.

    Attributes
    ----------
    quantile_ : float
        The conformal quantile ``q̂`` (``inf`` when ``n`` is too small for ``alpha``).
    n_calibration_ : int
        Calibration rows.

    Examples
    --------
    >>> c = SplitConformalRegressor(score="absolute", alpha=0.25)
    >>> c = c.fit(np.zeros(4), np.array([1.0, -2.0, 0.5, 3.0]))
    >>> c.quantile_  # scores 0.5, 1, 2, 3; rank ⌈5·0.75⌉ = 4
    3.0
    >>> c.predict_interval(np.array([10.0])).tolist()
    [[7.0, 13.0]]
    """

    def __init__(self, *, score: RegressionScoreName = "absolute", alpha: float = 0.1) -> None:
        if score not in REGRESSION_SCORES:
            msg = f"score must be one of {REGRESSION_SCORES}; got {score!r}"
            raise ValueError(msg)
        self.score: RegressionScoreName = score
        self.alpha = check_alpha(alpha)

    def __repr__(self) -> str:
        return f"SplitConformalRegressor(score={self.score!r}, alpha={self.alpha!r})"

    def _columns(self, pred: Any, name: str) -> tuple[FloatArray, FloatArray | None]:
        if self.score == "absolute":
            mu = as_float_array(pred, name, ndim=1)
            if mu.shape[0] == 0:
                msg = f"{name} is empty: expected at least one row"
                raise ValueError(msg)
            return mu, None
        arr = as_float_array(pred, name, ndim=2)
        layout = "(mean, sd)" if self.score == "normalized" else "(lower, upper)"
        if arr.shape[1] != 2 or arr.shape[0] == 0:
            msg = (
                f"{name} must have shape (m, 2), columns {layout}, for score={self.score!r}; got {arr.shape}"
            )
            raise ValueError(msg)
        if self.score == "normalized" and np.any(arr[:, 1] <= 0):
            msg = f"{name}'s sd column must be positive for score='normalized'"
            raise ValueError(msg)
        if self.score == "cqr" and np.any(arr[:, 1] < arr[:, 0]):
            msg = f"{name} must have lower ≤ upper in every row for score='cqr'"
            raise ValueError(msg)
        return arr[:, 0], arr[:, 1]

    def nonconformity(self, pred: Any, y: Any) -> FloatArray:
        """The nonconformity score of each row (larger: the label conforms less)."""
        a, b = self._columns(pred, "pred")
        labels = as_float_array(y, "y", ndim=1)
        if labels.shape[0] != a.shape[0]:
            msg = f"y has {labels.shape[0]} labels but pred has {a.shape[0]} rows"
            raise ValueError(msg)
        if self.score == "absolute":
            return np.abs(labels - a)
        assert b is not None
        if self.score == "normalized":
            out: FloatArray = np.abs(labels - a) / b
            return out
        return np.maximum(a - labels, labels - b)

    def fit(self, pred_cal: Any, y_cal: Any) -> SplitConformalRegressor:
        """Compute the calibration scores and the conformal quantile ``q̂``."""
        scores = self.nonconformity(pred_cal, y_cal)
        self.quantile_ = conformal_quantile(scores, self.alpha)
        self.n_calibration_ = int(scores.shape[0])
        return self

    def predict_interval(self, pred: Any) -> FloatArray:
        """Intervals ``(lower, upper)`` of shape ``(m, 2)``; ``±inf`` bounds when ``q̂ = inf``."""
        if not hasattr(self, "quantile_"):
            msg = "this SplitConformalRegressor is not fitted yet: call fit(pred_cal, y_cal) first"
            raise NotFittedError(msg)
        a, b = self._columns(pred, "pred")
        q = self.quantile_
        if self.score == "absolute":
            lo, hi = a - q, a + q
        elif self.score == "normalized":
            assert b is not None
            lo, hi = a - q * b, a + q * b
        else:
            assert b is not None
            lo, hi = a - q, b + q
        return np.column_stack([lo, hi])


__all__ = ["REGRESSION_SCORES", "SplitConformalRegressor"]
