"""Calibration maps of the top-label (or top-k) confidence (ALGORITHMS.md §5; paper 004 §II-A).

Both calibrators here reduce a probability matrix to one number per row, the *confidence* of
the model's output, and learn from labelled rows how often that output is right:

- the output is the top-k set ``I(x)``: the ``k`` most probable classes, ties broken by the
  lower class index (``top_k=1``: the predicted class ``ŷ``);
- its confidence is ``c(x) = Σ_{c ∈ I(x)} p_c``, the sum of the ``k`` largest probabilities
  (for ``k = 1`` the top-label confidence ``max p``);
- it is correct when the true label is in ``I(x)``.

``transform(P)`` returns the calibrated probability ``r(x)`` that the label is in ``I(x)``:
:class:`HistogramBinning` by the accuracy of the calibration rows in ``c(x)``'s bin (004 Eq. 4),
:class:`IsotonicCalibration` by scikit-learn's isotonic regression of correctness on
confidence (004 Eq. 5).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_labels, check_probabilities
from calwatch.engine.conformal.scores import label_ranks
from calwatch.engine.errors import NotFittedError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]
BinStrategy = Literal["equal-mass", "equal-width"]
BIN_STRATEGIES: tuple[BinStrategy, ...] = ("equal-mass", "equal-width")

#: Up to this many classes the row-wise max runs column by column (contiguous SIMD passes),
#: about twice as fast as ``P.max(axis=1)`` on narrow rows; the result is identical.
_COLUMN_LOOP_MAX_CLASSES = 64


def top_k_confidence(P: FloatArray, k: int) -> FloatArray:
    """Sum of the ``k`` largest probabilities of each row, shape ``(m,)``.

    Summed from the largest down, one addition at a time: bit for bit the deterministic APS
    score (:func:`calwatch.engine.conformal.scores.aps_scores`) of the ``k``-th ranked class, so that
    InvCP compares test and calibration scores without rounding noise.
    """
    K = P.shape[1]
    if k == 1:
        if K > _COLUMN_LOOP_MAX_CLASSES:
            top: FloatArray = P.max(axis=1)
            return top
        top = P[:, 0].copy()
        for c in range(1, K):
            np.maximum(top, P[:, c], out=top)
        return top
    ordered = np.sort(P, axis=1)  # ascending: the largest is the last column
    total: FloatArray = ordered[:, K - 1].copy()
    for j in range(2, k + 1):
        total += ordered[:, K - j]
    return total


def top_k_correct(P: FloatArray, y: IntArray, k: int) -> BoolArray:
    """Whether each row's label is among its ``k`` most probable classes (ties: lower index)."""
    correct: BoolArray = label_ranks(P, y) <= k
    return correct


