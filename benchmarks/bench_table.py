"""A prediction log in parquet, monitored five ways: rows per second and peak memory of each.

The log is a real task's model resampled to size (scikit-learn's breast cancer data, a logistic
regression; each logged row is a test row drawn with replacement, so its probabilities are the
model's own): ``id``, ``day`` (100 buckets), ``p0``, ``p1``, written in 1,000,000-row groups to a
temporary folder (never committed). Each path runs in a fresh process, so its peak RSS is its own:

* the in-memory loop: each row group read with pyarrow and given to ``Monitor.observe`` (no
  shift detectors, no row log: the statistics only, as the table paths compute them);
* ``Monitor.observe_table`` on the parquet file (the embedded default);
* ``calwatch.scale.spark.observe`` in Spark ``local[2]`` and ``local[1]``, with and without its id check
  (the session and its Python workers warmed up on a 2% sample, then on the log's first 10^6
  rows, not timed). The log is a
  bare parquet scan, so by default the Python workers read its row groups themselves
  (:mod:`calwatch.scale.spark_scan`); "Spark's rows" is the same call with ``read_files=False``, the
  path any other DataFrame takes: Spark's scan hands the workers its rows as Arrow;
* the JVM's own cost beside it: the same log through a bare ``mapInArrow`` in ``local[2]`` whose
  function reads every Arrow batch and returns nothing but its row count (Spark's scan and its
  rows-to-Arrow transfer to the Python workers only, in batches of calwatch's size), warmed up
  the same way; its rows/s and calwatch's time over it are printed;
* ``calwatch.scale.dask.observe`` with the synchronous scheduler (when dask is installed);
* the peers beside them, each in its own process in the competitors' environments
  (``benchmarks/.venv-drift`` and ``benchmarks/.venv-whylogs``, built by ``bash
  benchmarks/drift_env.sh`` and ``bash benchmarks/whylogs_env.sh``; ``make bench`` builds them):
  NannyML's CBPE over the whole log, Evidently's drift preset per day over the first
  ``--evidently-rows`` rows and whylogs' profiles per day, merged over row groups, over the first
  ``--whylogs-rows`` (default all; ``benchmarks/table_peers.py`` says what each computes). None
  computes calwatch's statistics, so they are not in the equality check: they are what a team
  would run instead, on the same file, the same chunks and the same cores.

Every calwatch path first runs once, untimed, on the log's first 20,000 rows with a throwaway
monitor (Spark on a 2% sample, then on the first 10^6 rows): the once-per-process costs —
imports, numba loading the compiled kernels from its on-disk cache (about 1 s here), Spark's JVM
and Python workers — are printed in their own column, "warm-up s", and left out of rows/s,
which is the cost per row.

CPU ns/row is the measuring process's own CPU time (all its threads; not the JVM's or Spark's
and Dask's worker processes) per row: on shared cores it says what a path costs when the wall
clock says mostly how busy the machine was. Every path must give the same statistics; the
benchmark checks that the summaries agree before it prints the table. Then ``observe_table``
reads a 10⁸-row log (``--big-rows``) and its peak RSS is compared with the 10⁷-row run: it
must stay flat (targets: ≥ 5 M rows/s on the binary log,
≥ the in-memory loop, peak RSS under 500 MiB; Spark ``local[2]`` ≥ 1 M rows/s and within 3× of
``observe_table`` per core).

Run: ``python benchmarks/bench_table.py [--rows 10000000] [--big-rows 100000000]
[--evidently-rows 1000000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from _common import machine_line

GROUP_ROWS = 1_000_000
BUCKETS = 100
#: Rows of the warm-up log every path runs once, untimed, before the measured run.
WARM_ROWS = 20_000
#: Rows of the Spark paths' second warm-up (:func:`warm_files`).
SPARK_WARM_ROWS = 1_000_000


def task() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Calibration probabilities and labels, and the test rows' probabilities, of a real model."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, C=0.05)).fit(X[:200], y[:200])
    P = model.predict_proba(X[200:])
    return P[:180], y[200:380], P[180:]


def write_log(path: Path, rows: int) -> None:
    """The parquet log: ``rows`` rows in row groups of :data:`GROUP_ROWS`, days in order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, _, pool = task()
    rng = np.random.default_rng(1)
    schema = pa.schema([("id", pa.int64()), ("day", pa.int32()), ("p0", pa.float64()), ("p1", pa.float64())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, GROUP_ROWS):
            n = min(GROUP_ROWS, rows - start)
            ids = np.arange(start, start + n, dtype=np.int64)
            P = pool[rng.integers(0, pool.shape[0], size=n)]
            day = (ids * BUCKETS // rows).astype(np.int32)
            writer.write_table(pa.table({"id": ids, "day": day, "p0": P[:, 0], "p1": P[:, 1]}, schema=schema))


def monitor() -> Any:
    import calwatch as cw

    P_cal, y_cal, _ = task()
    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps-by-label": cw.SplitConformalClassifier(score="aps", alpha=0.1, mondrian="label"),
        },
        shift=None, row_log=False,
    )  # fmt: skip
    return mon.calibrate(probs=P_cal, y=y_cal)


