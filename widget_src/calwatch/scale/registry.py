"""What a monitor remembers of the tables it observed: where their rows live, and the labels applied.

Late labels for table rows are joined to the rows the monitor observed, never to whatever a
source holds later:

* a parquet path, folder or glob is its own row log (its rows never have to fit in memory):
  the monitor keeps the list of files it read, each *pinned* (:mod:`calwatch.scale.pins`), and
  reads exactly those files again, after checking their pins; a file that changed is refused
  and a file that landed in the folder later is never read;
* any other table (a polars or pyarrow table, a lazy query) is copied, its log columns only, to
  a parquet file of the monitor's own as it is read; labels are joined to that copy, and a
  snapshot carries it, so the rows take labels after ``save``/``load`` as well.

So the monitor keeps, per observed table, those files, its columns and which batch each bucket
became. A relabel must take the row's
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

from calwatch.core.codec import SnapshotError
from calwatch.scale.columns import LogColumns
from calwatch.scale.pins import FilePin, check_pins
from calwatch.stream.row_log import (
    BUCKET,
    ID,
    LABEL,
    SEQ,
    LabelLog,
    check_file,
    file_sha256,
    inside,
    link_or_copy,
)


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
        Its columns, the slice columns (``meta``) among them: a label join reads them again from
        the observed rows, to count each label in its row's slices.
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
    #: The parquet path or glob it was read from, when it was one (shown, never read again).
    location: str | None = None
    #: The parquet files its rows are read from when labels come, each as it was observed: the
    #: user's files for a parquet source, the monitor's own copy for any other polars table.
    pins: tuple[FilePin, ...] = ()
    #: The files among ``pins`` the monitor wrote (its copy of an in-memory table's rows).
    copies: tuple[Path, ...] = ()

    def readable(self) -> pl.LazyFrame:
        """The observed rows (polars sources), after checking every pinned file is as observed.

        Raises
        ------
        ChangedSourceError
            Naming the first file that changed since it was observed, and how.
        ValueError
            For a table a snapshot could not keep (saved before pins existed).
        """
        if not self.pins:
            msg = (
                f"the table observed from {self.location or 'a frame'} was saved by a calwatch that did "
                "not pin its files: its rows cannot be checked, so they take no labels; observe it again"
            )
            raise ValueError(msg)
        check_pins(self.pins, "since it was observed")
        return pl.scan_parquet([pin.path for pin in self.pins])


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
    """The registry into a snapshot's ``tables/``: an index, each source's buckets, label parts, copies.

    A parquet source keeps its pins (the user's files stay where they are); a copy of an
    in-memory table's rows travels in the snapshot, like the label parts. Cluster DataFrames
    keep their batches and labels but cannot be read again after a load (their label call says so).
    """
    folder.mkdir()
    entries = []
    for i, source in enumerate(registry.sources):
        buckets = pl.DataFrame({"bucket": list(source.batches), "batch": list(source.batches.values())})
        buckets.write_parquet(folder / f"buckets-{i}.parquet")
        parts = [_carried(part, folder / f"labels-{i}-{part.name}") for part in source.labels.parts]
        copies = [_carried(copy, folder / f"rows-{i}-{copy.name}") for copy in source.copies]
        external = [pin.to_json() for pin in source.pins if Path(pin.path) not in source.copies]
        entries.append({
            "engine": source.engine, "location": source.location, "columns": asdict(source.columns),
            "rows": source.rows, "buckets": f"buckets-{i}.parquet",
            "buckets_sha256": file_sha256(folder / f"buckets-{i}.parquet"), "labels": parts,
            "pins": external, "copies": copies,
        })  # fmt: skip
    (folder / "index.json").write_text(json.dumps({"sources": entries}), encoding="utf-8")


def _carried(file: Path, target: Path) -> dict[str, str]:
    """``file`` linked (or copied) to ``target`` in the snapshot; its index entry (name and SHA-256)."""
    try:
        os.link(file, target)
    except OSError:
        shutil.copyfile(file, target)
    return {"file": target.name, "sha256": file_sha256(target)}


def load_registry(folder: Path, index: dict[str, Any]) -> TableRegistry:
    """The registry a snapshot's ``tables/`` holds (label parts and row copies linked into a fresh log).

    Every file the index names must be a plain name inside ``tables/``
    (:func:`calwatch.stream.row_log.inside`); the pins of a parquet source name the user's files, which
    are not read here: ``label_table`` checks them before it reads a row.

    Raises
    ------
    SnapshotError
        If a file is missing, altered, outside the folder, or the index is malformed.
    """
    registry = TableRegistry()
    try:
        for entry in index["sources"]:
            columns = dict(entry["columns"])
            if isinstance(columns["probs"], list):
                columns["probs"] = tuple(columns["probs"])
            columns["meta"] = tuple(columns.get("meta", ()))  # absent before tables took slices
            buckets_file = inside(folder, entry["buckets"])
            check_file(buckets_file, str(entry["buckets_sha256"]))
            buckets = pl.read_parquet(buckets_file)
            location = entry["location"]
            source = TableSource(
                engine=str(entry["engine"]),
                source=None,
                columns=LogColumns(**columns),
                batches=dict(zip(buckets["bucket"].to_list(), buckets["batch"].to_list(), strict=True)),
                rows=int(entry["rows"]),
                location=None if location is None else str(location),
            )
            for part in entry["labels"]:
                source.labels.parts.append(_restored(folder, part, source.labels.folder))
            copies = tuple(_restored(folder, copy, source.labels.folder) for copy in entry.get("copies", []))
            pins = [FilePin.from_json(pin) for pin in entry.get("pins", [])]
            source.copies = copies
            source.pins = (*pins, *(FilePin.of(copy) for copy in copies))
            if source.engine == "polars" and source.pins:
                source.source = source.pins
            registry.sources.append(source)
    except (KeyError, TypeError, ValueError) as err:
        msg = f"tables/index.json is malformed: {err}"
        raise SnapshotError(msg) from err
    return registry


def _restored(folder: Path, part: Any, target_folder: Path) -> Path:
    """A file the index names, checked (inside ``folder``, its SHA-256) and linked into ``target_folder``."""
    file = inside(folder, part["file"])
    check_file(file, str(part["sha256"]))
    target = target_folder / file.name
    link_or_copy(file, target)
    return target


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
