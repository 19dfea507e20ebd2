"""Monitor a prediction log where it lives in Spark: the kernel on executors, exact sums on the driver.

:func:`observe` takes a Spark DataFrame of logged predictions (one row per prediction: an id, a
bucket, the model's probabilities, maybe a label and a Mondrian category) and adds one batch per
bucket to a calibrated monitor, with the statistics that :meth:`Monitor.observe
<calwatch.monitor.monitor.Monitor.observe>` would give the same rows (counts exactly, float sums to
rounding). :func:`label` joins late labels to those DataFrames by id.

What runs where:

* driver: the calibrators are frozen (:mod:`calwatch.scale.frozen`: JSON and arrays, never
  pickle) and broadcast as bytes; the schema is checked before any job runs;
* executors: ``df.select(columns).mapInArrow(kernel)`` turns each Arrow batch of rows into
  partial statistics (the bytes are decoded once per Python worker), and Spark's own
  ``groupBy(bucket, calibrator, field, index).agg(sum, sum, max)`` adds them up. With the id
  check (the default) the same pass also hashes each row's id, each task sums its
  own partials, and one shuffle, ``groupBy(shard).applyInArrow``, brings each shard's partials
  and hashes (as bytes) together: a shard's group sums its partials and sorts its hashes, all in
  the scan's job (a repeated hash is confirmed on the rows);
* driver again: the reduced table, at most buckets × calibrators × (3K + 2) rows, is
  collected with ``toArrow()`` and merged into the monitor under its lock, all or nothing.

A monitor that slices (``calibrate(meta=)``) is given the DataFrame's slice columns
(``meta=[...]``): the executors encode them with the monitor's fixed encoding (broadcast with the
calibrators) and emit each bucket's slice counts with its other partials, which Spark's own
``groupBy().sum()`` adds up exactly (integers; :mod:`calwatch.scale.slice_partials`); :func:`label`
reads the labelled rows' slice columns from the observed DataFrame again.

A row's data never reaches the driver, except, in :func:`label`, the ``(id, bucket, label)``
of the rows a call labels: the monitor's label log keeps them (on the driver's disk) so that a
relabel takes the previous label out of every count.

Executors run Python from ``PYSPARK_PYTHON``; when it is unset it is set to this interpreter
(a fresh ``python3`` would lack pyarrow and calwatch, and ``mapInArrow`` would fail), and a
local session already started with the default is pointed at this interpreter too.

The adapter's other modules: :mod:`calwatch.scale.spark_tasks` (what the tasks run),
:mod:`calwatch.scale.spark_ids` (the id check's hashes, shards and confirmation),
:mod:`calwatch.scale.spark_arrow` (Spark's columns as Arrow, results collected as polars) and
:mod:`calwatch.scale.spark_scan` (files the workers read themselves). This module holds the
entry points and the jobs they run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa

from calwatch.monitor.labels import LabelReport
from calwatch.scale import remote, spark_ids, spark_scan
from calwatch.scale.collect import (
    LabelCall,
    check_ids_of,
    check_label_facts,
    commit_observed_partials,
    engine_sources,
    snapshot,
    unjoinable,
)
from calwatch.scale.columns import LogColumns
from calwatch.scale.kernel import partial_statistics
from calwatch.scale.pins import FilePin, check_pins, pin_files
from calwatch.scale.reduce import KEYS
from calwatch.scale.registry import BUCKET, ID, LABEL, TableSource
from calwatch.scale.slice_partials import check_meta, check_meta_types
from calwatch.scale.spark_arrow import (
    arrow_field,
    arrow_only,
    arrow_schema,
    col,
    collected,
    partial_type,
    session_conf,
)
from calwatch.scale.spark_ids import (
    HASHES,
    REPEATS,
    SHARD,
    KeyHashes,
    confirm_repeats,
    shard_reducer,
    with_hash_fields,
    with_repeat_fields,
)
from calwatch.scale.spark_tasks import Shipped

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

ENGINE = "spark"
LOG = logging.getLogger(__name__)
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
    meta: str | Sequence[str] | None = None,
    check_ids: bool = True,
    read_files: bool = True,
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
        Row ids, distinct across the whole DataFrame (one id, one row); :func:`label` joins on them.
    probs : str or sequence of str
        One numeric column per class in the monitor's class order, or one array column.
    bucket : str
        The column whose values make the batches (a date, an hour, a model version).
    label : str, optional
        Labels already known (null where not).
    category : str, optional
        The Mondrian category, for ``mondrian="category"`` calibrators.
    meta : list of str, optional
        The slice columns, required when the monitor was calibrated with ``meta=`` (and refused
        when it was not): each batch gets the exact slice counts ``observe(meta=)`` would give
        its rows (see :meth:`Monitor.observe_table <calwatch.monitor.monitor.Monitor.observe_table>`).
        An instant (``TimestampType``) reaches the encoding as the instant it is: bins fitted on
        naive times compare them as UTC, so keep such a column ``TimestampNTZType``, or the
        session's time zone UTC.
    check_ids : bool
        Refuse a table whose ids repeat (in one bucket or across). The check rides on the
        kernel's scan and its one shuffle: an 8-byte hash of each row's id, shuffled as bytes
        beside the partials and sorted by shard, and repeated hashes confirmed on the rows (see
        :func:`_observed_and_checked`); turn it off only for a table whose id is a key by
        construction.
    read_files : bool
        When ``df`` is only a scan of unpartitioned parquet files on local paths, let the Python
        workers read the files themselves (pyarrow, in the types Spark would hand them) instead
        of receiving Spark's rows as Arrow: the same rows and values, about twice the speed
        (:mod:`calwatch.scale.spark_scan` says what is checked, and when it reads through Spark
        instead). ``False`` always reads through Spark.

    Returns
    -------
    tuple of int
        The new batches' indices.

    Raises
    ------
    ValueError
        Naming the column: a missing or mistyped column or a wrong number of probability columns
        (before any job runs), and bad rows found on executors (probabilities outside [0, 1],
        NaN or not summing to 1, labels outside the classes, null or NaN buckets or ids, an id
        twice, ids of another type than the monitor's, no rows at all); ``meta`` missing for a
        monitor that slices, or given to one that does not. The monitor is unchanged.
    TypeError
        For calibrators a table cannot run (see :func:`calwatch.scale.frozen.freeze`), or a slice
        column of another type than at calibration (naming it).

    Notes
    -----
    The monitor keeps the DataFrame (its plan, not its rows): :func:`label` reads it again, so
    it must keep returning the same rows — a table read at a fixed version (Delta's
    ``versionAsOf``, an Iceberg snapshot), or files that are only ever added under new buckets.
    """
    columns = LogColumns.of(id=id, bucket=bucket, probs=probs, label=label, category=category, meta=meta)
    snap = snapshot(mon)
    check_meta(snap.frozen.slices, columns)
    names = columns.needed()
    schema = arrow_schema(df, names, "the DataFrame")
    columns.check_schema(schema, snap.frozen.n_classes)
    check_meta_types(snap.frozen.slices, columns, schema)
    id_kind = check_ids_of(mon, schema, columns.id)
    pins = pinned_inputs(df)
    spark = df.sparkSession
    _use_this_python(spark)
    with Shipped(spark, snap, kernel=KERNEL, rows=ARROW_ROWS) as shipped, arrow_only(), _arrow_batches(spark):
        scan = _file_scan(df, columns, schema, check_ids) if read_files else None
        reduced = None
        if scan is not None:
            try:
                reduced = _observed(shipped, df, columns, check_ids, scan)
            except Exception as err:
                reason = spark_scan.refused(err)
                if reason is None:
                    raise
                LOG.info(
                    "observe: a worker refused to read the files itself (%s); reading through Spark", reason
                )
        if reduced is None:
            reduced = _observed(shipped, df, columns, check_ids, None)
    check_pins(pins, "while it was read")
    source = TableSource(ENGINE, df, columns, pins=pins)
    return commit_observed_partials(mon, snap, reduced, source, id_kind)


