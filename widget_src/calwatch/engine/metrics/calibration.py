"""Calibration metrics of classifiers, plain and selective (ALGORITHMS.md §6; paper 002 §3.2, App. B.1).

The one implementation calwatch uses to *measure* classification calibration:

- :func:`binned_calibration_error`: equal-mass binned calibration error of confidences against
  binary outcomes (002 Eq. 45), in the ℓ1, ℓ2 or ℓ∞ norm, with ``m = min(15, ⌊n/25⌋)`` bins;
- :func:`calibration_error`: the same from a probability matrix, as the *binary* calibration
  error (BCE: ``r = p_1``, outcome ``y``) when ``K = 2`` and the *top-label* calibration error
  (TCE: ``r = max p``, outcome ``1{y = ŷ}``) otherwise;
- :func:`brier_score`: mean squared difference between ``r`` and the outcome (002 Eq. 6);
- :func:`selective_calibration_error`, :func:`selective_brier_score`: the same on the kept rows
  only (002 Def. 4.2; App. B.1 "first filter, then bin");
- :func:`coverage_threshold`: 002 Eq. 16, the largest ``τ`` keeping at least a share ``ξ`` of
  the scores;
- :func:`selective_curve` and :func:`selective_auc`: a metric against coverage
  ``ξ ∈ [0.05, 1]`` (thresholds tuned on the evaluated rows themselves, labels unused, as in
  002 §5.2) and the area under it.

Equal-mass bins here split the rows *by rank* (:func:`equal_mass_bin_index`): sorted by
confidence (stable, so ties keep the input order), the first ``n mod m`` bins hold ``⌈n/m⌉``
rows and the others ``⌊n/m⌋`` (the split of ``numpy.array_split``, also used by the
dashboard's reliability bins). Tied confidences can straddle a bin boundary. This is the
estimator of 002 App. B.1 (and Kumar et al. 2019).
:func:`calwatch.engine.calibration.binning.equal_mass_edges` answers another question (edges of a
calibration *map*, midpoints between ranks, ties never split) and is not used for measurement.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_labels, check_probabilities

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
Norm = Literal["l1", "l2", "linf"]
Kind = Literal["auto", "binary", "top-label"]
CurveMetric = Literal["calibration", "brier"]

NORMS: tuple[Norm, ...] = ("l1", "l2", "linf")
KINDS: tuple[Kind, ...] = ("auto", "binary", "top-label")
#: At most this many bins (002 App. B.1).
MAX_BINS = 15
#: At least this many rows per bin on average (002 App. B.1: ``m = min(15, ⌊n/25⌋)``).
ROWS_PER_BIN = 25
#: Lowest coverage of the selective curves (002 §5.2: "starting from a coverage of 5%").
MIN_COVERAGE = 0.05
#: Default coverage grid of :func:`selective_curve`: 0.05, 0.10, …, 1.00.
DEFAULT_COVERAGES: FloatArray = np.round(np.arange(1, 21) * 0.05, 10)


def default_bins(n: int) -> int:
    """``m = min(15, ⌊n/25⌋)`` bins for ``n`` rows, and at least one.

    Examples
    --------
    >>> default_bins(10), default_bins(60), default_bins(10_000)
    (1, 2, 15)
    """
    return max(1, min(MAX_BINS, n // ROWS_PER_BIN))


def _check_norm(norm: Any) -> Norm:
    if norm not in NORMS:
        msg = f"norm must be one of {NORMS}; got {norm!r}"
        raise ValueError(msg)
    value: Norm = norm
    return value


def _check_kind(kind: Any) -> Kind:
    if kind not in KINDS:
        msg = f"kind must be one of {KINDS}; got {kind!r}"
        raise ValueError(msg)
    value: Kind = kind
    return value


def _check_vector(values: Any, name: str, n_rows: int | None = None) -> FloatArray:
    arr = np.asarray(values)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        msg = f"{name} must be a numeric 1-D array; got dtype {arr.dtype}"
        raise TypeError(msg)
    if arr.ndim != 1:
        msg = f"{name} must be a 1-D array; got shape {arr.shape}"
        raise ValueError(msg)
    if n_rows is not None and arr.shape[0] != n_rows:
        msg = f"{name} has {arr.shape[0]} entries but there are {n_rows} rows"
        raise ValueError(msg)
    out = arr.astype(np.float64)
    if not np.isfinite(out).all():
        msg = f"{name} contains NaN or inf"
        raise ValueError(msg)
    return out


def check_kept(kept: Any, n_rows: int, name: str = "kept") -> BoolArray:
    """Validate a boolean mask of length ``n_rows`` that keeps at least one row."""
    arr = np.asarray(kept)
    if arr.dtype != np.bool_:
        msg = f"{name} must be a boolean mask; got dtype {arr.dtype}"
        raise TypeError(msg)
    if arr.ndim != 1 or arr.shape[0] != n_rows:
        msg = f"{name} must be a 1-D boolean mask of length {n_rows}; got shape {arr.shape}"
        raise ValueError(msg)
    if not arr.any():
        msg = f"{name} keeps no row: a selective metric needs at least one kept row"
        raise ValueError(msg)
    out: BoolArray = arr
    return out


def binned_calibration_error(
    confidence: Any, outcome: Any, *, norm: Norm = "l2", bins: int | None = None
) -> float:
    """Equal-mass binned calibration error of confidences against 0/1 outcomes (002 Eq. 45).

    Rows sorted by confidence (stable) are cut by rank into ``m`` bins of (almost) equal size,
    ``B_k``; with ``ȳ_k`` and ``r̄_k`` the mean outcome and confidence of bin ``k``:

    - ``"l1"``: ``Σ_k |B_k|/n · |ȳ_k − r̄_k|``;
    - ``"l2"``: ``(Σ_k |B_k|/n · |ȳ_k − r̄_k|²)^{1/2}``;
    - ``"linf"``: ``max_k |ȳ_k − r̄_k|``.

    Parameters
    ----------
    confidence : array-like of shape (n,)
        Predicted probability of the outcome, in ``[0, 1]``.
    outcome : array-like of shape (n,)
        The outcome, 0/1 (or booleans).
    norm : {"l1", "l2", "linf"}
        The norm ``q`` of 002 Eq. 45.
    bins : int, optional
        Number of bins ``m``; default ``min(15, ⌊n/25⌋)`` (at least 1). Capped at ``n``.

    Returns
    -------
    float

    Examples
    --------
    Six rows, two bins of three: confidences {.2 .3 .4} with outcomes {0 1 0}, then
    {.6 .7 .8} with {1 1 1}; gaps |1/3 − .3| = 1/30 and |1 − .7| = .3.

    >>> r = np.array([0.8, 0.2, 0.6, 0.3, 0.7, 0.4])
    >>> y = np.array([1, 0, 1, 1, 1, 0])
    >>> round(binned_calibration_error(r, y, norm="l1", bins=2), 6)  # (1/30 + .3) / 2
    0.166667
    >>> round(binned_calibration_error(r, y, norm="linf", bins=2), 6)
    0.3
    """
    norm = _check_norm(norm)
    r = _check_vector(confidence, "confidence")
    o = _check_vector(outcome, "outcome", n_rows=r.shape[0])
    n = r.shape[0]
    if n == 0:
        msg = "confidence is empty: expected at least one row"
        raise ValueError(msg)
    if r.min() < 0.0 or r.max() > 1.0:
        msg = f"confidence must lie in [0, 1]; found values in [{r.min():.6g}, {r.max():.6g}]"
        raise ValueError(msg)
    if not np.all((o == 0.0) | (o == 1.0)):
        msg = "outcome must hold 0/1 values (or booleans)"
        raise ValueError(msg)
    if bins is None:
        m = default_bins(n)
    elif isinstance(bins, bool) or not isinstance(bins, int | np.integer) or bins < 1:
        msg = f"bins must be an integer ≥ 1; got {bins!r}"
        raise ValueError(msg)
    else:
        m = min(int(bins), n)
    return _binned_error(r, o, norm, m)


def equal_mass_bin_index(n: int, m: int) -> IntArray:
    """Bin of each rank ``0..n-1`` for ``m ≤ n`` equal-mass bins, as ``numpy.array_split`` cuts.

    Examples
    --------
    >>> equal_mass_bin_index(7, 3).tolist()  # sizes 3, 2, 2
    [0, 0, 0, 1, 1, 2, 2]
    """
    small, extra = divmod(n, m)
    sizes = np.full(m, small, dtype=np.intp)
    sizes[:extra] += 1
    index: IntArray = np.repeat(np.arange(m, dtype=np.intp), sizes)
    return index


def _binned_error(r: FloatArray, o: FloatArray, norm: Norm, m: int) -> float:
    """:func:`binned_calibration_error` without validation (``m ≤ n``)."""
    n = r.shape[0]
    order = np.argsort(r, kind="stable")
    index = equal_mass_bin_index(n, m)  # bin of each rank
    counts = np.bincount(index, minlength=m).astype(np.float64)
    gap = np.abs(
        np.bincount(index, weights=o[order], minlength=m) - np.bincount(index, weights=r[order], minlength=m)
    )
    gap /= counts  # |ȳ_k − r̄_k|; every bin holds ⌊n/m⌋ or ⌈n/m⌉ ≥ 1 rows
    if norm == "linf":
        return float(gap.max())
    if norm == "l1":
        return float(np.dot(counts, gap) / n)
    return math.sqrt(float(np.dot(counts, gap * gap) / n))


def reduce_probabilities(P: Any, y: Any, *, kind: Kind = "auto") -> tuple[FloatArray, FloatArray]:
    """The confidence ``r`` and 0/1 outcome that a calibration metric compares.

    ``"binary"`` (``K = 2``; the default ``"auto"`` picks it then): ``r = p_1`` and the outcome
    is ``y`` (002 Def. 3.1). ``"top-label"`` (``"auto"`` for ``K > 2``): ``r = max p`` and the
    outcome is ``1{y = ŷ}``, ties in ``p`` going to the lowest class index (002 Def. 3.2).

    Examples
    --------
    >>> P = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3]])
    >>> reduce_probabilities(P, np.array([0, 2]))
    (array([0.7, 0.5]), array([1., 0.]))
    """
    kind = _check_kind(kind)
    probs = check_probabilities(P, "P")
    labels = check_labels(y, probs.shape[1], "y", n_rows=probs.shape[0])
    return _reduce(probs, labels, kind)


def _reduce(probs: FloatArray, labels: IntArray, kind: Kind) -> tuple[FloatArray, FloatArray]:
    K = probs.shape[1]
    if kind == "binary" or (kind == "auto" and K == 2):
        if K != 2:
            msg = f"kind='binary' needs P with 2 columns; got {K}"
            raise ValueError(msg)
        return probs[:, 1].copy(), (labels == 1).astype(np.float64)
    predicted = probs.argmax(axis=1)  # first maximum: the lowest class index on ties
    confidence: FloatArray = probs[np.arange(probs.shape[0]), predicted]
    return confidence, (predicted == labels).astype(np.float64)


def calibration_error(
    P: Any, y: Any, *, norm: Norm = "l2", kind: Kind = "auto", bins: int | None = None
) -> float:
    """Binned binary (``K = 2``) or top-label (``K > 2``) calibration error of a model.

    Parameters
    ----------
    P : array-like of shape (n, K)
        Model probabilities.
    y : array-like of shape (n,)
        True class indices.
    norm : {"l1", "l2", "linf"}
        Norm of the binned error (:func:`binned_calibration_error`).
    kind : {"auto", "binary", "top-label"}
        See :func:`reduce_probabilities`.
    bins : int, optional
        Number of equal-mass bins; default ``min(15, ⌊n/25⌋)``.

    Returns
    -------
    float

    Examples
    --------
    >>> P = np.array([[0.2, 0.8], [0.8, 0.2], [0.4, 0.6], [0.7, 0.3], [0.3, 0.7], [0.6, 0.4]])
    >>> round(calibration_error(P, np.array([1, 0, 1, 1, 1, 0]), norm="l1", bins=2), 6)
    0.166667
    """
    r, o = reduce_probabilities(P, y, kind=kind)
    return binned_calibration_error(r, o, norm=norm, bins=bins)


def brier_score(P: Any, y: Any, *, kind: Kind = "auto") -> float:
    """Mean of ``(r − outcome)²`` with ``r`` and the outcome of :func:`reduce_probabilities`.

    For ``K = 2`` the usual binary Brier score of ``p_1``; for ``K > 2`` the top-label one
    (002 Def. 3.3: ``f(X) = max p``, ``Y = 1{y = ŷ}``).

    Examples
    --------
    >>> round(brier_score(np.array([[0.2, 0.8], [0.6, 0.4]]), np.array([1, 1])), 6)  # (.04 + .36)/2
    0.2
    """
    r, o = reduce_probabilities(P, y, kind=kind)
    return float(np.mean((r - o) ** 2))


def selective_calibration_error(
    P: Any, y: Any, kept: Any, *, norm: Norm = "l2", kind: Kind = "auto", bins: int | None = None
) -> float:
    """Calibration error of the kept rows only (002 Def. 4.2; App. B.1).

    The rows with ``kept`` true are binned afresh: ``m = min(15, ⌊n_kept/25⌋)`` bins.

    Parameters
    ----------
    P : array-like of shape (n, K)
        Model probabilities.
    y : array-like of shape (n,)
        True class indices.
    kept : array-like of bool, shape (n,)
        The selector's decision (at least one row kept).
    norm, kind, bins
        As in :func:`calibration_error`.

    Returns
    -------
    float

    Examples
    --------
    >>> P = np.array([[0.2, 0.8], [0.8, 0.2], [0.4, 0.6], [0.7, 0.3], [0.3, 0.7], [0.6, 0.4]])
    >>> y = np.array([1, 0, 1, 1, 1, 0])
    >>> kept = np.array([True, True, False, False, True, False])  # p_1 = .8 .2 .7, y = 1 0 1
    >>> round(selective_calibration_error(P, y, kept, norm="linf"), 6)  # one bin: |2/3 − 1.7/3|
    0.1
    """
    r, o = reduce_probabilities(P, y, kind=kind)
    mask = check_kept(kept, r.shape[0])
    return binned_calibration_error(r[mask], o[mask], norm=norm, bins=bins)


def selective_brier_score(P: Any, y: Any, kept: Any, *, kind: Kind = "auto") -> float:
    """Brier score of the kept rows only (002 §4.1: "the selective Brier score").

    Examples
    --------
    >>> P = np.array([[0.2, 0.8], [0.6, 0.4]])
    >>> round(selective_brier_score(P, np.array([1, 1]), np.array([True, False])), 6)
    0.04
    """
    r, o = reduce_probabilities(P, y, kind=kind)
    mask = check_kept(kept, r.shape[0])
    return float(np.mean((r[mask] - o[mask]) ** 2))


def coverage_threshold(scores: Any, coverage: float) -> float:
    """002 Eq. 16: ``τ̂ = sup{τ : mean(s ≥ τ) ≥ ξ}``, the largest τ keeping a share ≥ ξ.

    With the scores sorted in decreasing order, ``τ̂ = s_(k)`` for ``k = ⌈ξ·n⌉``: keeping
    ``s ≥ τ̂`` keeps at least ``k`` rows (more when scores tie at ``τ̂``), so the coverage on
    these rows is always ``≥ ξ``.

    Parameters
    ----------
    scores : array-like of shape (n,)
        Selector scores (higher = keep first), at least one.
    coverage : float
        Target coverage ``ξ`` in ``(0, 1]``.

    Returns
    -------
    float

    Examples
    --------
    >>> coverage_threshold(np.array([0.9, 0.1, 0.5, 0.7, 0.3]), 0.6)  # keep ⌈3⌉ = 3 rows
    0.5
    >>> coverage_threshold(np.array([0.9, 0.1, 0.5, 0.7, 0.3]), 0.61)  # keep ⌈3.05⌉ = 4
    0.3
    """
    s = _check_vector(scores, "scores")
    xi = check_coverage(coverage)
    n = s.shape[0]
    if n == 0:
        msg = "scores is empty: the threshold needs at least one score"
        raise ValueError(msg)
    return _threshold(s, xi)


def _threshold(s: FloatArray, xi: float) -> float:
    n = s.shape[0]
    k = keep_count(xi, n)
    # the k-th largest score: the (n − k)-th smallest (0-based)
    return float(np.partition(s, n - k)[n - k])


def keep_count(coverage: float, n: int) -> int:
    """``⌈ξ·n⌉`` with ``ξ·n`` rounded to 9 decimals first (0.6 · 5 is 3.0000000000000004).

    Examples
    --------
    >>> keep_count(0.6, 5), keep_count(0.05, 10), keep_count(1.0, 7)
    (3, 1, 7)
    """
    return max(1, min(n, math.ceil(round(coverage * n, 9))))


def check_coverage(coverage: Any, name: str = "coverage") -> float:
    """Validate a target coverage ``ξ`` in ``(0, 1]``."""
    if isinstance(coverage, bool) or not isinstance(coverage, int | float | np.integer | np.floating):
        msg = f"{name} must be a number in (0, 1]; got {coverage!r}"
        raise TypeError(msg)
    value = float(coverage)
    if not 0.0 < value <= 1.0:
        msg = f"{name} must be in (0, 1]; got {coverage!r}"
        raise ValueError(msg)
    return value


def selective_curve(
    P: Any,
    y: Any,
    scores: Any,
    *,
    metric: CurveMetric = "calibration",
    norm: Norm = "l2",
    kind: Kind = "auto",
    coverages: Any = None,
) -> tuple[FloatArray, FloatArray]:
    """A selective metric against target coverage, thresholds tuned on these rows (002 §5.2).

    For each ``ξ`` the threshold is :func:`coverage_threshold` of ``scores`` on these same rows
    (labels unused), the rows with ``score ≥ τ̂`` are kept, and the metric is computed on them.

    Parameters
    ----------
    P : array-like of shape (n, K)
        Model probabilities.
    y : array-like of shape (n,)
        True class indices.
    scores : array-like of shape (n,)
        Selector scores (higher = keep first); constant scores give the full model.
    metric : {"calibration", "brier"}
        Selective calibration error (with ``norm``) or selective Brier score.
    norm : {"l1", "l2", "linf"}
        Norm of the calibration error.
    kind : {"auto", "binary", "top-label"}
        See :func:`reduce_probabilities`.
    coverages : array-like, optional
        Target coverages in ``(0, 1]``; default :data:`DEFAULT_COVERAGES` (0.05 to 1 by 0.05).

    Returns
    -------
    coverages : ndarray
        The target coverages, sorted.
    values : ndarray
        The metric at each.

    Examples
    --------
    >>> P = np.array([[0.2, 0.8], [0.8, 0.2], [0.4, 0.6], [0.7, 0.3]])
    >>> xi, v = selective_curve(P, np.array([1, 0, 0, 1]), np.array([4, 3, 2, 1]), metric="brier",
    ...                         coverages=[0.5, 1.0])
    >>> v.round(4).tolist()  # first two rows: (.04 + .04)/2; all: (.04 + .04 + .36 + .49)/4
    [0.04, 0.2325]
    """
    if metric not in ("calibration", "brier"):
        msg = f"metric must be 'calibration' or 'brier'; got {metric!r}"
        raise ValueError(msg)
    norm = _check_norm(norm)
    r, o = reduce_probabilities(P, y, kind=kind)
    s = _check_vector(scores, "scores", n_rows=r.shape[0])
    grid = DEFAULT_COVERAGES if coverages is None else _check_vector(coverages, "coverages")
    if grid.shape[0] == 0 or grid.min() <= 0.0 or grid.max() > 1.0:
        msg = "coverages must be a non-empty list of values in (0, 1]"
        raise ValueError(msg)
    grid = np.sort(grid)
    values = np.empty(grid.shape[0], dtype=np.float64)
    for i, xi in enumerate(grid.tolist()):
        mask = s >= _threshold(s, xi)
        values[i] = _metric(r[mask], o[mask], metric, norm)
    return grid, values


def _metric(r: FloatArray, o: FloatArray, metric: CurveMetric, norm: Norm) -> float:
    if metric == "brier":
        return float(np.mean((r - o) ** 2))
    return _binned_error(r, o, norm, min(default_bins(r.shape[0]), r.shape[0]))


def selective_auc(coverages: Any, values: Any) -> float:
    """Area under a selective curve by the trapezoid rule (002 §5.2; lower is better).

    Over the coverages given (by default 0.05 to 1): the full model's calibration-error AUC is
    ``0.95 ×`` its calibration error.

    Examples
    --------
    >>> selective_auc([0.05, 0.5, 1.0], [0.1, 0.1, 0.1])
    0.095
    """
    x = _check_vector(coverages, "coverages")
    v = _check_vector(values, "values", n_rows=x.shape[0])
    if x.shape[0] < 2:
        msg = "an AUC needs at least two coverages"
        raise ValueError(msg)
    order = np.argsort(x)
    x, v = x[order], v[order]
    return float(np.sum(np.diff(x) * (v[1:] + v[:-1]) / 2.0))


__all__ = [
    "DEFAULT_COVERAGES",
    "MIN_COVERAGE",
    "binned_calibration_error",
    "brier_score",
    "calibration_error",
    "check_coverage",
    "coverage_threshold",
    "default_bins",
    "equal_mass_bin_index",
    "keep_count",
    "reduce_probabilities",
    "selective_auc",
    "selective_brier_score",
    "selective_calibration_error",
    "selective_curve",
]
