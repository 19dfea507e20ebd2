"""Label-free risk estimates: the probability that a model's output misses the label (004).

:class:`RiskEstimator` estimates ``P(Y ∉ I(X))`` for the model output ``I(X)``, the top-k set
(``top_k=1``: the predicted class), from a labelled calibration set; at test time it needs
only the model's probabilities, so in a stream it gives a risk estimate before any label
arrives (ALGORITHMS.md §5). Methods:

- ``"softmax"`` (004's SMX): ``1 − Σ_{c ∈ I(X)} p_c``, the model's own belief.
- ``"temperature"``: temperature scaling of the logits ``log(p + 1e-12)`` (one divisor ``T``
  fitted by multi-class NLL; the ``ε`` as in scikit-learn, since ``log 0`` is no logit), then
  ``1 − Σ_{c ∈ I(X)} q_c`` with ``q = softmax(log(p + ε) / T)``, the calibrated mass of the
  same top-k set: ``q ∝ (p + ε)^{1/T}`` keeps the order of the classes.
- ``"platt"``, ``"histogram"``, ``"isotonic"``: calibrate the confidence of the output,
  ``c(X) = Σ_{c ∈ I(X)} p_c``, against whether the label was in ``I(X)`` on the calibration
  rows (a binary problem for any ``k``: top-label confidence vs correctness for ``k = 1``);
  the row risk is ``1 − r(c(X))``. Platt: ``r = σ(a·logit(c) + b)``; histogram: the accuracy
  of ``c``'s bin; isotonic: scikit-learn's isotonic regression.
- ``"invcp"`` (004 Alg. 1): deterministic APS calibration scores ``s_i`` (the mass ranked at
  or above the true label, ``u = 1``), sorted ``s_(1) ≤ … ≤ s_(n)``. For a test row,
  ``s* = Σ_{c ∈ I(X)} p_c`` (the mass down to the last label of ``I``), ``γ = min{i : s_(i) ≥ s*}``
  (``γ = n + 1`` when no score reaches ``s*``) and ``α(X) = 1 − γ/(n+1)``: the miscoverage of
  the smallest split-conformal set at least as large as ``I(X)``. Equivalently
  ``α(X) = #{i : s_i ≥ s*} / (n+1)``; a confident row (``s*`` above every score) gets 0, a
  row with ``s*`` at or below the smallest score gets ``n/(n+1)``. ``O((n + m) log n)``.
- ``"guarded"``: a calibrated estimate with a finite-sample band. The calibration rows are
  split (seeded, ``holdout`` of them held out); isotonic regression is fitted on the rest and
  the row risk is ``1 − r(c(X))`` as for ``"isotonic"`` (the map kept as its knots). The
  held-out rows measure the map's bias ``μ̂_H`` and an upper bound on the spread of
  ``Z − r(X)``; :meth:`RiskEstimator.band` turns them into ``[α̂ + μ̂_H − w, α̂ + μ̂_H + w]``,
  which holds the batch's realised error with probability ≥ ``1 − δ`` when the batch is drawn
  like the calibration rows (:mod:`calwatch.engine.risk.band` states the math and the null).

The batch estimate is ``α̂ = mean(row_risk)`` (004 Eq. 2 and 11); compare it with the
observed error rate ``α_emp`` once labels arrive: ``δ = α̂ − α_emp``, conservative iff
``δ ≥ 0``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_labels, check_probabilities
from calwatch.engine.calibration.binning import (
    BIN_STRATEGIES,
    BinStrategy,
    HistogramBinning,
    IsotonicCalibration,
    check_top_k,
    check_top_k_against_classes,
    top_k_confidence,
    top_k_correct,
)
from calwatch.engine.calibration.maps import TemperatureScaling, fit_sigmoid, log_odds, platt_targets
from calwatch.engine.conformal.scores import label_scores
from calwatch.engine.errors import NotFittedError
from calwatch.engine.risk.band import bernstein_halfwidth, check_delta, variance_bound

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
RiskMethod = Literal["invcp", "softmax", "temperature", "platt", "histogram", "isotonic", "guarded"]
RISK_METHODS: tuple[RiskMethod, ...] = (
    "invcp", "softmax", "temperature", "platt", "histogram", "isotonic", "guarded",
)  # fmt: skip

#: ``"temperature"`` takes the logits ``log(p + ε)`` (``log 0`` is not a logit), in fit and
#: prediction alike: scikit-learn's convention (``sklearn.calibration._convert_to_logits``).
LOGIT_EPSILON = 1e-12


def invcp_gamma(sorted_scores: FloatArray, s_star: FloatArray) -> IntArray:
    """InvCP's ``γ = min{i : s_(i) ≥ s*}`` (1-based; ``n + 1`` when no score reaches ``s*``).

    One binary search per test row: ``γ − 1 = #{i : s_(i) < s*}``, ``O(m log n)``.

    Examples
    --------
    >>> invcp_gamma(np.array([0.5, 0.7, 0.75, 0.8, 0.9]), np.array([0.7, 0.72, 0.4, 0.95])).tolist()
    [2, 3, 1, 6]
    """
    gamma: IntArray = np.searchsorted(sorted_scores, s_star, side="left") + 1
    return gamma


#: What each method's estimate promises, as the monitor's views label it. InvCP's per-row
#: ``α(X) = 1 − γ/(n+1)`` is read off deterministic APS scores, whose set at ``α(X)`` just reaches
#: the top-k mass, so it bounds the miss rate from above (paper 004 §III: "conservative", δ ≥ 0;
#: +0.04 to +0.48 on the bundled tasks, +0.17 on two new ones); the calibration maps estimate
#: the miss probability itself (within 0.01 on the same tasks).
RISK_PROMISES: dict[str, str] = {
    "invcp": "upper estimate (conservative)",
    "softmax": "uncalibrated estimate (the model's own)", "temperature": "calibrated estimate",
    "platt": "calibrated estimate",
    "histogram": "calibrated estimate", "isotonic": "calibrated estimate",
    "guarded": "calibrated estimate with a {level} band",
}  # fmt: skip


class RiskEstimator:
    """Estimate the probability that the model's top-k output misses the label (paper 004).

    Parameters
    ----------
    method : {"invcp", "softmax", "temperature", "platt", "histogram", "isotonic", "guarded"}
        The estimator (see the module docstring): InvCP (004 Alg. 1, the default), the raw
        softmax (SMX), temperature scaling, Platt scaling of the output's confidence,
        histogram binning or isotonic regression of it, or ``"guarded"``: a calibrated
        estimate with a finite-sample band.
    top_k : int
        The model's output is its ``top_k`` most probable classes (ties: the lower class
        index first); must be smaller than the number of classes.
    bins : int
        Histogram bins ``M`` (``method="histogram"`` only).
    strategy : {"equal-mass", "equal-width"}
        Histogram bin layout (``method="histogram"`` only).
    delta : float
        ``method="guarded"`` only: the band misses the batch's realised error with probability
        at most ``delta`` (default .05: a 95% band).
    holdout : float
        ``method="guarded"`` only: the share of calibration rows held out from fitting the map
        to measure its error (default .5; at least one row on each side).
    seed : int
        ``method="guarded"`` only: seeds the split of the calibration rows.

    Attributes
    ----------
    kind : str
        ``"risk"`` (class attribute): tells a monitor that this calibrator yields a risk
        estimate per row and per batch, not prediction sets.
    n_classes_ : int
        Number of classes seen at fit time.
    n_calibration_ : int
        Number of calibration rows.
    calibrator_ : TemperatureScaling, HistogramBinning, IsotonicCalibration or None
        The fitted calibration map of ``"temperature"``, ``"histogram"`` and ``"isotonic"``.
    platt_coef_, platt_intercept_ : float
        ``"platt"``: the fitted map ``r = σ(a·logit(c) + b)``.
    calibration_scores_ : ndarray of shape (n,) or None
        ``"invcp"``: the sorted deterministic APS scores of the calibration rows.
    guard_knots_ : ndarray of shape (2, j)
        ``"guarded"``: the isotonic map fitted on the non-held-out rows, as its knots
        (confidences, calibrated accuracies); linear between them, clipped outside.
    n_holdout_ : int
        ``"guarded"``: held-out calibration rows ``n_H`` (0 for the other methods).
    holdout_bias_ : float
        ``"guarded"``: ``μ̂_H``, the held-out rows' mean of ``Z − r(X)`` (realised miss minus
        estimated risk); the band is centred at ``α̂ + μ̂_H``.
    variance_bound_ : float
        ``"guarded"``: ``σ̄²``, the upper bound on ``E (Z − r(X))²`` (holds with prob. ``1 − δ/3``).

    Examples
    --------
    Five calibration rows whose deterministic APS scores (the mass ranked at or above the true
    label) are .5, .9 (``.6 + .3``: the label ranked second), .7, .75 and .8, sorted
    ``.5 .7 .75 .8 .9``. A test row with top-1 mass ``s* = .72`` has ``γ = 3``
    (``s_(3) = .75`` is the first score ≥ .72), so ``α = 1 − 3/6 = .5``; at ``s* = .95``
    no score reaches it: ``γ = 6``, ``α = 0``.

    >>> P_cal = np.array(
    ...     [[.5, .3, .2], [.6, .3, .1], [.7, .2, .1], [.4, .35, .25], [.8, .15, .05]]
    ... )
    >>> r = RiskEstimator(method="invcp").fit(P_cal, np.array([0, 1, 0, 1, 0]))
    >>> r.calibration_scores_.round(12).tolist()
    [0.5, 0.7, 0.75, 0.8, 0.9]
    >>> r.row_risk(np.array([[0.72, 0.2, 0.08], [0.95, 0.03, 0.02]])).tolist()
    [0.5, 0.0]
    """

    kind: ClassVar[str] = "risk"
    # class-level defaults: snapshots written before "guarded" existed load without them
    delta: float = 0.05
    holdout: float = 0.5
    seed: int = 0
    n_holdout_: int = 0
    holdout_bias_: float = 0.0
    variance_bound_: float = 1.0

    def __init__(
        self,
        *,
        method: RiskMethod = "invcp",
        top_k: int = 1,
        bins: int = 15,
        strategy: BinStrategy = "equal-mass",
        delta: float = 0.05,
        holdout: float = 0.5,
        seed: int = 0,
    ) -> None:
        if method not in RISK_METHODS:
            msg = f"method must be one of {RISK_METHODS}; got {method!r}"
            raise ValueError(msg)
        if isinstance(bins, bool) or not isinstance(bins, int | np.integer) or bins < 1:
            msg = f"bins must be an integer ≥ 1; got {bins!r}"
            raise ValueError(msg)
        if strategy not in BIN_STRATEGIES:
            msg = f"strategy must be one of {BIN_STRATEGIES}; got {strategy!r}"
            raise ValueError(msg)
        if isinstance(holdout, bool) or not isinstance(holdout, int | float) or not 0.0 < holdout < 1.0:
            msg = f"holdout must be a number in (0, 1); got {holdout!r}"
            raise ValueError(msg)
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            msg = f"seed must be an integer ≥ 0; got {seed!r}"
            raise ValueError(msg)
        self.delta = check_delta(delta)
        self.holdout = float(holdout)
        self.seed = int(seed)
        self.method: RiskMethod = method
        self.top_k = check_top_k(top_k)
        self.bins = int(bins)
        self.strategy: BinStrategy = strategy

    @property
    def promise(self) -> str:
        """What the estimate promises: ``"upper estimate (conservative)"`` for InvCP, else its kind.

        Examples
        --------
        >>> RiskEstimator(method="invcp").promise, RiskEstimator(method="isotonic").promise
        ('upper estimate (conservative)', 'calibrated estimate')
        >>> RiskEstimator(method="guarded", delta=0.1).promise
        'calibrated estimate with a 90% band'
        """
        return RISK_PROMISES[self.method].format(level=f"{100 * (1 - self.delta):g}%")

    def __repr__(self) -> str:
        options = [f"method={self.method!r}", f"top_k={self.top_k!r}"]
        if self.method == "histogram":
            options += [f"bins={self.bins!r}", f"strategy={self.strategy!r}"]
        if self.method == "guarded":
            options += [f"delta={self.delta!r}", f"holdout={self.holdout!r}", f"seed={self.seed!r}"]
        return f"RiskEstimator({', '.join(options)})"

    # ------------------------------------------------------------------ fitting
    def fit(self, P_cal: Any, y_cal: Any) -> RiskEstimator:
        """Fit the estimator on labelled calibration rows.

        Parameters
        ----------
        P_cal : array-like of shape (n, K)
            Model probabilities of the calibration rows (rows summing to 1).
        y_cal : array-like of shape (n,)
            Their true class indices in ``0..K-1``.

        Returns
        -------
        RiskEstimator
            ``self``, fitted.
        """
        P = check_probabilities(P_cal, "P_cal")
        n, K = P.shape
        y = check_labels(y_cal, K, "y_cal", n_rows=n)
        check_top_k_against_classes(self.top_k, K)
        self.calibrator_: TemperatureScaling | HistogramBinning | IsotonicCalibration | None = None
        self.calibration_scores_: FloatArray | None = None
        method = self.method
        if method == "invcp":
            self.calibration_scores_ = np.sort(label_scores(P, y, "aps"))
        elif method == "temperature":
            self.calibrator_ = TemperatureScaling().fit(np.log(P + LOGIT_EPSILON), y)
        elif method == "platt":
            confidence = top_k_confidence(P, self.top_k)
            correct = top_k_correct(P, y, self.top_k)
            a, b = fit_sigmoid(log_odds(confidence), platt_targets(correct))
            self.platt_coef_, self.platt_intercept_ = a, b
        elif method == "histogram":
            self.calibrator_ = HistogramBinning(bins=self.bins, strategy=self.strategy, top_k=self.top_k)
            self.calibrator_.fit(P, y)
        elif method == "isotonic":
            self.calibrator_ = IsotonicCalibration(top_k=self.top_k).fit(P, y)
        self.n_holdout_ = 0
        if method == "guarded":
            self._fit_guarded(P, y)
        self.n_classes_ = int(K)
        self.n_calibration_ = int(n)
        return self

    def _fit_guarded(self, P: FloatArray, y: IntArray) -> None:
        """Fit isotonic regression on a seeded part of the rows; measure it on the rest.

        Sets ``holdout_bias_ = mean_H D`` and ``variance_bound_ = σ̄²`` for ``D = Z − r(X)``
        on the ``n_H = ⌊holdout · n⌋`` held-out rows (:mod:`calwatch.engine.risk.band`).
        """
        n = P.shape[0]
        n_holdout = int(np.floor(self.holdout * n))
        if n_holdout < 1 or n - n_holdout < 1:
            msg = (
                f"method='guarded' needs at least one calibration row to fit and one to hold out; "
                f"got {n} rows with holdout={self.holdout} ({n_holdout} held out)"
            )
            raise ValueError(msg)
        order = np.random.default_rng(self.seed).permutation(n)
        held, fitting = order[:n_holdout], order[n_holdout:]
        isotonic = IsotonicCalibration(top_k=self.top_k).fit(P[fitting], y[fitting]).isotonic_
        # keep the map as its knots (plain arrays a snapshot can hold): scikit-learn's predict
        # is linear interpolation between them, clipped to the end values, as ``np.interp`` is
        self.guard_knots_ = np.stack(
            [
                np.asarray(isotonic.X_thresholds_, dtype=np.float64),
                np.asarray(isotonic.y_thresholds_, dtype=np.float64),
            ]
        )
        missed = 1.0 - top_k_correct(P[held], y[held], self.top_k).astype(np.float64)
        diff = missed - self._row_risk(P[held])
        self.n_holdout_ = n_holdout
        self.holdout_bias_ = float(np.mean(diff))
        self.variance_bound_ = variance_bound(float(np.mean(diff * diff)), n_holdout, self.delta)

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_classes_"):
            msg = "this RiskEstimator is not fitted yet: call fit(P_cal, y_cal) first"
            raise NotFittedError(msg)

    # --------------------------------------------------------------- prediction
    def row_risk(self, P: Any) -> FloatArray:
        """Estimated probability that each row's top-k output misses its label, shape ``(m,)``.

        Label-free: only the model's probabilities are needed. For ``"invcp"`` this is
        ``α(X)``, which also ranks rows by risk.
        """
        self._check_fitted()
        probs = check_probabilities(P, "P", n_classes=self.n_classes_)
        return self._row_risk(probs)

    def estimate(self, P: Any) -> float:
        """The batch estimate ``α̂``: the mean of :meth:`row_risk` (004 Eq. 2 and 11)."""
        return float(np.mean(self.row_risk(P)))

    def band_halfwidth(self, m: int) -> float:
        """The band's half-width ``w = t(n_H) + t(m)`` for a batch of ``m`` rows (``"guarded"``).

        ``t_n(σ̄²)`` is Bernstein's deviation at level ``δ/3`` (:func:`~calwatch.engine.risk.band.
        bernstein_halfwidth`); it needs only the batch size, not its labels.
        """
        self._check_fitted()
        if self.method != "guarded":
            msg = f"band_halfwidth needs method='guarded'; this estimator is method={self.method!r}"
            raise ValueError(msg)
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
            msg = f"m must be an integer ≥ 1 (the batch's rows); got {m!r}"
            raise ValueError(msg)
        held = bernstein_halfwidth(self.n_holdout_, self.variance_bound_, self.delta)
        return held + bernstein_halfwidth(int(m), self.variance_bound_, self.delta)

    def band(self, P: Any) -> tuple[float, float]:
        """``[α̂ + μ̂_H − w, α̂ + μ̂_H + w] ∩ [0, 1]``: holds the batch's realised error w.p. ≥ 1 − δ.

        Label-free (``method="guarded"`` only). Promise, under the null that the batch and the
        held-out calibration rows are drawn from one distribution: over those draws, the share
        of the batch's rows whose label is outside the top-k output lies in the band with
        probability at least ``1 − delta`` (:mod:`calwatch.engine.risk.band`).

        Examples
        --------
        Four calibration rows, two held out; then, by hand, the held-out statistics of
        ``n_H = 1,000`` rows with ``μ̂_H = .01`` and ``σ̄² = .1452``: ``w = 2 t_1000(.1452) = .08123``
        (the example of :func:`~calwatch.engine.risk.band.bernstein_halfwidth`).

        >>> P_cal = np.array([[.9, .1], [.8, .2], [.3, .7], [.45, .55]])
        >>> r = RiskEstimator(method="guarded").fit(P_cal, np.array([0, 1, 0, 1]))
        >>> r.n_holdout_, r.promise
        (2, 'calibrated estimate with a 95% band')
        >>> r.holdout_bias_, r.variance_bound_, r.n_holdout_ = 0.01, 0.1452, 1000
        >>> round(r.band_halfwidth(1000), 5)
        0.08123
        >>> batch = np.tile([[0.9, 0.1]], (1000, 1))
        >>> r.estimate(batch), [round(v, 5) for v in r.band(batch)]
        (0.5, [0.42877, 0.59123])
        """
        self._check_fitted()
        risk = self.row_risk(P)
        centre = float(np.mean(risk)) + self.holdout_bias_
        width = self.band_halfwidth(int(risk.shape[0]))
        return max(0.0, centre - width), min(1.0, centre + width)

    def _row_risk(self, P: FloatArray) -> FloatArray:
        method, k = self.method, self.top_k
        if method == "temperature":
            return self._temperature_risk(P)
        confidence = top_k_confidence(P, k)
        if method == "guarded":
            knots = self.guard_knots_
            guarded: FloatArray = np.clip(1.0 - np.interp(confidence, knots[0], knots[1]), 0.0, 1.0)
            return guarded
        if method == "invcp":
            scores = self.calibration_scores_
            assert scores is not None  # set by fit for this method
            alpha: FloatArray = 1.0 - invcp_gamma(scores, confidence) / (scores.shape[0] + 1.0)
            return alpha
        if method == "softmax":
            risk = 1.0 - confidence
        elif method == "platt":
            eta = self.platt_coef_ * log_odds(confidence) + self.platt_intercept_
            risk = 1.0 / (1.0 + np.exp(eta))  # 1 − σ(η) = σ(−η)
        else:
            calibrator = self.calibrator_
            assert isinstance(calibrator, HistogramBinning | IsotonicCalibration)
            risk = 1.0 - calibrator.transform_confidence(confidence)
        clipped: FloatArray = np.clip(risk, 0.0, 1.0)  # 1 − (a sum that rounds above 1)
        return clipped

    def _temperature_risk(self, P: FloatArray) -> FloatArray:
        """``1 − Σ_{top k} q_c`` with ``q = softmax(log(p + ε) / T)``, i.e. ``q ∝ (p + ε)^{1/T}``.

        Computed as ``((p + ε) / (p_max + ε))^{1/T}``: dividing by the row max keeps every
        power in ``[0, 1]`` (no overflow), and the top class gets exactly 1.
        """
        calibrator = self.calibrator_
        assert isinstance(calibrator, TemperatureScaling)
        inverse = 1.0 / calibrator.temperature_
        shifted = P + LOGIT_EPSILON
        top = top_k_confidence(shifted, 1)
        powered = np.power(shifted / top[:, None], inverse)
        total = powered @ np.ones(P.shape[1])
        if self.top_k == 1:
            risk: FloatArray = 1.0 - 1.0 / total
        else:
            risk = 1.0 - top_k_confidence(powered, self.top_k) / total  # same top-k as P
        clipped: FloatArray = np.clip(risk, 0.0, 1.0)
        return clipped


__all__ = ["LOGIT_EPSILON", "RISK_METHODS", "RISK_PROMISES", "RiskEstimator", "RiskMethod", "invcp_gamma"]
