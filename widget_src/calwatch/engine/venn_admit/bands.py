"""Exact, vectorised queries over distance bands of calibration rows (paper 000 Eq. 6, Alg. 2-4).

A band ``B(t) = {j : q_j = q_t, |d_j − d_t| ≤ ω}`` restricted to a class (ADMIT) or to a Venn
category is a contiguous range of calibration rows once they are sorted by (group key, d).
Three structures answer every query of a batch at once, with no loop over test rows:

- :class:`GroupedWindows`: rows sorted by (integer key, d); ``window(key, lo, hi)`` returns
  the position range of the rows with that key and ``d ∈ [lo, hi]``: two ``searchsorted``
  calls on one int64 array of ``key·(n+1) + rank(d)``. O(log n) per query.
- :class:`RankTree`: a merge-sort tree over those positions. ``count_less(lo, hi, x)`` is the
  exact number of positions ``p ∈ [lo, hi)`` with ``v_p < x``: the range is split into ≤ 2
  prefixes, each prefix into ≤ log₂ n aligned blocks whose values are stored sorted, and each
  block is counted with one ``searchsorted`` (all blocks of one level for all queries in a
  single call, on an int64 array of ``block·(n+1) + rank(v)``). Build O(n log² n) time and
  O(n log n) memory; a query costs O(log² n). This gives the conformal order statistic of a
  variable window exactly: ``s ≤ s_(k)`` of the window iff fewer than ``k`` window scores are
  ``< s``.
- :class:`PrefixCounts`: per-class prefix counts over positions; the label counts of any range
  in O(C) per query.

On top of them, :class:`AdmitCalibration` (ADMIT sets, Alg. 2) and :class:`VennCategories`
(Venn-ADMIT category counts, Alg. 3-4). A batch of ``m`` rows costs O(m·C·log² n).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
Int64Array = npt.NDArray[np.int64]


class GroupedWindows:
    """Rows grouped by a non-negative integer key and sorted by a float value within each group.

    Parameters
    ----------
    keys : ndarray of shape (n,), integer
        Group of each row.
    values : ndarray of shape (n,), float
        The value ranges are taken on (the distance ``d``).

    Attributes
    ----------
    order : ndarray of shape (n,)
        Row numbers in (key, value, row) order: position ``p`` holds row ``order[p]``.

    Examples
    --------
    >>> w = GroupedWindows(np.array([1, 0, 1, 1]), np.array([0.5, 0.2, 0.1, 0.9]))
    >>> w.order.tolist()
    [1, 2, 0, 3]
    >>> lo, hi = w.window(np.array([1]), np.array([0.1]), np.array([0.5]))
    >>> w.order[lo[0] : hi[0]].tolist()  # key 1, value in [0.1, 0.5]
    [2, 0]
    """

    def __init__(self, keys: IntArray | Int64Array, values: FloatArray) -> None:
        keys = np.asarray(keys, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        n = keys.shape[0]
        self.n = int(n)
        self.order: IntArray = np.lexsort((values, keys)).astype(np.intp)
        self._uniq_keys = np.unique(keys)
        group = np.searchsorted(self._uniq_keys, keys[self.order])
        self._sorted_values = np.sort(values)
        rank = np.searchsorted(self._sorted_values, values[self.order], side="left")
        self._combined: Int64Array = group.astype(np.int64) * (n + 1) + rank

    def window(
        self, keys: IntArray | Int64Array, lo: FloatArray, hi: FloatArray
    ) -> tuple[IntArray, IntArray]:
        """Position range ``[start, stop)`` of the rows with ``key`` and value in ``[lo, hi]``.

        A key absent from the rows gives an empty range.
        """
        keys = np.asarray(keys, dtype=np.int64)
        if self.n == 0:
            zero = np.zeros(keys.shape[0], dtype=np.intp)
            return zero, zero.copy()
        group = np.searchsorted(self._uniq_keys, keys)
        clipped = np.minimum(group, self._uniq_keys.shape[0] - 1)
        known = self._uniq_keys[clipped] == keys
        base = clipped.astype(np.int64) * (self.n + 1)
        # rank(v) = #{values < v}: v ≥ lo ⇔ rank(v) ≥ #{values < lo}; v ≤ hi ⇔ rank(v) < #{values ≤ hi}
        r_lo = np.searchsorted(self._sorted_values, lo, side="left")
        r_hi = np.searchsorted(self._sorted_values, hi, side="right")
        start = np.searchsorted(self._combined, base + r_lo, side="left").astype(np.intp)
        stop = np.searchsorted(self._combined, base + r_hi, side="left").astype(np.intp)
        stop = np.maximum(stop, start)
        start[~known] = 0
        stop[~known] = 0
        return start, stop


class RankTree:
    """Exact counts of values below a threshold in position ranges (a merge-sort tree).

    Parameters
    ----------
    values : ndarray of shape (n,), float
        One value per position.

    Examples
    --------
    >>> tree = RankTree(np.array([0.3, 0.1, 0.4, 0.1, 0.5]))
    >>> tree.count_less(np.array([1, 0]), np.array([4, 5]), np.array([0.4, 0.35])).tolist()
    [2, 3]
    """

    def __init__(self, values: FloatArray) -> None:
        values = np.asarray(values, dtype=np.float64)
        n = values.shape[0]
        self.n = int(n)
        self._sorted_values = np.sort(values)
        rank = np.searchsorted(self._sorted_values, values, side="left").astype(np.int64)
        positions = np.arange(n, dtype=np.int64)
        self._levels: list[Int64Array] = []
        level = 0
        while n and (1 << level) <= n:
            # within an aligned block of 2**level positions the values are stored sorted
            self._levels.append(np.sort((positions >> level) * (n + 1) + rank))
            level += 1

    def count_less(self, start: IntArray, stop: IntArray, x: FloatArray) -> IntArray:
        """``#{p ∈ [start, stop) : values[p] < x}`` for each query (exact)."""
        rx = np.searchsorted(self._sorted_values, x, side="left").astype(np.int64)
        out: IntArray = (self._prefix(np.asarray(stop), rx) - self._prefix(np.asarray(start), rx)).astype(
            np.intp
        )
        return out

    def _prefix(self, bound: IntArray, rx: Int64Array) -> Int64Array:
        """``#{p < bound : rank(values[p]) < rx}``: ``[0, bound)`` as aligned blocks, one per set bit."""
        bound = bound.astype(np.int64)
        out = np.zeros(bound.shape[0], dtype=np.int64)
        for level, keys in enumerate(self._levels):
            has = np.flatnonzero((bound >> level) & 1)
            if has.size == 0:
                continue
            block = (bound[has] >> (level + 1)) << 1
            found = np.searchsorted(keys, block * (self.n + 1) + rx[has], side="left")
            out[has] += found - (block << level)
        return out


