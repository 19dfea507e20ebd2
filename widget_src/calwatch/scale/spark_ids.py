"""The id check of Spark's observe pass: ids hashed, the hashes sharded, repeats confirmed on the rows.

The observe pass (:func:`calwatch.scale.spark.observe` with ``check_ids=True``) hashes each row's
id to 64 bits beside the kernel (:class:`KeyHashes`), and each task ends with its folded partials
(:func:`sharded_partials`) and its hashes grouped by shard, as bytes (:class:`ShardedHashes`).
One shuffle brings each shard's rows together, and :func:`shard_reducer` sums the shard's partials
and finds its repeated hashes; :func:`confirm_repeats` then looks at the rows behind those hashes,
so a hash collision never refuses a good table. :func:`shard_bits` chooses the number of shards
from Spark's estimate of the input's size.

Nothing here imports pyspark at module import time: every pyspark import is inside the function
that needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from calwatch.scale.collect import repeated_id
from calwatch.scale.columns import LogColumns
from calwatch.scale.duplicates import key_hashes, repeated
from calwatch.scale.fold import FoldedPartials, sum_partials
from calwatch.scale.spark_arrow import col

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

#: Hash-shard bits at most: the hash rows are shuffled by their top bits (at most 256 shards; see
#: :func:`shard_bits`).
SHARD_BITS = 8
#: Input bytes per hash shard (:func:`shard_bits`): at a few bytes of parquet a row, a shard's
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


def shard_bits(df: DataFrame) -> int:
    """How many top bits of a key hash choose its shard: one shard per :data:`SHARD_INPUT_BYTES` of input.

    The input's size is Spark's own estimate for the plan (the files' size for a file scan; no
    job runs). Each shard's group costs the Python worker a fixed time (its transfer, an Arrow
    group-by of its partials, a sort), so a small table wants few groups; a large one wants
    many, so that a group's hashes (8 bytes a row) stay tens of MiB. On the bench log in
    ``local[2]`` (2 shards instead of 256, with :class:`ShardedHashes` built in one pass; CPU
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


class KeyHashes:
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
    def of(cls, df: DataFrame, columns: LogColumns) -> KeyHashes:
        """How ``df``'s id column is hashed: on the workers when integer-like, else by the JVM."""
        from pyspark.sql import types as st

        exact = (st.ByteType, st.ShortType, st.IntegerType, st.LongType, st.DateType, st.TimestampType,
                 st.TimestampNTZType)  # fmt: skip
        integer_like = type(df.schema[columns.id].dataType) in exact
        return cls(columns.id, in_jvm=not integer_like)

    def inputs(self, names: Sequence[str]) -> list[Column]:
        """The columns ``names``, and :data:`KEY` when the JVM hashes."""
        from pyspark.sql import functions as sf

        selected = [col(n) for n in names]
        if self.in_jvm:
            selected.append(sf.xxhash64(col(self.id)).alias(KEY))
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


class ShardedHashes:
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
        """Keep a batch's hashes (none kept for an empty batch)."""
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


def sharded_partials(folded: FoldedPartials, schema: pa.Schema, bits: int) -> pa.RecordBatch | None:
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


def with_hash_fields(partial: StructType) -> StructType:
    """The observe pass's output: the partials' fields, then :data:`SHARD` and :data:`HASHES`."""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    extra = [
        StructField(SHARD, IntegerType(), nullable=True),
        StructField(HASHES, BinaryType(), nullable=True),
    ]
    return StructType([*partial.fields, *extra])


def with_repeat_fields(partial: StructType) -> StructType:
    """The shard reduction's output: the reduced partials' fields, then :data:`HASHES` and :data:`REPEATS`."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    extra = [
        StructField(HASHES, BinaryType(), nullable=True),
        StructField(REPEATS, LongType(), nullable=True),
    ]
    return StructType([*partial.fields, *extra])


def shard_reducer(schema: pa.Schema, cap: int) -> Callable[[pa.Table], pa.Table]:
    """The function ``applyInArrow`` runs on each shard's group (``schema``: its output's).

    It returns the group's partials summed per (bucket, calibrator, field, index) — the same
    exact reduction as the unchecked pass's ``groupBy``: integer counts exactly, float sums to rounding — with
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
        found = repeated(blob_hashes(blobs))
        if found.shape[0]:
            row = [pa.nulls(1, field.type) for field in schema][:-2]
            row += [pa.array([found[:cap].tobytes()], pa.binary()), pa.array([found.shape[0]], pa.int64())]
            parts.append(pa.Table.from_arrays(row, schema=schema))
        return pa.concat_tables(parts)

    return reduce


def blob_hashes(blobs: pa.ChunkedArray) -> npt.NDArray[np.uint64]:
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


def confirm_repeats(
    df: DataFrame, columns: LogColumns, keyed: KeyHashes, hashes: npt.NDArray[np.uint64] | None
) -> None:
    """Raise naming an id seen twice (in a bucket or across), looking at rows whose hash is in ``hashes``.

    ``None`` looks at every row (one grouped query). Equal hashes of distinct keys (a collision)
    raise nothing.
    """
    from pyspark.sql import functions as sf

    keys = df.select(*keyed.inputs([columns.bucket, columns.id]))
    if hashes is not None:
        wanted = np.unique(hashes)
        key_schema = df.select(col(columns.bucket), col(columns.id)).schema

        def candidates(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                keep = np.isin(keyed.hashes(batch), wanted)
                if keep.any():
                    yield batch.filter(pa.array(keep)).select([columns.bucket, columns.id])

        keys = keys.mapInArrow(candidates, key_schema)
    repeats = (
        keys.groupBy(col(columns.id))
        .agg(sf.count(sf.lit(1)).alias("__cw_n"), sf.slice(sf.collect_list(col(columns.bucket)), 1, 3))
        .where(sf.col("__cw_n") > 1)
        .limit(1)
        .collect()
    )
    if repeats:
        raise repeated_id(columns.id, repeats[0][0], int(repeats[0][1]), list(repeats[0][2]))


__all__ = [
    "BLOB_HASHES",
    "CONFIRM_AT_MOST",
    "HASHES",
    "KEY",
    "REPEATS",
    "SHARD",
    "SHARD_BITS",
    "SHARD_INPUT_BYTES",
    "KeyHashes",
    "ShardedHashes",
    "blob_hashes",
    "confirm_repeats",
    "shard_bits",
    "shard_reducer",
    "sharded_partials",
    "with_hash_fields",
    "with_repeat_fields",
]
