"""Numerics of conformal test martingales (SHIFT.md §1), array in, array out.

- :class:`ScoreBag`: the exact multiset of every score seen so far (calibration rows first,
  then the stream in order) and the smoothed conformal p-value of each new row against it.
- :func:`earlier_counts`: within one batch, how many *earlier* rows of the batch score above
  (and equal to) each row, by a merge-sort count in ``O(b log b)``.
- :func:`simple_jumper`: Vovk's simple-jumper betting martingale over a batch of p-values,
  vectorised as a blocked parallel prefix product of 3×3 matrices, in log space.
- :func:`cusum`, :func:`shiryaev_roberts`: the change-detection statistics on the
  martingale's factors, in log space, restarted after every alarm.

:class:`calwatch.engine.shift.detectors.ConformalTestMartingale` puts these together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: Runs of the bag are kept at least this many times smaller than the run before them; a new
#: run that breaks this is merged into its predecessor (so there are ``O(log N)`` runs).
MERGE_RATIO = 4
#: Rows per block of the simple jumper's prefix product. Every factor ``D_n M`` has column sums
#: in ``[0.5, 1.5]``, so a product of up to this many has column sums in
#: ``[0.5^32, 1.5^32] ⊂ [1e-10, 1e6]`` and needs no rescaling; the block totals are rescaled
#: at every step of their own scan.
JUMPER_BLOCK = 32
#: The betting states ``ε`` of the simple jumper, in this order throughout.
EPSILONS = np.array([-1.0, 0.0, 1.0])


# ----------------------------------------------------------------------------------- the bag
class _Run(NamedTuple):
    """A sorted run of the bag: distinct values and how many elements lie below each."""

    values: FloatArray  # sorted, distinct
    below: IntArray  # below[i] = #elements < values[i]; below[-1] = size of the run


def _run_from_sorted(values: FloatArray) -> _Run:
    """A run from sorted values that may repeat."""
    n = values.shape[0]
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(values[1:], values[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    return _Run(values[starts], np.append(starts, n).astype(np.int64))


def _merge(a: _Run, b: _Run) -> _Run:
    """The union of two runs (counts added where a value is in both), by insertion into ``a``."""
    if a.values.shape[0] < b.values.shape[0]:
        a, b = b, a
    at = np.searchsorted(a.values, b.values)
    hit = np.take(a.values, at, mode="clip") == b.values
    counts = np.diff(a.below)
    b_counts = np.diff(b.below)
    counts[at[hit]] += b_counts[hit]
    miss = ~hit
    values = np.insert(a.values, at[miss], b.values[miss])
    counts = np.insert(counts, at[miss], b_counts[miss])
    below = np.zeros(values.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=below[1:])
    return _Run(values, below)


def earlier_counts(scores: FloatArray) -> tuple[IntArray, IntArray, FloatArray, IntArray]:
    """Rank each row of a batch against the rows before it in the same batch.

    Parameters
    ----------
    scores : ndarray of shape (b,)
        One batch of scores, in arrival order.

    Returns
    -------
    greater, equal : ndarray of int64, shape (b,)
        ``#{i < j : a_i > a_j}`` and ``#{i < j : a_i = a_j}`` for every row ``j``.
    distinct : ndarray of shape (u,)
        The batch's distinct values, sorted.
    inverse : ndarray of int64, shape (b,)
        ``distinct[inverse] == scores``.

    Notes
    -----
    One stable sort gives the rank of every row under the total order "by score, then by
    position", a permutation ``π``; ``#{i < j : a_i > a_j}`` is then the number of inversions
    ``#{i < j : π_i > π_j}`` ending at ``j``, counted bottom-up as in merge sort: at level
    ``L`` the batch is cut into blocks of ``2^(L+1)`` positions, each block's two halves
    already sorted by rank, and every row of a right half gains the number of left-half rows
    ranked above it (read off a cumulative count after sorting the block). Each pair
    ``i < j`` is counted once, at the level where the two first fall in different halves:
    ``O(b log b)`` work in ``⌈log2 b⌉`` vectorised steps.
    """
    b = scores.shape[0]
    order = np.argsort(scores, kind="stable")
    ordered = scores[order]
    new = np.empty(b, dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    positions = np.arange(b, dtype=np.int64)
    equal = np.empty(b, dtype=np.int64)
    equal[order] = positions - starts[group]  # stable: a tie group lists its rows in order
    inverse = np.empty(b, dtype=np.int64)
    inverse[order] = group
    rank = np.empty(b, dtype=np.int64)
    rank[order] = positions
    return _earlier_greater(rank), equal, ordered[starts], inverse


def _earlier_greater(rank: IntArray) -> IntArray:
    """``#{i < j : rank_i > rank_j}`` for every ``j``, ``rank`` a permutation of ``0..b-1``."""
    b = rank.shape[0]
    size = 1 << max(0, (b - 1).bit_length())  # padded to a power of two; pads rank last
    bits = max(1, size.bit_length() - 1)
    index = np.arange(size, dtype=np.int64)
    padded = index.copy()
    padded[:b] = rank
    keys = (padded << bits) | index  # sorting keys sorts by rank and carries the row
    greater = np.zeros(size, dtype=np.int64)
    mask = (1 << bits) - 1
    level, width = 0, 1
    while width < size:
        keys = np.sort(keys.reshape(-1, 2 * width), axis=1).ravel()
        rows = keys & mask
        left = ((rows >> level) & 1) == 0
        left_so_far = np.cumsum(left.reshape(-1, 2 * width), axis=1).ravel()
        greater[rows] += np.where(left, 0, width - left_so_far)
        level, width = level + 1, 2 * width
    return greater[:b]


