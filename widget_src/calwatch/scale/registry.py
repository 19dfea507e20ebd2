"""What a monitor remembers of the tables it observed: where their rows live, and the labels applied.

Late labels for table rows are joined to the table itself (the prediction log is the row log:
its rows never have to fit in memory), so the monitor keeps, per observed table, the source to
read again, its columns and which batch each bucket became. A relabel must take the row's
previous label out of the counts, so the labels applied so far are kept in a :class:`LabelLog`:
parquet parts on disk (one per labelling call), looked up by a join on the new labels' ids, so
memory stays bounded by one call's labels.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from calwatch.scale.columns import LogColumns

#: Column names of the label log (prefixed so they never clash with a log's own columns).
ID, BUCKET, LABEL, SEQ = "__cw_id", "__cw_bucket", "__cw_label", "__cw_seq"


@dataclass
class TableSource:
    """One observed table.

    Attributes
    ----------
    engine : str
        ``"polars"`` (parquet paths, polars and pyarrow sources), ``"spark"`` or ``"dask"``.
    source : object
        What to read again when labels come: a polars ``LazyFrame``, a Spark or Dask DataFrame.
    columns : LogColumns
        Its columns.
    batches : dict
        Bucket value -> the monitor's batch index.
    rows : int
        Rows observed from it.
    """

    engine: str
    source: Any
    columns: LogColumns
    batches: dict[Any, int] = field(default_factory=dict)
    rows: int = 0
    labels: LabelLog = field(default_factory=lambda: LabelLog())


class LabelLog:
    """The labels applied to one table's rows so far, on disk, keyed by (id, bucket).

    Each call that labels rows stages its ``(id, bucket, label)`` parts while it computes, and
    commits them once the monitor has taken its statistics (or discards them if it failed), so
    the log always agrees with the monitor's counts. :meth:`previous` gives the last label of
    rows about to be labelled again.
    """

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="calwatch-labels-"))
        self._parts: list[Path] = []
        self._staged: list[Path] = []
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.folder), True)

    def previous(self, ids: pl.LazyFrame) -> pl.LazyFrame | None:
        """``(ID, BUCKET, LABEL)``: the last label of each labelled row whose id is in ``ids``'s ``ID``.

        None while nothing was labelled.
        """
        if not self._parts:
            return None
        log = pl.scan_parquet([str(p) for p in self._parts])
        known = log.join(ids.select(ID), on=ID, how="semi")
        return known.group_by([ID, BUCKET]).agg(pl.col(LABEL).sort_by(SEQ).last())

    def stage(self, rows: pl.DataFrame) -> None:
        """Write labelled rows ``(ID, BUCKET, LABEL)`` as a staged part (in the log after :meth:`commit`)."""
        if rows.height == 0:
            return
        staged = self.folder / f".staged-{uuid.uuid4().hex[:8]}.parquet"
        rows.select(ID, BUCKET, LABEL).with_columns(
            pl.lit(len(self._parts), pl.Int64).alias(SEQ)
        ).write_parquet(staged)
        self._staged.append(staged)

    def commit(self) -> None:
        """Make the staged parts part of the log (one labelling call, one sequence number)."""
        for staged in self._staged:
            part = self.folder / f"part-{len(self._parts):06d}-{staged.stem.rsplit('-', 1)[-1]}.parquet"
            staged.replace(part)
            self._parts.append(part)
        self._staged = []

    def discard(self) -> None:
        """Drop the staged parts (their call failed)."""
        for staged in self._staged:
            staged.unlink(missing_ok=True)
        self._staged = []


@dataclass
class TableRegistry:
    """The tables a monitor observed."""

    sources: list[TableSource] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Rows observed from tables."""
        return sum(s.rows for s in self.sources)

    def describe(self) -> str:
        """One line for the status: e.g. ``"spark: 1,204,331,000 rows, 365 buckets"``."""
        by_engine: dict[str, list[int]] = {}
        for source in self.sources:
            counts = by_engine.setdefault(source.engine, [0, 0])
            counts[0] += source.rows
            counts[1] += len(source.batches)
        return "; ".join(
            f"{engine}: {rows:,} rows, {buckets:,} buckets" for engine, (rows, buckets) in by_engine.items()
        )


def registry_of(monitor: Any) -> TableRegistry:
    """The monitor's table registry, created on first use (also for monitors loaded from snapshots)."""
    found: TableRegistry = monitor.__dict__.get("_tables") or monitor.__dict__.setdefault(
        "_tables", TableRegistry()
    )
    return found


__all__ = [
    "BUCKET",
    "ID",
    "LABEL",
    "SEQ",
    "LabelLog",
    "LogColumns",
    "TableRegistry",
    "TableSource",
    "registry_of",
]
