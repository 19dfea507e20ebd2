"""The cluster paths under test, behind one small interface, and tasks with 2, 3 and 5 classes.

Each engine turns a polars prediction log into its own DataFrame (split into a given number of
partitions) and runs ``calwatch.scale.spark`` / ``calwatch.scale.dask`` on it, so one property test checks
Spark, Dask's synchronous scheduler and a Dask cluster of worker processes alike.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa

import calwatch as cw
from calwatch.monitor.labels import LabelReport
from tests.scale.logs import Task, fitted_task, real_task


@functools.cache
def task_with(K: int) -> Task:
    """A real task with ``K`` classes: breast cancer (2), wine (3), digits 0-4 (5)."""
    if K == 2:
        return real_task("breast_cancer")
    from sklearn.datasets import load_digits, load_wine

    if K == 3:
        X, y = load_wine(return_X_y=True)
    else:
        X, y = load_digits(return_X_y=True)
        X, y = X[y < K], y[y < K]
    return fitted_task(f"K={K}", X, y, seed=11)


class Engine:
    """One cluster path: its DataFrames, ``observe`` and ``label``."""

    name = ""

    def table(self, frame: pl.DataFrame, partitions: int) -> Any:
        """The log as this engine's DataFrame, in ``partitions`` partitions."""
        raise NotImplementedError

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Where the engine's work runs (a Dask scheduler); nothing to set up for Spark."""
        yield

    def observe(self, mon: cw.Monitor, table: Any, **columns: Any) -> tuple[int, ...]:
        with self.running():
            return self.module().observe(mon, table, **columns)  # type: ignore[no-any-return]

    def label(self, mon: cw.Monitor, table: Any, **columns: Any) -> LabelReport:
        with self.running():
            return self.module().label(mon, table, **columns)  # type: ignore[no-any-return]

    def module(self) -> Any:
        raise NotImplementedError


class SparkEngine(Engine):
    name = "spark"

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def table(self, frame: pl.DataFrame, partitions: int) -> Any:
        arrow = frame.to_arrow(compat_level=pl.CompatLevel.oldest())
        return self.spark.createDataFrame(arrow).repartition(partitions)

    def module(self) -> Any:
        import calwatch.scale.spark

        return calwatch.scale.spark


class SparkParquetEngine(SparkEngine):
    """Spark reading the log from parquet files, which its workers read themselves where they can.

    :meth:`table` writes the frame as ``partitions`` files of random row-group sizes;
    :attr:`reads` records, per ``observe``, whether the workers read the files (``"files"``) or
    Spark did (``"spark"``), as ``calwatch.scale.spark`` logs it.
    """

    name = "spark-parquet"

    def __init__(self, spark: Any, folder: Path) -> None:
        super().__init__(spark)
        self.folder = folder
        self.reads: list[str] = []

    def table(self, frame: pl.DataFrame, partitions: int) -> Any:
        import pyarrow.parquet as pq

        where = Path(tempfile.mkdtemp(dir=self.folder))
        rng = np.random.default_rng(frame.height * 7 + partitions)
        n_files = max(1, min(partitions, frame.height))
        cuts = np.sort(rng.choice(np.arange(1, max(frame.height, 2)), size=n_files - 1, replace=False))
        bounds = [0, *cuts.tolist(), frame.height]
        arrow = frame.to_arrow(compat_level=pl.CompatLevel.oldest())
        for i in range(n_files):
            part = arrow.slice(bounds[i], bounds[i + 1] - bounds[i])
            group = int(rng.integers(1, max(part.num_rows, 1) + 1))
            pq.write_table(part, where / f"part-{i}.parquet", row_group_size=group)
        return self.spark.read.parquet(str(where))

    def observe(self, mon: cw.Monitor, table: Any, **columns: Any) -> tuple[int, ...]:
        logger = logging.getLogger("calwatch.scale.spark")
        records: list[str] = []
        handler = _Recorder(records)
        level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            return super().observe(mon, table, **columns)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            read = "spark" if any("through Spark" in r for r in records) else "files"
            self.reads.append(read if records else "")


class _Recorder(logging.Handler):
    def __init__(self, records: list[str]) -> None:
        super().__init__(logging.INFO)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


class DaskEngine(Engine):
    def __init__(self, name: str, client: Any = None) -> None:
        self.name, self.client = name, client

    def table(self, frame: pl.DataFrame, partitions: int) -> Any:
        import dask.dataframe as dd

        # Through Arrow, so dates stay dates (dask then stores them as ISO strings) and
        # missing labels are NaN, as a pandas user's would be.
        arrow = frame.to_arrow()
        pdf = arrow.to_pandas()
        for field in arrow.schema:  # lists as pyarrow lists (Dask would store objects as strings)
            if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
                pdf[field.name] = pd.Series(
                    arrow.column(field.name).combine_chunks(), dtype=pd.ArrowDtype(field.type)
                )
        return dd.from_pandas(pdf, npartitions=max(1, min(partitions, len(pdf))), sort=False)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        import dask

        if self.client is None:
            with dask.config.set(scheduler="synchronous"):
                yield
        else:
            with self.client.as_current():
                yield

    def module(self) -> Any:
        import calwatch.scale.dask

        return calwatch.scale.dask