def warm_log(log: Path) -> Path:
    """The warm-up log beside ``log``: its first :data:`WARM_ROWS` rows (written by ``main``)."""
    return log.with_name("warm.parquet")


def warm_files(log: Path) -> Path:
    """The Spark warm-up folder beside ``log``: its first :data:`SPARK_WARM_ROWS` rows as four files.

    Four files make four pieces, so when the Python workers read the files themselves each of
    them (one per core) reads some and loads its compiled kernels before the measured run.
    """
    return log.with_name("warm-files")


def write_warm_log(log: Path) -> None:
    """Write :func:`warm_log` (``log``'s first :data:`WARM_ROWS` rows) and :func:`warm_files`."""
    import pyarrow.parquet as pq

    first = pq.ParquetFile(log).read_row_group(0)
    pq.write_table(first.slice(0, WARM_ROWS), warm_log(log))
    warm_files(log).mkdir(exist_ok=True)
    quarter = min(SPARK_WARM_ROWS, first.num_rows) // 4
    for i in range(4):
        pq.write_table(first.slice(i * quarter, quarter), warm_files(log) / f"part-{i}.parquet")


def observe_log(path_name: str, mon: Any, log: Path) -> None:
    """Observe a log by one of the in-process paths (the loop, ``observe_table``, Dask)."""
    if path_name == "in-memory loop":
        import pyarrow.parquet as pq

        file = pq.ParquetFile(log)
        for group in range(file.num_row_groups):
            table = file.read_row_group(group)
            days = table.column("day").to_numpy()
            P = np.column_stack([table.column("p0").to_numpy(), table.column("p1").to_numpy()])
            ids = table.column("id").to_numpy()
            for day in np.unique(days):  # one observe per (row group, day): the loop a user writes
                sel = days == day
                mon.observe(probs=P[sel], ids=ids[sel], name=str(day))
    elif path_name == "observe_table":
        mon.observe_table(log, id="id", probs=["p0", "p1"], bucket="day", progress=False)
    elif path_name == "dask":
        import dask
        import dask.dataframe as dd

        import calwatch.scale.dask

        with dask.config.set(scheduler="synchronous"):
            ddf = dd.read_parquet(str(log), split_row_groups=True)  # one partition a row group
            calwatch.scale.dask.observe(mon, ddf, id="id", probs=["p0", "p1"], bucket="day")
    else:
        msg = f"no in-process path named {path_name!r}"
        raise ValueError(msg)