def check_top_k(top_k: Any) -> int:
    """Validate ``top_k``: an integer ≥ 1 (the upper bound ``< K`` is checked at fit time)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
        msg = f"top_k must be an integer ≥ 1; got {top_k!r}"
        raise ValueError(msg)
    return int(top_k)


def check_top_k_against_classes(top_k: int, n_classes: int) -> None:
    """A top-k set of every class always holds the label: require ``top_k < K``."""
    if top_k >= n_classes:
        msg = (
            f"top_k={top_k} must be smaller than the number of classes ({n_classes}): "
            "a set of every class always holds the label"
        )
        raise ValueError(msg)


class _TopKConfidenceCalibrator:
    """Shared lifecycle: validate, reduce ``P`` to top-k confidence, fit or apply the map."""

    top_k: int

    def _fit_inputs(self, P: Any, y: Any) -> tuple[FloatArray, FloatArray]:
        probs = check_probabilities(P, "P")
        n, K = probs.shape
        labels = check_labels(y, K, "y", n_rows=n)
        check_top_k_against_classes(self.top_k, K)
        self.n_classes_ = int(K)
        self.n_calibration_ = int(n)
        confidence = top_k_confidence(probs, self.top_k)
        correct = top_k_correct(probs, labels, self.top_k).astype(np.float64)
        return confidence, correct

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_classes_"):
            msg = f"this {type(self).__name__} is not fitted yet: call fit(P, y) first"
            raise NotFittedError(msg)

    def _confidence(self, P: Any) -> FloatArray:
        self._check_fitted()
        probs = check_probabilities(P, "P", n_classes=self.n_classes_)
        return top_k_confidence(probs, self.top_k)


class HistogramBinning(_TopKConfidenceCalibrator):
    """Histogram binning of the top-k confidence (Zadrozny & Elkan 2001; 004 Eq. 4).

    The confidence range is cut into bins; each bin's calibrated value is the share of its
    calibration rows whose label is in the top-k set (the least-squares fit of Eq. 4).

    Parameters
    ----------
    bins : int
        Number of bins ``M`` (004's default 15).
    strategy : {"equal-mass", "equal-width"}
        ``"equal-mass"``: bins holding (up to rounding) the same number of calibration rows:
        with the confidences sorted ``c_(1) ≤ … ≤ c_(n)`` and ``M' = min(M, n)``, bin ``j``
        holds ranks ``⌊(j−1)n/M'⌋+1 … ⌊jn/M'⌋`` and the edge between bins ``j`` and ``j+1``
        is the midpoint ``(c_(⌊jn/M'⌋) + c_(⌊jn/M'⌋+1)) / 2``. Equal confidences are never
        split: repeated edges are merged, so tie-heavy scores (tree models) give fewer bins.
        ``"equal-width"``: ``M`` bins of width ``1/M`` on ``[0, 1]``.
        A value on an edge belongs to the bin above it.
    top_k : int
        Calibrate the confidence of the top-k set (default 1, the predicted class).

    Attributes
    ----------
    edges_ : ndarray of shape (bins_ + 1,)
        Bin edges, ``0`` and ``1`` at the ends.
    values_ : ndarray of shape (bins_,)
        Calibrated probability of each bin.
    counts_ : ndarray of shape (bins_,)
        Calibration rows in each bin.
    bins_ : int
        Number of bins after merging repeated edges.
    n_classes_, n_calibration_ : int
        Classes and rows seen at fit time.

    Notes
    -----
    Empty bins (possible with ``"equal-width"``, or below the lowest confidence when edges
    merged) have no data of their own: they take the value of the nearest non-empty bin, the
    lower-confidence neighbour on a tie, whose accuracy is usually lower, i.e. the more
    conservative risk estimate. The map stays a step function fitted from data.

    Examples
    --------
    Top-label confidences .65 .6 .55 .8 .7 .9, correct ✓ ✗ ✓ ✓ ✗ ✓; sorted, two per bin:
    {.55 ✓, .6 ✗} | {.65 ✓, .7 ✗} | {.8 ✓, .9 ✓}, edges at the midpoints .625 and .75:

    >>> P = np.array([[0.65, 0.35], [0.6, 0.4], [0.55, 0.45], [0.2, 0.8], [0.3, 0.7], [0.1, 0.9]])
    >>> hb = HistogramBinning(bins=3).fit(P, np.array([0, 1, 0, 1, 0, 1]))
    >>> hb.edges_.tolist(), hb.values_.tolist()
    ([0.0, 0.625, 0.75, 1.0], [0.5, 0.5, 1.0])
    """

    def __init__(self, *, bins: int = 15, strategy: BinStrategy = "equal-mass", top_k: int = 1) -> None:
        if isinstance(bins, bool) or not isinstance(bins, int | np.integer) or bins < 1:
            msg = f"bins must be an integer ≥ 1; got {bins!r}"
            raise ValueError(msg)
        if strategy not in BIN_STRATEGIES:
            msg = f"strategy must be one of {BIN_STRATEGIES}; got {strategy!r}"
            raise ValueError(msg)
        self.bins = int(bins)
        self.strategy: BinStrategy = strategy
        self.top_k = check_top_k(top_k)

    def __repr__(self) -> str:
        return f"HistogramBinning(bins={self.bins!r}, strategy={self.strategy!r}, top_k={self.top_k!r})"

    def fit(self, P: Any, y: Any) -> HistogramBinning:
        """Bin the calibration rows' top-k confidence and store each bin's accuracy.

        Parameters
        ----------
        P : array-like of shape (n, K)
            Model probabilities of the calibration rows.
        y : array-like of shape (n,)
            Their true class indices.

        Returns
        -------
        HistogramBinning
            ``self``, fitted.
        """
        confidence, correct = self._fit_inputs(P, y)
        if self.strategy == "equal-width":
            inner = np.linspace(0.0, 1.0, self.bins + 1)[1:-1]
        else:
            inner = equal_mass_edges(confidence, self.bins)
        index = np.searchsorted(inner, confidence, side="right")
        n_bins = inner.shape[0] + 1
        counts = np.bincount(index, minlength=n_bins)
        hits = np.bincount(index, weights=correct, minlength=n_bins)
        values = np.divide(hits, counts, out=np.zeros(n_bins), where=counts > 0)
        self.edges_: FloatArray = np.concatenate(([0.0], inner, [1.0]))
        self.values_: FloatArray = _fill_empty_bins(values, counts)
        self.counts_: IntArray = counts.astype(np.intp)
        self.bins_ = int(n_bins)
        self._inner = inner
        return self

    def transform(self, P: Any) -> FloatArray:
        """Calibrated probability that each row's label is in its top-k set, shape ``(m,)``."""
        confidence = self._confidence(P)
        return self.transform_confidence(confidence)

    def transform_confidence(self, confidence: FloatArray) -> FloatArray:
        """Apply the fitted map to top-k confidences already computed (no validation)."""
        self._check_fitted()
        mapped: FloatArray = self.values_[np.searchsorted(self._inner, confidence, side="right")]
        return mapped


def equal_mass_edges(confidence: FloatArray, bins: int) -> FloatArray:
    """Inner edges of ``min(bins, n)`` equal-mass bins: midpoints between neighbouring ranks.

    Repeated edges (equal confidences across a split) are merged, so the result is strictly
    increasing and may hold fewer than ``bins − 1`` edges.

    Examples
    --------
    >>> equal_mass_edges(np.array([0.9, 0.35, 0.6, 0.4, 0.7, 0.5]), 3).tolist()  # 2 per bin
    [0.45, 0.6499999999999999]
    """
    ordered = np.sort(confidence)
    n = ordered.shape[0]
    n_bins = min(bins, n)
    split = (np.arange(1, n_bins) * n) // n_bins  # rows in the first j bins, j = 1..M'−1
    edges: FloatArray = np.unique((ordered[split - 1] + ordered[split]) / 2.0)
    return edges


def _fill_empty_bins(values: FloatArray, counts: npt.NDArray[np.int64]) -> FloatArray:
    """Give each empty bin the value of the nearest non-empty bin (the lower one on a tie)."""
    full = np.flatnonzero(counts > 0)
    if full.shape[0] == values.shape[0]:
        return values
    bins = np.arange(values.shape[0])
    above = np.minimum(np.searchsorted(full, bins), full.shape[0] - 1)
    below = np.maximum(above - 1, 0)
    use_below = np.abs(bins - full[below]) <= np.abs(full[above] - bins)
    nearest = np.where(use_below, full[below], full[above])
    filled: FloatArray = values[nearest]
    return filled


class IsotonicCalibration(_TopKConfidenceCalibrator):
    """Isotonic regression of top-k correctness on top-k confidence (004 Eq. 5).

    scikit-learn's :class:`~sklearn.isotonic.IsotonicRegression` (increasing, values in
    ``[0, 1]``, ``out_of_bounds="clip"``: a confidence outside the calibration range gets the
    value at the nearest end). Between calibration points it interpolates linearly, as
    scikit-learn does.

    Parameters
    ----------
    top_k : int
        Calibrate the confidence of the top-k set (default 1, the predicted class).

    Attributes
    ----------
    isotonic_ : sklearn.isotonic.IsotonicRegression
        The fitted regression.
    n_classes_, n_calibration_ : int
        Classes and rows seen at fit time.

    Examples
    --------
    Confidences .55 .7 .8 .9 with correctness 1 1 0 1: the pool-adjacent-violators fit is
    2/3 on ``[.55, .8]`` and 1 at .9; beyond .9 it is clipped.

    >>> P = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.45, 0.55]])
    >>> iso = IsotonicCalibration().fit(P, np.array([0, 1, 1, 1]))
    >>> iso.transform(np.array([[0.6, 0.4], [0.95, 0.05]])).round(4).tolist()
    [0.6667, 1.0]
    """

    def __init__(self, *, top_k: int = 1) -> None:
        self.top_k = check_top_k(top_k)

    def __repr__(self) -> str:
        return f"IsotonicCalibration(top_k={self.top_k!r})"

    def fit(self, P: Any, y: Any) -> IsotonicCalibration:
        """Fit the isotonic map on calibration probabilities and labels.

        Parameters
        ----------
        P : array-like of shape (n, K)
            Model probabilities of the calibration rows.
        y : array-like of shape (n,)
            Their true class indices.

        Returns
        -------
        IsotonicCalibration
            ``self``, fitted.
        """
        from sklearn.isotonic import IsotonicRegression

        confidence, correct = self._fit_inputs(P, y)
        self.isotonic_ = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
        self.isotonic_.fit(confidence, correct)
        return self

    def transform(self, P: Any) -> FloatArray:
        """Calibrated probability that each row's label is in its top-k set, shape ``(m,)``."""
        return self.transform_confidence(self._confidence(P))

    def transform_confidence(self, confidence: FloatArray) -> FloatArray:
        """Apply the fitted map to top-k confidences already computed (no validation)."""
        self._check_fitted()
        mapped: FloatArray = np.asarray(self.isotonic_.predict(confidence), dtype=np.float64)
        return mapped
