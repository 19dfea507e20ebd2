"""Mergeable counts per slice cell (:class:`SliceCounts`) and their history (:class:`SliceStore`).

The cells are :mod:`calwatch.stream.slices`'s: one value of one slice column, or one pair of values
of two columns.

**Counts.** :class:`SliceCounts` holds, per cell, the rows, the labelled rows and, per set
calibrator, the labelled rows its set covered and the sum of its rows' set sizes: integers, a
monoid (:meth:`SliceCounts.merge` adds them; a relabel merges the old label's counts with
``sign=-1``), so pooled batches and late labels are exact in any order.

**History** (:class:`SliceStore`). Counts are kept per *epoch* of consecutive batches: each new
batch is an epoch of its own, and when more than :data:`EPOCHS_PER_LENGTH` epochs of one length
exist the two oldest of them merge into one of twice the length. The newest batches stay one
epoch each, older ones pool into epochs of 2, 4, 8… batches, at most ``4·(⌊log₂ B⌋ + 1)``
epochs for ``B`` batches, each ``(2 + 2c) × cells`` int64 (``c`` set calibrators). A late label
updates the epoch holding its batch, so totals are exact however late it comes; ``since=`` is
exact at an epoch's start and otherwise counts from the start of the epoch holding it (the
batch actually counted from is reported). At 10⁷ rows in 10⁴ batches, ten numeric columns
(1,680 cells) and one calibrator, that is at most 56 epochs of 53.8 KB: about 3 MB, and
``O(log B)`` however long the stream. Each row's codes cost 2 bytes a column besides, in the
window (10 columns × 100,000 rows: 2 MB) and in the row log on disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.stream.slices import CodeArray, SliceEncoding

CountArray = npt.NDArray[np.int64]

#: Epochs of one length kept before the two oldest merge (see the module's *History*).
EPOCHS_PER_LENGTH = 4
#: The calibration rows are kept (for :meth:`Monitor.slice_calibrator`) when their probabilities
#: hold at most this many values (rows × classes: 32 MB of float64).
CALIBRATION_VALUES = 1 << 22


@dataclass(frozen=True, eq=False)
class CalibrationRows:
    """The calibration rows of a monitor that slices: what a calibrator by slice is fitted on.

    :meth:`Monitor.slice_calibrator <calwatch.monitor.monitor.Monitor.slice_calibrator>` fits a
    new calibrator (Mondrian by a slice column, or group-conditional over several) on the same
    rows the monitor's calibrators were fitted on, with their slice codes, so a fix can be built
    in one call, after a snapshot too. Kept when ``n × K ≤`` :data:`CALIBRATION_VALUES`.

    Attributes
    ----------
    probs : ndarray of shape (n, K), float64
    labels : ndarray of shape (n,), int64
        Class indices.
    codes : ndarray of shape (n, columns), int16
        Each row's slice codes (:meth:`~calwatch.stream.slices.SliceEncoding.codes`).
    """

    probs: npt.NDArray[np.float64]
    labels: npt.NDArray[np.int64]
    codes: CodeArray

    def problems(self, n_columns: int) -> list[str]:
        """What is inconsistent (shapes, labels outside the classes), in words; empty when sound."""
        n = self.labels.shape[0]
        if self.probs.ndim != 2 or self.probs.shape[0] != n or self.codes.shape != (n, n_columns):
            shapes = f"{self.probs.shape}, {self.labels.shape}, {self.codes.shape}"
            return [f"calibration rows of mismatched shapes {shapes}"]
        if n and (self.labels.min() < 0 or self.labels.max() >= self.probs.shape[1]):
            return ["calibration labels outside the classes"]
        return []


@dataclass(frozen=True, eq=False)
class SliceCounts:
    """Counts per cell for some rows: a monoid (:meth:`empty` is the identity of :meth:`merge`).

    ``counts`` rows: ``0`` rows, ``1`` labelled rows, ``2 + k`` labelled rows whose set of
    calibrator ``k`` held the label, ``2 + c + k`` the sum of calibrator ``k``'s set sizes over
    the rows (``c = len(calibrators)``); one column per cell. Integers, so merges are exact in
    any order; a relabel's old label is merged in with ``sign=-1`` (:meth:`SliceStore.labelled`).

    Examples
    --------
    >>> a = SliceCounts(("lac",), np.array([[2, 1], [2, 0], [1, 0], [3, 2]]))
    >>> b = SliceCounts(("lac",), np.array([[1, 1], [1, 1], [1, 1], [1, 1]]))
    >>> ab = a.merge(b)
    >>> ab.n_rows.tolist(), ab.n_labelled.tolist(), ab.n_covered("lac").tolist()
    ([3, 2], [3, 1], [2, 1])
    >>> ab.set_size_sum("lac").tolist()
    [4, 3]
    >>> a.merge(SliceCounts.empty(("lac",), 2)) == a
    True
    """

    calibrators: tuple[str, ...]
    counts: CountArray

    @classmethod
    def empty(cls, calibrators: tuple[str, ...], n_cells: int) -> SliceCounts:
        """Counts of no rows."""
        return cls(tuple(calibrators), np.zeros((2 + 2 * len(calibrators), n_cells), dtype=np.int64))

    def merge(self, other: SliceCounts) -> SliceCounts:
        """Counts of the rows of both (a new object; neither operand changes)."""
        if other.calibrators != self.calibrators or other.counts.shape != self.counts.shape:
            msg = "slice counts of different calibrators or cells cannot be merged"
            raise ValueError(msg)
        return SliceCounts(self.calibrators, self.counts + other.counts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SliceCounts):
            return NotImplemented
        return self.calibrators == other.calibrators and np.array_equal(self.counts, other.counts)

    __hash__ = None  # type: ignore[assignment]

    @property
    def n_rows(self) -> CountArray:
        """Rows per cell."""
        rows: CountArray = self.counts[0]
        return rows

    @property
    def n_labelled(self) -> CountArray:
        """Labelled rows per cell."""
        labelled: CountArray = self.counts[1]
        return labelled

    def _row(self, key: str, shift: int) -> CountArray:
        row: CountArray = self.counts[2 + shift + self.calibrators.index(key)]
        return row

    def n_covered(self, key: str) -> CountArray:
        """Labelled rows per cell whose set of calibrator ``key`` held the label."""
        return self._row(key, 0)

    def set_size_sum(self, key: str) -> CountArray:
        """Sum of calibrator ``key``'s set sizes per cell (over every row, labelled or not)."""
        return self._row(key, len(self.calibrators))

    def check(self) -> list[str]:
        """Violations of the counts' invariants (empty when sound): ``0 ≤ covered ≤ labelled ≤ rows``."""
        problems = []
        c = len(self.calibrators)
        if self.counts.ndim != 2 or self.counts.shape[0] != 2 + 2 * c:
            return [f"counts have shape {self.counts.shape}, not ({2 + 2 * c}, cells)"]
        if np.any(self.counts < 0):
            problems.append("a count is negative")
        if np.any(self.n_labelled > self.n_rows):
            problems.append("more labelled rows than rows in a cell")
        for key in self.calibrators:
            if np.any(self.n_covered(key) > self.n_labelled):
                problems.append(f"calibrator {key!r}: more covered rows than labelled rows in a cell")
        return problems