def pinned_inputs(df: DataFrame) -> tuple[FilePin, ...]:
    """The local parquet files ``df`` reads (``inputFiles()``), pinned; none for other sources.

    Spark lists a file scan's files when the DataFrame is made and keeps the list, so a file
    landing later is not read; a file rewritten in place would be (with the old listing's sizes),
    so the pins are checked after the observe pass and before each label join
    (:mod:`calwatch.scale.pins`). Files on other file systems (HDFS, S3) or in other formats are
    not pinned: Spark reads them as they are then.
    """
    try:
        uris = list(df.inputFiles())
    except Exception:  # no file scan under the plan (a table built in memory, a view...)
        return ()
    paths = [spark_scan.local_path(uri) for uri in uris]
    local = [path for path in paths if path is not None and path.endswith(".parquet")]
    return pin_files(sorted(local)) if local and len(local) == len(paths) else ()


def _file_scan(
    df: DataFrame, columns: LogColumns, schema: pa.Schema, check_ids: bool
) -> spark_scan.FileScan | None:
    """The pieces of ``df`` for its workers to read themselves, or None (the reason is logged).

    ``schema``: the needed columns in the Arrow types Spark hands the workers
    (:func:`~calwatch.scale.spark_arrow.arrow_schema`).
    """
    selected = df.select(*[col(n) for n in schema.names])
    scan, reason = spark_scan.file_scan(selected, schema, ARROW_ROWS)
    if scan is not None and check_ids and KeyHashes.of(df, columns).in_jvm:
        scan, reason = None, "the id check hashes these key types in the JVM"
    if scan is None:
        LOG.info("observe: reading through Spark: %s", reason)
    else:
        LOG.info("observe: the workers read the files themselves: %s", reason)
    return scan


