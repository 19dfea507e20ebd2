"""Blocks of rows as the unit of exchangeability, for seasonal streams (SHIFT.md §1).

Why blocks
    A conformal test martingale assumes the *rows* of the stream are exchangeable with the
    calibration rows. Many real streams are not, even when nothing is wrong: flights in date
    order share each day's weather (a stormy day's departures are all delayed), traffic has an
    hour-of-day cycle, a day's transactions share its promotions. Rows within such a day are
    correlated, so a row-level martingale sees "non-exchangeable" every few weeks and alarms
    although the days themselves are as they always were.

    The block option moves the null up one level: *the blocks, each taken whole (its rows in
    any order and however correlated), are exchangeable with the calibration blocks*. Each
    complete block is reduced to one number by a fixed function of its own rows, and those
    numbers go through the usual fully online conformal test martingale. Under the block null
    the block statistics are exchangeable, so their smoothed conformal p-values are
    independent and uniform and every bound of
    :class:`~calwatch.engine.shift.detectors.ConformalTestMartingale` holds with "rows" read as
    "blocks". The price: one p-value per block, so a shift is seen only once blocks are
    complete, and the martingale needs a dozen or more blocks to reach its threshold (each
    block multiplies it by at most 1.5).

    The block statistic must be the *same* function for calibration and stream blocks. A
    distance to a reference distribution qualifies when the reference is built from other
    rows than the blocks it scores: the calibration blocks are split in two (seeded), one half
    pools its rows into the reference, the other half's blocks and every stream block are
    scored against it (:func:`ks_distance`). A shift must move a block further than the
    day-to-day variation of the calibration blocks to be seen: that is what the block null
    costs in power.

    Grouping by a key *within* each block class (a Mondrian test by hour of day, say) answers
    another null ("rows of the same hour are exchangeable") that correlated days still break:
    on NYC flights 2013 in date order, a by-hour Mondrian martingale alarmed about as often as
    the plain row-level one.

Scores on a grid
    Every score here lies in ``[0, 1]`` (``1 − max p``, and distances mapped by ``d/(d + m)``)
    and enters as its cell ``⌊score · GRID⌋`` (a fixed, data-independent map, so the null and
    the bounds are untouched): an open block is then a vector of cell counts, whatever its
    size, and it can span any number of batches.

What a block is
    In calibration, every distinct key is one block (calibration rows may come in any order).
    In the stream, the rows of a block arrive together, possibly over several batches: a block
    is complete when a row with another key arrives, and a key whose block is complete may not
    come back (that would split one day into two blocks of a different size distribution).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def block_keys(keys: Any, n: int, name: str = "blocks") -> list[str]:
    """Check per-row block keys and return them as strings (the form a snapshot can keep).

    Parameters
    ----------
    keys : array-like of shape (n,)
        One hashable key per row: a day, an hour, a shift number. ``None`` and NaN are refused
        (a row outside every block cannot be tested).
    n : int
        The number of rows the keys must match.
    name : str
        The argument's name, for errors.

    Returns
    -------
    list of str
        ``str(key)`` per row: keys are compared by their text, so ``3`` and ``"3"`` are one
        block, and a date and its ISO string are one block.
    """
    if isinstance(keys, (str, bytes)) or keys is None:
        msg = (
            f"{name} must hold one key per row (a sequence or array of length {n}); got {type(keys).__name__}"
        )
        raise TypeError(msg)
    to_list = getattr(keys, "to_list", None) or getattr(keys, "tolist", None)
    values = to_list() if callable(to_list) else list(keys)
    if not isinstance(values, list) or len(values) != n:
        got = len(values) if isinstance(values, list) else "a scalar"
        msg = f"{name} must hold one key per row: expected {n}, got {got}"
        raise ValueError(msg)
    out: list[str] = []
    for i, value in enumerate(values):
        if value is None or (isinstance(value, float) and value != value):
            msg = f"{name}[{i}] is missing ({value!r}): every row needs a block key"
            raise ValueError(msg)
        if isinstance(value, (list, dict, set)):
            msg = f"{name}[{i}] must be a scalar key (a day, an hour, a number); got {type(value).__name__}"
            raise TypeError(msg)
        out.append(str(value))
    return out


#: Cells of the score grid on ``[0, 1]`` (cell ``GRID`` holds the score 1 exactly).
GRID = 10_000


def grid_counts(scores: FloatArray, codes: npt.NDArray[np.intp] | None = None, n_groups: int = 1) -> IntArray:
    """Cell counts of scores in ``[0, 1]`` on the grid: shape ``(GRID + 1,)``, or per group.

    ``codes`` (one group index per score, ``0 ≤ code < n_groups``) gives one row of counts per
    group, shape ``(n_groups, GRID + 1)``.
    """
    cells = np.clip(np.floor(np.asarray(scores, dtype=np.float64) * GRID), 0, GRID).astype(np.intp)
    if codes is None:
        return np.bincount(cells, minlength=GRID + 1).astype(np.int64)
    flat = np.bincount(codes * (GRID + 1) + cells, minlength=n_groups * (GRID + 1))
    return flat.reshape(n_groups, GRID + 1).astype(np.int64)


def ks_distance(counts: IntArray, reference_cdf: FloatArray) -> float:
    """Kolmogorov–Smirnov distance between a block's gridded scores and a reference CDF.

    ``max_j |F_block(j) − F_ref(j)|`` over the grid cells ``j``, with ``F(j)`` the share of
    scores in cells ``≤ j``. Larger = the block's distribution lies further from the reference;
    any change of shape counts (a mean can stay put while the spread moves).
    """
    cdf = np.cumsum(counts) / max(int(counts.sum()), 1)
    return float(np.max(np.abs(cdf - reference_cdf)))


def grid_mean(counts: IntArray) -> float:
    """The mean of a block's gridded scores (cell midpoints are not used: cell ``j`` is ``j / GRID``)."""
    return float(np.dot(np.arange(GRID + 1), counts) / (GRID * max(int(counts.sum()), 1)))


