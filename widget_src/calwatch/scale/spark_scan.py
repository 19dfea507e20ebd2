"""A Spark DataFrame that is only a scan of parquet files, read where the kernel runs.

Spark 4 has no columnar hand-off to ``mapInArrow``: the JVM decodes its parquet batches into
rows, then turns the rows into Arrow again for the Python workers. On the benchmark's log
(10^7 rows, ``local[2]``) that scan and hand-off alone ran at 1.9-2.0 M rows/s, less than
:meth:`Monitor.observe_table <calwatch.monitor.monitor.Monitor.observe_table>` does with the whole
kernel on the same two cores. When a DataFrame is nothing but a scan of unpartitioned parquet
files, the files can be read by the Python workers themselves, with pyarrow, as
``observe_table`` reads them: :func:`file_scan` recognises such a DataFrame and lists its row
groups as pieces; Spark's tasks take consecutive pieces (:meth:`FileScan.tasks`), each task
reads their row groups (:meth:`FileScan.batches`) and runs the kernel, and the reduction, the
shuffle and the id check stay Spark's own.

Same statistics as reading through Spark:

* the same rows: every row group of every file Spark's own scan lists
  (``HadoopFsRelation.location.inputFiles``), each in exactly one piece;
* the same values, in the same Arrow types: each batch is cast, with a *safe* cast, to the
  types Spark itself hands ``mapInArrow`` for the DataFrame's schema; a cast that would change
  a value fails;
* what Spark may read differently than pyarrow is refused: before any job, a plan that filters,
  computes a column or reads partitioned folders, a format that is not Spark's own parquet
  (Delta and Iceberg subclass it and keep deletion files), a file that is not on a local path,
  INT96 timestamps, files written with Spark's legacy calendar, reading by field id; on the
  workers, a file whose schema lacks a column or whose values the cast would change, dates
  before the Gregorian switch or instants before 1900 (where Spark's calendar rebase may apply).

A refusal on a worker raises an error carrying :data:`REFUSED`; :func:`calwatch.scale.spark.observe`
then reads the DataFrame through Spark, the general path, and logs why.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa

from calwatch.scale.table import RowGroups, file_row_groups, item_chunks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Marks a worker's refusal to read a piece itself (the driver then reads through Spark).
REFUSED = "<<calwatch-file-scan-refused>>"
#: Rows per piece at least (smaller consecutive row groups go together). A row group is never
#: split, so a file of large row groups has one piece per row group.
PIECE_ROWS = 1 << 18
#: Spark tasks per core the pieces are spread over (each task reads consecutive pieces).
TASKS_PER_CORE = 2
#: The parquet format class a bare scan must use (Delta's and others' subclasses keep more state).
PARQUET_FORMAT = "org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat"
#: Footer keys of files written with Spark's legacy hybrid calendar (read with a rebase).
LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")
#: Earliest date and instant read without a possible calendar rebase in Spark.
FIRST_DATE = dt.date(1582, 10, 15)
FIRST_INSTANT = dt.datetime(1900, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class FileScan:
    """The row groups of a bare parquet scan, and the Arrow schema Spark would hand the workers."""

    pieces: tuple[RowGroups, ...]
    schema: pa.Schema
    batch_rows: int

    def tasks(self, spark: SparkSession) -> DataFrame:
        """One row per piece, spread over :data:`TASKS_PER_CORE` tasks a core: ``mapInArrow``'s input.

        A task costs Spark a fixed time (about 70 ms here for a Python task that does nothing),
        so consecutive pieces share a task; a few tasks per core keep the cores evenly busy.
        """
        n = len(self.pieces)
        tasks = max(1, min(n, TASKS_PER_CORE * spark.sparkContext.defaultParallelism))
        return spark.range(0, n, 1, tasks)

    def batches(self, tasks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The log's batches of the pieces named in ``tasks`` (column ``id``), read here, in Spark's types.

        Raises
        ------
        RuntimeError
            Carrying :data:`REFUSED` and the reason, for a piece this worker will not read as Spark would.
        """
        names = self.schema.names
        for task in tasks:
            for index in task.column("id").to_pylist():
                piece = self.pieces[index]
                try:
                    for batch in item_chunks(piece, names, self.batch_rows):
                        yield in_spark_types(batch.select(names), self.schema)
                except RefusedPieceError as err:
                    raise _refusal(f"{piece.file}: {err}") from None
                except (OSError, pa.ArrowException) as err:
                    raise _refusal(f"{piece.file}: {type(err).__name__}: {err}") from None


class RefusedPieceError(Exception):
    """A batch whose values Spark might read otherwise than pyarrow."""