def _observed(
    shipped: Shipped, df: DataFrame, columns: LogColumns, check_ids: bool, scan: spark_scan.FileScan | None
) -> pl.DataFrame:
    """The reduced partials of ``df`` (its rows through Spark, or its files read by the workers: ``scan``)."""
    if check_ids:
        return _observed_and_checked(shipped, df, columns, scan)
    inputs = df.select(*[col(n) for n in columns.needed()]) if scan is None else scan.tasks(df.sparkSession)
    partials = inputs.mapInArrow(
        shipped.executor(columns, observed=True, scan=scan), partial_type(df.schema[columns.bucket].dataType)
    )
    return collected(_reduced(partials))


def _observed_and_checked(
    shipped: Shipped, df: DataFrame, columns: LogColumns, scan: spark_scan.FileScan | None = None
) -> pl.DataFrame:
    """The reduced partials of ``df``, after refusing an id repeated anywhere in it (one job, one shuffle).

    The kernel's pass also hashes each row's id to 64 bits (:mod:`calwatch.scale.spark_ids`).
    Each task folds its partials as they come and ends with its folded partials and, per hash
    shard, one row of that shard's hashes as bytes (8 bytes a row; the ``bucket`` and ``id``
    values never go through Spark's row format). Both kinds of rows carry a shard number
    (:data:`~calwatch.scale.spark_ids.SHARD`) and go through one shuffle,
    ``groupBy(SHARD).applyInArrow``: each shard's group sums its partials and sorts its hashes
    (:func:`~calwatch.scale.spark_ids.shard_reducer`), so the scan, the reduction and the search
    for repeated hashes are one job, and nothing is kept. (Keeping the pass's output for a second
    job that shuffled the hashes cost about a third on top of the pass.) Repeated hashes are
    confirmed on the rows themselves (:func:`~calwatch.scale.spark_ids.confirm_repeats`), so a
    hash collision never refuses a good table, and equal keys always hash equal, so no repeat hides.

    With ``scan`` the workers read the files themselves; the keys are then integer-like, hashed
    on the workers as in the general path (:func:`_file_scan` reads through Spark otherwise).
    :func:`~calwatch.scale.spark_ids.shard_bits` and
    :data:`~calwatch.scale.spark_ids.CONFIRM_AT_MOST` are read from their module at each call.
    """
    keyed = KeyHashes.of(df, columns)
    arrow = arrow_schema(df, columns.needed(), "the DataFrame")
    partial = partial_type(df.schema[columns.bucket].dataType)
    inputs = df.select(*keyed.inputs(columns.needed()))
    hashing = (keyed, arrow.field(columns.bucket).type, spark_ids.shard_bits(inputs))
    if scan is not None:
        inputs = scan.tasks(df.sparkSession)
    hashed = inputs.mapInArrow(
        shipped.executor(columns, observed=True, hashes=hashing, scan=scan), with_hash_fields(partial)
    )
    out_schema = with_repeat_fields(partial)
    arrow_out = pa.schema([arrow_field(df.sparkSession, f) for f in out_schema.fields])
    cap = spark_ids.CONFIRM_AT_MOST
    found = collected(hashed.groupBy(col(SHARD)).applyInArrow(shard_reducer(arrow_out, cap), out_schema))
    is_partial = pl.col(REPEATS).is_null()
    reduced = found.filter(is_partial).drop(HASHES, REPEATS)
    repeats = found.filter(~is_partial)
    if reduced.height and repeats.height:
        n_repeated = int(repeats[REPEATS].sum())
        hashes = np.concatenate([np.frombuffer(b, dtype=np.uint64) for b in repeats[HASHES].to_list()])
        confirm_repeats(df, columns, keyed, hashes if n_repeated <= cap else None)
    return reduced


