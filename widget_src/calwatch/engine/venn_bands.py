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
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
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
