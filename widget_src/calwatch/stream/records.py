"""The monitor's stream state: per-batch statistics for the whole stream, raw rows for a window.

Statistics are counts (mergeable, O(K) per batch and calibrator); raw rows (ids, probabilities,
prediction sets as packed bits, labels) are kept only for the most recent ``window`` rows, so
memory stays flat however long the stream runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from itertools import repeat
from typing import Any, Protocol, Self, overload

import numpy as np
import numpy.typing as npt

from calwatch.core.paged import grown
from calwatch.stream.columns import StatsColumns

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
    # each row's code in each slice column, (m, columns) int16 (:mod:`calwatch.stream.slices`), for
    # monitors calibrated with ``meta=``: a late label counts its row in the row's slices
    slice_codes: npt.NDArray[np.int16] | None = None


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
        self.batches = RecordStore()
        self._in_window: deque[BatchRecord] = deque()
        self._rows_in_window = 0
        self.id_index: dict[Hashable, tuple[int, int]] = {}
        self.rows_seen = 0
        self.rows_labelled = 0
        self.labels_unmatched = 0
        #: Labels skipped by ``label(..., outside_classes="skip")``: not one of the classes.
        self.labels_outside_classes = 0
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
        with contextlib.suppress(MemoryError):  # settling saves memory; a batch it cannot settle stays
            self.batches.settle()
        return dropped


# --------------------------------------------------------------------------- settled records
#: Batches kept as objects behind the newest, beyond the window: labels and re-tuning touch
#: recent batches, and the live widget's running merges read them.
HOT_BATCHES = 256
SETTLE_CHUNK = 64
_NAIVE_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


class _SettledRecord(BatchRecord):
    """A settled batch read back from a :class:`RecordStore`'s columns.

    Equal to the record that was settled. A copy: new statistics for it go through
    :meth:`RecordStore.set_stats`, which writes the columns.
    """

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchRecord):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(BatchRecord))

    __hash__ = None  # type: ignore[assignment]


class RecordStore(Sequence[BatchRecord]):
    """The stream's batch records, oldest first: settled ones as columns, recent ones as objects.

    A batch record is a few hundred bytes of Python objects per calibrator (a dataclass of numpy
    arrays), kept for the whole stream. Once a batch has left the window and is more than
    :data:`HOT_BATCHES` batches old, :meth:`settle` moves it into columns (``n_rows``, the time
    observed, the name when it is not the index, and the statistics in a
    :class:`~calwatch.stream.columns.StatsColumns`), in chunks, so an append costs amortised
    O(1). Reading a settled batch builds a new record equal to the one settled.

    It reads like the list it replaces (``len``, indices, negative indices, slices, iteration).
    Readers on other threads see a consistent store: the settled count and the list of recent
    records are swapped together.
    """

    def __init__(self, records: Iterable[BatchRecord] = ()) -> None:
        self._state: tuple[int, list[BatchRecord]] = (0, list(records))
        self._stats = StatsColumns()
        self._n_rows = np.empty(SETTLE_CHUNK, dtype=np.int64)
        self._wall_us = np.empty(SETTLE_CHUNK, dtype=np.int64)  # local wall time, µs from 1970
        self._tz_code = np.empty(SETTLE_CHUNK, dtype=np.int16)
        self._zones: list[tzinfo | None] = []
        self._odd_names: dict[int, str] = {}
        self._odd_times: dict[int, datetime] = {}
        self._generation = np.zeros(SETTLE_CHUNK, dtype=np.int64)  # settled stats replaced, per batch

    def __len__(self) -> int:
        n, hot = self._state
        return n + len(hot)

    @overload
    def __getitem__(self, i: int) -> BatchRecord: ...

    @overload
    def __getitem__(self, i: slice) -> list[BatchRecord]: ...

    def __getitem__(self, i: int | slice) -> BatchRecord | list[BatchRecord]:
        n, hot = self._state
        if isinstance(i, slice):
            return [self._at(j, n, hot) for j in range(*i.indices(n + len(hot)))]
        j = int(i)
        if j < 0:
            j += n + len(hot)
            if j < 0:
                raise IndexError("batch index out of range")
        return self._at(j, n, hot)

    def __iter__(self) -> Iterator[BatchRecord]:
        n, hot = self._state
        for i in range(n):
            yield self._settled(i)
        yield from hot

    def __repr__(self) -> str:
        n, hot = self._state
        return f"RecordStore({n} settled, {len(hot)} recent)"

    def _at(self, i: int, n: int, hot: list[BatchRecord]) -> BatchRecord:
        return hot[i - n] if i >= n else self._settled(i)

    def append(self, record: BatchRecord) -> None:
        """Add the next batch's record."""
        self._state[1].append(record)

    def set_stats(self, record: BatchRecord, stats: dict[str, Any]) -> None:
        """Replace a batch's statistics (late labels, re-tuning): its record's, and its columns once settled.

        Statistics are replaced, never changed in place. A settled batch's record is a copy read
        from the columns, so the columns are written too; there is no write-through on assignment.
        """
        record.stats = stats
        n, _ = self._state
        if record.index < n:
            self.put_stats(record.index, stats)

    def extend(self, records: Iterable[BatchRecord]) -> None:
        """Add the next batches' records."""
        self._state[1].extend(records)

    @property
    def n_settled(self) -> int:
        """Batches kept as columns."""
        return self._state[0]

    def tokens(self) -> list[object]:
        """What identifies each batch's statistics now, in batch order (for :mod:`calwatch.core.frame_cache`).

        A settled batch's token is how many times its statistics were replaced since it settled
        (an int); a recent batch's is its statistics dict (replaced, never changed in place) and
        whether its raw rows are in the window. A token changes whenever the batch's reads can.
        """
        n, hot = self._state
        return [*self._generation[:n].tolist(), *((r.stats, r.rows is not None) for r in hot)]

    def settle(self, keep: int | None = None) -> int:
        """Move the oldest recent records that left the window into columns; return how many.

        Only when ``keep + 64`` recent records are held (a chunk at a time), and only records
        without raw rows, at their own index, whose statistics are dataclasses.
        """
        keep = HOT_BATCHES if keep is None else keep
        n, hot = self._state
        if len(hot) < keep + SETTLE_CHUNK:
            return 0
        k = 0
        while k < len(hot) - keep and _settles(hot[k], n + k):
            self._put(n + k, hot[k])
            k += 1
        if k:
            self._state = (n + k, hot[k:])
        return k

    def _put(self, i: int, record: BatchRecord) -> None:
        self._n_rows = grown(self._n_rows, i + 1)
        self._wall_us = grown(self._wall_us, i + 1)
        self._tz_code = grown(self._tz_code, i + 1)
        self._generation = grown(self._generation, i + 1)
        self._generation[i] = 0
        self._n_rows[i] = record.n_rows
        if record.name != str(i):
            self._odd_names[i] = record.name
        at = record.observed_at
        if type(at) is datetime and not at.fold and len(self._zones) < 2**15:
            zone = at.tzinfo
            code = next((c for c, z in enumerate(self._zones) if z is zone), None)  # kept as it was
            if code is None:
                code = len(self._zones)
                self._zones.append(zone)
            self._tz_code[i] = code
            self._wall_us[i] = (at.replace(tzinfo=None) - _NAIVE_EPOCH) // _MICROSECOND
        else:
            self._odd_times[i] = at
        self._stats.put(i, record.stats)

    def put_stats(self, i: int, stats: dict[str, Any]) -> None:
        """Replace settled batch ``i``'s statistics in the columns (see :meth:`set_stats`)."""
        self._stats.put(i, stats)
        self._generation[i] += 1

    def _settled(self, i: int) -> BatchRecord:
        observed = self._odd_times.get(i)
        if observed is None:
            wall = _NAIVE_EPOCH + timedelta(microseconds=int(self._wall_us[i]))
            observed = wall.replace(tzinfo=self._zones[int(self._tz_code[i])])
        record = _SettledRecord.__new__(_SettledRecord)  # its fields set as __init__ would
        record.__dict__.update(
            index=i,
            name=self._odd_names.get(i, str(i)),
            observed_at=observed,
            n_rows=int(self._n_rows[i]),
            stats=self._stats.get(i),
            rows=None,
        )
        return record


def _settles(record: BatchRecord, i: int) -> bool:
    """Whether ``record`` can be kept as columns at index ``i`` and read back equal."""
    return (
        record.rows is None
        and type(record) is BatchRecord
        and record.index == i
        and isinstance(record.n_rows, int)
        and all(dataclasses.is_dataclass(s) for s in record.stats.values())
    )