def in_spark_types(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in the Arrow types of ``schema`` (a safe cast), after refusing values Spark may rebase.

    Raises
    ------
    RefusedPieceError
        A date before :data:`FIRST_DATE` or an instant before :data:`FIRST_INSTANT` (Spark's
        reader may shift them between calendars), or a value the cast would change.
    """
    try:
        cast = batch.cast(schema, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as err:
        raise RefusedPieceError(f"not castable to Spark's types ({err})") from None
    for field, column in zip(schema, cast.columns, strict=True):
        _refuse_rebased(field, column)
    return cast


def _refuse_rebased(field: pa.Field, column: pa.Array) -> None:
    """Raise :class:`RefusedPieceError` for dates or instants where Spark's calendar rebase may apply."""
    import pyarrow.compute as pc

    if pa.types.is_date(field.type):
        first = FIRST_DATE
    elif pa.types.is_timestamp(field.type):
        first = FIRST_INSTANT if field.type.tz is not None else FIRST_INSTANT.replace(tzinfo=None)
    else:
        return
    earliest = pc.min(column).as_py()
    if earliest is not None and earliest < first:
        msg = f"column {field.name!r} holds {earliest}, before {first} (Spark may rebase it)"
        raise RefusedPieceError(msg)


def _refusal(reason: str) -> RuntimeError:
    return RuntimeError(f"{REFUSED} {reason}")


def refused(err: BaseException) -> str | None:
    """The worker's reason when ``err`` (as Spark re-raised it) is a refusal; None otherwise."""
    text = str(err)
    at = text.find(REFUSED)
    if at < 0:
        return None
    return text[at + len(REFUSED) :].strip().splitlines()[0]


def file_scan(df: DataFrame, schema: pa.Schema, batch_rows: int) -> tuple[FileScan | None, str]:
    """The pieces of ``df`` when it is a bare scan of unpartitioned local parquet files; else why not.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        The prediction log's columns the kernel needs (selected by the caller).
    schema : pyarrow.Schema
        Those columns in the Arrow types Spark hands ``mapInArrow``.
    batch_rows : int
        Rows per batch a worker reads.

    Returns
    -------
    (FileScan or None, str)
        The scan, or None with the reason the DataFrame must be read through Spark.
    """
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
    except Exception as err:  # another DataFrame API (Spark Connect has no JVM plan here)
        return None, f"no plan to inspect ({type(err).__name__})"
    relation = _bare_relation(plan)
    if isinstance(relation, str):
        return None, relation
    conf = df.sparkSession.conf
    if str(conf.get("spark.sql.parquet.fieldId.read.enabled", "false")).lower() == "true":
        return None, "the session reads parquet by field id"
    files = [local_path(f) for f in relation.location().inputFiles()]
    if not files:
        return None, "no files"
    if any(f is None for f in files):
        return None, "files not on a local path"
    paths = sorted(str(f) for f in files)
    pieces = _pieces(paths, schema.names)
    if isinstance(pieces, str):
        return None, pieces
    if not pieces:
        return None, "no row groups"
    described = _counted(len(paths), "file") + ", " + _counted(len(pieces), "piece")
    return FileScan(pieces, schema, batch_rows), described


def _counted(n: int, what: str) -> str:
    return f"{n:,} {what}" + ("" if n == 1 else "s")


def _bare_relation(plan: Any) -> Any:
    """The ``HadoopFsRelation`` of a plan that only scans files (maybe under plain columns); else why not."""
    if plan.nodeName() == "Project":
        projections = plan.projectList()
        for i in range(projections.size()):
            if projections.apply(i).nodeName() != "AttributeReference":
                return "the DataFrame computes or renames a column"
        plan = plan.child()
    if plan.nodeName() != "LogicalRelation":
        return f"the DataFrame's plan is not a bare file scan ({plan.nodeName()})"
    relation = plan.relation()
    if relation.getClass().getName() != "org.apache.spark.sql.execution.datasources.HadoopFsRelation":
        return "the DataFrame does not read files"
    if relation.fileFormat().getClass().getName() != PARQUET_FORMAT:
        return "the DataFrame does not read plain parquet"
    if not relation.partitionSchema().isEmpty():
        return "the DataFrame reads partitioned folders"
    return relation


def local_path(uri: str) -> str | None:
    """The local path of a ``file:`` URI (None for any other scheme)."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("file", ""):
        return None
    return unquote(parsed.path)


def _pieces(paths: Sequence[str], names: Sequence[str]) -> tuple[RowGroups, ...] | str:
    """The files' row groups as pieces, or why their footers forbid reading them with pyarrow as Spark would.

    Each footer is read once, for both.
    """
    import pyarrow.parquet as pq

    wanted = set(names)
    pieces: list[RowGroups] = []
    for path in paths:
        try:
            metadata = pq.read_metadata(path)
        except (OSError, pa.ArrowException) as err:
            return f"{path}: footer unreadable here ({err})"
        keys = metadata.metadata or {}
        if any(key in keys for key in LEGACY_KEYS):
            return f"{path}: written with Spark's legacy calendar"
        version = keys.get(b"org.apache.spark.version", b"3").decode(errors="replace")
        if version.split(".")[0].isdigit() and int(version.split(".")[0]) < 3:
            return f"{path}: written by Spark {version}"
        parquet_schema = metadata.schema
        present = set()
        for i in range(len(parquet_schema)):
            column = parquet_schema.column(i)
            top = column.path.split(".")[0]
            present.add(top)
            if top in wanted and column.physical_type == "INT96":
                return f"{path}: column {top!r} is an INT96 timestamp"
        missing = wanted - present
        if missing:
            return f"{path}: no column {sorted(missing)[0]!r}"
        pieces.extend(file_row_groups(path, metadata, PIECE_ROWS))
    return tuple(pieces)


__all__ = ["REFUSED", "FileScan", "file_scan", "in_spark_types", "local_path", "refused"]