def measure(path_name: str, log: Path) -> dict[str, Any]:
    """Run one path on the log in this process: seconds, peak RSS and the summary's counts.

    Every path first runs once, untimed, on the warm-up log (:func:`warm_log`) with a throwaway
    monitor, as the Spark paths warm their session: what a process pays once (imports, numba
    loading its compiled kernels from the on-disk cache, about 1 s on these cores) is not the
    monitor's cost per row. That once-per-process time is returned as ``warmup_seconds``.
    """
    mon = monitor()
    warmup = float("nan")
    if not path_name.startswith("spark") and warm_log(log).exists():
        started = time.perf_counter()
        observe_log(path_name, monitor(), warm_log(log))
        warmup = time.perf_counter() - started
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    if not path_name.startswith("spark"):
        observe_log(path_name, mon, log)
    else:
        from pyspark.sql import SparkSession

        import calwatch.scale.spark

        cores = path_name.split("[")[1].split("]")[0]
        spark = (
            SparkSession.builder.master(f"local[{cores}]").config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "8").config("spark.driver.memory", "2g").getOrCreate()
        )  # fmt: skip
        df = spark.read.parquet(str(log))
        if path_name.endswith(BARE):
            return _bare_map_in_arrow(spark, df, baseline)
        # Warm-up, not measured: the JVM, the session and the Python workers (each imports calwatch
        # once, 5-10 s on 2 cores) are a once-per-session cost, not the monitor's per-row one. A
        # 2% sample runs a task per core (``limit`` ran one: the second worker started, and the
        # JIT compiled the scan-to-Arrow path, inside the measured run). Then the measured call
        # itself on the log's first 10^6 rows, as four files: each worker reads some, and the
        # JVM's shuffle and its heap have seen a table of that size (after the small warm-ups
        # alone the first call on the log ran ~1 s slower than the next ones: 4.3 s, then 3.0-3.3).
        sample = df.sample(fraction=0.02, seed=1)
        started = time.perf_counter()
        calwatch.scale.spark.observe(monitor(), sample, id="id", probs=["p0", "p1"], bucket="day")
        read_files = ROWS not in path_name
        check = "no id check" not in path_name
        warm = spark.read.parquet(str(warm_files(log)))
        calwatch.scale.spark.observe(
            monitor(), warm, id="id", probs=["p0", "p1"], bucket="day", check_ids=check, read_files=read_files
        )
        warmup = time.perf_counter() - started
        cpu_start = _cpu_seconds()
        start = time.perf_counter()
        calwatch.scale.spark.observe(
            mon, df, id="id", probs=["p0", "p1"], bucket="day", check_ids=check, read_files=read_files
        )
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_start
    if path_name.startswith("spark"):  # not timed: stopping the session (~1 s) is not a cost per row
        spark.stop()
    summary = (
        mon.summary()
        .group_by("calibrator")
        .agg(
            n_rows=__import__("polars").col("n_rows").sum(),
            covered_sizes=__import__("polars").col("mean_set_size").sum(),
        )
    )
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rows": int(mon.status()["rows_seen"]),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "baseline_mib": baseline,
        "check": sorted(summary.rows()),
        "batches": mon.n_batches,
        "warmup_seconds": warmup,
    }


#: The path name's tail of the bare ``mapInArrow`` run (the JVM's own cost).
BARE = "bare mapInArrow"
#: The path name's tail of the Spark runs that read through Spark's rows (``read_files=False``).
ROWS = "Spark's rows"


def _bare_map_in_arrow(spark: Any, df: Any, baseline: float) -> dict[str, Any]:
    """The log's columns through a ``mapInArrow`` that only counts its rows: Spark's scan and transfer.

    The Python function reads every batch Spark hands it and yields one row, its row count, per
    task; the batches are calwatch's size (``spark.sql.execution.arrow.maxRecordsPerBatch`` set
    as ``calwatch.scale.spark`` sets it while it runs), so the difference to ``calwatch.scale.spark.observe``
    is calwatch's own work: the kernel, the id check's hashes and the shuffle of the partials.
    """
    import calwatch.scale.spark

    def count(batches: Any) -> Any:
        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"n": [sum(batch.num_rows for batch in batches)]})

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(calwatch.scale.spark.ARROW_ROWS))
    columns = ["id", "day", "p0", "p1"]
    started = time.perf_counter()
    df.sample(fraction=0.02, seed=1).select(*columns).mapInArrow(count, "n long").collect()  # warm-up
    warmup = time.perf_counter() - started
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    rows = sum(row[0] for row in df.select(*columns).mapInArrow(count, "n long").collect())
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_start
    spark.stop()
    return {
        "seconds": seconds, "cpu_seconds": cpu, "rows": int(rows), "baseline_mib": baseline,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "check": None, "batches": 0, "bare": True, "warmup_seconds": warmup,
    }  # fmt: skip


#: The competitors' environments and script (``benchmarks/drift_env.sh``, ``whylogs_env.sh``,
#: ``table_peers.py``): whylogs needs numpy < 2 and its own pins, so it has a venv of its own.
HERE = Path(__file__).resolve().parent
PEERS_PYTHON = {
    "nannyml": HERE / ".venv-drift" / "bin" / "python",
    "evidently": HERE / ".venv-drift" / "bin" / "python",
    "whylogs": HERE / ".venv-whylogs" / "bin" / "python",
}
PEERS_ENV_SCRIPT = {"nannyml": "drift_env.sh", "evidently": "drift_env.sh", "whylogs": "whylogs_env.sh"}
PEERS = HERE / "table_peers.py"
#: Reference rows the peers fit on (the calibration rows with their labels, resampled to size).
REFERENCE_ROWS = 100_000