class PrefixCounts:
    """Per-class counts of labels in position ranges, from prefix sums.

    Examples
    --------
    >>> pc = PrefixCounts(np.array([0, 1, 1, 0]), n_classes=2)
    >>> pc.counts(np.array([1]), np.array([4])).tolist()
    [[1, 2]]
    """

    def __init__(self, labels: IntArray, n_classes: int) -> None:
        labels = np.asarray(labels, dtype=np.intp)
        onehot = labels[:, None] == np.arange(n_classes)
        self._prefix = np.zeros((labels.shape[0] + 1, n_classes), dtype=np.int64)
        np.cumsum(onehot, axis=0, out=self._prefix[1:])

    def counts(self, start: IntArray, stop: IntArray) -> Int64Array:
        """Label counts of each range ``[start, stop)``, shape (m, C)."""
        out: Int64Array = self._prefix[stop] - self._prefix[start]
        return out


#: Slack on ``⌈(n+1)(1−α)⌉`` against float rounding (as in :mod:`calwatch.engine.conformal.quantiles`).
_RANK_SLACK = 1e-9


class AdmitCalibration:
    """ADMIT's Mondrian conformal calibration (paper 000 Alg. 2) over the ``D_ca^mc`` rows.

    The taxonomy of a test row is its band ``{j : q_j = q_t, |d_j − d_t| ≤ ω}`` and the label:
    for each class ``c`` the scores ``1 − π_{y_j}`` of the band's rows with ``y_j = c`` give the
    conformal order statistic ``l̂_c = s_(⌈(n_c+1)(1−α)⌉)`` (``+∞`` past ``n_c``).

    Parameters
    ----------
    q, d, y : ndarray of shape (n,)
        ``q``, ``d`` and true label of the calibration rows.
    scores : ndarray of shape (n,)
        ``1 − π^KNN_{y_j}(x_j)``.
    n_classes : int
    alpha, omega : float
        Miscoverage level and band radius.
    kappa : int
        Any class with fewer band rows than this gives the full set.
    """

    def __init__(
        self,
        q: IntArray,
        d: FloatArray,
        y: IntArray,
        scores: FloatArray,
        *,
        n_classes: int,
        alpha: float,
        omega: float,
        kappa: int,
    ) -> None:
        self.n_classes, self.alpha, self.omega, self.kappa = n_classes, alpha, omega, kappa
        self._windows = GroupedWindows(q * n_classes + y, d)
        self._tree = RankTree(scores[self._windows.order])

    def sets(
        self, probs: FloatArray, yhat: IntArray, q: IntArray, d: FloatArray
    ) -> tuple[BoolArray, BoolArray]:
        """ADMIT sets ``{ŷ} ∪ {c : 1 − π_c ≤ l̂_c}`` (m, C) and the κ-guard mask (m,).

        ``π_c ≥ τ̂_c = 1 − l̂_c`` is evaluated as ``1 − π_c ≤ l̂_c``, the same float64 expression
        as the calibration scores; and ``s ≤ s_(r)`` as "fewer than ``r`` window scores are
        ``< s``", a rank query, so no quantile is materialised.
        """
        m, C = probs.shape
        lo, hi = d - self.omega, d + self.omega
        windows = [self._windows.window(q * C + c, lo, hi) for c in range(C)]
        sizes = np.stack([stop - start for start, stop in windows], axis=1)
        guarded: BoolArray = np.asarray((sizes < self.kappa).any(axis=1))
        sets: BoolArray = np.zeros((m, C), dtype=bool)
        sets[guarded] = True
        open_rows = np.flatnonzero(~guarded)
        for c, (start, stop) in enumerate(windows):
            rows = open_rows[yhat[open_rows] != c]
            if rows.size == 0:
                continue
            rank = np.ceil((sizes[rows, c] + 1) * (1.0 - self.alpha) - _RANK_SLACK).astype(np.int64)
            below = self._tree.count_less(start[rows], stop[rows], 1.0 - probs[rows, c])
            sets[rows, c] = below <= rank - 1
        sets[np.arange(m), yhat] = True
        return sets, guarded


