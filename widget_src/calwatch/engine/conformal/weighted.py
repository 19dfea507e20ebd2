"""Weighted split conformal under covariate shift (Tibshirani et al. 2019; SHIFT.md §3).

When the stream's inputs drift (``P_test(x) ≠ P_cal(x)``) but ``P(y | x)`` stays the same,
reweighting the calibration scores by the likelihood ratio ``w(x) = dP_test/dP_cal(x)``
restores coverage ``≥ 1 − α`` (Tibshirani et al., Corollary 1). For a test row ``x`` the
threshold is the ``(1 − α)`` quantile of

    Σ_i p_i δ_{s_i} + p_{n+1} δ_{+∞},   p_i = w(x_i) / (Σ_j w(x_j) + w(x)),   p_{n+1} = w(x) / (…),

i.e. ``q̂(x) = s_(k)`` with ``k`` the smallest index whose cumulative weight (scores sorted
ascending) reaches ``(1 − α)(W + w(x))``, ``W = Σ_j w(x_j)``; ``+∞`` (every class) when even all
calibration rows fall short: the atom at ``+∞`` carries the test row's own weight. With unit
weights this is exactly the split conformal quantile ``s_(⌈(n+1)(1−α)⌉)``.

The weights come from a *domain classifier* that separates calibration rows (label 0) from a
recent window of stream rows (label 1) on user features or embeddings: with ``p = P(window | x)``,
``w = p / (1 − p) · n_cal / n_win`` (the odds, corrected for the two sets' sizes). Our choice of
classifier, ``domain=``:

- ``"boosting"`` (default): ``HistGradientBoostingClassifier`` (scikit-learn defaults, seeded;
  early stopping on a seeded 10% validation split above 10,000 rows). Real shifts are rarely
  log-linear: a band of one feature (more flights departing 1-40 minutes late), an
  interaction, a mix of categories. On such a shift of NYC flights
  (``tests/validity/test_aci_weighted.py``) it restores coverage where logistic weights
  change nothing.
- ``"logistic"``: standardised features, ``LogisticRegression`` (L2, ``C = 1``). The log
  density ratio is then linear in the features (an exponential tilt, the shift of Tibshirani
  et al.'s experiments); weights are smooth and rarely extreme, cheap on wide embeddings.

Both fit on the calibration rows themselves and score them in-sample, which can make the
calibration weights slightly optimistic for a flexible classifier. ``p`` is clipped to
``[1e-6, 1 − 1e-6]`` so that no weight is 0 or infinite.

Reliability: the *effective sample size* of the calibration weights, ``ESS = (Σw)² / Σw²``
(Kish), says how many unweighted rows the weighted quantile is worth. Below ``floor`` (default
50) the correction is flagged unreliable (:attr:`WeightedConformalClassifier.ess_below_floor_`):
at ``ESS = 50`` one calibration draw's coverage already has a spread of about
``sqrt(α(1−α)/ESS) ≈ 0.042`` at ``α = 0.1``, and below ``1/α − 1`` rows every set is full.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_alpha, check_labels, check_probabilities
from calwatch.engine.conformal.scores import SCORE_NAMES, ScoreName, class_scores, label_scores
from calwatch.engine.errors import NotFittedError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
DomainName = Literal["logistic", "boosting"]
DOMAIN_NAMES: tuple[DomainName, ...] = ("logistic", "boosting")

#: Default floor on the effective sample size below which the correction is flagged unreliable.
DEFAULT_ESS_FLOOR = 50.0
#: The domain classifier's probability is clipped to ``[PROBABILITY_CLIP, 1 − PROBABILITY_CLIP]``.
PROBABILITY_CLIP = 1e-6
# Like conformal_rank's slack: with weights scaled to mean 1 and unit weights, the target
# (1 − α)(n + 1) is often an integer that lands a few ulps above itself in floating point.
_TARGET_SLACK = 1e-9


def effective_sample_size(weights: Any) -> float:
    """Kish's effective sample size ``(Σw)² / Σw²`` of non-negative weights.

    Examples
    --------
    >>> effective_sample_size([1.0, 1.0, 2.0])  # 4² / 6
    2.6666666666666665
    """
    w = np.asarray(weights, dtype=np.float64)
    total_sq = float(w @ w)
    if total_sq == 0.0:
        return 0.0
    return float(w.sum()) ** 2 / total_sq


def domain_weights(p: Any, n_calibration: int, n_window: int) -> FloatArray:
    """Likelihood-ratio weights ``p/(1 − p) · n_cal/n_win`` from domain probabilities ``p``.

    ``p`` is clipped to ``[1e-6, 1 − 1e-6]`` first.

    Examples
    --------
    >>> domain_weights([0.5, 0.75], n_calibration=100, n_window=50).tolist()  # odds 1, 3; × 2
    [2.0, 6.0]
    """
    probs = np.clip(np.asarray(p, dtype=np.float64), PROBABILITY_CLIP, 1.0 - PROBABILITY_CLIP)
    out: FloatArray = probs / (1.0 - probs) * (n_calibration / n_window)
    return out


def weighted_conformal_quantile(
    sorted_scores: FloatArray,
    sorted_weights: FloatArray,
    test_weights: Any,
    alpha: float,
) -> FloatArray:
    """Per test row, the ``(1 − α)`` quantile of ``Σ_i p_i δ_{s_i} + p_{n+1} δ_{+∞}``.

    Vectorised: one cumulative sum over the calibration weights (sorted with their scores),
    then one binary search per test row for the first index whose cumulative weight reaches
    ``(1 − α)(W + w(x))``. ``O(n + m log n)``.

    Parameters
    ----------
    sorted_scores : ndarray of shape (n,)
        Calibration scores, ascending.
    sorted_weights : ndarray of shape (n,)
        Their weights ``w(x_i)``, in the same order (non-negative, not all 0).
    test_weights : array-like of shape (m,)
        Each test row's own weight ``w(x)``: the mass of the ``+∞`` atom.
    alpha : float
        Miscoverage level.

    Returns
    -------
    ndarray of shape (m,)
        ``q̂(x)``, ``inf`` where the calibration mass cannot reach ``1 − α``.

    Examples
    --------
    Scores ``.1 .2 .3 .4`` with weights ``1 1 1 1`` and a test weight 1: the target is
    ``0.6 · 5 = 3`` -> ``s_(3) = .3`` (the unweighted conformal quantile at α = 0.4). With a
    test weight 3: ``0.6 · 7 = 4.2 > W = 4`` -> ``inf``.

    >>> s = np.array([0.1, 0.2, 0.3, 0.4])
    >>> weighted_conformal_quantile(s, np.ones(4), [1.0, 3.0], alpha=0.4).tolist()
    [0.3, inf]
    """
    w = np.asarray(sorted_weights, dtype=np.float64)
    wt = np.atleast_1d(np.asarray(test_weights, dtype=np.float64))
    n = int(sorted_scores.shape[0])
    if n == 0:
        return np.full(wt.shape[0], math.inf)
    scale = float(w.mean())
    if not scale > 0:
        msg = "calibration weights must be non-negative and not all 0"
        raise ValueError(msg)
    cumulative = np.cumsum(w / scale)
    target = (1.0 - alpha) * (cumulative[-1] + wt / scale) - _TARGET_SLACK
    index = np.searchsorted(cumulative, target, side="left")
    reachable = index < n
    out = np.full(wt.shape[0], math.inf)
    out[reachable] = sorted_scores[index[reachable]]
    return out


def _check_features(
    X: Any, name: str, *, n_rows: int | None = None, n_features: int | None = None
) -> FloatArray:
    if hasattr(X, "to_numpy"):
        X = X.to_numpy()
    arr = np.asarray(X)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        msg = f"{name} must be a numeric matrix of features (encode categories first); got dtype {arr.dtype}"
        raise TypeError(msg)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] == 0:
        msg = f"{name} must be a non-empty 2-D array (rows, features); got shape {arr.shape}"
        raise ValueError(msg)
    if n_rows is not None and arr.shape[0] != n_rows:
        msg = f"{name} has {arr.shape[0]} rows but there are {n_rows} probability rows"
        raise ValueError(msg)
    if n_features is not None and arr.shape[1] != n_features:
        msg = f"{name} has {arr.shape[1]} features but the calibration rows had {n_features}"
        raise ValueError(msg)
    out = np.asarray(arr, dtype=np.float64)
    if not np.isfinite(out).all():
        msg = f"{name} contains NaN or inf; impute or drop those rows first"
        raise ValueError(msg)
    return out


class WeightedConformalClassifier:
    """Split conformal sets reweighted for covariate shift by a domain classifier.

    Parameters
    ----------
    score : {"lac", "aps", "raps"}
        Nonconformity score (deterministic APS/RAPS, ``u = 1``).
    alpha : float
        Miscoverage level; the target coverage is ``1 − alpha``.
    floor : float
        Effective-sample-size floor below which :attr:`ess_below_floor_` is set.
    domain : {"logistic", "boosting"}
        The domain classifier (see the module docstring).
    allow_empty : bool
        ``False`` (default): the top class is always in the set, as in
        :class:`~calwatch.engine.conformal.classifier.SplitConformalClassifier`.
    raps_lambda, raps_k_reg : float, int
        RAPS regularisation (``score="raps"`` only).
    seed : int
        Seed of the domain classifier.

    Attributes
    ----------
    n_classes_, n_calibration_ : int
        Classes and calibration rows seen by :meth:`fit`.
    calibration_weights_ : ndarray of shape (n,)
        ``w(x_i)`` of each calibration row, in the order given to :meth:`fit` (all 1 until
        :meth:`update_domain` runs: plain split conformal).
    effective_sample_size_ : float
        ``(Σw)² / Σw²`` of the calibration weights.
    ess_below_floor_ : bool
        True when ``effective_sample_size_ < floor``: the correction is unreliable.
    domain_classifier_ : sklearn estimator or None
        The fitted domain classifier (None before :meth:`update_domain`).
    n_window_ : int
        Rows of the window the domain classifier was last fitted on (0 before).

    Examples
    --------
    Without a domain window the weights are 1 and the sets are split conformal's.

    >>> P = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> wc = WeightedConformalClassifier(alpha=0.4).fit(P, np.array([0, 1, 2, 0]), X)
    >>> wc.quantiles(np.array([[1.5]])).tolist(), wc.effective_sample_size_
    ([0.5], 4.0)
    """

    def __init__(
        self,
        *,
        score: ScoreName = "lac",
        alpha: float = 0.1,
        floor: float = DEFAULT_ESS_FLOOR,
        domain: DomainName = "boosting",
        allow_empty: bool = False,
        raps_lambda: float = 0.01,
        raps_k_reg: int = 1,
        seed: int = 0,
    ) -> None:
        if score not in SCORE_NAMES:
            msg = f"score must be one of {SCORE_NAMES}; got {score!r}"
            raise ValueError(msg)
        if domain not in DOMAIN_NAMES:
            msg = f"domain must be one of {DOMAIN_NAMES}; got {domain!r}"
            raise ValueError(msg)
        if not (math.isfinite(floor) and floor >= 0):
            msg = f"floor must be a finite number ≥ 0; got {floor!r}"
            raise ValueError(msg)
        self.score: ScoreName = score
        self.alpha = check_alpha(alpha)
        self.floor = float(floor)
        self.domain: DomainName = domain
        self.allow_empty = bool(allow_empty)
        self.raps_lambda = float(raps_lambda)
        self.raps_k_reg = int(raps_k_reg)
        self.seed = int(seed)

    def __repr__(self) -> str:
        return (
            f"WeightedConformalClassifier(score={self.score!r}, alpha={self.alpha!r}, "
            f"floor={self.floor!r}, domain={self.domain!r})"
        )

    # ------------------------------------------------------------------ fitting
    def fit(self, P_cal: Any, y_cal: Any, X_cal: Any) -> WeightedConformalClassifier:
        """Compute and sort the calibration scores once; keep the calibration features.

        Parameters
        ----------
        P_cal : array-like of shape (n, K)
            Model probabilities of the calibration rows.
        y_cal : array-like of shape (n,)
            Their true class indices.
        X_cal : array-like of shape (n, d)
            Their features or embeddings, as the domain classifier will see them (numeric,
            finite; a polars or pandas frame of numbers works).

        Returns
        -------
        WeightedConformalClassifier
            ``self``, fitted, with unit weights until :meth:`update_domain`.
        """
        P = check_probabilities(P_cal, "P_cal")
        n, K = P.shape
        y = check_labels(y_cal, K, "y_cal", n_rows=n)
        X = _check_features(X_cal, "X_cal", n_rows=n)
        scores = label_scores(P, y, self.score, raps_lambda=self.raps_lambda, raps_k_reg=self.raps_k_reg)
        self._order = np.argsort(scores, kind="stable")
        self._sorted_scores = scores[self._order]
        self._X_cal = X
        self.n_classes_ = int(K)
        self.n_calibration_ = int(n)
        self.n_features_ = int(X.shape[1])
        self.domain_classifier_: Any = None
        self.n_window_ = 0
        self._set_weights(np.ones(n))
        return self

    def _set_weights(self, weights: FloatArray) -> None:
        self.calibration_weights_ = weights
        self._sorted_weights = weights[self._order]
        self.effective_sample_size_ = effective_sample_size(weights)
        self.ess_below_floor_ = bool(self.effective_sample_size_ < self.floor)

    def _check_fitted(self) -> None:
        if not hasattr(self, "_sorted_scores"):
            msg = "this WeightedConformalClassifier is not fitted yet: call fit(P_cal, y_cal, X_cal) first"
            raise NotFittedError(msg)

    def _new_domain_classifier(self) -> Any:
        if self.domain == "logistic":
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            return make_pipeline(
                StandardScaler(), LogisticRegression(C=1.0, max_iter=1000, random_state=self.seed)
            )
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(random_state=self.seed)

    def update_domain(self, X_window: Any) -> WeightedConformalClassifier:
        """Refit the domain classifier: calibration rows against this window of stream rows.

        Sets :attr:`calibration_weights_`, :attr:`effective_sample_size_` and
        :attr:`ess_below_floor_`.

        Parameters
        ----------
        X_window : array-like of shape (m, d)
            Features of recent stream rows (no labels needed).

        Returns
        -------
        WeightedConformalClassifier
            ``self``.
        """
        self._check_fitted()
        Xw = _check_features(X_window, "X_window", n_features=self.n_features_)
        n, m = self.n_calibration_, Xw.shape[0]
        features = np.vstack([self._X_cal, Xw])
        target = np.concatenate([np.zeros(n, dtype=np.intp), np.ones(m, dtype=np.intp)])
        model = self._new_domain_classifier()
        model.fit(features, target)
        self.domain_classifier_ = model
        self.n_window_ = int(m)
        self._set_weights(self._weights_of(self._X_cal))
        return self

    def _weights_of(self, X: FloatArray) -> FloatArray:
        if self.domain_classifier_ is None:
            return np.ones(X.shape[0])
        p = np.asarray(self.domain_classifier_.predict_proba(X)[:, 1], dtype=np.float64)
        return domain_weights(p, self.n_calibration_, self.n_window_)

    # --------------------------------------------------------------- prediction
    def weights(self, X: Any) -> FloatArray:
        """Estimated likelihood ratio ``w(x)`` of each row (1 before :meth:`update_domain`)."""
        self._check_fitted()
        return self._weights_of(_check_features(X, "X", n_features=self.n_features_))

    def quantiles(self, X: Any) -> FloatArray:
        """Each row's weighted threshold ``q̂(x)`` (``inf``: every class)."""
        self._check_fitted()
        test_weights = self.weights(X)
        return weighted_conformal_quantile(
            self._sorted_scores, self._sorted_weights, test_weights, self.alpha
        )

    def predict_sets(self, P: Any, X: Any) -> BoolArray:
        """Weighted conformal sets, boolean ``(m, K)``; the top class always in unless ``allow_empty``.

        Parameters
        ----------
        P : array-like of shape (m, K)
            Model probabilities.
        X : array-like of shape (m, d)
            The rows' features, as given to :meth:`fit`.
        """
        self._check_fitted()
        Pv = check_probabilities(P, "P", n_classes=self.n_classes_)
        Xv = _check_features(X, "X", n_rows=Pv.shape[0], n_features=self.n_features_)
        q = weighted_conformal_quantile(
            self._sorted_scores, self._sorted_weights, self._weights_of(Xv), self.alpha
        )
        scores = class_scores(Pv, self.score, raps_lambda=self.raps_lambda, raps_k_reg=self.raps_k_reg)
        thresholds = q[:, None]
        sets: BoolArray = scores <= thresholds
        if not self.allow_empty:
            sets[np.arange(Pv.shape[0]), Pv.argmax(axis=1)] = True
        return sets


__all__ = [
    "DEFAULT_ESS_FLOOR",
    "DOMAIN_NAMES",
    "PROBABILITY_CLIP",
    "WeightedConformalClassifier",
    "domain_weights",
    "effective_sample_size",
    "weighted_conformal_quantile",
]