def _arrow_batches(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """Spark hands Python workers Arrow batches of :data:`ARROW_ROWS` rows while our jobs run.

    Fewer, larger batches halve the time Spark spends moving a table to Python (measured here on
    10^7 rows: 11.2 s at 10,000 rows a batch, 6.0 s at 200,000); the session's setting is put back.
    """
    return session_conf(spark, "spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_ROWS))


def label(mon: Any, labels_df: DataFrame, *, id: str, label: str) -> LabelReport:
    """Join late labels by id to the DataFrames observed with :func:`observe`; update the batches they touch.

    A second label for a row replaces the first in every count (the row's previous label comes
    from the monitor's label log, or the DataFrame's own label column at observe time), the
    slice counts of a monitor that slices included (the rows' slice columns are read from the
    observed DataFrame again). Labels whose id meets no observed row are counted as unmatched.

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
    check_ids_of(mon, arrow_schema(labels_df, [id, label], "the labels DataFrame"), id)
    snap = snapshot(mon)
    sources = engine_sources(mon, ENGINE)
    count = _checked_count(labels_df, id, label)
    if count == 0:
        return LabelReport(0, 0, 0, ())
    spark = labels_df.sparkSession
    _use_this_python(spark)
    call = LabelCall.start(snap, count)
    try:
        shipping = Shipped(spark, snap, kernel=KERNEL, rows=ARROW_ROWS)
        with shipping as shipped, arrow_only(), _arrow_batches(spark):
            for source in sources:
                _label_source(spark, shipped, call, source, labels_df, id, label)
    except BaseException:
        call.discard()
        raise
    return call.commit(mon)


def _label_source(
    spark: SparkSession, shipped: Shipped, call: LabelCall, source: TableSource, labels_df: DataFrame,
    id: str, label: str,
) -> None:  # fmt: skip
    """One observed DataFrame's share of a label call: join, look up previous labels, kernel, reduce."""
    from pyspark import StorageLevel

    columns = source.columns
    df: DataFrame = source.source
    check_pins(source.pins, "since it was observed")
    kept, theirs = df.schema[columns.id].dataType, labels_df.schema[id].dataType
    if not _joinable(kept, theirs):
        raise unjoinable(columns.id, theirs.simpleString(), kept.simpleString())
    rows = df.select(*_label_inputs(columns)).where(col(columns.bucket).isin(list(source.batches)))
    labels = labels_df.select(col(id).alias(columns.id), col(label).alias(LABEL))
    # Read twice (the labelled rows' keys, then the kernel): kept, so the log is scanned once.
    joined = rows.join(labels, on=columns.id, how="inner").persist(StorageLevel.MEMORY_AND_DISK)
    try:
        labelled = collected(
            joined.select(col(columns.id).alias(ID), col(columns.bucket).alias(BUCKET), col(LABEL))
        )
        if labelled.height == 0:
            call.add(source, pl.DataFrame(), labelled)
            return
        partials = _with_logged(spark, joined, source, labelled, df.schema).mapInArrow(
            shipped.executor(columns, observed=False), partial_type(df.schema[columns.bucket].dataType)
        )
        call.add(source, collected(_reduced(partials), {LABEL: label}), labelled)
        check_pins(source.pins, "while labels were joined to it")
    finally:
        joined.unpersist()


def _label_inputs(columns: LogColumns) -> list[Column]:
    """The observed columns the label kernel reads, the observed label renamed out of the way."""
    inputs = [col(n) for n in columns.needed() if n != columns.label]
    if columns.label is not None:
        inputs.append(col(columns.label).alias(remote.SOURCE_LABEL))
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
        col(ID).cast(schema[columns.id].dataType).alias(columns.id),
        col(BUCKET).cast(schema[columns.bucket].dataType).alias(columns.bucket),
        col(LABEL).alias(remote.LOGGED),
    )
    return joined.join(sf.broadcast(small), on=[columns.id, columns.bucket], how="left")


def _checked_count(labels_df: DataFrame, id: str, label: str) -> int:
    """Rows of the labels table, after refusing null labels or ids and repeated ids (one job)."""
    from pyspark.sql import functions as sf

    facts = labels_df.agg(
        sf.count(sf.lit(1)),
        sf.sum(sf.when(col(label).isNull(), 1).otherwise(0)),
        sf.sum(sf.when(col(id).isNull(), 1).otherwise(0)),
        sf.countDistinct(col(id)),
    ).collect()[0]
    n = int(facts[0])
    check_label_facts(n=n, null_labels=int(facts[1] or 0), null_ids=int(facts[2] or 0),
                      distinct=int(facts[3]), id=id, label=label)  # fmt: skip
    return n


def _reduced(partials: DataFrame) -> DataFrame:
    """Spark's own exact reduction of the partials: sums of counts and totals, max of constants."""
    from pyspark.sql import functions as sf

    return partials.groupBy(*KEYS).agg(
        sf.sum("count").alias("count"), sf.sum("total").alias("total"), sf.max("constant").alias("constant")
    )


def _joinable(kept: DataType, theirs: DataType) -> bool:
    """Whether two id columns join without a lossy cast: the same type, or both integers."""
    from pyspark.sql.types import IntegralType

    return bool(kept == theirs or (isinstance(kept, IntegralType) and isinstance(theirs, IntegralType)))


def _use_this_python(spark: SparkSession) -> None:
    """Make a local session's Python workers run this interpreter when ``PYSPARK_PYTHON`` was not chosen."""
    context = spark.sparkContext
    if str(context.master).startswith("local") and context.pythonExec == "python3":
        context.pythonExec = os.environ.get("PYSPARK_PYTHON", sys.executable)


__all__ = ["ARROW_ROWS", "ENGINE", "KERNEL", "label", "observe", "pinned_inputs", "session_conf"]
