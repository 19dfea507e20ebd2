"""What Spark's Python workers run: the frozen monitor, broadcast once, and the function of each task.

:class:`Shipped` broadcasts the frozen calibrators (:mod:`calwatch.scale.frozen`: JSON and
arrays, never pickle) as bytes, decoded once per Python worker, and makes the function that
``mapInArrow`` runs on each partition: the kernel on Arrow batches of the partition's rows (or
of the files it names, :mod:`calwatch.scale.spark_scan`), and, for the id check, the task's
folded partials and its key hashes by shard (:mod:`calwatch.scale.spark_ids`). Nothing here
imports pyspark at module import time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from calwatch.scale import remote, spark_ids, spark_scan
from calwatch.scale.columns import LogColumns
from calwatch.scale.fold import FoldedPartials
from calwatch.scale.kernel import partial_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from calwatch.scale.collect import Snapshot


class Shipped:
    """The frozen monitor broadcast as bytes (destroyed on exit); :meth:`executor` makes the task function.

    ``kernel`` is what the tasks run on each batch (the signature of
    :func:`~calwatch.scale.kernel.partial_statistics`), ``rows`` the rows per kernel call.
    """

    def __init__(self, spark: SparkSession, snap: Snapshot, *, kernel: remote.Kernel, rows: int) -> None:
        self.kernel, self.rows = kernel, rows
        data = snap.frozen.to_bytes()
        self.key = remote.digest(data)
        self.broadcast = spark.sparkContext.broadcast(data)

    def __enter__(self) -> Shipped:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.broadcast.destroy()

    def executor(
        self,
        columns: LogColumns,
        *,
        observed: bool,
        hashes: tuple[spark_ids.KeyHashes, pa.DataType, int] | None = None,
        scan: spark_scan.FileScan | None = None,
    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        """The function ``mapInArrow`` runs on each partition (pickled with its few small captures).

        With ``hashes`` (the key hashing, the bucket's Arrow type and the shard bits), the task
        folds its partials and yields them once, each with its shard
        (:func:`~calwatch.scale.spark_ids.sharded_partials`), then its hash rows
        (:class:`~calwatch.scale.spark_ids.ShardedHashes`), as many per row as
        :data:`~calwatch.scale.spark_ids.BLOB_HASHES` says when the function is made. With ``scan``
        the partition's rows name pieces of files, and the task reads them
        (:meth:`calwatch.scale.spark_scan.FileScan.batches`).
        """
        key, broadcast, kernel, rows = self.key, self.broadcast, self.kernel, self.rows
        per_row = spark_ids.BLOB_HASHES

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
            .append(pa.field(spark_ids.SHARD, pa.int32()))
            .append(pa.field(spark_ids.HASHES, pa.binary()))
        )

        def run_hashing(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            frozen = remote.frozen_for(key, lambda: bytes(broadcast.value))
            sharded, folded = spark_ids.ShardedHashes(bits, per_row), FoldedPartials()
            for batch in remote.coalesced(read(batches), rows):
                out = remote.raising_marked(
                    keyed.kernel_batch(batch), frozen, columns, observed=observed, kernel=kernel
                )
                sharded.add(keyed.hashes(batch))  # after the kernel: null keys were refused there
                if out.num_rows:
                    folded.add(out)
            for last in (spark_ids.sharded_partials(folded, schema, bits), sharded.batch(schema)):
                if last is not None:
                    yield last

        return run_hashing


__all__ = ["Shipped"]
