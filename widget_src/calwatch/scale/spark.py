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

A row's data never reaches the driver, except, in :func:`label`, the ``(id, bucket, label)``
of the rows a call labels: the monitor's label log keeps them (on the driver's disk) so that a
relabel takes the previous label out of every count.

Executors run Python from ``PYSPARK_PYTHON``; when it is unset it is set to this interpreter
(a fresh ``python3`` would lack pyarrow and calwatch, and ``mapInArrow`` would fail), and a
local session already started with the default is pointed at this interpreter too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from calwatch.monitor.labels import LabelReport
from calwatch.scale import remote, spark_scan
from calwatch.scale.collect import (
    LabelCall,
    Snapshot,
    check_ids_of,
    check_label_facts,
    check_names,
    commit_observed_partials,
    engine_sources,
    repeated_id,
    snapshot,
    unjoinable,
)
from calwatch.scale.columns import LogColumns
from calwatch.scale.duplicates import key_hashes, repeated
from calwatch.scale.fold import FoldedPartials, sum_partials
from calwatch.scale.kernel import partial_schema, partial_statistics
from calwatch.scale.pins import FilePin, check_pins, pin_files
from calwatch.scale.reduce import KEYS
from calwatch.scale.registry import BUCKET, ID, LABEL, TableSource

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

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
        twice, ids of another type than the monitor's, no rows at all). The monitor is unchanged.
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
    schema = _arrow_schema(df, names, "the DataFrame")
    columns.check_schema(schema, snap.frozen.n_classes)
    id_kind = check_ids_of(mon, schema, columns.id)
    pins = pinned_inputs(df)
    spark = df.sparkSession
    _use_this_python(spark)
    with _Shipped(spark, snap) as shipped, _arrow_only(), _arrow_batches(spark):
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

    ``schema``: the needed columns in the Arrow types Spark hands the workers (:func:`_arrow_schema`).
    """
    selected = df.select(*[_col(n) for n in schema.names])
    scan, reason = spark_scan.file_scan(selected, schema, ARROW_ROWS)
    if scan is not None and check_ids and _KeyHashes.of(df, columns).in_jvm:
        scan, reason = None, "the id check hashes these key types in the JVM"
    if scan is None:
        LOG.info("observe: reading through Spark: %s", reason)
    else:
        LOG.info("observe: the workers read the files themselves: %s", reason)
    return scan


def _observed(
    shipped: _Shipped, df: DataFrame, columns: LogColumns, check_ids: bool, scan: spark_scan.FileScan | None
) -> pl.DataFrame:
    """The reduced partials of ``df`` (its rows through Spark, or its files read by the workers: ``scan``)."""
    if check_ids:
        return _observed_and_checked(shipped, df, columns, scan)
    inputs = df.select(*[_col(n) for n in columns.needed()]) if scan is None else scan.tasks(df.sparkSession)
    partials = inputs.mapInArrow(
        shipped.executor(columns, observed=True, scan=scan), _partial_type(df.schema[columns.bucket].dataType)
    )
    return _collect(_reduced(partials))


def _observed_and_checked(
    shipped: _Shipped, df: DataFrame, columns: LogColumns, scan: spark_scan.FileScan | None = None
) -> pl.DataFrame:
    """The reduced partials of ``df``, after refusing an id repeated anywhere in it (one job, one shuffle).

    The kernel's pass also hashes each row's id to 64 bits. Each task folds its
    partials as they come and ends with its folded partials and, per hash shard, one row of that
    shard's hashes as bytes (8 bytes a row; the ``bucket`` and ``id`` values never go through
    Spark's row format). Both kinds of rows carry a shard number (:data:`SHARD`) and go through
    one shuffle, ``groupBy(SHARD).applyInArrow``: each shard's group sums its partials and sorts
    its hashes (:func:`_shard_reducer`), so the scan, the reduction and the search for repeated
    hashes are one job, and nothing is kept. (Keeping the pass's output for a second job that
    shuffled the hashes cost about a third on top of the pass.) Repeated hashes are confirmed on
    the rows themselves (:func:`_confirm_repeats`), so a hash collision never refuses a good
    table, and equal keys always hash equal, so no repeat hides.

    With ``scan`` the workers read the files themselves; the keys are then integer-like, hashed
    on the workers as in the general path (:func:`_file_scan` reads through Spark otherwise).
    """
    keyed = _KeyHashes.of(df, columns)
    arrow = _arrow_schema(df, columns.needed(), "the DataFrame")
    partial = _partial_type(df.schema[columns.bucket].dataType)
    inputs = df.select(*keyed.inputs(columns.needed()))
    hashing = (keyed, arrow.field(columns.bucket).type, _shard_bits(inputs))
    if scan is not None:
        inputs = scan.tasks(df.sparkSession)
    hashed = inputs.mapInArrow(
        shipped.executor(columns, observed=True, hashes=hashing, scan=scan),
        _with_hash_fields(partial),
    )
    out_schema = _with_repeat_fields(partial)
    arrow_out = pa.schema([_arrow_field(df.sparkSession, f) for f in out_schema.fields])
    reduce_shard = _shard_reducer(arrow_out, CONFIRM_AT_MOST)
    found = _collect(hashed.groupBy(_col(SHARD)).applyInArrow(reduce_shard, out_schema))
    is_partial = pl.col(REPEATS).is_null()
    reduced = found.filter(is_partial).drop(HASHES, REPEATS)
    repeats = found.filter(~is_partial)
    if reduced.height and repeats.height:
        n_repeated = int(repeats[REPEATS].sum())
        hashes = np.concatenate([np.frombuffer(b, dtype=np.uint64) for b in repeats[HASHES].to_list()])
        _confirm_repeats(df, columns, keyed, hashes if n_repeated <= CONFIRM_AT_MOST else None)
    return reduced


def _arrow_batches(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """Spark hands Python workers Arrow batches of :data:`ARROW_ROWS` rows while our jobs run.

    Fewer, larger batches halve the time Spark spends moving a table to Python (measured here on
    10^7 rows: 11.2 s at 10,000 rows a batch, 6.0 s at 200,000); the session's setting is put back.
    """
    return session_conf(spark, "spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_ROWS))


@contextlib.contextmanager
def session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """The Spark session's setting ``key`` set to ``value`` for the block, then put back as it was."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
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
    check_ids_of(mon, _arrow_schema(labels_df, [id, label], "the labels DataFrame"), id)
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
    check_pins(source.pins, "since it was observed")
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
        check_pins(source.pins, "while labels were joined to it")
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


