"""Merge reduced table statistics into a monitor: compute every new record first, then commit.

Called with the monitor's lock held (from its guarded methods, or through ``with mon.lock``):
a reader never sees half of a table's buckets, and a call that raises changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from calwatch.scale.bucket_watch import record_looks, watch_of
from calwatch.scale.reduce import BucketStatistics
from calwatch.scale.registry import TableSource, registry_of
from calwatch.stream.records import BatchRecord, BatchStats


def commit_observed(
    monitor: Any, buckets: Sequence[BucketStatistics], source: TableSource
) -> tuple[int, ...]:
    """Append one batch per bucket (in the given, sorted, order) and register the table.

    The batches keep statistics only (their rows stay in the table, which late labels are joined
    to). Returns the new batch indices.

    Raises
    ------
    ValueError
        If no bucket holds rows, or a bucket's statistics break their invariants.
    """
    if not buckets or not any(b.n_rows for b in buckets):
        msg = "the table has no rows: nothing to observe"
        raise ValueError(msg)
    refuse_slices(monitor)
    stream = monitor._stream
    first = len(stream.batches)
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

    Returns the batches whose statistics changed.
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
    watch = watch_of(monitor)
    looks = [] if watch is None else watch.labelled(monitor, updates)
    # Everything is computed: commit.
    for record, merged in updates:
        stream.batches.set_stats(record, merged)
    if watch is not None:
        record_looks(monitor, watch, looks)
    stream.rows_labelled += sum(d.n_new_labels for _, d in deltas)
    stream.labels_unmatched += int(unmatched)
    touched = tuple(sorted({r.index for r, _ in updates}))
    monitor._notify(touched)
    return touched


def refuse_slices(monitor: Any) -> None:
    """Refuse a table for a monitor that slices its batches (``calibrate(meta=)``): not counted yet.

    Raises
    ------
    ValueError
        If the monitor keeps slice counts, which table batches (observe_table, Spark, Dask) would
        leave out.
    """
    if getattr(monitor, "_slices", None) is not None:
        msg = (
            "this monitor slices its batches by meta columns, which tables (observe_table, Spark, Dask) "
            "do not carry yet: observe the table's rows with observe(meta=...), or use a monitor "
            "without slices"
        )
        raise ValueError(msg)


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


__all__ = ["commit_labels", "commit_observed", "refuse_slices"]
