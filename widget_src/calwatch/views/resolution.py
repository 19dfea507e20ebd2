"""Display resolution: long streams drawn at a bounded number of points per chart.

A chart of every batch costs the browser work in proportion to the number of batches (each new
batch moves the x axis, so every mark is redrawn). Past :data:`MAX_POINTS` batches the per-batch
datasets are sent as *buckets* of ``width`` consecutive batches, ``width`` a power of two, with
statistics pooled exactly (:func:`calwatch.stream.records.merge_records`: counts are summed, rates are
ratios of the sums). A chart then holds between ``MAX_POINTS / 2`` and ``MAX_POINTS`` points
however long the stream runs; the width doubles (and the views are re-sent once) each time the
stream doubles in length.

A :class:`Resolution` is either the whole stream (buckets aligned to multiples of ``width``
from batch 0) or a brushed range ``[lo, hi]`` (buckets from ``lo``, at the width that range
needs), which is how brushing a range of the timeline zooms the other panels to single batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from calwatch.stream.records import BatchRecord, merge_records

#: Most points (buckets) per series drawn for a range of batches.
MAX_POINTS = 128


def bucket_width(n_batches: int, max_points: int | None = None) -> int:
    """The smallest power of two ``w`` with ``ceil(n_batches / w) <= max_points``.

    ``max_points`` defaults to :data:`MAX_POINTS` (read at each call).

    Examples
    --------
    >>> [bucket_width(n) for n in (0, 1, 128, 129, 256, 257, 1020, 10_000)]
    [1, 1, 1, 2, 2, 4, 8, 128]
    """
    if max_points is None:
        max_points = MAX_POINTS
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1; got {max_points}")
    width = 1
    while -(-n_batches // width) > max_points:
        width *= 2
    return width


@dataclass(frozen=True)
class Resolution:
    """How per-batch datasets are drawn: buckets of ``width`` batches from ``lo``, up to ``hi``.

    ``hi`` is the last batch of the range (inclusive) or None for "up to the latest batch".

    Examples
    --------
    >>> res = Resolution.of_range(100, 139)
    >>> res.width, res.start_of(105), res.end_of(100, latest=2000)
    (1, 105, 100)
    >>> whole = Resolution.whole(1020)
    >>> whole.width, whole.start_of(1019), whole.end_of(1016, latest=1019)
    (8, 1016, 1019)
    >>> whole.starts(range(1014, 1020), latest=1019)
    [1008, 1016]
    """

    width: int = 1
    lo: int = 0
    hi: int | None = None

    @classmethod
    def whole(cls, n_batches: int, max_points: int | None = None) -> Resolution:
        """Every batch of a stream of ``n_batches``, at most ``max_points`` buckets."""
        return cls(bucket_width(n_batches, max_points))

    @classmethod
    def of_range(cls, lo: int, hi: int, max_points: int | None = None) -> Resolution:
        """The batches ``lo..hi`` (inclusive), at most ``max_points`` buckets."""
        if lo > hi or lo < 0:
            raise ValueError(f"a batch range needs 0 <= lo <= hi; got ({lo}, {hi})")
        return cls(bucket_width(hi - lo + 1, max_points), lo, hi)

    def contains(self, batch: int) -> bool:
        """Whether ``batch`` is inside the range."""
        return batch >= self.lo and (self.hi is None or batch <= self.hi)

    def start_of(self, batch: int) -> int:
        """First batch of the bucket holding ``batch``."""
        return self.lo + (batch - self.lo) // self.width * self.width

    def end_of(self, start: int, *, latest: int) -> int:
        """Last batch of the bucket starting at ``start`` (clipped to the range and the stream)."""
        end = min(start + self.width - 1, latest)
        return end if self.hi is None else min(end, self.hi)

    def axis_end(self, start: int) -> int:
        """How far a chart's x axis reaches while the bucket starting at ``start`` is the latest.

        The axis reserves room for buckets to come, in steps of up to 8 buckets and never more
        than an eighth of those drawn, so that it moves once per several buckets instead of with
        each one: a move of the axis redraws every mark of every chart. Monotone in ``start``
        (the axis never shrinks as the stream grows) and clipped to the range's ``hi``.

        Examples
        --------
        >>> [Resolution(1).axis_end(b) for b in (0, 5, 15, 16, 17, 63, 64, 127)]
        [0, 5, 15, 17, 17, 63, 71, 127]
        >>> [Resolution(8).axis_end(b) for b in (960, 1016)], Resolution(16).axis_end(1024)
        ([1023, 1023], 1151)
        >>> Resolution.of_range(100, 139).axis_end(139)
        139
        """
        drawn = (start - self.lo) // self.width + 1  # buckets up to this one
        step = 1
        while step < 8 and 8 * 2 * step <= drawn:
            step *= 2
        end = self.lo + -(-drawn // step) * step * self.width - 1
        return end if self.hi is None else min(end, self.hi)

    def starts(self, batches: Iterable[int] | None, *, latest: int) -> list[int]:
        """Sorted starts of the buckets holding ``batches`` (None: every bucket up to ``latest``)."""
        if latest < self.lo:
            return []
        if batches is None:
            last = latest if self.hi is None else min(latest, self.hi)
            return list(range(self.lo, last + 1, self.width))
        inside = (b for b in batches if self.contains(b) and b <= latest)
        return sorted({self.start_of(b) for b in inside})


def bucket_records(
    batches: Sequence[BatchRecord], resolution: Resolution, touched: Iterable[int] | None = None
) -> list[tuple[BatchRecord, int]]:
    """Pooled records of the buckets holding ``touched`` (default all), with each bucket's last batch.

    ``batches`` is the stream's records in index order (``batches[i].index == i``).
    """
    latest = len(batches) - 1
    out = []
    for start in resolution.starts(touched, latest=latest):
        end = resolution.end_of(start, latest=latest)
        out.append((merge_records(batches[start : end + 1]), end))
    return out