#: Hash-shard bits at most: the hash rows are shuffled by their top bits (at most 256 shards; see
#: :func:`_shard_bits`).
SHARD_BITS = 8
#: Input bytes per hash shard (:func:`_shard_bits`): at a few bytes of parquet a row, a shard's
#: hashes are some tens of MiB.
SHARD_INPUT_BYTES = 32 << 20
#: Hashes in one value of the hash rows at most (1 MiB): a shard's hashes go as several rows, so
#: a row stays small however few shards (a value of tens of MiB is copied whole at each step of
#: Spark's row format, and a row must stay under 2 GiB). On 3·10^6 rows, local[2], 4 alternating
#: runs each, load 3-3.7: median 1.21 M -> 1.27 M rows/s, CPU 5.4 -> 4.6 s (noisy; 3 of 4 pairs).
BLOB_HASHES = 1 << 17
#: Column names the observe pass adds to the partials: every row's shard, and the hash rows' bytes.
SHARD, HASHES = "__cw_shard", "__cw_hashes"
#: Column of the shard reduction's output: how many hashes repeated in the shard (null on partials).
REPEATS = "__cw_repeats"
#: The JVM's hash of the id, when it is not integer-like.
KEY = "__cw_key"
#: Repeated hashes confirmed row by row at most; more (a table of many repeats) runs one exact
#: grouped query over every id instead.
CONFIRM_AT_MOST = 4096