class VennCategories:
    """Venn-ADMIT categories (paper 000 Alg. 3-4) over the ``D_ca^vp`` rows with singleton ADMIT sets.

    A singleton test row's category is the ``D_ca^vp`` rows of its band with the same ``ŷ^KNN``
    and the same ADMIT set ``{ŷ}``, i.e. the rows with key ``q·C + ŷ`` (``-1`` for rows whose
    set is not a singleton) and ``d`` in ``[d_t − ω, d_t + ω]``.

    Parameters
    ----------
    key : ndarray of shape (n,)
        ``q·C + ŷ`` for rows with singleton sets, ``-1`` otherwise.
    d, y : ndarray of shape (n,)
        Distance ``d`` and true label.
    n_classes : int
    """

    def __init__(self, key: Int64Array, d: FloatArray, y: IntArray, *, n_classes: int) -> None:
        self.key, self.d = key, d
        members = np.flatnonzero(key >= 0)
        self._windows = GroupedWindows(key[members], d[members])
        self._counts = PrefixCounts(y[members][self._windows.order], n_classes)

    def counts(
        self, key: Int64Array, lo: FloatArray, hi: FloatArray, label: IntArray
    ) -> tuple[IntArray, IntArray]:
        """``|T|`` and the number of its rows labelled ``label``, for each query."""
        start, stop = self._windows.window(key, lo, hi)
        n_label = self._counts.counts(start, stop)[np.arange(key.shape[0]), label]
        return (stop - start).astype(np.intp), n_label.astype(np.intp)


def reliability_features(
    dist: FloatArray, idx: Int64Array, y_hat: IntArray, ref_pred: IntArray, ref_labels: IntArray
) -> tuple[IntArray, FloatArray]:
    """``q`` (Eq. 4) and ``d`` (Eq. 5) of rows with known reference neighbours, nearest first.

    ``q_t`` counts the leading neighbours ``k`` whose model prediction equals both ``ŷ_t^KNN``
    and their own true label; the count stops at the first neighbour that fails (``q ∈ [0, K]``).
    ``d_t`` is the distance to the nearest reference row.

    Examples
    --------
    Neighbours 0, 1, 2, 3 (nearest first); the third is mislabelled by the model, so the fourth's
    match no longer counts:

    >>> q, d = reliability_features(np.array([[0.5, 1.0, 2.0, 3.0]]), np.array([[0, 1, 2, 3]]),
    ...                             np.array([1]), np.array([1, 1, 1, 1]), np.array([1, 1, 0, 1]))
    >>> int(q[0]), float(d[0])
    (2, 0.5)
    """
    match = (ref_pred[idx] == y_hat[:, None]) & (ref_pred[idx] == ref_labels[idx])
    q = np.where(match.all(axis=1), idx.shape[1], np.argmin(match, axis=1)).astype(np.intp)
    return q, np.asarray(dist[:, 0], dtype=np.float64).copy()


