"""Spark and Arrow where the Spark adapter meets them: column types, collected results, session settings.

:func:`arrow_type` says in which Arrow type Spark hands a column to the Python workers (and takes
it back from them), :func:`arrow_schema` checks a DataFrame's columns against that before any job
runs, and :func:`collected` brings a small result to the driver as polars, re-raising a kernel
error from an executor as itself. Nothing here imports pyspark at module import time: every
pyspark import is inside the function that needs it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import polars as pl
import pyarrow as pa

from calwatch.scale import remote
from calwatch.scale.collect import check_names

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructField, StructType


def col(name: str) -> Column:
    """A column by its exact name (dots and spaces are not struct paths here)."""
    from pyspark.sql import functions as sf

    return sf.col("`" + name.replace("`", "``") + "`")


def arrow_schema(df: DataFrame, names: Sequence[str], what: str) -> pa.Schema:
    """The Arrow schema of ``df``'s columns ``names`` (raises naming a missing or unconvertible column)."""
    check_names(df.columns, names, what)
    fields = []
    for name in names:
        spark_type = df.schema[name].dataType
        try:
            fields.append(pa.field(name, arrow_type(df.sparkSession, spark_type)))
        except Exception as err:
            msg = f"column {name!r}: Arrow cannot carry its Spark type {spark_type.simpleString()} ({err})"
            raise ValueError(msg) from err
    return pa.schema(fields)


def arrow_type(spark: SparkSession, spark_type: DataType, *, returned: bool = False) -> pa.DataType:
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


def arrow_field(spark: SparkSession, field: StructField) -> pa.Field:
    """A field of a UDF's result as the Arrow field Spark takes back (see :func:`arrow_type`)."""
    return pa.field(field.name, arrow_type(spark, field.dataType, returned=True))


def partial_type(bucket_type: DataType) -> StructType:
    """The Spark schema of :func:`calwatch.scale.kernel.partial_schema` for a bucket of ``bucket_type``."""
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    types = [bucket_type, StringType(), StringType(), IntegerType(), LongType(), DoubleType(), DoubleType()]
    names = ["bucket", "calibrator", "field", "index", "count", "total", "constant"]
    return StructType([StructField(n, t, nullable=True) for n, t in zip(names, types, strict=True)])


def collected(df: DataFrame, renames: dict[str, str] | None = None) -> pl.DataFrame:
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
        frame = pl.from_arrow(in_session_zone(table, df.sparkSession.conf.get("spark.sql.session.timeZone")))
    except (pl.exceptions.PolarsError, pa.ArrowException):  # a zone polars cannot name stays UTC
        frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def in_session_zone(table: pa.Table, zone: str | None) -> pa.Table:
    """``table`` with its zoned timestamp columns relabelled to ``zone`` (the same instants)."""
    fields = [
        field.with_type(pa.timestamp(field.type.unit, tz=zone))
        if pa.types.is_timestamp(field.type) and field.type.tz is not None and zone
        else field
        for field in table.schema
    ]
    return table.cast(pa.schema(fields)) if fields != list(table.schema) else table


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


@contextlib.contextmanager
def arrow_only() -> Iterator[None]:
    """Silence pyspark's warning about pandas 3: ``mapInArrow`` and ``toArrow`` never use pandas."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
        yield


__all__ = [
    "arrow_field",
    "arrow_only",
    "arrow_schema",
    "arrow_type",
    "col",
    "collected",
    "in_session_zone",
    "partial_type",
    "session_conf",
]
