"""Cluster fixtures for the scale tests: one Spark session and one Dask cluster for the whole run.

Starting Spark costs seconds (a JVM, then a Python worker per core that imports calwatch) and a
Dask ``LocalCluster`` of worker processes about as much, so each is started once, on first use,
and shared: the one-machine tests (``test_table.py``) never start either. Spark runs on
``local[2,3]``: two cores and up to three attempts per task, so a test can fail a task's first
attempt and check that the retry counts every row once, and a Python worker that hangs is
killed after a minute of silence and its task tried again.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local Spark session (2 cores, 3 attempts a task, no UI, 4 shuffle partitions)."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17: `make java` installs it")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("calwatch-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        # A Python worker silent for a minute (tasks here take well under a second) is killed,
        # so its task fails and is tried again instead of leaving the test waiting; a worker
        # that dies prints its Python stack.
        .config("spark.sql.execution.pyspark.udf.idleTimeoutSeconds", "60")
        .config("spark.sql.execution.pyspark.udf.killOnIdleTimeout", "true")
        .config("spark.sql.execution.pyspark.udf.faulthandler.enabled", "true")
        .config("spark.python.worker.idleTimeoutSeconds", "60")
        .config("spark.python.worker.killOnIdleTimeout", "true")
        .config("spark.python.worker.faulthandler.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def dask_client() -> Iterator[Any]:
    """A Dask client of a two-process local cluster (one thread each); not the default scheduler."""
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client
