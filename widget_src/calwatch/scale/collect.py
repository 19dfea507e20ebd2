"""The driver's half of a cluster adapter: reduced partials in, monitor updated, all or nothing.

Spark and Dask reduce the kernel's partial statistics with their own group-by and hand the
small result (buckets × calibrators × fields rows) to the driver as a polars frame; the
functions here rebuild each bucket's statistics and commit them under the monitor's lock, as
:mod:`calwatch.scale.table` does for the one-machine path, with the same checks and counts:

* observe: one batch per bucket, refused whole if a bucket breaks an invariant or the
  calibrators changed while the cluster computed;
* label: each source's label statistics merged into the batches they touch, the rows labelled
  staged in each source's label log and committed only with the monitor's counts (so a failed
  call leaves both as they were); ``matched`` counts distinct label ids that met a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa

from calwatch.core.ids import arrow_id_kind, check_id_kind
from calwatch.monitor.labels import LabelReport
from calwatch.scale.commit import commit_labels, commit_observed
from calwatch.scale.duplicates import repeated_id
from calwatch.scale.frozen import FrozenMonitor, freeze
from calwatch.scale.reduce import BucketStatistics, bucket_statistics
from calwatch.scale.registry import ID, TableSource, registry_of
from calwatch.scale.table import check_label_facts, distinct_matches, same_calibrators


@dataclass(frozen=True)
class Snapshot:
    """What a cluster call takes from the monitor under its lock: frozen calibrators and their identity."""

    frozen: FrozenMonitor
    calibrators: dict[str, Any]


def snapshot(monitor: Any) -> Snapshot:
    """Freeze the monitor's calibrators (under its lock); raises as :func:`~calwatch.scale.frozen.freeze`."""
    with monitor.lock:
        return Snapshot(freeze(monitor), dict(monitor._calibrators))


def engine_sources(monitor: Any, engine: str) -> list[TableSource]:
    """The DataFrames of one engine the monitor observed.

    Raises ``ValueError`` when there are none, or when some came from a snapshot (which keeps
    their statistics but cannot keep a cluster DataFrame).
    """
    with monitor.lock:
        sources = [s for s in registry_of(monitor).sources if s.engine == engine]
    gone = [s for s in sources if s.source is None]
    if gone:
        msg = (
            f"{len(gone)} {engine} DataFrame(s) were observed before this monitor was saved and loaded: a "
            "snapshot keeps their batches and labels but not the DataFrames, so their rows cannot take labels"
        )
        raise ValueError(msg)
    if not sources:
        msg = (
            f"calwatch.{engine}.label joins labels to DataFrames observed with calwatch.{engine}.observe, "
            "and none was observed: use label() for rows observed in memory"
        )
        raise ValueError(msg)
    return sources


def check_names(present: Sequence[str], names: Sequence[str], what: str) -> None:
    """Raise ``ValueError`` naming the first of ``names`` missing from ``present``."""
    for name in names:
        if name not in present:
            msg = f"column {name!r} is not in {what}; it has {list(present)[:20]}"
            raise ValueError(msg)


def unjoinable(column: str, theirs: str, kept: str) -> ValueError:
    """The error for label ids of type ``theirs`` that cannot join an observed id column of type ``kept``."""
    msg = (
        f"id: the labels' ids cannot be joined to column {column!r} of the observed table (the labels' "
        f"ids are {theirs}, the table's {kept})"
    )
    return ValueError(msg)


def check_ids_of(monitor: Any, schema: pa.Schema, column: str) -> str:
    """The kind of ids ``column`` holds, after refusing another kind than the monitor's (naming both).

    Called before anything is computed; :func:`commit_observed_partials` checks again under the
    monitor's lock (another call may have fixed the kind meanwhile).
    """
    kind = arrow_id_kind(schema.field(column).type)
    check_id_kind(monitor._id_kind, kind, f"id column {column!r}", auto_ids=monitor._next_auto_id > 0)
    return kind


def commit_observed_partials(
    monitor: Any, snap: Snapshot, reduced: pl.DataFrame, source: TableSource, id_kind: str
) -> tuple[int, ...]:
    """One batch per bucket of the reduced partials, committed under the lock (fixing the id kind)."""
    if reduced.height == 0:
        msg = "the DataFrame has no rows: nothing to observe"
        raise ValueError(msg)
    buckets = bucket_statistics(reduced, snap.frozen, observed=True)
    with monitor.lock:
        same_calibrators(monitor, snap.calibrators)
        check_id_kind(monitor._id_kind, id_kind, f"id column {source.columns.id!r}")
        indices = commit_observed(monitor, buckets, source)
        monitor._id_kind = monitor._id_kind or id_kind
        return indices


@dataclass
class LabelCall:
    """One label call's work across sources: reduced label partials and the rows they labelled."""

    snap: Snapshot
    count: int
    deltas: list[tuple[TableSource, BucketStatistics]]
    matched_ids: list[pl.Series]
    staged: list[TableSource]

    @classmethod
    def start(cls, snap: Snapshot, count: int) -> LabelCall:
        """A call with ``count`` labels (distinct ids) and nothing computed yet."""
        return cls(snap, count, [], [], [])

    def add(self, source: TableSource, reduced: pl.DataFrame, rows: pl.DataFrame) -> None:
        """A source's reduced label partials and its labelled rows ``(ID, BUCKET, LABEL)`` (staged)."""
        self.staged.append(source)
        source.labels.stage(rows)
        self.matched_ids.append(rows.get_column(ID))
        if reduced.height:
            self.deltas += [(source, d) for d in bucket_statistics(reduced, self.snap.frozen, observed=False)]

    def commit(self, monitor: Any) -> LabelReport:
        """Merge every source's statistics and label log, or none (the staged logs are discarded)."""
        try:
            matched = distinct_matches(self.matched_ids)
            unmatched = self.count - matched
            relabelled = sum(d.n_relabelled for _, d in self.deltas)
            with monitor.lock:
                same_calibrators(monitor, self.snap.calibrators)
                touched = commit_labels(monitor, self.deltas, unmatched=unmatched)
                for source in self.staged:
                    source.labels.commit()
        except BaseException:
            self.discard()
            raise
        return LabelReport(matched, unmatched, relabelled, touched)

    def discard(self) -> None:
        """Drop what was staged (the call failed)."""
        for source in self.staged:
            source.labels.discard()


__all__ = [
    "LabelCall",
    "Snapshot",
    "check_ids_of",
    "check_label_facts",
    "check_names",
    "commit_observed_partials",
    "engine_sources",
    "repeated_id",
    "snapshot",
    "unjoinable",
]