def write_reference(path: Path) -> None:
    """The peers' labelled reference: the calibration rows resampled to :data:`REFERENCE_ROWS`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    P_cal, y_cal, _ = task()
    pick = np.random.default_rng(2).integers(0, len(y_cal), size=REFERENCE_ROWS)
    p1 = P_cal[pick, 1]
    y_pred = (p1 >= 0.5).astype(np.int64)
    pq.write_table(pa.table({"p1": p1, "y_pred": y_pred, "y_true": y_cal[pick].astype(np.int64)}), path)


def run_peer(tool: str, log: Path, reference: Path, rows: int | None) -> dict[str, Any] | str:
    """One peer on the log in a fresh process of its own venv; a string says why not."""
    python = PEERS_PYTHON[tool]
    if not python.exists():
        venv = python.parent.parent.name
        return f"did not run: no benchmarks/{venv} (bash benchmarks/{PEERS_ENV_SCRIPT[tool]} builds it)"
    extra = [] if rows is None else ["--rows", str(rows)]
    return _last_json([str(python), str(PEERS), tool, str(log), str(reference), *extra])


def _last_json(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any] | str:
    """The JSON object a fresh process prints last; a string says why there is none."""
    completed = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"did not run: {tail[0][:120]}"
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def print_row(name: str, result: dict[str, Any] | str, base: dict[str, Any] | None) -> None:
    """One line of the table: rows/s, against the loop, peak RSS, batches, CPU and warm-up (or why not)."""
    if isinstance(result, str):
        print(f"{name:<42} {result}")
        return
    rate = result["rows"] / result["seconds"]
    ratio = rate / (base["rows"] / base["seconds"]) if base else float("nan")
    if "what" in result:  # a peer: its chunks, what it computed (its CPU is not measured)
        tail = f"{result['chunks']:>8} {'':>11} {'':>10}  {result['what']}"
    else:
        cpu = 1e9 * result["cpu_seconds"] / result["rows"]
        tail = f"{result['batches']:>8} {cpu:>11,.0f} {result['warmup_seconds']:>10.1f}"
    print(f"{name:<42} {rate:>12,.0f} {ratio:>7.2f}x {result['peak_rss_mib']:>13,.0f} {tail}")


def _cpu_seconds() -> float:
    """This process's CPU time, user and system, all threads (not a JVM's or worker processes')."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(path_name: str, log: Path) -> dict[str, Any] | str:
    """``measure`` in a fresh process (its own peak RSS); a string says why it could not run."""
    command = [sys.executable, __file__, "--measure", path_name, str(log)]
    return _last_json(command, env={**os.environ, "PYSPARK_PYTHON": sys.executable})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--big-rows", type=int, default=100_000_000, help="0 skips the flat-memory run")
    parser.add_argument("--evidently-rows", type=int, default=1_000_000, help="Evidently's prefix (0: all)")
    parser.add_argument("--whylogs-rows", type=int, default=0, help="whylogs' prefix (0: all)")
    parser.add_argument("--measure", nargs=2, metavar=("PATH", "LOG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure[0], Path(args.measure[1]))))
        return 0
    loadavg = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="calwatch-bench-table-"))
    try:
        log = folder / "log.parquet"
        started = time.perf_counter()
        write_log(log, args.rows)
        write_warm_log(log)
        size = log.stat().st_size / 2**20
        print(f"wrote a {args.rows:,}-row binary prediction log ({size:,.0f} MiB parquet, "
              f"{BUCKETS} days) in {time.perf_counter() - started:.0f} s")  # fmt: skip
        paths = [
            "in-memory loop", "observe_table", "spark local[2]", "spark local[2], no id check",
            f"spark local[2], {ROWS}", f"spark local[2], {ROWS}, no id check", f"spark local[2], {BARE}",
            "spark local[1]", "dask",
        ]  # fmt: skip
        results = {name: run(name, log) for name in paths}
        done = {k: v for k, v in results.items() if isinstance(v, dict)}
        checks = {json.dumps(v["check"]) for v in done.values() if not v.get("bare")}
        print(
            f"\nMonitoring a {args.rows:,}-row parquet log: rows/s and peak RSS "
            "(each path in its own process)"
        )
        print(machine_line(loadavg))
        base = done.get("in-memory loop")
        table_rate = (
            done["observe_table"]["rows"] / done["observe_table"]["seconds"]
            if "observe_table" in done
            else None
        )
        header = f"{'path':<42} {'rows/s':>12} {'vs loop':>8} {'peak RSS MiB':>13} {'batches':>8}"
        print(f"{header} {'CPU ns/row':>11} {'warm-up s':>10}")
        for name, result in results.items():
            print_row(name, result, base)
        reference = folder / "reference.parquet"
        write_reference(reference)
        evidently_rows = args.evidently_rows or None
        whylogs_rows = args.whylogs_rows or None

        def prefix_of(rows: int | None) -> str:
            return "" if rows is None else f", first {min(rows, args.rows) / 1e6:g}M rows"

        prefix, whylogs_prefix = prefix_of(evidently_rows), prefix_of(whylogs_rows)
        peers = {
            "NannyML CBPE": run_peer("nannyml", log, reference, None),
            f"Evidently{prefix}": run_peer("evidently", log, reference, evidently_rows),
            f"whylogs{whylogs_prefix}": run_peer("whylogs", log, reference, whylogs_rows),
        }
        for name, result in peers.items():
            print_row(name, result, base)
        if len(checks) != 1:
            print("FAIL: the paths' statistics differ")
            return 1
        print("every path gave the same statistics")
        if table_rate is not None:
            ok = table_rate >= 5e6 and (base is None or table_rate >= base["rows"] / base["seconds"])
            ok = ok and done["observe_table"]["peak_rss_mib"] < 500
            print(f"observe_table target (>= 5M rows/s, >= the loop, < 500 MiB): {'PASS' if ok else 'FAIL'}")
        spark_paths = [name for name in paths if name.startswith("spark local[2]") and BARE not in name]
        for name in spark_paths:
            spark = done.get(name)
            if spark is None or table_rate is None:
                continue
            rate = spark["rows"] / spark["seconds"]
            per_core = table_rate / rate  # both run on the same two cores
            print(f"{name} target (>= 1M rows/s, within 3x of observe_table per core: {per_core:.2f}x): "
                  f"{'PASS' if rate >= 1e6 and per_core <= 3 else 'FAIL'}")  # fmt: skip
        bare = done.get(f"spark local[2], {BARE}")
        if bare is not None and bare["rows"] != args.rows:
            print(f"FAIL: the bare mapInArrow saw {bare['rows']:,} rows of {args.rows:,}")
            return 1
        for name in (path for path in spark_paths if ROWS in path):  # the paths through that transfer
            spark = done.get(name)
            if spark is None or bare is None:
                continue
            bare_rate, rate = bare["rows"] / bare["seconds"], spark["rows"] / spark["seconds"]
            print(f"the JVM's own cost: Spark's scan and rows-to-Arrow transfer alone (a bare mapInArrow, "
                  f"local[2]) {bare_rate:,.0f} rows/s; {name} {rate:,.0f} rows/s, "
                  f"{bare_rate / rate:.2f}x the bare transfer's time")  # fmt: skip
        if args.big_rows:
            big = folder / "big.parquet"
            log.unlink()
            started = time.perf_counter()
            write_log(big, args.big_rows)
            write_warm_log(big)
            print(f"\nwrote a {args.big_rows:,}-row log ({big.stat().st_size / 2**30:,.1f} GiB) in "
                  f"{time.perf_counter() - started:.0f} s")  # fmt: skip
            result = run("observe_table", big)
            if isinstance(result, str):
                print(f"observe_table on {args.big_rows:,} rows {result}")
                return 1
            small = done.get("observe_table", {}).get("peak_rss_mib", float("nan"))
            print(f"observe_table, {args.big_rows:,} rows: {result['rows'] / result['seconds']:,.0f} rows/s, "
                  f"peak RSS {result['peak_rss_mib']:,.0f} MiB (at {args.rows:,} rows: {small:,.0f} MiB): "
                  f"{'flat' if result['peak_rss_mib'] < 1.25 * small + 50 else 'NOT flat'}")  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
