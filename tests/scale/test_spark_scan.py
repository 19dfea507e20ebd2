"""calwatch.scale.spark_scan: which DataFrames the Python workers read from their files, and in which types.

The property test in ``test_clusters.py`` (engine ``spark-parquet``) checks that the statistics
equal the in-memory monitor's when the workers read the files; here, that every DataFrame the
workers could read otherwise than Spark is read through Spark instead, with the reason, and that a
worker's refusal falls back to Spark with the same statistics.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calwatch.scale import spark_arrow, spark_scan
from tests.scale.engines import task_with
from tests.scale.logs import assert_same_statistics, calibrated, log_frame, prob_names, replay

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")


# ---------------------------------------------------------------------------- types (no Spark)
def test_a_batch_is_cast_to_sparks_types_without_changing_a_value() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "id": pa.array([1, 2], pa.int32()),
            "name": pa.array(["a", "b"], pa.string()),
            "at": pa.array([0, 3_600_000_000], pa.timestamp("us", tz="UTC")),
        }
    )
    schema = pa.schema(
        [("id", pa.int64()), ("name", pa.large_string()), ("at", pa.timestamp("us", tz="Europe/Paris"))]
    )
    cast = spark_scan.in_spark_types(batch, schema)
    assert cast.schema == schema
    assert cast.column("id").to_pylist() == [1, 2]
    assert cast.column("name").to_pylist() == ["a", "b"]
    # The same instants, named in the session's zone.
    assert cast.column("at").cast(pa.int64()).to_pylist() == [0, 3_600_000_000]


@pytest.mark.parametrize(
    ("values", "spark_type", "reason"),
    [
        (pa.array([1, 2**40], pa.int64()), pa.int32(), "not castable"),
        (pa.array([0.5, 1.25], pa.float64()), pa.int64(), "not castable"),
        (pa.array([dt.date(1500, 1, 1), dt.date(2026, 1, 1)], pa.date32()), pa.date32(), "before 1582-10-15"),
        (pa.array([dt.datetime(1899, 12, 31)], pa.timestamp("us")), pa.timestamp("us"), "before 1900-01-01"),
        (
            pa.array([dt.datetime(1899, 12, 31, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
            pa.timestamp("us", tz="UTC"),
            "before 1900-01-01",
        ),
    ],
)
def test_values_spark_may_read_otherwise_are_refused(
    values: pa.Array, spark_type: pa.DataType, reason: str
) -> None:
    batch = pa.RecordBatch.from_arrays([values], names=["x"])
    with pytest.raises(spark_scan.RefusedPieceError, match=reason):
        spark_scan.in_spark_types(batch, pa.schema([("x", spark_type)]))


def test_a_refusal_survives_sparks_wrapping_and_names_its_reason() -> None:
    wrapped = RuntimeError(
        f"Py4JJavaError ... PythonException: RuntimeError: {spark_scan.REFUSED} f.parquet: why\n  at ..."
    )
    assert spark_scan.refused(wrapped) == "f.parquet: why"
    assert spark_scan.refused(RuntimeError("another failure")) is None


# ---------------------------------------------------------------------------- which plans
def _log(n: int = 60, *, buckets: Any = None) -> pl.DataFrame:
    task = task_with(2)
    days = buckets if buckets is not None else (np.arange(n) % 3).tolist()
    return log_frame(task.P[:n], np.arange(n), days, [int(v) for v in task.y[:n]])


def _written(frame: pl.DataFrame, folder: Path, **options: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(frame.to_arrow(compat_level=pl.CompatLevel.oldest()), folder / "part-0.parquet", **options)
    return folder


def _scan(df: Any) -> tuple[Any, str]:
    names = ["id", "bucket", *prob_names(2)]
    return spark_scan.file_scan(df.select(*names), spark_arrow.arrow_schema(df, names, "the DataFrame"), 1000)


def test_only_a_bare_scan_of_local_unpartitioned_parquet_is_read_by_the_workers(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql import functions as sf

    monkeypatch.setattr(spark_scan, "PIECE_ROWS", 25)  # one piece a row group
    frame = _log()
    plain = spark.read.parquet(str(_written(frame, tmp_path / "plain", row_group_size=25)))
    scan, reason = _scan(plain)
    assert scan is not None and reason == "1 file, 3 pieces"
    assert [p.groups for p in scan.pieces] == [(0,), (1,), (2,)]
    scan, _ = _scan(plain.select("p1", "p0", "bucket", "id", "y"))  # a projection of plain columns
    assert scan is not None
    scan, _ = _scan(plain.withColumnRenamed("p0", "q").withColumnRenamed("q", "p0"))  # optimised away
    assert scan is not None
    refused = {
        "a filter": (plain.where(sf.col("id") > 3), "not a bare file scan (Filter)"),
        "a computed column": (plain.withColumn("p0", sf.col("p0") * 1.0), "computes or renames"),
        "swapped columns": (
            plain.select(sf.col("p1").alias("p0"), sf.col("p0").alias("p1"), "id", "bucket"),
            "computes or renames",
        ),
        "rows in memory": (spark.createDataFrame(frame.to_arrow()), "not a bare file scan (LocalRelation)"),
        "a union": (plain.union(plain), "not a bare file scan (Union)"),
    }
    frame.write_csv(tmp_path / "log.csv")
    csv = spark.read.csv(str(tmp_path / "log.csv"), header=True, inferSchema=True)
    refused["csv"] = (csv, "does not read plain parquet")
    split = tmp_path / "split"
    for day in range(3):
        _written(frame.filter(pl.col("bucket") == day).drop("bucket"), split / f"bucket={day}")
    refused["partitioned folders"] = (spark.read.parquet(str(split)), "partitioned folders")
    old = tmp_path / "int96"
    with_time = frame.with_columns(
        bucket=pl.lit(dt.datetime(2026, 3, 1)) + pl.duration(days=pl.col("bucket"))
    )
    _written(with_time, old, use_deprecated_int96_timestamps=True)
    refused["INT96 timestamps"] = (spark.read.parquet(str(old)), "INT96")
    for case, (df, why) in refused.items():
        scan, reason = _scan(df)
        assert scan is None, case
        assert why in reason, (case, reason)


def test_files_missing_a_column_are_read_through_spark_with_its_nulls(spark: Any, tmp_path: Path) -> None:
    import calwatch.scale.spark as cw_spark

    frame = _log(90)
    folder = tmp_path / "merged"
    _written(frame.head(45), folder)
    pq.write_table(frame.tail(45).drop("y").to_arrow(), folder / "part-1.parquet")
    df = spark.read.option("mergeSchema", "true").parquet(str(folder))
    names = ["id", "bucket", "y"]
    scan, reason = spark_scan.file_scan(df.select(*names), spark_arrow.arrow_schema(df, names, "x"), 100)
    assert scan is None and "no column 'y'" in reason
    task = task_with(2)
    table, memory = calibrated(task), calibrated(task)
    cw_spark.observe(table, df, id="id", probs=prob_names(2), bucket="bucket", label="y", category="cat")
    replay(
        memory, frame.with_columns(pl.when(pl.col("id") >= 45).then(None).otherwise(pl.col("y")).alias("y"))
    )
    assert_same_statistics(table, memory)


def test_a_workers_refusal_reads_through_spark_with_the_same_statistics(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A date before the Gregorian switch: the worker refuses, Spark reads (rebase mode CORRECTED)."""
    import calwatch.scale.spark as cw_spark

    days = [dt.date(1500, 1, 1) + dt.timedelta(days=int(d)) for d in np.arange(60) % 2]
    frame = _log(60, buckets=days)
    df = spark.read.parquet(str(_written(frame, tmp_path / "old")))
    task = task_with(2)
    table, memory = calibrated(task), calibrated(task)
    key = "spark.sql.parquet.datetimeRebaseModeInRead"
    with (
        cw_spark.session_conf(spark, key, "CORRECTED"),
        caplog.at_level(logging.INFO, "calwatch.scale.spark"),
    ):
        cw_spark.observe(table, df, id="id", probs=prob_names(2), bucket="bucket", label="y", category="cat")
    messages = [r.getMessage() for r in caplog.records]
    assert any("the workers read the files themselves" in m for m in messages), messages
    assert any("a worker refused to read the files" in m and "before 1582-10-15" in m for m in messages), (
        messages
    )
    replay(memory, frame)
    assert_same_statistics(table, memory)


def test_read_files_false_reads_through_spark(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import calwatch.scale.spark as cw_spark

    frame = _log()
    df = spark.read.parquet(str(_written(frame, tmp_path / "log")))
    task = task_with(2)
    rows, files, memory = calibrated(task), calibrated(task), calibrated(task)
    log = {"id": "id", "probs": prob_names(2), "bucket": "bucket", "label": "y", "category": "cat"}
    with caplog.at_level(logging.INFO, "calwatch.scale.spark"):
        cw_spark.observe(rows, df, read_files=False, **log)
        assert not any("the workers read" in r.getMessage() for r in caplog.records)
        cw_spark.observe(files, df, check_ids=False, **log)
        assert any("the workers read" in r.getMessage() for r in caplog.records)
    replay(memory, frame)
    assert_same_statistics(rows, memory)
    assert_same_statistics(files, memory)