def band_radius(
    d: FloatArray, q: IntArray, y_hat: IntArray, y: IntArray, delta: float
) -> tuple[float, float]:
    """The band's ``ŝ`` and radius ``ω = δ·ŝ`` (§4.1.3).

    ``ŝ`` is the sample standard deviation (ddof 1) of ``d`` over the rows with ``q > 0`` and a
    correct KNN prediction.

    Raises
    ------
    ValueError
        Fewer than 2 such rows.

    Examples
    --------
    >>> band_radius(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1, 1, 0, 2]), np.zeros(4, int),
    ...             np.array([0, 0, 0, 0]), delta=2.0)  # d = 1, 2, 4: ŝ = sqrt(7/3) = 1.52753
    (1.5275252316519465, 3.055050463303893)
    """
    rows = (q > 0) & (y_hat == y)
    if int(rows.sum()) < 2:
        msg = (
            "the band radius needs ≥ 2 calibration rows with q > 0 and a correct KNN prediction; "
            f"found {int(rows.sum())}"
        )
        raise ValueError(msg)
    s_hat = float(np.std(d[rows], ddof=1))
    return s_hat, delta * s_hat


def venn_bounds(n_category: IntArray, n_label: IntArray, weight: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Lower and upper Venn probabilities of a label (Alg. 3-4) with test-point weight ``w``.

    With ``|T|`` category rows of which ``n`` carry the label, ``p_c(label) = (n + [c = label]·w)
    / (|T| + w)``: the minimum over ``c`` is ``n/(|T| + w)``, the maximum ``(n + w)/(|T| + w)``.
    ``w = inf`` (``ψ' = 0``) gives ``0`` and ``1``.

    Examples
    --------
    >>> lo, up = venn_bounds(np.array([5, 5]), np.array([4, 4]), np.array([1.0, 2.0]))
    >>> lo.round(4).tolist(), up.round(4).tolist()  # 4/6, 5/6; 4/7, 6/7
    ([0.6667, 0.5714], [0.8333, 0.8571])
    """
    n_t = np.asarray(n_category, dtype=np.float64)
    n_y = np.asarray(n_label, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lower: FloatArray = n_y / (n_t + w)
        upper: FloatArray = np.where(np.isinf(w), 1.0, (n_y + w) / (n_t + w))
    return lower, upper


def venn_cp_lower(n_category: IntArray, n_label: IntArray, weight: FloatArray, level: float) -> FloatArray:
    """One-sided Clopper-Pearson lower bound on a category's frequency of a label, Venn style.

    The test point joins the category with weight ``w`` and the label it is *not* (the worst
    hypothesis of the Venn predictor, which gives ``p̲ = n/(|T| + w)``): ``n`` successes in
    ``|T| + w`` trials. The bound is the ``level`` quantile of ``Beta(n, |T| + w − n + 1)``
    (``0`` when ``n = 0`` or ``w = inf``): with probability ``≥ 1 − level`` over the category's
    calibration rows, the label's true frequency in the category is at least this. It is at
    most the Venn lower probability ``n/(|T| + w)`` for any ``level ≤ 1/2`` (the median of
    that Beta distribution is below its mean ratio), so admitting on it only removes rows.

    Examples
    --------
    A category of 20 rows all labelled ``ŷ``, ``w = 1``: the bound solves
    ``p^20·(21 − 20p) = level`` (the CDF of ``Beta(20, 2)``):

    >>> b = venn_cp_lower(np.array([20]), np.array([20]), np.array([1.0]), 0.05)
    >>> round(float(b[0]), 4), round(float(b[0] ** 20 * (21 - 20 * b[0])), 4)
    (0.7933, 0.05)
    """
    from scipy.special import betaincinv  # on first use: `import calwatch` stays fast

    n_t = np.asarray(n_category, dtype=np.float64)
    n_y = np.asarray(n_label, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    ok = (n_y > 0) & np.isfinite(w)
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = betaincinv(np.where(ok, n_y, 1.0), np.where(ok, n_t + w - n_y + 1.0, 1.0), level)
    out: FloatArray = np.where(ok, bound, 0.0).astype(np.float64)
    return out
