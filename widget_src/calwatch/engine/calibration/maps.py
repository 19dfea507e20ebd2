"""Post-hoc calibration maps for classifier outputs (ALGORITHMS.md §4.1, §5).

Each calibrator has one lifecycle: construct with options, ``fit(...)`` on labelled calibration
data, then ``transform(...)``. Fitted attributes end in ``_``.

- :class:`TemperatureScaling`: one divisor ``T`` of multi-class logits.
- :class:`PlattScaling`: a logistic map of each class's log-odds (binary, or one-vs-rest).
- :class:`HistogramBinning`, :class:`IsotonicCalibration`: maps of the top-label (or top-k)
  confidence to the chance that the label is in the top-k set; defined in
  :mod:`calwatch.engine.calibration.binning` and re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_labels, check_probabilities
from calwatch.engine.calibration.binning import HistogramBinning, IsotonicCalibration
from calwatch.engine.errors import NotFittedError

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
    from scipy.special import logsumexp  # on first use: `import calwatch` stays fast

    scaled = logits / temperature
    rows = np.arange(logits.shape[0])
    return float(np.mean(logsumexp(scaled, axis=1) - scaled[rows, y]))


def _log_temperature_objective(logits: FloatArray, y: IntArray) -> Callable[[float], float]:
    """``log T ↦`` :func:`temperature_nll` ``(logits, y, T)``, for many evaluations.

    Each row is shifted by its max once (the NLL is invariant to it): then every scaled entry
    is ≤ 0 and each row holds an exact 0, so ``log Σ exp`` needs no further max-shift (no
    overflow; the sum is ≥ 1). The mean true-label logit is computed once; each evaluation is
    one scale, one ``exp`` in a reused buffer and a row sum as a matrix-vector product.
    """
    z = logits - logits.max(axis=1, keepdims=True)
    mean_true = float(np.mean(z[np.arange(z.shape[0]), y]))
    ones = np.ones(z.shape[1])
    buffer = np.empty_like(z)

    def objective(log_t: float) -> float:
        inverse = math.exp(-log_t)
        np.multiply(z, inverse, out=buffer)
        np.exp(buffer, out=buffer)
        return float(np.mean(np.log(buffer @ ones))) - inverse * mean_true

    return objective


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
        from scipy.optimize import minimize_scalar  # on first use: `import calwatch` stays fast

        z = check_logits(logits, "logits")
        labels = check_labels(y, z.shape[1], "y", n_rows=z.shape[0])
        lo, hi = (math.log(b) for b in self.bounds)
        result = minimize_scalar(
            _log_temperature_objective(z, labels),
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
        from scipy.special import log_softmax  # on first use: `import calwatch` stays fast

        self._check_fitted()
        z = check_logits(logits, "logits", n_classes=self.n_classes_)
        probs: FloatArray = np.exp(log_softmax(z / self.temperature_, axis=1))
        return probs

    def log_transform(self, logits: Any) -> FloatArray:
        """Calibrated log-probabilities ``log_softmax(logits / T)``, float64."""
        from scipy.special import log_softmax  # on first use: `import calwatch` stays fast

        self._check_fitted()
        z = check_logits(logits, "logits", n_classes=self.n_classes_)
        log_probs: FloatArray = log_softmax(z / self.temperature_, axis=1)
        return log_probs


# ---------------------------------------------------------------------------------- Platt
PlattInput = Literal["probs", "logits"]
PLATT_INPUTS: tuple[PlattInput, ...] = ("probs", "logits")
#: Probabilities are clipped to ``[ε, 1 − ε]`` before taking log-odds (a 0 or 1 has none).
LOG_ODDS_CLIP = 1e-12
_NEWTON_MAX_ITER = 100
_NEWTON_TOL = 1e-10


def log_odds(p: FloatArray) -> FloatArray:
    """``log(p / (1 − p))`` with ``p`` clipped to ``[1e-12, 1 − 1e-12]``, float64."""
    q = np.clip(p, LOG_ODDS_CLIP, 1.0 - LOG_ODDS_CLIP)
    odds: FloatArray = np.log(q) - np.log1p(-q)
    return odds


def platt_targets(positive: npt.NDArray[np.bool_]) -> FloatArray:
    """Platt's (1999) smoothed targets: ``(N₊+1)/(N₊+2)`` for positives, ``1/(N₋+2)`` otherwise.

    The same Bayesian targets as scikit-learn's sigmoid calibration. They keep the fit finite
    when the scores separate the classes perfectly.
    """
    n_pos = float(np.count_nonzero(positive))
    n_neg = float(positive.shape[0]) - n_pos
    targets: FloatArray = np.where(positive, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    return targets


def fit_sigmoid(scores: FloatArray, targets: FloatArray) -> tuple[float, float]:
    """Slope ``a`` and intercept ``b`` of ``σ(a·s + b)`` minimising the cross-entropy to ``targets``.

    Newton's method with step halving on the convex two-parameter logistic loss, float64; the
    fit is unregularised apart from what the (soft) targets imply. Scores that are all equal
    leave the slope unidentified: ``a = 0`` and ``σ(b)`` is the mean target.

    Examples
    --------
    Scores −1 and +1, with mean targets 1/3 and 2/3: the fit is exact, ``a = ln 2``, ``b = 0``.

    >>> a, b = fit_sigmoid(np.array([-1.0, -1.0, 1.0, 1.0]), np.array([0.0, 2 / 3, 1.0, 1 / 3]))
    >>> round(a, 9), abs(round(b, 9))
    (0.693147181, 0.0)
    """
    from scipy.special import expit, log_expit  # on first use: `import calwatch` stays fast

    mean_target = float(np.clip(np.mean(targets), LOG_ODDS_CLIP, 1.0 - LOG_ODDS_CLIP))
    intercept = math.log(mean_target) - math.log1p(-mean_target)
    if float(np.ptp(scores)) == 0.0:
        return 0.0, intercept

    def loss(a: float, b: float) -> float:
        eta = a * scores + b
        # −[t log σ(η) + (1−t) log(1−σ(η))] = −log σ(η) + (1−t)·η … written stably:
        return float(np.sum(-log_expit(eta) + (1.0 - targets) * eta))

    a, b = 0.0, intercept
    current = loss(a, b)
    for _ in range(_NEWTON_MAX_ITER):
        p = expit(a * scores + b)
        residual = p - targets
        weight = p * (1.0 - p)
        gradient = np.array([residual @ scores, residual.sum()])
        sw = float(weight @ scores)
        hessian = np.array([[float(weight @ (scores * scores)), sw], [sw, float(weight.sum())]])
        try:
            step = np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:  # all weights underflowed: a plain gradient step instead
            step = gradient / max(float(np.trace(hessian)), 1.0)
        t = 1.0
        a_new, b_new = a - float(step[0]), b - float(step[1])
        candidate = loss(a_new, b_new)
        while candidate > current and t > 1e-10:  # step halving keeps every iterate descending
            t /= 2.0
            a_new, b_new = a - t * float(step[0]), b - t * float(step[1])
            candidate = loss(a_new, b_new)
        if candidate > current:
            break
        moved = max(abs(a_new - a), abs(b_new - b))
        a, b, current = a_new, b_new, candidate
        if moved <= _NEWTON_TOL * (1.0 + abs(a) + abs(b)):
            break
    return a, b


class PlattScaling:
    """Platt scaling: a logistic map of each class's score (binary, or one-vs-rest).

    Binary (``K = 2``): ``p₁ = σ(a·s + b)`` with ``s`` the score of class 1, fitted by maximum
    likelihood on Platt's smoothed targets (:func:`platt_targets`); ``p₀ = 1 − p₁``.
    Multi-class: one such map per class ``c`` on its own score, fitted one-vs-rest
    (``y = c`` against the rest), then ``q_c = σ(a_c·s_c + b_c)`` renormalised to sum to 1.

    Parameters
    ----------
    input : {"probs", "logits"}
        What ``fit`` and ``transform`` receive. ``"probs"`` (default): a probability matrix
        (rows summing to 1); the score of class ``c`` is its log-odds
        ``log(p_c / (1 − p_c))``, probabilities clipped to ``[1e-12, 1 − 1e-12]``.
        ``"logits"``: a matrix of real-valued logits (any finite numbers); the score of class
        ``c`` is its logit ``z_c``, except for two columns, where the score of class 1 is
        ``z₁ − z₀`` (its log-odds under a softmax; just ``z₁`` when ``z₀ = 0``).

    Attributes
    ----------
    coef_, intercept_ : ndarray of shape (1,) or (K,)
        The slope ``a`` and intercept ``b`` of each map: one (class 1) for binary input,
        one per class otherwise.
    n_classes_ : int
        Number of classes seen at fit time.

    Examples
    --------
    Binary log-odds −ln 2 (p₁ = 1/3) on four rows, +ln 2 (p₁ = 2/3) on four, with 1 and 3
    positives: Platt's targets are 5/6 and 1/6, so the mean targets of the two groups are 1/3
    and 2/3, which the map matches exactly with slope 1 and intercept 0.

    >>> P = np.array([[2 / 3, 1 / 3]] * 4 + [[1 / 3, 2 / 3]] * 4)
    >>> platt = PlattScaling().fit(P, np.array([1, 0, 0, 0, 1, 1, 1, 0]))
    >>> platt.coef_.round(6).tolist(), np.abs(platt.intercept_).round(6).tolist()
    ([1.0], [0.0])
    """

    def __init__(self, *, input: PlattInput = "probs") -> None:
        if input not in PLATT_INPUTS:
            msg = f"input must be one of {PLATT_INPUTS}; got {input!r}"
            raise ValueError(msg)
        self.input: PlattInput = input

    def __repr__(self) -> str:
        return f"PlattScaling(input={self.input!r})"

    def _scores(self, X: Any, name: str, n_classes: int | None) -> FloatArray:
        if self.input == "logits":
            z = check_logits(X, name, n_classes=n_classes)
            if z.shape[1] == 2:
                return (z[:, 1] - z[:, 0])[:, None]
            return z
        P = check_probabilities(X, name, n_classes=n_classes)
        if P.shape[1] == 2:
            return log_odds(P[:, 1])[:, None]
        return log_odds(P)

    def fit(self, X: Any, y: Any) -> PlattScaling:
        """Fit the logistic map(s) on calibration probabilities (or logits) and labels.

        Parameters
        ----------
        X : array-like of shape (n, K)
            Probabilities (``input="probs"``) or logits (``input="logits"``).
        y : array-like of shape (n,)
            True class indices.

        Returns
        -------
        PlattScaling
            ``self``, fitted.
        """
        scores = self._scores(X, "X", None)
        K = 2 if scores.shape[1] == 1 else scores.shape[1]
        labels = check_labels(y, K, "y", n_rows=scores.shape[0])
        classes = [1] if K == 2 else list(range(K))
        coef = np.empty(len(classes))
        intercept = np.empty(len(classes))
        for j, c in enumerate(classes):
            coef[j], intercept[j] = fit_sigmoid(scores[:, j], platt_targets(labels == c))
        self.coef_: FloatArray = coef
        self.intercept_: FloatArray = intercept
        self.n_classes_ = int(K)
        return self

    def transform(self, X: Any) -> FloatArray:
        """Calibrated probabilities, shape ``(m, K)``, float64, rows summing to 1."""
        from scipy.special import expit, log_expit, logsumexp  # on first use: `import calwatch` stays fast

        if not hasattr(self, "coef_"):
            msg = "this PlattScaling is not fitted yet: call fit(X, y) first"
            raise NotFittedError(msg)
        scores = self._scores(X, "X", self.n_classes_)
        eta = scores * self.coef_ + self.intercept_
        if self.n_classes_ == 2:
            p1 = expit(eta[:, 0])
            binary: FloatArray = np.column_stack([1.0 - p1, p1])
            return binary
        log_q = log_expit(eta)  # log σ, then renormalised in log space (no underflow to 0/0)
        probs: FloatArray = np.exp(log_q - logsumexp(log_q, axis=1, keepdims=True))
        return probs


__all__ = [
    "TEMPERATURE_BOUNDS",
    "HistogramBinning",
    "IsotonicCalibration",
    "PlattScaling",
    "TemperatureScaling",
    "check_logits",
    "fit_sigmoid",
    "log_odds",
    "platt_targets",
    "temperature_nll",
]
