"""The monitor's stream state: per-batch statistics for the whole stream, raw rows for a window.

Statistics are counts (mergeable, O(K) per batch and calibrator); raw rows (ids, probabilities,
prediction sets as packed bits, labels) are kept only for the most recent ``window`` rows, so
memory stays flat however long the stream runs.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import repeat
from typing import Any, Protocol, Self

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.intp]
NO_LABEL = -1


class BatchStats(Protocol):
    """Per-batch statistics of one calibrator: a monoid of small counts and sums.

    Each calibrator kind (:mod:`calwatch.kinds`) has its own type. ``empty(n_classes)`` is the
    identity of ``merge`` and ``merge`` is associative: the statistics of a batch equal the
    merge of the statistics of its parts, in any split and any grouping of the merges, labels
    included. Counts merge exactly (integers), float sums to rounding.
    """

    @classmethod
    def empty(cls, n_classes: int) -> Self:
        """The identity: statistics of no rows."""
        ...

    def merge(self, other: Self) -> Self:
        """Statistics of the rows of both (a new object; neither operand changes)."""
        ...

    @property
    def n_labelled(self) -> int:
        """Labelled rows."""
        ...

    def check(self, n_rows: int) -> list[str]:
        """Violations of the invariants for a batch of ``n_rows`` rows (empty when sound)."""
        ...

    def to_row(self) -> dict[str, Any]:
        """The statistics as one row of the snapshot's ``batches.parquet`` (its kind included)."""
        ...


@dataclass
class BatchRecord:
    """One observed batch: its statistics (kept forever) and its raw rows (kept in the window)."""

    index: int
    name: str
    observed_at: datetime
    n_rows: int
    stats: dict[str, BatchStats]
    rows: BatchRows | None = None

    @property
    def n_labelled(self) -> int:
        """Labelled rows of this batch (the same for every calibrator).

        Remembered per statistics object (statistics are replaced, never changed in place): the
        status line reads it for every window batch after each call.
        """
        first = next(iter(self.stats.values()))
        known = self.__dict__.get("_n_labelled")
        if known is not None and known[0] is first:
            return int(known[1])
        n = first.n_labelled
        self.__dict__["_n_labelled"] = (first, n)
        return n


def merge_records(records: Sequence[BatchRecord]) -> BatchRecord:
    """Consecutive batches as one record: statistics pooled per calibrator, no raw rows.

    One record is returned as it is.

    Its ``index`` is the first batch's, its ``name`` spans the first and last names
    (``"512–515"``) and its ``observed_at`` is the last batch's. Statistics are counts, so the
    pooled record gives exactly the summaries of the rows of all its batches (rates are ratios of
    the summed counts). Used to draw long streams at a bounded number of points.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> from calwatch.kinds.sets import CalibratorBatchStats
    >>> def batch(i, covered):
    ...     stats = CalibratorBatchStats(np.array([0, 2, 0]), np.array([2, 0]), np.array([covered, 0]), 0.1)
    ...     return BatchRecord(i, str(i), datetime(2026, 1, 1, tzinfo=UTC), 2, {"lac": stats})
    >>> pooled = merge_records([batch(4, 2), batch(5, 1)])
    >>> pooled.index, pooled.name, pooled.n_rows, pooled.stats["lac"].n_covered, pooled.n_labelled
    (4, '4–5', 4, 3, 4)
    """
    if not records:
        raise ValueError("records must hold at least one batch record")
    first, last = records[0], records[-1]
    if len(records) == 1:
        return first
    n_rows = [r.n_rows for r in records]
    stats: dict[str, Any] = {}
    keys = dict.fromkeys(key for r in records for key in r.stats)  # a calibrator may miss batches
    for key in keys:
        parts = [r.stats[key] for r in records if key in r.stats]
        stats[key] = functools.reduce(lambda a, b: a.merge(b), parts)
    return BatchRecord(
        index=first.index,
        name=f"{first.name}–{last.name}",
        observed_at=last.observed_at,
        n_rows=sum(n_rows),
        stats=stats,
    )


