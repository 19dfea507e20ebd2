"""Monitor a prediction log where it lives in Spark: the kernel on executors, exact sums on the driver.

:func:`observe` takes a Spark DataFrame of logged predictions (one row per prediction: an id, a
bucket, the model's probabilities, maybe a label and a Mondrian category) and adds one batch per
bucket to a calibrated monitor, with the statistics that :meth:`Monitor.observe
<calwatch.monitor.Monitor.observe>` would give the same rows (counts exactly, float sums to
rounding). :func:`label` joins late labels to those DataFrames by id.

What runs where:

* driver: the calibrators are frozen (:mod:`calwatch.scale.frozen`: JSON and arrays, never
  pickle) and broadcast as bytes; the schema is checked before any job runs;
* executors: ``df.select(columns).mapInArrow(kernel)`` turns each Arrow batch of rows into
  partial statistics (the bytes are decoded once per Python worker), and Spark's own
  ``groupBy(bucket, calibrator, field, index).agg(sum, sum, max)`` adds them up;
* driver again: the reduced table, at most buckets × calibrators × (3K + 2) rows, is
  collected with ``toArrow()`` and merged into the monitor under its lock, all or nothing.

A row's data never reaches the driver, except, in :func:`label`, the ``(id, bucket, label)``
of the rows a call labels: the monitor's label log keeps them (on the driver's disk) so that a
relabel takes the previous label out of every count.

Executors run Python from ``PYSPARK_PYTHON``; when it is unset it is set to this interpreter
(a fresh ``python3`` would lack pyarrow and calwatch, and ``mapInArrow`` would fail), and a
local session already started with the default is pointed at this interpreter too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from calwatch.monitor_labels import LabelReport
from calwatch.scale import remote
from calwatch.scale.collect import (
    LabelCall,
    Snapshot,
    check_label_facts,
    check_names,
    commit_observed_partials,
    engine_sources,
    repeated_id,
    snapshot,
    unjoinable,
)
from calwatch.scale.columns import LogColumns
from calwatch.scale.kernel import BUCKET as BUCKET_COUNTS
from calwatch.scale.kernel import N_ROWS, partial_statistics
from calwatch.scale.reduce import KEYS
from calwatch.scale.registry import BUCKET, ID, LABEL, TableSource

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

ENGINE = "spark"
#: The kernel executors run (signature of :func:`~calwatch.scale.kernel.partial_statistics`). A
#: seam for tests, e.g. a wrapper that fails a task's first attempt to check retries count once.
KERNEL: remote.Kernel = partial_statistics
#: Rows per Arrow batch Spark hands the Python workers, and per kernel call, while our jobs run.
ARROW_ROWS = remote.COALESCE_ROWS

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def observe(
    mon: Any,
    df: DataFrame,
    *,
    id: str,
    probs: str | Sequence[str],
    bucket: str,
    label: str | None = None,
    category: str | None = None,
    check_ids: bool = True,
) -> tuple[int, ...]:
    """Observe every row of a Spark DataFrame: one batch per bucket, in sorted bucket order.

    Parameters
    ----------
    mon : Monitor
        A calibrated monitor whose calibrators can run on a table (split conformal sets that
        do not randomise, risk estimators).
    df : pyspark.sql.DataFrame
        The prediction log.
    id : str
        Row ids, distinct within a bucket; :func:`label` joins on them.
    probs : str or sequence of str
        One numeric column per class in the monitor's class order, or one array column.
    bucket : str
        The column whose values make the batches (a date, an hour, a model version).
    label : str, optional
        Labels already known (null where not).
    category : str, optional
        The Mondrian category, for ``mondrian="category"`` calibrators.
    check_ids : bool
        Refuse a table whose ids repeat within a bucket. The check is a distinct count of
        ``(bucket, id)``, a shuffle of every row that costs about as much as the statistics
        themselves; turn it off only for a table whose ``(bucket, id)`` is a key by construction.

    Returns
    -------
    tuple of int
        The new batches' indices.

    Raises
    ------
    ValueError
        Naming the column: a missing or mistyped column or a wrong number of probability columns
        (before any job runs), and bad rows found on executors (probabilities outside [0, 1],
        NaN or not summing to 1, labels outside the classes, null buckets or ids, an id twice in
        a bucket, no rows at all). The monitor is unchanged.
    TypeError
        For calibrators a table cannot run (see :func:`calwatch.scale.frozen.freeze`).

    Notes
    -----
    The monitor keeps the DataFrame (its plan, not its rows): :func:`label` reads it again, so
    it must keep returning the same rows — a table read at a fixed version (Delta's
    ``versionAsOf``, an Iceberg snapshot), or files that are only ever added under new buckets.
    """
    columns = LogColumns.of(id=id, bucket=bucket, probs=probs, label=label, category=category)
    snap = snapshot(mon)
    names = columns.needed()
    columns.check_schema(_arrow_schema(df, names, "the DataFrame"), snap.frozen.n_classes)
    spark = df.sparkSession
    _use_this_python(spark)
    with _Shipped(spark, snap) as shipped, _arrow_only(), _arrow_batches(spark):
        partials = df.select(*[_col(n) for n in names]).mapInArrow(
            shipped.executor(columns, observed=True), _partial_type(df.schema[bucket].dataType)
        )
        reduced = _collect(_reduced(partials))
    if check_ids and reduced.height:
        _refuse_repeats(df, columns, _observed_rows(reduced))
    return commit_observed_partials(mon, snap, reduced, TableSource(ENGINE, df, columns))


def _observed_rows(reduced: pl.DataFrame) -> int:
    """The rows the kernel counted (the bucket-level ``n_rows`` summed over buckets)."""
    counted = reduced.filter((pl.col("calibrator") == BUCKET_COUNTS) & (pl.col("field") == N_ROWS))
    return int(counted["count"].sum())


@contextlib.contextmanager
def _arrow_batches(spark: SparkSession) -> Iterator[None]:
    """Spark hands Python workers Arrow batches of :data:`ARROW_ROWS` rows while our jobs run.

    Fewer, larger batches halve the time Spark spends moving a table to Python (measured here on
    10^7 rows: 11.2 s at 10,000 rows a batch, 6.0 s at 200,000); the session's setting is put back.
    """
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key, None)
    spark.conf.set(key, str(ARROW_ROWS))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def label(mon: Any, labels_df: DataFrame, *, id: str, label: str) -> LabelReport:
    """Join late labels by id to the DataFrames observed with :func:`observe`; update the batches they touch.

    A second label for a row replaces the first in every count (the row's previous label comes
    from the monitor's label log, or the DataFrame's own label column at observe time). Labels
    whose id meets no observed row are counted as unmatched.

    Parameters
    ----------
    mon : Monitor
        The monitor that observed the DataFrames.
    labels_df : pyspark.sql.DataFrame
        The labels: one row per id.
    id : str
        Its id column (joined to each observed DataFrame's id column).
    label : str
        Its label column.

    Returns
    -------
    LabelReport
        Labels matched and unmatched, rows relabelled, batches changed.

    Raises
    ------
    ValueError
        Naming the column: a missing column, null labels or ids, an id twice, ids whose type
        cannot be joined, labels outside the classes. The monitor is unchanged.
    """
    check_names(labels_df.columns, [id, label], "the labels DataFrame")
    snap = snapshot(mon)
    sources = engine_sources(mon, ENGINE)
    count = _checked_count(labels_df, id, label)
    if count == 0:
        return LabelReport(0, 0, 0, ())
    spark = labels_df.sparkSession
    _use_this_python(spark)
    call = LabelCall.start(snap, count)
    try:
        with _Shipped(spark, snap) as shipped, _arrow_only(), _arrow_batches(spark):
            for source in sources:
                _label_source(spark, shipped, call, source, labels_df, id, label)
    except BaseException:
        call.discard()
        raise
    return call.commit(mon)


def _label_source(
    spark: SparkSession, shipped: _Shipped, call: LabelCall, source: TableSource, labels_df: DataFrame,
    id: str, label: str,
) -> None:  # fmt: skip
    """One observed DataFrame's share of a label call: join, look up previous labels, kernel, reduce."""
    from pyspark import StorageLevel

    columns = source.columns
    df: DataFrame = source.source
    kept, theirs = df.schema[columns.id].dataType, labels_df.schema[id].dataType
    if not _joinable(kept, theirs):
        raise unjoinable(columns.id, theirs.simpleString(), kept.simpleString())
    rows = df.select(*_label_inputs(columns)).where(_col(columns.bucket).isin(list(source.batches)))
    labels = labels_df.select(_col(id).alias(columns.id), _col(label).alias(LABEL))
    # Read twice (the labelled rows' keys, then the kernel): kept, so the log is scanned once.
    joined = rows.join(labels, on=columns.id, how="inner").persist(StorageLevel.MEMORY_AND_DISK)
    try:
        labelled = _collect(
            joined.select(_col(columns.id).alias(ID), _col(columns.bucket).alias(BUCKET), _col(LABEL))
        )
        if labelled.height == 0:
            call.add(source, pl.DataFrame(), labelled)
            return
        partials = _with_logged(spark, joined, source, labelled, df.schema).mapInArrow(
            shipped.executor(columns, observed=False), _partial_type(df.schema[columns.bucket].dataType)
        )
        call.add(source, _collect(_reduced(partials), {LABEL: label}), labelled)
    finally:
        joined.unpersist()


def _label_inputs(columns: LogColumns) -> list[Column]:
    """The observed columns the label kernel reads, the observed label renamed out of the way."""
    inputs = [_col(n) for n in columns.needed() if n != columns.label]
    if columns.label is not None:
        inputs.append(_col(columns.label).alias(remote.SOURCE_LABEL))
    return inputs


def _with_logged(
    spark: SparkSession, joined: DataFrame, source: TableSource, labelled: pl.DataFrame, schema: StructType
) -> DataFrame:
    """``joined`` with column ``LOGGED``: each row's last label from earlier label calls (broadcast join)."""
    from pyspark.sql import functions as sf

    previous = source.labels.previous(labelled.lazy().select(ID))
    if previous is None:
        return joined
    logged = previous.collect()
    if logged.height == 0:
        return joined
    columns = source.columns
    small = spark.createDataFrame(logged.to_arrow(compat_level=pl.CompatLevel.oldest())).select(
        _col(ID).cast(schema[columns.id].dataType).alias(columns.id),
        _col(BUCKET).cast(schema[columns.bucket].dataType).alias(columns.bucket),
        _col(LABEL).alias(remote.LOGGED),
    )
    return joined.join(sf.broadcast(small), on=[columns.id, columns.bucket], how="left")


def _checked_count(labels_df: DataFrame, id: str, label: str) -> int:
    """Rows of the labels table, after refusing null labels or ids and repeated ids (one job)."""
    from pyspark.sql import functions as sf

    facts = labels_df.agg(
        sf.count(sf.lit(1)),
        sf.sum(sf.when(_col(label).isNull(), 1).otherwise(0)),
        sf.sum(sf.when(_col(id).isNull(), 1).otherwise(0)),
        sf.countDistinct(_col(id)),
    ).collect()[0]
    n = int(facts[0])
    check_label_facts(n=n, null_labels=int(facts[1] or 0), null_ids=int(facts[2] or 0),
                      distinct=int(facts[3]), id=id, label=label)  # fmt: skip
    return n


def _refuse_repeats(df: DataFrame, columns: LogColumns, rows: int) -> None:
    """Raise if an id repeats within a bucket anywhere in the DataFrame (the kernel sees a batch).

    One job counts the distinct ``(bucket, id)`` pairs (a distinct count costs about half of a
    grouped count on Spark); only when they fall short of the ``rows`` the kernel counted does a
    second job find an example to name.
    """
    from pyspark.sql import functions as sf

    if df.select(_col(columns.bucket), _col(columns.id)).distinct().count() == rows:
        return
    repeats = (
        df.groupBy(_col(columns.bucket), _col(columns.id))
        .agg(sf.count(sf.lit(1)).alias("__cw_n"))
        .where(sf.col("__cw_n") > 1)
        .limit(1)
        .collect()
    )
    if repeats:
        raise repeated_id(columns.id, repeats[0][0], repeats[0][1], int(repeats[0][2]))


class _Shipped:
    """The frozen monitor broadcast as bytes (destroyed on exit); :meth:`executor` makes the task function."""

    def __init__(self, spark: SparkSession, snap: Snapshot) -> None:
        data = snap.frozen.to_bytes()
        self.key = remote.digest(data)
        self.broadcast = spark.sparkContext.broadcast(data)

    def __enter__(self) -> _Shipped:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.broadcast.destroy()

    def executor(
        self, columns: LogColumns, *, observed: bool
    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        """The function ``mapInArrow`` runs on each partition (pickled with its few small captures)."""
        key, broadcast, kernel, rows = self.key, self.broadcast, KERNEL, ARROW_ROWS

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            frozen = remote.frozen_for(key, lambda: bytes(broadcast.value))
            for batch in remote.coalesced(batches, rows):
                out = remote.raising_marked(batch, frozen, columns, observed=observed, kernel=kernel)
                if out.num_rows:
                    yield out

        return run


def _reduced(partials: DataFrame) -> DataFrame:
    """Spark's own exact reduction of the partials: sums of counts and totals, max of constants."""
    from pyspark.sql import functions as sf

    return partials.groupBy(*KEYS).agg(
        sf.sum("count").alias("count"), sf.sum("total").alias("total"), sf.max("constant").alias("constant")
    )


def _collect(df: DataFrame, renames: dict[str, str] | None = None) -> pl.DataFrame:
    """A small DataFrame on the driver as polars; a kernel error from an executor re-raised as itself."""
    try:
        table = df.toArrow()
    except Exception as err:
        found = remote.unmarked(err, renames)
        if found is None:
            raise
        raise found from None
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _partial_type(bucket_type: DataType) -> StructType:
    """The Spark schema of :func:`calwatch.scale.kernel.partial_schema` for a bucket of ``bucket_type``."""
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    types = [bucket_type, StringType(), StringType(), IntegerType(), LongType(), DoubleType(), DoubleType()]
    names = ["bucket", "calibrator", "field", "index", "count", "total", "constant"]
    return StructType([StructField(n, t, nullable=True) for n, t in zip(names, types, strict=True)])


def _arrow_schema(df: DataFrame, names: Sequence[str], what: str) -> pa.Schema:
    """The Arrow schema of ``df``'s columns ``names`` (raises naming a missing or unconvertible column)."""
    from pyspark.sql.pandas.types import to_arrow_type

    check_names(df.columns, names, what)
    fields = []
    for name in names:
        spark_type = df.schema[name].dataType
        try:
            fields.append(pa.field(name, to_arrow_type(spark_type)))
        except Exception as err:
            msg = f"column {name!r}: Arrow cannot carry its Spark type {spark_type.simpleString()} ({err})"
            raise ValueError(msg) from err
    return pa.schema(fields)


def _joinable(kept: DataType, theirs: DataType) -> bool:
    """Whether two id columns join without a lossy cast: the same type, or both integers."""
    from pyspark.sql.types import IntegralType

    return bool(kept == theirs or (isinstance(kept, IntegralType) and isinstance(theirs, IntegralType)))


def _col(name: str) -> Column:
    """A column by its exact name (dots and spaces are not struct paths here)."""
    from pyspark.sql import functions as sf

    return sf.col("`" + name.replace("`", "``") + "`")


@contextlib.contextmanager
def _arrow_only() -> Iterator[None]:
    """Silence pyspark's warning about pandas 3: ``mapInArrow`` and ``toArrow`` never use pandas."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
        yield


def _use_this_python(spark: SparkSession) -> None:
    """Make a local session's Python workers run this interpreter when ``PYSPARK_PYTHON`` was not chosen."""
    context = spark.sparkContext
    if str(context.master).startswith("local") and context.pythonExec == "python3":
        context.pythonExec = os.environ.get("PYSPARK_PYTHON", sys.executable)


__all__ = ["KERNEL", "label", "observe"]
