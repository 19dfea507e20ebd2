"""Post-hoc calibration maps for classifier outputs (ALGORITHMS.md §4.1, §5).

Each calibrator has one lifecycle: construct with options, ``fit(...)`` on labelled calibration
data, then ``transform(...)``. Fitted attributes end in ``_``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, logsumexp

from calwatch.engine._validation import check_labels
from calwatch.engine.conformal import NotFittedError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

#: Search range of the temperature T (the divisor of the logits).
TEMPERATURE_BOUNDS = (0.01, 100.0)


def check_logits(logits: Any, name: str = "logits", *, n_classes: int | None = None) -> FloatArray:
    """Validate a logit matrix and return it as float64.

    Raises
    ------
    ValueError
        Wrong shape, NaN or inf, or the wrong number of columns.
    TypeError
        A non-numeric dtype.
    """
    arr = np.asarray(logits)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        msg = f"{name} must be a numeric array of logits; got dtype {arr.dtype}"
        raise TypeError(msg)
    if arr.ndim != 2 or arr.shape[1] < 2:
        msg = f"{name} must have shape (rows, classes ≥ 2); got {arr.shape}"
        raise ValueError(msg)
    if arr.shape[0] == 0:
        msg = f"{name} is empty: expected at least one row"
        raise ValueError(msg)
    if n_classes is not None and arr.shape[1] != n_classes:
        msg = f"{name} has {arr.shape[1]} columns but the calibrator was fitted on {n_classes} classes"
        raise ValueError(msg)
    out = np.asarray(arr, dtype=np.float64)
    lo, hi = float(out.min()), float(out.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        row = int(np.argwhere(~np.isfinite(out))[0, 0])
        msg = f"{name} contains NaN or inf (first in row {row})"
        raise ValueError(msg)
    return out


def temperature_nll(logits: FloatArray, y: IntArray, temperature: float) -> float:
    """Mean negative log-likelihood of ``softmax(logits / T)`` at the true labels."""
    scaled = logits / temperature
    rows = np.arange(logits.shape[0])
    return float(np.mean(logsumexp(scaled, axis=1) - scaled[rows, y]))


class TemperatureScaling:
    """Temperature scaling of multi-class logits: ``p ∝ exp(logits / T)``.

    ``T`` is found by bounded one-dimensional minimisation (Brent) of the calibration NLL over
    ``log T``, in float64. ``T > 1`` softens an over-confident model; ``T < 1`` sharpens.

    Parameters
    ----------
    bounds : tuple of float
        Search range of ``T``.

    Attributes
    ----------
    temperature_ : float
        The fitted divisor ``T`` of the logits (``p ∝ exp(logits / T)``). In paper 003's
        notation ``τ = 1/T`` multiplies the log-probabilities.
    nll_ : float
        Calibration NLL at ``temperature_``.

    Examples
    --------
    >>> ts = TemperatureScaling().fit(np.array([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]]), np.array([0, 1, 1]))
    >>> round(ts.temperature_, 3)  # σ(2/T) = 2/3 at the optimum: T = 2 / ln 2
    2.885
    """

    def __init__(self, *, bounds: tuple[float, float] = TEMPERATURE_BOUNDS) -> None:
        lo, hi = bounds
        if not (0 < lo < hi and math.isfinite(hi)):
            msg = f"bounds must be 0 < low < high < inf; got {bounds!r}"
            raise ValueError(msg)
        self.bounds = (float(lo), float(hi))

    def fit(self, logits: Any, y: Any) -> TemperatureScaling:
        """Fit ``T`` on calibration logits and class indices."""
        z = check_logits(logits, "logits")
        labels = check_labels(y, z.shape[1], "y", n_rows=z.shape[0])
        # Shift each row by its max once: NLL is invariant to it, and exp stays in range.
        z = z - z.max(axis=1, keepdims=True)
        lo, hi = (math.log(b) for b in self.bounds)
        result = minimize_scalar(
            lambda log_t: temperature_nll(z, labels, math.exp(log_t)),
            bounds=(lo, hi),
            method="bounded",
            options={"xatol": 1e-6},
        )
        self.temperature_ = float(math.exp(result.x))
        self.nll_ = float(result.fun)
        self.n_classes_ = int(z.shape[1])
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "temperature_"):
            msg = "this TemperatureScaling is not fitted yet: call fit(logits, y) first"
            raise NotFittedError(msg)

    def transform(self, logits: Any) -> FloatArray:
        """Calibrated probabilities ``softmax(logits / T)``, float64."""
        self._check_fitted()
        z = check_logits(logits, "logits", n_classes=self.n_classes_)
        probs: FloatArray = np.exp(log_softmax(z / self.temperature_, axis=1))
        return probs

    def log_transform(self, logits: Any) -> FloatArray:
        """Calibrated log-probabilities ``log_softmax(logits / T)``, float64."""
        self._check_fitted()
        z = check_logits(logits, "logits", n_classes=self.n_classes_)
        log_probs: FloatArray = log_softmax(z / self.temperature_, axis=1)
        return log_probs