@dataclass
class BatchRows:
    """Raw rows of a batch inside the window."""

    ids: list[Hashable]
    probs: npt.NDArray[np.float64]
    packed_sets: dict[str, npt.NDArray[np.uint8]]  # np.packbits of the (m, K) set matrix, axis 1
    labels: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    categories: npt.NDArray[Any] | None = None
    risks: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)  # per-row risk estimates
    # per Venn-ADMIT calibrator: y_hat, q, d, admitted, p_lower, p_upper (one value per row)
    admit: dict[str, dict[str, npt.NDArray[Any]]] = field(default_factory=dict)
    # per selective calibrator: the selector's score and whether the row was kept
    selective: dict[str, dict[str, npt.NDArray[Any]]] = field(default_factory=dict)
    # regression monitors: true values ("y", NaN until labelled) and per-calibrator row results
    regression: dict[str, Any] = field(default_factory=dict)
    # any other kind's per-row results: calibrator -> {name: one value per row}; snapshots keep
    # them without knowing the kind (rows.parquet columns ``extra_<i>_<name>``)
    extra: dict[str, dict[str, npt.NDArray[Any]]] = field(default_factory=dict)


class StreamState:
    """Batches of the whole stream, with an id index over the rows still in the window.

    Parameters
    ----------
    window : int
        Raw rows to keep. Whole batches are dropped, oldest first, once the window holds more
        than ``window`` rows; the newest batch is always kept.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.batches: list[BatchRecord] = []
        self._in_window: deque[BatchRecord] = deque()
        self._rows_in_window = 0
        self.id_index: dict[Hashable, tuple[int, int]] = {}
        self.rows_seen = 0
        self.rows_labelled = 0
        self.labels_unmatched = 0
        self.rows_expired = 0
        #: Called with the batches about to leave the window, rows still set (the row log's
        #: ``spill``); an error it raises (a full disk) is kept in ``spill_errors``, never raised.
        self.spill: Callable[[list[BatchRecord]], None] | None = None
        self.spill_errors: list[str] = []

    def __iter__(self) -> Iterator[BatchRecord]:
        return iter(self.batches)

    @property
    def rows_in_window(self) -> int:
        """Raw rows currently kept."""
        return self._rows_in_window

    @property
    def rows_pending(self) -> int:
        """Rows in the window that are still waiting for a label."""
        return sum(b.n_rows - b.n_labelled for b in self._in_window)

    def window_batches(self) -> list[BatchRecord]:
        """Batches whose raw rows are kept, oldest first."""
        return list(self._in_window)

    def first_known_id(self, ids: list[Hashable]) -> Hashable | None:
        """One of ``ids`` that is already in the window, or None."""
        if self.id_index.keys().isdisjoint(ids):
            return None
        return next(i for i in ids if i in self.id_index)

    def append(self, record: BatchRecord) -> list[int]:
        """Add a batch (with rows) and drop old raw rows past the window; return dropped indices."""
        assert record.rows is not None
        leaving: list[BatchRecord] = []
        rows_left = self._rows_in_window + record.n_rows
        for old in self._in_window:  # the new batch always stays
            if rows_left <= self.window:
                break
            leaving.append(old)
            rows_left -= old.n_rows
        if leaving and self.spill is not None:
            try:
                self.spill(leaving)
            except Exception as err:  # a full disk must not stop the stream: their labels go unmatched
                self.spill_errors.append(f"{type(err).__name__}: {err}")
        self.batches.append(record)
        self._in_window.append(record)
        self._rows_in_window += record.n_rows
        self.rows_seen += record.n_rows
        positions = zip(repeat(record.index), range(record.n_rows))
        self.id_index.update(zip(record.rows.ids, positions, strict=True))
        dropped = []
        for _ in leaving:
            old = self._in_window.popleft()
            assert old.rows is not None
            for row_id in old.rows.ids:
                del self.id_index[row_id]
            self._rows_in_window -= old.n_rows
            self.rows_expired += old.n_rows
            old.rows = None
            dropped.append(old.index)
        return dropped
