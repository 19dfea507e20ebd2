"""What a monitor remembers of the tables it observed: where their rows live, and the labels applied.

Late labels for table rows are joined to the table itself (the prediction log is the row log:
its rows never have to fit in memory), so the monitor keeps, per observed table, the source to
read again, its columns and which batch each bucket became. A relabel must take the row's
previous label out of the counts, so the labels applied so far are kept in a :class:`LabelLog`:
parquet parts on disk (one per labelling call), looked up by a join on the new labels' ids, so
memory stays bounded by one call's labels.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from calwatch.row_log import BUCKET, ID, LABEL, SEQ, LabelLog, check_file, file_sha256, link_or_copy
from calwatch.scale.columns import LogColumns
from calwatch.state_codec import SnapshotError


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
    #: The parquet path or glob it was read from, when it was one: a snapshot keeps it, so a
    #: loaded monitor joins late labels to the same files.
    location: str | None = None


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


def save_registry(registry: TableRegistry, folder: Path) -> None:
    """The registry into a snapshot's ``tables/``: an index, each source's buckets, its label log's parts.

    Sources read from parquet paths are kept whole; sources that were in-memory frames or
    cluster DataFrames keep their batches and labels but cannot be read again after a load
    (``label_table`` says so).
    """
    folder.mkdir()
    entries = []
    for i, source in enumerate(registry.sources):
        buckets = pl.DataFrame({"bucket": list(source.batches), "batch": list(source.batches.values())})
        buckets.write_parquet(folder / f"buckets-{i}.parquet")
        parts = []
        for part in source.labels.parts:
            name = f"labels-{i}-{part.name}"
            try:
                os.link(part, folder / name)
            except OSError:
                shutil.copyfile(part, folder / name)
            parts.append({"file": name, "sha256": file_sha256(folder / name)})
        entries.append({
            "engine": source.engine, "location": source.location, "columns": asdict(source.columns),
            "rows": source.rows, "buckets": f"buckets-{i}.parquet",
            "buckets_sha256": file_sha256(folder / f"buckets-{i}.parquet"), "labels": parts,
        })  # fmt: skip
    (folder / "index.json").write_text(json.dumps({"sources": entries}), encoding="utf-8")


def load_registry(folder: Path, index: dict[str, Any]) -> TableRegistry:
    """The registry a snapshot's ``tables/`` holds (label parts linked into a fresh log).

    Raises
    ------
    SnapshotError
        If a file is missing, altered, or the index is malformed.
    """
    registry = TableRegistry()
    try:
        for entry in index["sources"]:
            columns = dict(entry["columns"])
            if isinstance(columns["probs"], list):
                columns["probs"] = tuple(columns["probs"])
            buckets_file = folder / str(entry["buckets"])
            check_file(buckets_file, str(entry["buckets_sha256"]))
            buckets = pl.read_parquet(buckets_file)
            location = entry["location"]
            source = TableSource(
                engine=str(entry["engine"]),
                source=None if location is None else pl.scan_parquet(str(location)),
                columns=LogColumns(**columns),
                batches=dict(zip(buckets["bucket"].to_list(), buckets["batch"].to_list(), strict=True)),
                rows=int(entry["rows"]),
                location=None if location is None else str(location),
            )
            for part in entry["labels"]:
                file = folder / str(part["file"])
                check_file(file, str(part["sha256"]))
                target = source.labels.folder / file.name
                link_or_copy(file, target)
                source.labels.parts.append(target)
            registry.sources.append(source)
    except (KeyError, TypeError, ValueError) as err:
        msg = f"tables/index.json is malformed: {err}"
        raise SnapshotError(msg) from err
    return registry


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
