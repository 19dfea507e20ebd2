"""Column types the property tests do not draw: timestamps, and Spark's large string types.

* Timestamp buckets (naive ``timestamp[us]`` and a tz-aware one) with timestamp ids, through
  ``observe_table``/``label_table``, Spark and Dask: the statistics of the in-memory monitor
  that observed the same rows bucket by bucket and took the same labels (the randomised APS
  sets draw each row's ``u`` from its id, so an id read differently would show).
* Spark with ``spark.sql.execution.arrow.useLargeVarTypes``: string ids, buckets and categories
  reach the Python workers as ``large_string``; observe (with and without the id check) and
  late labels by string id give the in-memory monitor's statistics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

import calwatch as cw
from calwatch.scale.spark import session_conf
from tests.scale.engines import DaskEngine, Engine, SparkEngine, SparkParquetEngine, task_with
from tests.scale.logs import assert_same_statistics, calibrated, log_frame, prob_names, replay

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")

START = datetime(2026, 3, 28, 22, 30)  # hours across midnight: local and UTC dates differ
PATHS = ["table", "spark", "spark-no-id-check", "spark-parquet", "dask-sync", "dask-cluster"]


def _timestamp_log(zone: str | None, seed: int) -> tuple[cw.Monitor, pl.DataFrame]:
    """A K = 3 log whose buckets are hours and whose ids are instants (in ``zone``, or naive)."""
    task = task_with(3)
    n = 150
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, task.P.shape[0], size=n)
    buckets = [START + timedelta(hours=int(h)) for h in rng.integers(0, 4, size=n)]
    ids = [START + timedelta(seconds=int(s), microseconds=7) for s in rng.permutation(10 * n)[:n]]
    known = rng.random(n) < 0.4
    y = [int(v) if k else None for v, k in zip(task.y[rows], known, strict=True)]
    frame = log_frame(task.P[rows], ids, buckets, y)
    if zone is not None:
        frame = frame.with_columns(pl.col("bucket", "id").dt.replace_time_zone(zone))
    assert frame.schema["bucket"] == pl.Datetime("us", zone)
    return calibrated(task), frame


def _engine(path: str, request: pytest.FixtureRequest) -> Engine | None:
    if path == "table":
        return None
    if path.startswith("spark-parquet"):
        return SparkParquetEngine(request.getfixturevalue("spark"), request.getfixturevalue("tmp_path"))
    if path.startswith("spark"):
        return SparkEngine(request.getfixturevalue("spark"))
    pytest.importorskip("dask.dataframe")
    client = request.getfixturevalue("dask_client") if path == "dask-cluster" else None
    return DaskEngine(path, client)


@contextlib.contextmanager
def _session_time_zone(engine: Engine | None, zone: str | None) -> Iterator[None]:
    """Spark's session time zone set to the log's, or UTC for a naive log (restored after).

    Spark's ``TimestampType`` holds instants and hands them to Python in the session's zone, so
    a bucket's name (its local time) is the log's only when the session shares its zone.
    """
    if not isinstance(engine, SparkEngine):
        yield
        return
    key = "spark.sql.session.timeZone"
    before = engine.spark.conf.get(key)
    engine.spark.conf.set(key, zone or "UTC")
    try:
        yield
    finally:
        engine.spark.conf.set(key, before)


def _table(engine: Engine, frame: pl.DataFrame, partitions: int, zone: str | None) -> Any:
    """The engine's DataFrame; for Spark and a naive log, its timestamps as ``TimestampNTZType``.

    Spark reads a naive Arrow timestamp as a ``TimestampType`` instant (in the session's zone,
    UTC here); its naive type is ``timestamp_ntz``, which a naive log's table would have. From
    parquet it reads a naive timestamp (``isAdjustedToUTC=false``) as ``timestamp_ntz`` itself.
    """
    table = engine.table(frame, partitions)
    if isinstance(engine, SparkParquetEngine):
        expected = "timestamp" if zone is not None else "timestamp_ntz"
        stamps = [name for name, kind in frame.schema.items() if isinstance(kind, pl.Datetime)]
        assert {table.schema[name].dataType.simpleString() for name in stamps} == {expected}
        return table
    if not isinstance(engine, SparkEngine) or zone is not None:
        return table
    from pyspark.sql import functions as sf

    naive = [name for name, kind in frame.schema.items() if kind == pl.Datetime("us")]
    return table.withColumns({name: sf.col(name).cast("timestamp_ntz") for name in naive})


@pytest.mark.parametrize("zone", [None, "Europe/Paris"], ids=["naive", "tz-aware"])
@pytest.mark.parametrize("path", PATHS)
def test_timestamp_buckets_and_ids_equal_the_in_memory_monitor(
    path: str, zone: str | None, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    engine = _engine(path, request)
    table, frame = _timestamp_log(zone, seed=len(path) + (zone is None))
    memory = calibrated(task_with(3))
    columns = {"id": "id", "probs": prob_names(3), "bucket": "bucket", "label": "y", "category": "cat"}
    unlabelled = frame.filter(pl.col("y").is_null())
    late = pl.DataFrame(
        {
            "rid": unlabelled["id"].head(40).to_list()
            + frame.filter(pl.col("y").is_not_null())["id"].head(10).to_list(),
            "truth": [1] * 40 + [2] * 10,
        }
    ).with_columns(pl.col("rid").cast(frame.schema["id"]))
    with _session_time_zone(engine, zone):
        if engine is None:
            path_file = tmp_path / "log.parquet"
            pq.write_table(frame.to_arrow(), path_file, row_group_size=40)
            assert pq.read_schema(path_file).field("bucket").type.tz == zone
            table.observe_table(path_file, chunk_rows=50, **columns)
        else:
            checks = {"check_ids": False} if path.endswith("no-id-check") else {}
            engine.observe(table, _table(engine, frame, 3, zone), **columns, **checks)
            if isinstance(engine, SparkParquetEngine):  # instants are integer-like keys
                assert engine.reads == ["files"]
        replay(memory, frame)
        assert_same_statistics(table, memory)
        assert table.summary()["name"].to_list() == memory.summary()["name"].to_list()
        if engine is None:
            got = table.label_table(late, id="rid", label="truth")
        else:
            got = engine.label(table, _table(engine, late, 2, zone), id="rid", label="truth")
    want = memory.label(late["rid"].to_list(), late["truth"].to_numpy())
    assert (got.matched, got.unmatched, got.relabelled) == (want.matched, want.unmatched, want.relabelled)
    assert set(got.batches) == set(want.batches)
    assert_same_statistics(table, memory)


@pytest.mark.parametrize("from_files", [False, True], ids=["rows", "files"])
@pytest.mark.parametrize("check_ids", [True, False], ids=["id-check", "no-id-check"])
def test_spark_large_string_columns_equal_the_in_memory_monitor(
    spark: Any, check_ids: bool, from_files: bool, tmp_path: Path
) -> None:
    """Through Spark's rows, and from parquet files (the workers read them when the id check is off)."""
    import calwatch.scale.spark as cw_spark

    task = task_with(3)
    n = 160
    rng = np.random.default_rng(13)
    rows = rng.integers(0, task.P.shape[0], size=n)
    y = task.y[rows]
    ids = [f"row-{i:05d}" for i in rng.permutation(10 * n)[:n]]
    buckets = [f"day-{d}" for d in rng.integers(0, 4, size=n)]
    known = rng.random(n) < 0.5
    frame = log_frame(
        task.P[rows], ids, buckets, [int(v) if k else None for v, k in zip(y, known, strict=True)]
    )
    table, memory = calibrated(task), calibrated(task)
    engine = SparkParquetEngine(spark, tmp_path) if from_files else SparkEngine(spark)
    columns = {"id": "id", "probs": prob_names(3), "bucket": "bucket", "label": "y", "category": "cat"}
    before = spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes")
    with session_conf(spark, "spark.sql.execution.arrow.useLargeVarTypes", "true"):
        log = engine.table(frame, 3)
        probe = log.select("id", "bucket", "cat").mapInArrow(_string_types, "types string")
        assert {row[0] for row in probe.collect()} == {"large_string,large_string,large_string"}
        engine.observe(table, log, check_ids=check_ids, **columns)
        if isinstance(engine, SparkParquetEngine):  # string keys: the id check hashes them in the JVM
            assert engine.reads == ["spark" if check_ids else "files"]
        replay(memory, frame)
        assert_same_statistics(table, memory)
        for call in range(2):  # late labels, then relabels of some of them and of observed labels
            pick = rng.random(n) < 0.4
            truth = (y + call) % 3
            labels = pl.DataFrame({"rid": [ids[i] for i in np.flatnonzero(pick)], "truth": truth[pick]})
            got = cw_spark.label(table, engine.table(labels, 2), id="rid", label="truth")
            want = memory.label(labels["rid"].to_list(), labels["truth"].to_numpy())
            assert (got.matched, got.unmatched, got.relabelled) == (
                want.matched,
                want.unmatched,
                want.relabelled,
            )
            assert_same_statistics(table, memory)
        if check_ids:  # an id twice in a bucket (the hashes come back as large_binary): refused
            same = frame.filter(pl.col("bucket") == buckets[0])["id"].head(2).to_list()
            twice = frame.with_columns(pl.col("id").replace(same[1], same[0]))
            fresh = calibrated(task)
            with pytest.raises(ValueError, match=f"id column 'id': id '{same[0]}' appears 2 times"):
                cw_spark.observe(fresh, engine.table(twice, 3), **columns)
            assert fresh.n_batches == 0
    assert spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes") == before


def _string_types(batches: Iterator[Any]) -> Iterator[Any]:
    """The Arrow types the Python workers see for ``id``, ``bucket`` and ``cat`` (one row a batch)."""
    import pyarrow as pa

    for batch in batches:
        kinds = ",".join(str(batch.schema.field(name).type) for name in ("id", "bucket", "cat"))
        yield pa.RecordBatch.from_pydict({"types": [kinds]})