def _runs(keys: list[str]) -> tuple[list[str], npt.NDArray[np.intp]]:
    """Consecutive runs of equal keys: each run's key, and the runs' bounds (starts plus the end)."""
    arr = np.asarray(keys, dtype=object)
    change = np.concatenate([[True], arr[1:] != arr[:-1]]) if len(keys) else np.zeros(0, np.bool_)
    starts = np.flatnonzero(change)
    return [keys[int(i)] for i in starts], np.append(starts, len(keys)).astype(np.intp)


def calibration_blocks(scores: FloatArray, keys: list[str]) -> tuple[list[str], IntArray]:
    """Each distinct key's grid counts (calibration: a block is every row with its key).

    Returns the keys, sorted, and their counts, shape ``(n_blocks, GRID + 1)``.
    """
    names = sorted(set(keys))
    index = {k: i for i, k in enumerate(names)}
    codes = np.fromiter((index[k] for k in keys), dtype=np.intp, count=len(keys))
    return names, grid_counts(scores, codes, len(names))


def split_blocks(n_blocks: int, seed: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """A seeded split of the calibration blocks into a reference half and a scored half."""
    order = np.random.default_rng([seed, 7]).permutation(n_blocks)
    half = n_blocks // 2
    return np.sort(order[:half]), np.sort(order[half:])


class BlockAccumulator:
    """The stream side: consecutive rows with one key form a block; complete blocks' grid counts.

    Attributes
    ----------
    open_key_ : str or None
        The key of the block still receiving rows (None before the first row).
    open_counts_ : ndarray of int64, shape (GRID + 1,)
        The open block's grid counts so far.
    closed_ : list of str
        Keys of the complete blocks, in order (a complete key may not come back).
    """

    def __init__(self) -> None:
        self.open_key_: str | None = None
        self.open_counts_: IntArray = np.zeros(GRID + 1, dtype=np.int64)
        self.closed_: list[str] = []

    def check(self, keys: list[str]) -> None:
        """Raise ``ValueError`` if these keys, fed next, would reopen a complete block (changes nothing)."""
        run_keys, _ = _runs(keys)
        done = set(self.closed_)
        if self.open_key_ is not None and run_keys and run_keys[0] != self.open_key_:
            done.add(self.open_key_)
        for i, key in enumerate(run_keys):
            if key in done:
                msg = (
                    f"blocks: key {key!r} comes back after its block was complete (another key came "
                    "in between); the rows of a block must arrive together, in one run"
                )
                raise ValueError(msg)
            if i < len(run_keys) - 1:
                done.add(key)

    def feed(self, scores: FloatArray, keys: list[str]) -> tuple[list[str], list[IntArray]]:
        """Add rows; return the keys and grid counts of the blocks these rows completed, in order.

        Call :meth:`check` first: ``feed`` assumes the keys are valid.
        """
        run_keys, bounds = _runs(keys)
        done: list[str] = []
        counts: list[IntArray] = []
        for key, lo, hi in zip(run_keys, bounds[:-1], bounds[1:], strict=True):
            if key != self.open_key_:
                if self.open_key_ is not None:
                    done.append(self.open_key_)
                    counts.append(self.open_counts_)
                    self.closed_.append(self.open_key_)
                self.open_key_ = key
                self.open_counts_ = np.zeros(GRID + 1, dtype=np.int64)
            self.open_counts_ = self.open_counts_ + grid_counts(scores[lo:hi])
        return done, counts

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the open block and the list of complete ones back as they are now.

        :meth:`feed` never writes into an array it has handed out or kept (it adds into a new
        one), so keeping a reference is enough.
        """
        state = (self.open_key_, self.open_counts_, len(self.closed_))

        def restore() -> None:
            self.open_key_, self.open_counts_ = state[0], state[1]
            del self.closed_[state[2] :]

        return restore