class ScoreBag:
    """The exact multiset of all scores seen so far, as sorted runs merged geometrically.

    Each run holds sorted distinct values with cumulative counts; a batch enters as a new run
    and is merged into the run before it while it is at least ``1/MERGE_RATIO`` of that run's
    size, so sizes shrink geometrically, there are ``O(log N)`` runs and each score is merged
    ``O(log N)`` times. A p-value costs one binary search per run, ``O(log² N)`` at worst and
    ``O(log N)`` in practice (the recent runs are small).

    Parameters
    ----------
    scores : ndarray of shape (n,)
        The calibration scores, the first elements of the bag (any order).
    """

    def __init__(self, scores: FloatArray) -> None:
        self._runs: list[_Run] = []
        self.size = 0
        if scores.shape[0]:
            self._push(_run_from_sorted(np.sort(scores)))

    @classmethod
    def from_counts(cls, values: FloatArray, counts: IntArray) -> ScoreBag:
        """A bag holding ``counts[i]`` copies of ``values[i]`` (``values`` sorted and distinct)."""
        bag = cls(np.empty(0))
        if values.shape[0]:
            below = np.zeros(values.shape[0] + 1, dtype=np.int64)
            np.cumsum(counts, out=below[1:])
            bag._push(_Run(values.copy(), below))
        return bag

    def counts(self) -> tuple[FloatArray, IntArray]:
        """The bag as sorted distinct values and their multiplicities (runs merged)."""
        if not self._runs:
            return np.empty(0), np.empty(0, dtype=np.int64)
        merged = self._runs[0]
        for run in self._runs[1:]:
            merged = _merge(merged, run)
        self._runs = [merged]
        return merged.values, np.diff(merged.below)

    @property
    def n_runs(self) -> int:
        """How many sorted runs the bag is split into now."""
        return len(self._runs)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the bag back as it is now (runs are never changed in place)."""
        runs, size = list(self._runs), self.size

        def restore() -> None:
            self._runs, self.size = list(runs), size

        return restore

    def _push(self, run: _Run) -> None:
        self._runs.append(run)
        self.size += int(run.below[-1])
        runs = self._runs
        while len(runs) > 1 and MERGE_RATIO * runs[-1].values.shape[0] >= runs[-2].values.shape[0]:
            last = runs.pop()
            runs[-1] = _merge(runs[-1], last)

    def _counts_against(self, distinct: FloatArray) -> tuple[IntArray, IntArray]:
        """``#{bag > x}`` and ``#{bag = x}`` for sorted distinct query values ``x``."""
        greater = np.zeros(distinct.shape[0], dtype=np.int64)
        equal = np.zeros(distinct.shape[0], dtype=np.int64)
        for run in self._runs:
            lo = np.searchsorted(run.values, distinct)
            hit = np.take(run.values, lo, mode="clip") == distinct
            below = run.below[lo]
            not_above = run.below[lo + hit]
            greater += run.below[-1] - not_above
            equal += not_above - below
        return greater, equal

    def p_values(self, scores: FloatArray, theta: FloatArray) -> FloatArray:
        """Add ``scores`` to the bag, in order, returning each row's smoothed p-value.

        ``p_n = (#{i : a_i > a_n} + θ_n · #{i : a_i = a_n}) / N_n`` over the bag just after row
        ``n`` joined it (so ``N_n`` counts row ``n`` and the equal count includes it).
        """
        b = scores.shape[0]
        if b == 0:
            return np.empty(0)
        greater_in, equal_in, distinct, inverse = earlier_counts(scores)
        greater_bag, equal_bag = self._counts_against(distinct)
        greater = greater_bag[inverse] + greater_in
        equal = equal_bag[inverse] + equal_in + 1
        sizes = np.arange(self.size + 1, self.size + b + 1, dtype=np.float64)
        out: FloatArray = (greater + theta * equal) / sizes
        counts = np.bincount(inverse, minlength=distinct.shape[0])
        below = np.zeros(distinct.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=below[1:])
        self._push(_Run(distinct, below))
        return out