def _shard_bits(df: DataFrame) -> int:
    """How many top bits of a key hash choose its shard: one shard per :data:`SHARD_INPUT_BYTES` of input.

    The input's size is Spark's own estimate for the plan (the files' size for a file scan; no
    job runs). Each shard's group costs the Python worker a fixed time (its transfer, an Arrow
    group-by of its partials, a sort), so a small table wants few groups; a large one wants
    many, so that a group's hashes (8 bytes a row) stay tens of MiB. On the bench log in
    ``local[2]`` (2 shards instead of 256, with :class:`_ShardedHashes` built in one pass; CPU
    of the driver, JVM and workers, medians, load 3-4): 3·10^6 rows 5.8 -> 4.7 s (unchecked
    4.1 s), 10^7 rows 16.1 -> 15.2 s. Without an estimate (Spark gives ``Long.MaxValue``),
    :data:`SHARD_BITS`.
    """
    try:
        size = int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    except Exception:  # no JVM plan to ask (another DataFrame API): the most shards
        return SHARD_BITS
    shards = -(-size // SHARD_INPUT_BYTES)
    return max(1, min(SHARD_BITS, (shards - 1).bit_length()))


class _KeyHashes:
    """How the observe pass hashes each row's id: the same function on every executor.

    Integer-like ids (integers, dates, timestamps) are hashed on the Python workers with
    :func:`calwatch.scale.duplicates.key_hashes` (compiled; a bijection of the id); any other
    type by the JVM, Spark's ``xxhash64(id)`` (seeded, the same on every executor), carried to
    the workers as column :data:`KEY`. Only the id is hashed: an id must be distinct across the
    whole table, not only within its bucket.
    """

    def __init__(self, id: str, in_jvm: bool) -> None:
        self.id, self.in_jvm = id, in_jvm

    @classmethod
    def of(cls, df: DataFrame, columns: LogColumns) -> _KeyHashes:
        from pyspark.sql import types as st

        exact = (st.ByteType, st.ShortType, st.IntegerType, st.LongType, st.DateType, st.TimestampType,
                 st.TimestampNTZType)  # fmt: skip
        integer_like = type(df.schema[columns.id].dataType) in exact
        return cls(columns.id, in_jvm=not integer_like)

    def inputs(self, names: Sequence[str]) -> list[Column]:
        """The columns ``names``, and :data:`KEY` when the JVM hashes."""
        from pyspark.sql import functions as sf

        selected = [_col(n) for n in names]
        if self.in_jvm:
            selected.append(sf.xxhash64(_col(self.id)).alias(KEY))
        return selected

    def hashes(self, batch: pa.RecordBatch) -> npt.NDArray[np.uint64]:
        """Each row's key hash (``batch`` holds the inputs)."""
        if self.in_jvm:
            values = np.asarray(batch.column(KEY).to_numpy(zero_copy_only=False), dtype=np.int64)
            return values.view(np.uint64)
        return key_hashes(batch, self.id)

    def kernel_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch without :data:`KEY` (the kernel sees the log's columns only)."""
        if not self.in_jvm:
            return batch
        return batch.select([n for n in batch.schema.names if n != KEY])


class _ShardedHashes:
    """One partition's key hashes, kept as they come and grouped by their top ``bits`` bits once, at the end.

    One counting pass over the task's hashes (:func:`calwatch.scale.id_hashes.partition`) and one
    binary column whose values are slices of the grouped buffer, shared, not copied: grouping each
    Arrow batch as it came and joining every shard's pieces into bytes cost more Python time than
    hashing the rows (a profile of ``local[2]``: about 0.1 s a million rows).
    """

    def __init__(self, bits: int, per_row: int) -> None:
        self.bits, self.per_row = bits, per_row
        self.parts: list[npt.NDArray[np.uint64]] = []

    def add(self, hashes: npt.NDArray[np.uint64]) -> None:
        if hashes.shape[0]:
            self.parts.append(hashes)

    def batch(self, schema: pa.Schema) -> pa.RecordBatch | None:
        """Rows of a shard's number and up to ``per_row`` of its hashes as bytes; other columns null."""
        from calwatch.scale.id_hashes import partition

        if not self.parts:
            return None
        hashes = np.concatenate(self.parts) if len(self.parts) > 1 else self.parts[0]
        self.parts = []
        grouped = np.empty_like(hashes)
        bounds = np.zeros((1 << self.bits) + 1, dtype=np.int64)
        partition(hashes, 64 - self.bits, grouped, bounds)
        counts = np.diff(bounds)
        pieces = -(-counts // self.per_row)  # each shard's values: per_row hashes at most
        shards = np.repeat(np.arange(counts.shape[0]), pieces)
        first = np.repeat(np.cumsum(pieces) - pieces, pieces)
        starts = bounds[shards] + (np.arange(shards.shape[0]) - first) * self.per_row
        offsets = (np.append(starts, bounds[-1]) * 8).astype(np.int32)
        n = shards.shape[0]
        blobs = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(grouped)])
        arrays = [pa.nulls(n, field.type) for field in schema][:-2]
        arrays += [pa.array(shards.astype(np.int32)), blobs]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _sharded_partials(folded: FoldedPartials, schema: pa.Schema, bits: int) -> pa.RecordBatch | None:
    """A task's summed partials, each with its :data:`SHARD` and null :data:`HASHES` (``schema``: the output).

    A summed row's shard comes from its ``(calibrator, field, index)``, the same on every executor
    (``zlib.crc32``, not Python's salted ``hash``), so every partial of a statistic meets in one
    shard's group however many tasks sent one.
    """
    import zlib

    summed = folded.result()
    if summed is None or summed.num_rows == 0:
        return None
    table = summed.combine_chunks()
    names = pc.binary_join_element_wise(table.column("calibrator"), table.column("field"), "\0")
    names = names.combine_chunks().dictionary_encode()
    seeds = np.array([zlib.crc32(v.encode()) for v in names.dictionary.to_pylist()], dtype=np.int64)
    index = table.column("index").to_numpy().astype(np.int64)
    shards = (seeds[names.indices.to_numpy()] + index) % (1 << bits)
    n = table.num_rows
    arrays = [table.column(name).combine_chunks() for name in schema.names[:-2]]
    arrays += [pa.array(shards.astype(np.int32)), pa.nulls(n, pa.binary())]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _with_hash_fields(partial: StructType) -> StructType:
    """The observe pass's output: the partials' fields, then :data:`SHARD` and :data:`HASHES`."""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    extra = [
        StructField(SHARD, IntegerType(), nullable=True),
        StructField(HASHES, BinaryType(), nullable=True),
    ]
    return StructType([*partial.fields, *extra])


def _with_repeat_fields(partial: StructType) -> StructType:
    """The shard reduction's output: the reduced partials' fields, then :data:`HASHES` and :data:`REPEATS`."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    extra = [
        StructField(HASHES, BinaryType(), nullable=True),
        StructField(REPEATS, LongType(), nullable=True),
    ]
    return StructType([*partial.fields, *extra])


def _arrow_field(spark: SparkSession, field: StructField) -> pa.Field:
    """A field of a UDF's result as the Arrow field Spark takes back (see :func:`_arrow_type`)."""
    return pa.field(field.name, _arrow_type(spark, field.dataType, returned=True))


def _arrow_type(spark: SparkSession, spark_type: DataType, *, returned: bool = False) -> pa.DataType:
    """The Arrow type in which Spark hands ``spark_type`` to Python workers, or takes it back.

    It depends on the session: a ``TimestampType`` (an instant) comes in the session's time zone
    (``spark.sql.session.timeZone``) and goes back in UTC, and under
    ``spark.sql.execution.arrow.useLargeVarTypes`` strings and binaries have 64-bit offsets both
    ways (``applyInArrow`` refuses a result of other types).
    """
    from pyspark.sql.pandas.types import to_arrow_type

    zone = "UTC" if returned else spark.conf.get("spark.sql.session.timeZone")
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes")).lower() == "true"
    return to_arrow_type(spark_type, timezone=zone, prefers_large_types=large)


def _shard_reducer(schema: pa.Schema, cap: int) -> Callable[[pa.Table], pa.Table]:
    """The function ``applyInArrow`` runs on each shard's group (``schema``: its output's).

    It returns the group's partials summed per (bucket, calibrator, field, index) — the same
    exact reduction as :func:`_reduced`: integer counts exactly, float sums to rounding — with
    null :data:`HASHES` and :data:`REPEATS`, and, when the shard's hashes repeat, one more row:
    the repeated hashes (at most ``cap`` of them) as bytes and how many there were.
    """

    def reduce(group: pa.Table) -> pa.Table:
        blobs = group.column(HASHES)
        summed = sum_partials(group.filter(blobs.is_null()).select(schema.names[:-2]))
        n = summed.num_rows
        arrays = [*summed.columns, pa.nulls(n, pa.binary()), pa.nulls(n, pa.int64())]
        # Cast, not just labelled: Spark may hand the group large string types (useLargeVarTypes).
        parts = [pa.Table.from_arrays(arrays, names=schema.names).cast(schema)]
        found = repeated(_blob_hashes(blobs))
        if found.shape[0]:
            row = [pa.nulls(1, field.type) for field in schema][:-2]
            row += [pa.array([found[:cap].tobytes()], pa.binary()), pa.array([found.shape[0]], pa.int64())]
            parts.append(pa.Table.from_arrays(row, schema=schema))
        return pa.concat_tables(parts)

    return reduce


def _blob_hashes(blobs: pa.ChunkedArray) -> npt.NDArray[np.uint64]:
    """The hashes packed in a binary column's non-null values, read in place (8 bytes each)."""
    parts = []
    for chunk in blobs.chunks:
        chunk = chunk.drop_null()
        if len(chunk) == 0:
            continue
        wide = pa.types.is_large_binary(chunk.type)
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64 if wide else np.int32)
        start, stop = int(offsets[chunk.offset]), int(offsets[chunk.offset + len(chunk)])
        data = np.frombuffer(chunk.buffers()[2], dtype=np.uint8)[start:stop]
        parts.append(data.view(np.uint64))
    if not parts:
        return np.zeros(0, dtype=np.uint64)
    return np.concatenate(parts)


