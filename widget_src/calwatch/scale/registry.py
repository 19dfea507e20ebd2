"""What a monitor remembers of the tables it observed: where their rows live, and the labels applied.

Late labels for table rows are joined to the table itself (the prediction log is the row log:
its rows never have to fit in memory), so the monitor keeps, per observed table, the source to
read again, its columns and which batch each bucket became. A relabel must take the row's
previous label out of the counts, so the labels applied so far are kept in a :class:`LabelLog`:
parquet parts on disk (one per labelling call), looked up by a join on the new labels' ids, so
memory stays bounded by one call's labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from calwatch.row_log import BUCKET, ID, LABEL, SEQ, LabelLog
from calwatch.scale.columns import LogColumns


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