# ------------------------------------------------------------------------ the grid bag
#: Most grid cells a :class:`GridScoreBag` spans (two int64 arrays of this length: 64 MiB).
MAX_GRID_CELLS = 1 << 22


class GridScoreBag:
    """The exact multiset of scores on an integer grid: a count per cell, in a Fenwick tree.

    A martingale with ``resolution`` feeds scores ``⌊score / resolution⌋``, integers in a range
    that the scores' own range bounds (``[0, 1]`` at ``1e-4``: 10,001 cells). Counting per cell
    makes a p-value one prefix sum over the tree (its own cell's count is the equal count),
    ``O(log cells)``, for every row in arrival order, the batch's earlier rows included (a
    compiled loop, :meth:`martingale_step`), with no sorting and no merging;
    memory is two integers per cell whatever the stream's length. The range grows (doubling)
    when a score falls outside it; :meth:`accepts` says when a batch cannot be held (a
    non-integer or infinite score, or more than :data:`MAX_GRID_CELLS` cells), and the
    martingale then moves to the sorted-runs :class:`ScoreBag` (same counts, same p-values).

    Parameters
    ----------
    lo : int
        The value of cell 0.
    counts : ndarray of int64
        Scores per cell.
    """

    def __init__(self, lo: int, counts: IntArray) -> None:
        from calwatch.engine.shift.kernels import fenwick_build

        self.lo = int(lo)
        self._counts = np.ascontiguousarray(counts, dtype=np.int64)
        self._tree = fenwick_build(self._counts)
        self.size = int(self._counts.sum())

    @staticmethod
    def accepts(values: FloatArray, lo: float | None = None, hi: float | None = None) -> bool:
        """Whether these values (with a current range ``[lo, hi]``) fit on a grid bag."""
        if values.shape[0] == 0:
            return True
        vmin, vmax = float(values.min()), float(values.max())
        if not (math.isfinite(vmin) and math.isfinite(vmax)) or not np.array_equal(values, np.floor(values)):
            return False
        low = vmin if lo is None else min(lo, vmin)
        high = vmax if hi is None else max(hi, vmax)
        return high - low + 1 <= MAX_GRID_CELLS

    @classmethod
    def from_values(cls, values: FloatArray) -> GridScoreBag:
        """A bag of these integer-valued scores (check :meth:`accepts` first)."""
        if values.shape[0] == 0:
            return cls(0, np.zeros(1, dtype=np.int64))
        lo = int(values.min())
        counts = np.bincount((values - lo).astype(np.int64))
        return cls(lo, counts)

    @classmethod
    def from_counts(cls, values: FloatArray, counts: IntArray) -> GridScoreBag:
        """A bag holding ``counts[i]`` copies of the integer ``values[i]`` (sorted, distinct)."""
        if values.shape[0] == 0:
            return cls(0, np.zeros(1, dtype=np.int64))
        lo = int(values[0])
        dense = np.zeros(int(values[-1]) - lo + 1, dtype=np.int64)
        dense[(values - lo).astype(np.int64)] = counts
        return cls(lo, dense)

    def __getstate__(self) -> dict[str, Any]:
        """The cells' counts (the tree is rebuilt from them on load)."""
        return {"lo": self.lo, "counts": self._counts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Rebuild the tree from the saved counts."""
        self.__init__(int(state["lo"]), np.asarray(state["counts"], dtype=np.int64))  # type: ignore[misc]

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the bag back as it is now (a copy of the counts: 8 bytes a cell)."""
        lo, counts, size = self.lo, self._counts.copy(), self.size

        def restore() -> None:
            self.__init__(lo, counts.copy())  # type: ignore[misc]
            assert self.size == size

        return restore

    @property
    def hi(self) -> int:
        """The value of the last cell."""
        return self.lo + int(self._counts.shape[0]) - 1

    def counts(self) -> tuple[FloatArray, IntArray]:
        """The bag as sorted distinct values and their multiplicities."""
        cells = np.flatnonzero(self._counts)
        return (cells + self.lo).astype(np.float64), self._counts[cells].copy()

    def _cover(self, vmin: int, vmax: int) -> None:
        """Grow the range to hold ``[vmin, vmax]``, with as much room again on the side that grew."""
        lo, hi = self.lo, self.hi
        if vmin >= lo and vmax <= hi:
            return
        span = max(hi, vmax) - min(lo, vmin) + 1
        room = min(span, MAX_GRID_CELLS - span) // 2
        new_lo = min(lo, vmin) - (room if vmin < lo else 0)
        new_hi = max(hi, vmax) + (room if vmax > hi else 0)
        counts = np.zeros(new_hi - new_lo + 1, dtype=np.int64)
        counts[lo - new_lo : lo - new_lo + self._counts.shape[0]] = self._counts
        self.__init__(new_lo, counts)  # type: ignore[misc]

    def run_martingale(
        self,
        scores: FloatArray,
        resolution: float,
        theta: FloatArray,
        *,
        seen: int,
        jump: float,
        capital: FloatArray,
        state: FloatArray,
        log_table: FloatArray,
        epoch_rows: int,
        which: int,
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, BoolArray, int] | None:
        """A martingale's whole batch from its raw scores, in one compiled call; None if it does not fit.

        :func:`calwatch.engine.shift.kernels.martingale_grid`: the scores go on the grid
        (``⌊score / resolution⌋``), and unless a cell falls outside the bag's range (then nothing
        changes and None is returned: the caller grows the bag or moves to sorted runs) each
        row runs as in :meth:`martingale_step`, its threshold read from ``log_table`` (see
        :func:`calwatch.engine.shift.betting.threshold_table`). ``capital`` and ``state`` (``log S``,
        ``log γ``, ``log R``, ``max log S``) are updated in place. Returns each row's p-value,
        ``log S``, ``log γ``, ``log R``, the ``(3, m)`` alarms (Ville, CUSUM, Shiryaev–Roberts)
        and how many rows alarmed on statistic ``which`` (that order).
        """
        from calwatch.engine.shift.kernels import martingale_grid

        m = scores.shape[0]
        p, log_s, log_cusum, log_sr = np.empty(m), np.empty(m), np.empty(m), np.empty(m)
        alarms = np.zeros((3, m), dtype=np.bool_)
        n_alarms = martingale_grid(
            scores, float(resolution), self.lo, self.hi, self._tree, self._counts, theta, self.size,
            int(seen), float(jump), capital, state, log_table, int(epoch_rows), int(which), p, log_s,
            log_cusum, log_sr, alarms,
        )  # fmt: skip
        if n_alarms < 0:
            return None
        self.size += m
        return p, log_s, log_cusum, log_sr, alarms, int(n_alarms)

    def martingale_step(
        self,
        scores: FloatArray,
        theta: FloatArray,
        *,
        jump: float,
        capital: FloatArray,
        state: FloatArray,
        log_thresholds: FloatArray,
    ) -> tuple[FloatArray, BoolArray]:
        """Add ``scores`` and run the whole martingale over them in one compiled pass.

        :func:`calwatch.engine.shift.kernels.martingale_rows`: per row the p-value (the same as
        :meth:`ScoreBag.p_values` gives), the simple jumper (``capital`` updated in place), ``log S``, CUSUM
        and Shiryaev–Roberts (``state`` = their logs, updated in place). Returns the per-row
        ``(p, log S, log γ, log R)`` as an ``(m, 4)`` array and the ``(m, 2)`` alarms.
        """
        from calwatch.engine.shift.kernels import martingale_rows

        m = scores.shape[0]
        out = np.empty((m, 4))
        alarms = np.zeros((m, 2), dtype=np.bool_)
        if m == 0:
            return out, alarms
        self._cover(int(scores.min()), int(scores.max()))
        cells = (scores - self.lo).astype(np.int64)
        martingale_rows(
            self._tree, self._counts, cells, theta, self.size, float(jump), capital, state,
            np.ascontiguousarray(log_thresholds, dtype=np.float64), out, alarms,
        )  # fmt: skip
        self.size += m
        return out, alarms


# ------------------------------------------------------------------------ the simple jumper
def jumper_matrix(jump: float) -> FloatArray:
    """``M = (1 − J) I + (J/3) 11ᵀ``: each state keeps ``1 − J`` of its capital, the rest is pooled."""
    return (1.0 - jump) * np.eye(3) + jump / 3.0


def simple_jumper(p: FloatArray, *, jump: float, capital: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Log of Vovk's simple-jumper martingale over a batch of p-values, relative to its start.

    Row ``n`` maps the capital vector ``C`` (states ``ε = −1, 0, 1``) to ``D_n M C`` with
    ``D_n = diag(1 + ε (p_n − ½))`` and ``M`` from :func:`jumper_matrix`; the martingale is
    ``S_n = Σ_ε C_ε``. Computed row by row
    (:func:`calwatch.engine.shift.kernels.simple_jumper_rows`), the capital renormalised to sum
    1 after each row and the log of its growth carried.

    Parameters
    ----------
    p : ndarray of shape (b,)
        The batch's p-values.
    jump : float
        The jump rate ``J`` in ``[0, 1]``.
    capital : ndarray of shape (3,)
        The capital before the batch, normalised to sum 1.

    Returns
    -------
    log_growth : ndarray of shape (b,)
        ``log(S_n / S_start)`` for every row of the batch.
    capital : ndarray of shape (3,)
        The capital after the batch, normalised to sum 1.
    """
    from calwatch.engine.shift.kernels import simple_jumper_rows

    after = np.array(capital, dtype=np.float64)
    factors: FloatArray = simple_jumper_rows(np.ascontiguousarray(p, dtype=np.float64), float(jump), after)
    return np.cumsum(factors), after


# ------------------------------------------------------------- CUSUM and Shiryaev–Roberts
def change_statistics(
    log_factors: FloatArray, *, cusum_start: float, sr_start: float, log_threshold: float | FloatArray
) -> tuple[FloatArray, BoolArray, FloatArray, BoolArray]:
    """CUSUM and Shiryaev–Roberts together on the same factors (one compiled pass).

    ``log_threshold`` is ``log c``, one number or one per row. Returns ``(log_gamma,
    cusum_alarm, log_r, sr_alarm)``; see :func:`cusum` and :func:`shiryaev_roberts`.
    """
    from calwatch.engine.shift.kernels import change_statistics as kernel

    f = np.ascontiguousarray(log_factors, dtype=np.float64)
    log_gamma = np.empty(f.shape[0])
    log_r = np.empty(f.shape[0])
    limits = np.ascontiguousarray(np.broadcast_to(np.asarray(log_threshold, dtype=np.float64), f.shape))
    alarms = kernel(f, float(cusum_start), float(sr_start), limits, log_gamma, log_r)
    return log_gamma, alarms[:, 0].copy(), log_r, alarms[:, 1].copy()


def cusum(log_factors: FloatArray, *, start: float, log_threshold: float) -> tuple[FloatArray, BoolArray]:
    """CUSUM ``log γ_n = log F_n + max(0, log γ_{n−1})`` with restarts after every alarm.

    Parameters
    ----------
    log_factors : ndarray of shape (b,)
        ``log F_n = log S_n − log S_{n−1}``.
    start : float
        ``log γ`` before the batch (``0`` after a restart: ``γ = 1``).
    log_threshold : float
        ``log c``; an alarm at ``log γ_n ≥ log c``, after which ``γ`` restarts at 1.

    Returns
    -------
    log_gamma, alarm : ndarray of shape (b,)
    """
    log_gamma, alarm, _, _ = change_statistics(
        log_factors, cusum_start=start, sr_start=-math.inf, log_threshold=log_threshold
    )
    return log_gamma, alarm


def shiryaev_roberts(
    log_factors: FloatArray, *, start: float, log_threshold: float
) -> tuple[FloatArray, BoolArray]:
    """Shiryaev–Roberts ``log R_n = log F_n + log(1 + R_{n−1})``, ``R_0 = 0``, restarted at alarms.

    Parameters
    ----------
    log_factors : ndarray of shape (b,)
        ``log F_n``.
    start : float
        ``log R`` before the batch (``-inf`` after a restart: ``R = 0``).
    log_threshold : float
        ``log c``; an alarm at ``log R_n ≥ log c``, after which ``R`` restarts at 0.

    Returns
    -------
    log_r, alarm : ndarray of shape (b,)
    """
    _, _, log_r, alarm = change_statistics(
        log_factors, cusum_start=0.0, sr_start=start, log_threshold=log_threshold
    )
    return log_r, alarm