# --------------------------------------------------------------------------- the history
@dataclass
class SliceStore:
    """A monitor's slices: the encoding, the set calibrators counted, and counts per epoch of batches.

    See the module docstring (*History*) for the epochs. Attributes are plain lists and arrays,
    so a snapshot keeps them as JSON and arrays (:mod:`calwatch.core.codec`).

    Attributes
    ----------
    encoding : SliceEncoding
    calibrators : tuple of str
        The set calibrators counted, in the monitor's order.
    starts : list of int
        The first batch of each epoch, oldest first.
    lengths : list of int
        Batches of each epoch.
    epochs : list of ndarray
        Each epoch's counts, ``(2 + 2c, cells)`` int64 (:class:`SliceCounts` layout).
    calibration : CalibrationRows or None
        The latest ``calibrate(meta=)``'s rows (None when too large to keep, or in snapshots
        saved before they were kept).
    """

    encoding: SliceEncoding
    calibrators: tuple[str, ...]
    starts: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    epochs: list[CountArray] = field(default_factory=list)
    calibration: CalibrationRows | None = None

    @property
    def n_batches(self) -> int:
        """Batches counted."""
        return self.starts[-1] + self.lengths[-1] if self.starts else 0

    def observed(self, codes: CodeArray, sizes: Mapping[str, npt.NDArray[np.integer[Any]]]) -> SliceCounts:
        """Counts of freshly observed rows: rows and set-size sums per cell (no labels yet)."""
        cells = self.encoding.cells(codes)
        flat, n = cells.ravel(), self.encoding.n_cells
        out = SliceCounts.empty(self.calibrators, n)
        out.counts[0] = np.bincount(flat, minlength=n)
        c = len(self.calibrators)
        for k, key in enumerate(self.calibrators):
            weights = np.repeat(np.asarray(sizes[key], dtype=np.float64), cells.shape[1])
            out.counts[2 + c + k] = np.rint(np.bincount(flat, weights=weights, minlength=n)).astype(np.int64)
        return out

    def labelled(
        self, codes: CodeArray, covered: Mapping[str, npt.NDArray[np.bool_]], sign: int = 1
    ) -> SliceCounts:
        """What labelling these rows adds (``sign=-1``: takes away): labelled and covered per cell."""
        cells = self.encoding.cells(codes)
        n = self.encoding.n_cells
        out = SliceCounts.empty(self.calibrators, n)
        out.counts[1] = sign * np.bincount(cells.ravel(), minlength=n)
        for k, key in enumerate(self.calibrators):
            hit = np.asarray(covered[key], dtype=bool)
            out.counts[2 + k] = sign * np.bincount(cells[hit].ravel(), minlength=n)
        return out

    def append(self, batch: int, counts: SliceCounts) -> None:
        """The next batch's counts, as an epoch of its own; then the oldest epochs of a length merge.

        Raises
        ------
        ValueError
            If ``batch`` is not the next batch.
        """
        if batch != self.n_batches:
            msg = f"slice counts of batch {batch} come after batch {self.n_batches - 1}"
            raise ValueError(msg)
        self.starts.append(batch)
        self.lengths.append(1)
        self.epochs.append(counts.counts.copy())
        length = 1
        while True:
            same = [e for e, n in enumerate(self.lengths) if n == length]
            if len(same) <= EPOCHS_PER_LENGTH:
                return
            first, second = same[0], same[1]  # adjacent: lengths never grow toward the newest
            self.epochs[first] = self.epochs[first] + self.epochs[second]
            self.lengths[first] = 2 * length
            del self.starts[second], self.lengths[second], self.epochs[second]
            length *= 2

    def add(self, batch: int, delta: SliceCounts) -> None:
        """Merge counts of a batch's rows (late labels) into the epoch holding the batch."""
        epoch = self.epoch_of(batch)
        self.epochs[epoch] = self.epochs[epoch] + delta.counts

    def epoch_of(self, batch: int) -> int:
        """The epoch holding ``batch``.

        Raises
        ------
        IndexError
            If no epoch holds it.
        """
        if not 0 <= batch < self.n_batches:
            msg = f"batch {batch} has no slice counts"
            raise IndexError(msg)
        return int(np.searchsorted(np.asarray(self.starts), batch, side="right")) - 1

    def pooled(self, since: int | None = None) -> tuple[SliceCounts, int]:
        """Counts of every batch from ``since`` (whole epochs), and the first batch counted.

        ``since`` inside an epoch counts from that epoch's start (the first batch counted is
        returned); ``since`` past the last batch counts nothing.
        """
        total = SliceCounts.empty(self.calibrators, self.encoding.n_cells)
        if since is None or since <= 0:
            first_epoch = 0
        elif since >= self.n_batches:
            return total, int(since)
        else:
            first_epoch = self.epoch_of(since)
        for counts in self.epochs[first_epoch:]:
            total.counts[:] += counts
        first = self.starts[first_epoch] if self.starts else 0
        return total, int(first)

    def problems(self) -> list[str]:
        """Violations of the store's invariants (empty when sound), for a snapshot's checks."""
        shape = (2 + 2 * len(self.calibrators), self.encoding.n_cells)
        if not (len(self.starts) == len(self.lengths) == len(self.epochs)):
            return ["epochs, starts and lengths differ in number"]
        expected = 0
        for start, length, counts in zip(self.starts, self.lengths, self.epochs, strict=True):
            if start != expected or length < 1:
                return [f"epoch starting at batch {start} does not follow batch {expected - 1}"]
            if not isinstance(counts, np.ndarray) or counts.shape != shape or counts.dtype != np.int64:
                return [f"epoch starting at batch {start} has counts of the wrong shape or type"]
            expected += length
            problems = SliceCounts(self.calibrators, counts).check()
            if problems:
                return [f"epoch starting at batch {start}: {problems[0]}"]
        if self.calibration is not None:
            return self.calibration.problems(len(self.encoding.columns))
        return []


__all__ = ["CALIBRATION_VALUES", "EPOCHS_PER_LENGTH", "CalibrationRows", "SliceCounts", "SliceStore"]
