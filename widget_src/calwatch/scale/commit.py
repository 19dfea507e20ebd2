"""Merge reduced table statistics into a monitor: compute every new record first, then commit.

Called with the monitor's lock held (from its guarded methods, or through ``with mon.lock``):
a reader never sees half of a table's buckets, and a call that raises changes nothing. A monitor
that slices (``calibrate(meta=)``) takes each bucket's slice counts in the same commit: an
observed bucket's as the next epoch of its :class:`~calwatch.stream.slice_counts.SliceStore`
(:meth:`~calwatch.stream.slice_counts.SliceStore.append`), a label call's added to the epoch
holding the bucket's batch, as ``observe(meta=)`` and ``label`` do in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from calwatch.scale.bucket_watch import record_looks, watch_of
from calwatch.scale.reduce import BucketStatistics
from calwatch.scale.registry import TableSource, registry_of
from calwatch.scale.slice_partials import check_bucket_counts
from calwatch.stream.records import BatchRecord, BatchStats
from calwatch.stream.slice_counts import CountArray, SliceCounts, SliceStore


def commit_observed(
    monitor: Any, buckets: Sequence[BucketStatistics], source: TableSource
) -> tuple[int, ...]:
    """Append one batch per bucket (in the given, sorted, order) and register the table.

    The batches keep statistics only (their rows stay in the table, which late labels are joined
    to). A monitor that slices appends each bucket's slice counts to its slice store, one epoch
    per new batch. Returns the new batch indices.

    Raises
    ------
    ValueError
        If no bucket holds rows, a bucket's statistics break their invariants, or the buckets'
        slice counts do not fit the monitor (missing for a monitor that slices, present for one
        that does not, not counting every row in every slice table).
    """
    if not buckets or not any(b.n_rows for b in buckets):
        msg = "the table has no rows: nothing to observe"
        raise ValueError(msg)
    stream = monitor._stream
    first = len(stream.batches)
    store = _slices_for(monitor, buckets, first)
    now = datetime.now(UTC)
    records = []
    for i, bucket in enumerate(buckets):
        record = BatchRecord(index=first + i, name=str(bucket.bucket), observed_at=now, n_rows=bucket.n_rows,
                             stats=dict(bucket.stats))  # fmt: skip
        _check(record, f"bucket {bucket.bucket!r}")
        records.append(record)
    watch = watch_of(monitor)
    looks = [] if watch is None else watch.observed(monitor, records, buckets)
    # Everything is computed: commit.
    stream.batches.extend(records)
    if store is not None:
        for bucket, record in zip(buckets, records, strict=True):
            assert bucket.slices is not None  # checked by _slices_for
            store.append(record.index, bucket.slices)
    stream.rows_seen += sum(r.n_rows for r in records)
    stream.rows_labelled += sum(b.n_new_labels for b in buckets)
    source.batches.update({b.bucket: r.index for b, r in zip(buckets, records, strict=True)})
    source.rows += sum(r.n_rows for r in records)
    registry = registry_of(monitor)
    if not any(s is source for s in registry.sources):
        registry.sources.append(source)
    if watch is not None:
        record_looks(monitor, watch, looks)
    indices = tuple(r.index for r in records)
    monitor._notify(indices)
    return indices


def commit_labels(
    monitor: Any, deltas: Sequence[tuple[TableSource, BucketStatistics]], *, unmatched: int
) -> tuple[int, ...]:
    """Merge each bucket's label statistics into its batch; count labels that matched no row.

    A label delta's slice counts (for a monitor that slices) are added to the epoch holding its
    batch, as :meth:`~calwatch.stream.slice_counts.SliceStore.add` does for in-memory labels.
    Returns the batches whose statistics changed.

    Raises
    ------
    ValueError
        If a merged batch, or an epoch's merged slice counts, would break their invariants.
    """
    stream = monitor._stream
    updates: list[tuple[BatchRecord, dict[str, BatchStats]]] = []
    for source, delta in deltas:
        record = stream.batches[source.batches[delta.bucket]]
        merged = {key: (stats.merge(delta.stats[key]) if key in delta.stats else stats)
                  for key, stats in record.stats.items()}  # fmt: skip
        probe = BatchRecord(record.index, record.name, record.observed_at, record.n_rows, merged)
        _check(probe, f"bucket {delta.bucket!r}")
        updates.append((record, merged))
    epochs = _labelled_epochs(monitor._slices, deltas)
    watch = watch_of(monitor)
    looks = [] if watch is None else watch.labelled(monitor, updates)
    # Everything is computed: commit.
    for record, merged in updates:
        stream.batches.set_stats(record, merged)
    if epochs:
        assert monitor._slices is not None
        for epoch, counts in epochs.items():
            monitor._slices.epochs[epoch] = counts
    if watch is not None:
        record_looks(monitor, watch, looks)
    stream.rows_labelled += sum(d.n_new_labels for _, d in deltas)
    stream.labels_unmatched += int(unmatched)
    touched = tuple(sorted({r.index for r, _ in updates}))
    monitor._notify(touched)
    return touched


def _slices_for(monitor: Any, buckets: Sequence[BucketStatistics], first: int) -> SliceStore | None:
    """The monitor's slice store, after checking the buckets' slice counts fit it (None: no slices)."""
    store: SliceStore | None = getattr(monitor, "_slices", None)
    if store is None:
        if any(b.slices is not None for b in buckets):
            msg = "the table's buckets carry slice counts, but this monitor keeps no slices"
            raise ValueError(msg)
        return None
    if store.n_batches != first:
        msg = "the slice counts do not cover every batch of this monitor; slices cannot go on"
        raise ValueError(msg)
    shape = (2 + 2 * len(store.calibrators), store.encoding.n_cells)
    for bucket in buckets:
        if bucket.slices is None:
            msg = (
                f"bucket {bucket.bucket!r} has no slice counts, but this monitor slices its batches by "
                f"{list(store.encoding.names)}: pass them as meta={list(store.encoding.names)}"
            )
            raise ValueError(msg)
        if bucket.slices.calibrators != store.calibrators or bucket.slices.counts.shape != shape:
            msg = f"bucket {bucket.bucket!r}: its slice counts are not of this monitor's cells or calibrators"
            raise ValueError(msg)
        problems = check_bucket_counts(bucket.slices, store, bucket.n_rows)
        if problems:
            msg = f"bucket {bucket.bucket!r}: the slice counts are inconsistent: {'; '.join(problems)}"
            raise ValueError(msg)
    return store


def _labelled_epochs(
    store: SliceStore | None, deltas: Sequence[tuple[TableSource, BucketStatistics]]
) -> dict[int, CountArray]:
    """Each touched epoch's slice counts with the labels' counts added (checked; nothing is changed)."""
    merged: dict[int, SliceCounts] = {}
    for source, delta in deltas:
        if delta.slices is None:
            continue
        if store is None:
            msg = "the labels carry slice counts, but this monitor keeps no slices"
            raise ValueError(msg)
        epoch = store.epoch_of(source.batches[delta.bucket])
        current = merged[epoch] if epoch in merged else SliceCounts(store.calibrators, store.epochs[epoch])
        merged[epoch] = current.merge(delta.slices)
    for epoch, counts in merged.items():
        problems = counts.check()
        if problems:
            msg = (
                f"the slice counts of batches from {store.starts[epoch] if store else epoch} would be "
                f"inconsistent: {'; '.join(problems)}"
            )
            raise ValueError(msg)
    return {epoch: counts.counts for epoch, counts in merged.items()}


def _check(record: BatchRecord, what: str) -> None:
    for key, stats in record.stats.items():
        problems = stats.check(record.n_rows)
        if problems:
            msg = f"{what}, calibrator {key!r}: the merged statistics are inconsistent: {'; '.join(problems)}"
            raise ValueError(msg)
    counts = {int(s.n_labelled) for s in record.stats.values()}
    if len(counts) > 1:
        msg = f"{what}: calibrators disagree on the labelled rows ({sorted(counts)})"
        raise ValueError(msg)


__all__ = ["commit_labels", "commit_observed"]