def _confirm_repeats(
    df: DataFrame, columns: LogColumns, keyed: _KeyHashes, hashes: npt.NDArray[np.uint64] | None
) -> None:
    """Raise naming an id seen twice (in a bucket or across), looking at rows whose hash is in ``hashes``.

    ``None`` looks at every row (one grouped query). Equal hashes of distinct keys (a collision)
    raise nothing.
    """
    from pyspark.sql import functions as sf

    keys = df.select(*keyed.inputs([columns.bucket, columns.id]))
    if hashes is not None:
        wanted = np.unique(hashes)
        key_schema = df.select(_col(columns.bucket), _col(columns.id)).schema

        def candidates(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                keep = np.isin(keyed.hashes(batch), wanted)
                if keep.any():
                    yield batch.filter(pa.array(keep)).select([columns.bucket, columns.id])

        keys = keys.mapInArrow(candidates, key_schema)
    repeats = (
        keys.groupBy(_col(columns.id))
        .agg(sf.count(sf.lit(1)).alias("__cw_n"), sf.slice(sf.collect_list(_col(columns.bucket)), 1, 3))
        .where(sf.col("__cw_n") > 1)
        .limit(1)
        .collect()
    )
    if repeats:
        raise repeated_id(columns.id, repeats[0][0], int(repeats[0][1]), list(repeats[0][2]))


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
        self,
        columns: LogColumns,
        *,
        observed: bool,
        hashes: tuple[_KeyHashes, pa.DataType, int] | None = None,
        scan: spark_scan.FileScan | None = None,
    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        """The function ``mapInArrow`` runs on each partition (pickled with its few small captures).

        With ``hashes`` (the key hashing, the bucket's Arrow type and the shard bits), the task
        folds its partials and yields them once, each with its :data:`SHARD`
        (:func:`_sharded_partials`), then its hash rows (:class:`_ShardedHashes`). With ``scan``
        the partition's rows name pieces of files, and the task reads them
        (:meth:`calwatch.scale.spark_scan.FileScan.batches`).
        """
        key, broadcast, kernel, rows, per_row = self.key, self.broadcast, KERNEL, ARROW_ROWS, BLOB_HASHES

        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return batches if scan is None else scan.batches(batches)

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            frozen = remote.frozen_for(key, lambda: bytes(broadcast.value))
            for batch in remote.coalesced(read(batches), rows):
                out = remote.raising_marked(batch, frozen, columns, observed=observed, kernel=kernel)
                if out.num_rows:
                    yield out

        if hashes is None:
            return run
        keyed, bucket_type, bits = hashes
        schema = (
            partial_schema(bucket_type)
            .append(pa.field(SHARD, pa.int32()))
            .append(pa.field(HASHES, pa.binary()))
        )

        def run_hashing(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            frozen = remote.frozen_for(key, lambda: bytes(broadcast.value))
            sharded, folded = _ShardedHashes(bits, per_row), FoldedPartials()
            for batch in remote.coalesced(read(batches), rows):
                out = remote.raising_marked(
                    keyed.kernel_batch(batch), frozen, columns, observed=observed, kernel=kernel
                )
                sharded.add(keyed.hashes(batch))  # after the kernel: null keys were refused there
                if out.num_rows:
                    folded.add(out)
            for last in (_sharded_partials(folded, schema, bits), sharded.batch(schema)):
                if last is not None:
                    yield last

        return run_hashing


def _reduced(partials: DataFrame) -> DataFrame:
    """Spark's own exact reduction of the partials: sums of counts and totals, max of constants."""
    from pyspark.sql import functions as sf

    return partials.groupBy(*KEYS).agg(
        sf.sum("count").alias("count"), sf.sum("total").alias("total"), sf.max("constant").alias("constant")
    )


def _collect(df: DataFrame, renames: dict[str, str] | None = None) -> pl.DataFrame:
    """A small DataFrame on the driver as polars; a kernel error from an executor re-raised as itself.

    Instants (``TimestampType``) come in the session's time zone, as Spark shows them and as
    ``mapInArrow`` hands them to the kernel: ``toArrow`` labels them UTC, and a bucket named in
    UTC would not be the hour the log's reader sees.
    """
    try:
        table = df.toArrow()
    except Exception as err:
        found = remote.unmarked(err, renames)
        if found is None:
            raise
        raise found from None
    try:
        frame = pl.from_arrow(_in_session_zone(table, df.sparkSession.conf.get("spark.sql.session.timeZone")))
    except (pl.exceptions.PolarsError, pa.ArrowException):  # a zone polars cannot name stays UTC
        frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _in_session_zone(table: pa.Table, zone: str | None) -> pa.Table:
    """``table`` with its zoned timestamp columns relabelled to ``zone`` (the same instants)."""
    fields = [
        field.with_type(pa.timestamp(field.type.unit, tz=zone))
        if pa.types.is_timestamp(field.type) and field.type.tz is not None and zone
        else field
        for field in table.schema
    ]
    return table.cast(pa.schema(fields)) if fields != list(table.schema) else table


def _partial_type(bucket_type: DataType) -> StructType:
    """The Spark schema of :func:`calwatch.scale.kernel.partial_schema` for a bucket of ``bucket_type``."""
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    types = [bucket_type, StringType(), StringType(), IntegerType(), LongType(), DoubleType(), DoubleType()]
    names = ["bucket", "calibrator", "field", "index", "count", "total", "constant"]
    return StructType([StructField(n, t, nullable=True) for n, t in zip(names, types, strict=True)])


def _arrow_schema(df: DataFrame, names: Sequence[str], what: str) -> pa.Schema:
    """The Arrow schema of ``df``'s columns ``names`` (raises naming a missing or unconvertible column)."""
    check_names(df.columns, names, what)
    fields = []
    for name in names:
        spark_type = df.schema[name].dataType
        try:
            fields.append(pa.field(name, _arrow_type(df.sparkSession, spark_type)))
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
