"""calwatch.scale.spark and calwatch.scale.dask: a cluster-fed monitor equals the in-memory monitor, exactly.

For random prediction logs of real tasks with K = 2, 3 and 5 classes (random row counts,
buckets of random type, random partitionings, labels known at observe time, late labels in
random order over several calls, relabels, unknown ids), a monitor fed through Spark, Dask's
synchronous scheduler or a two-process Dask cluster must hold the statistics of a monitor that
observed the same rows bucket by bucket with ``observe`` and took the same label calls with
``label`` (counts exactly, float sums to 1e-12 relative). Bad input is refused naming the
column, with the monitor unchanged; a Spark task retried after a failure counts its rows once.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import calwatch as cw
from calwatch.scale.kernel import partial_statistics
from calwatch.scale.registry import registry_of
from tests.scale.engines import DaskEngine, Engine, SparkEngine, SparkParquetEngine, task_with
from tests.scale.logs import assert_same_statistics, bucket_values, calibrated, log_frame, prob_names, replay
from tests.scale.slice_logs import (
    META,
    assert_same_slices,
    assert_unchanged,
    replay_sliced,
    slice_meta,
    slice_view,
    slicing_monitor,
)

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")

#: Examples per engine: a Spark job costs about a second, a Dask cluster round trip a fraction.
EXAMPLES = {"spark": 5, "spark-parquet": 5, "dask-sync": 10, "dask-cluster": 6}
#: Examples per engine of the slice counts' property test (fewer: the paths are the same jobs).
SLICE_EXAMPLES = {"spark": 2, "spark-parquet": 2, "dask-sync": 5, "dask-cluster": 2}


@pytest.fixture(params=list(EXAMPLES))
def engine(request: pytest.FixtureRequest) -> Engine:
    name = request.param
    if name == "spark":
        return SparkEngine(request.getfixturevalue("spark"))
    if name == "spark-parquet":
        return SparkParquetEngine(request.getfixturevalue("spark"), request.getfixturevalue("tmp_path"))
    pytest.importorskip("dask.dataframe")
    client = request.getfixturevalue("dask_client") if name == "dask-cluster" else None
    return DaskEngine(name, client)


def _check_against_memory(engine: Engine, data: st.DataObject) -> None:
    K = data.draw(st.sampled_from([2, 3, 5]), label="K")
    task = task_with(K)
    # Each engine sees other logs for the same hypothesis choices.
    rng = np.random.default_rng(
        [data.draw(st.integers(0, 2**32 - 1), label="seed"), zlib.crc32(engine.name.encode())]
    )
    n = data.draw(st.integers(1, 300), label="rows")
    rows = rng.integers(0, task.P.shape[0], size=n)
    P, y = task.P[rows], task.y[rows]
    kind = data.draw(st.sampled_from(["int", "str", "date"]), label="bucket type")
    buckets = bucket_values(kind, rng.integers(0, data.draw(st.integers(1, 5), label="buckets"), size=n))
    ids = rng.permutation(10 * n)[:n]
    known = rng.random(n) < data.draw(st.sampled_from([0.0, 0.3, 1.0]), label="labelled at once")
    frame = log_frame(P, ids, buckets, [int(v) if k else None for v, k in zip(y, known, strict=True)])
    frame = frame.sample(fraction=1.0, shuffle=True, seed=int(rng.integers(2**31)))
    table, memory = calibrated(task), calibrated(task)
    engine.observe(
        table, engine.table(frame, data.draw(st.integers(1, 4), label="partitions")), id="id",
        probs=prob_names(K), bucket="bucket", label="y", category="cat",
    )  # fmt: skip
    if isinstance(engine, SparkParquetEngine):  # integer ids (whatever the buckets): workers read the files
        assert engine.reads[-1] == "files"
    replay(memory, frame)
    assert_same_statistics(table, memory)
    for _ in range(data.draw(st.integers(0, 2), label="label calls")):
        pick = rng.random(n) < rng.random()
        wrong = rng.random(n) < 0.2  # some labels are wrong, to be corrected by a later call
        labels = np.where(wrong, rng.integers(0, K, size=n), y)[pick]
        unknown = np.unique(rng.integers(10 * n, 20 * n, size=int(rng.integers(0, 3))))
        label_ids = np.concatenate([ids[pick], unknown])
        label_values = np.concatenate([labels, np.zeros(unknown.shape[0], dtype=int)])
        order = rng.permutation(label_ids.shape[0])
        labels_frame = pl.DataFrame({"rid": label_ids[order], "truth": label_values[order]})
        got = engine.label(
            table, engine.table(labels_frame, int(rng.integers(1, 4))), id="rid", label="truth"
        )
        want = memory.label(label_ids[order], label_values[order])
        assert (got.matched, got.unmatched, got.relabelled) == (want.matched, want.unmatched, want.relabelled)
        assert set(got.batches) == set(want.batches)
        assert_same_statistics(table, memory)
    source = registry_of(table).sources[0]
    assert registry_of(table).describe() == f"{source.engine}: {n:,} rows, {len(set(buckets)):,} buckets"


def test_a_cluster_fed_monitor_equals_the_in_memory_monitor(engine: Engine) -> None:
    @settings(
        max_examples=EXAMPLES[engine.name], deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )  # fmt: skip
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        _check_against_memory(engine, data)

    check()


def test_a_list_column_of_probabilities_equals_class_columns(engine: Engine) -> None:
    task = task_with(5)
    n = 200
    frame = log_frame(task.P[:n], range(n), np.arange(n) % 3, [int(v) for v in task.y[:n]], list_column=True)
    table, memory = calibrated(task), calibrated(task)
    engine.observe(
        table, engine.table(frame, 3), id="id", probs="probs", bucket="bucket", label="y", category="cat"
    )
    replay(memory, frame)
    assert_same_statistics(table, memory)


def test_relabels_replace_the_label_observed_and_the_label_logged(engine: Engine) -> None:
    """Rows labelled at observe time, then by one call, then again: each label replaces the last."""
    task = task_with(3)
    n = 90
    rng = np.random.default_rng(9)
    rows = rng.integers(0, task.P.shape[0], size=n)
    y = task.y[rows]
    frame = log_frame(
        task.P[rows], np.arange(n), np.arange(n) % 3, [int(v) if i < 30 else None for i, v in enumerate(y)]
    )
    table, memory = calibrated(task), calibrated(task)
    engine.observe(
        table,
        engine.table(frame, 2),
        id="id",
        probs=prob_names(3),
        bucket="bucket",
        label="y",
        category="cat",
    )
    replay(memory, frame)
    for ids in (np.arange(15, 60), np.arange(0, 90, 2)):  # observed labels, then logged ones, relabelled
        wrong = (y[ids] + 1) % 3 if ids[0] == 15 else y[ids]
        got = engine.label(
            table, engine.table(pl.DataFrame({"rid": ids, "truth": wrong}), 2), id="rid", label="truth"
        )
        want = memory.label(ids, wrong)
        assert (got.matched, got.unmatched, got.relabelled) == (want.matched, want.unmatched, want.relabelled)
        assert_same_statistics(table, memory)


def test_a_loaded_monitor_keeps_cluster_statistics_but_refuses_their_labels(tmp_path: Path) -> None:
    pytest.importorskip("dask.dataframe")
    engine = DaskEngine("dask-sync")
    task = task_with(2)
    n = 40
    frame = log_frame(task.P[:n], np.arange(n), np.arange(n) % 2)
    mon = calibrated(task)
    engine.observe(mon, engine.table(frame, 2), id="id", probs=prob_names(2), bucket="bucket", category="cat")
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert_same_statistics(loaded, mon)
    assert registry_of(loaded).describe() == "dask: 40 rows, 2 buckets"
    with pytest.raises(ValueError, match="saved and loaded"):
        engine.label(
            loaded, engine.table(pl.DataFrame({"rid": [1], "truth": [0]}), 1), id="rid", label="truth"
        )


# ---------------------------------------------------------------------------- slices
def _check_slices_against_memory(engine: Engine, data: st.DataObject) -> None:
    task = task_with(data.draw(st.sampled_from([2, 3, 5]), label="K"))
    rng = np.random.default_rng(
        [data.draw(st.integers(0, 2**32 - 1), label="seed"), zlib.crc32(engine.name.encode())]
    )
    n = data.draw(st.integers(1, 200), label="rows")
    rows = rng.integers(0, task.P.shape[0], size=n)
    P, y = task.P[rows], task.y[rows]
    kind = data.draw(st.sampled_from(["int", "str", "date"]), label="bucket type")
    buckets = bucket_values(kind, rng.integers(0, data.draw(st.integers(1, 4), label="buckets"), size=n))
    ids = rng.permutation(10 * n)[:n]
    known = rng.random(n) < data.draw(st.sampled_from([0.0, 0.5]), label="labelled at once")
    frame = log_frame(P, ids, buckets, [int(v) if k else None for v, k in zip(y, known, strict=True)])
    frame = frame.hstack(slice_meta(rng, n)).sample(fraction=1.0, shuffle=True, seed=int(rng.integers(2**31)))
    table, memory = slicing_monitor(task), slicing_monitor(task)
    engine.observe(
        table, engine.table(frame, data.draw(st.integers(1, 4), label="partitions")), id="id",
        probs=prob_names(task.K), bucket="bucket", label="y", category="cat",
        meta=[META[i] for i in rng.permutation(len(META))],
    )  # fmt: skip
    if isinstance(engine, SparkParquetEngine):  # the workers read the slice columns from the files too
        assert engine.reads[-1] == "files"
    replay_sliced(memory, frame)
    assert_same_statistics(table, memory)
    assert_same_slices(table, memory)
    for _ in range(data.draw(st.integers(0, 2), label="label calls")):
        pick = rng.random(n) < rng.random()
        wrong = rng.random(n) < 0.3  # some labels are wrong, to be corrected by a later call
        labels = np.where(wrong, rng.integers(0, task.K, size=n), y)[pick]
        label_ids = np.concatenate([ids[pick], [20 * n]])  # and one unknown id
        label_values = np.concatenate([labels, [0]])
        labels_frame = pl.DataFrame({"rid": label_ids, "truth": label_values})
        got = engine.label(
            table, engine.table(labels_frame, int(rng.integers(1, 3))), id="rid", label="truth"
        )
        want = memory.label(label_ids, label_values)
        assert (got.matched, got.unmatched, got.relabelled) == (want.matched, want.unmatched, want.relabelled)
        assert_same_statistics(table, memory)
        assert_same_slices(table, memory)


def test_cluster_slice_counts_equal_the_in_memory_monitor(engine: Engine) -> None:
    """observe(meta=) and label on a cluster leave the slices of observe(meta=) and label in memory."""

    @settings(
        max_examples=SLICE_EXAMPLES[engine.name], deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )  # fmt: skip
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        _check_slices_against_memory(engine, data)

    check()


def test_bad_meta_is_refused_before_any_job_and_changes_nothing(engine: Engine) -> None:
    """No meta for a monitor that slices, a slice column missing or of another type, meta without slices."""
    from calwatch.stream.slices import SliceTypeError

    task = task_with(2)
    n = 40
    frame = log_frame(task.P[:n], np.arange(n), np.arange(n) % 2).hstack(
        slice_meta(np.random.default_rng(3), n)
    )
    mon = slicing_monitor(task)
    log: dict[str, Any] = {"id": "id", "probs": prob_names(2), "bucket": "bucket", "category": "cat"}
    engine.observe(mon, engine.table(frame.head(10), 1), **log, meta=META)
    before = slice_view(mon)
    rest = frame.slice(10)
    cases: list[tuple[pl.DataFrame, dict[str, Any], type[Exception], str]] = [
        (rest, {}, ValueError, r"given no meta=: name the table's slice columns, meta=\['carrier'"),
        (rest.drop("dist"), {"meta": META}, ValueError, "column 'dist' is not in the DataFrame"),
        (rest.with_columns(pl.col("hour").cast(pl.String)), {"meta": META}, SliceTypeError,
         "meta column 'hour' holds text values"),
    ]  # fmt: skip
    for spoilt, extra, error, named in cases:
        with pytest.raises(error, match=named):
            engine.observe(mon, engine.table(spoilt, 2), **log, **extra)
        assert_unchanged(mon, before)
    plain = calibrated(task)
    with pytest.raises(ValueError, match=r"this monitor keeps no slices; calibrate\(meta=\.\.\.\) fixes"):
        engine.observe(plain, engine.table(rest, 2), **log, meta=["carrier"])
    assert plain.n_batches == 0 and plain._slices is None


# ---------------------------------------------------------------------------- retries
@pytest.mark.parametrize("from_files", [False, True], ids=["rows", "files"])
def test_a_retried_spark_task_counts_every_row_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, from_files: bool
) -> None:
    """Partition 0's first attempt fails after its first batch went out; the retry must count once.

    Through Spark's rows, and with the workers reading parquet files themselves (partition 0 is
    then the first piece of row groups)."""
    import calwatch.scale.spark as cw_spark

    marker = tmp_path / "failed"

    def flaky(batch: Any, frozen: Any, columns: Any, **options: Any) -> Any:
        from pyspark import TaskContext

        context = TaskContext.get()
        seen.append(len(batch))  # one list per task: the function is unpickled for each
        if (
            context is not None
            and context.partitionId() == 0
            and context.attemptNumber() == 0
            and len(seen) == 2
        ):
            marker.touch()
            raise RuntimeError("injected: the executor went away")
        return partial_statistics(batch, frozen, columns, **options)

    seen: list[int] = []
    monkeypatch.setattr(cw_spark, "KERNEL", flaky)
    monkeypatch.setattr(
        cw_spark, "ARROW_ROWS", 20
    )  # several batches per task: one goes out before the failure
    task = task_with(3)
    n = 240
    rng = np.random.default_rng(5)
    rows = rng.integers(0, task.P.shape[0], size=n)
    days = bucket_values("date", rng.integers(0, 3, size=n))
    known = rng.random(n) < 0.5
    y = task.y[rows]
    frame = log_frame(
        task.P[rows], np.arange(n), days, [int(v) if k else None for v, k in zip(y, known, strict=True)]
    )
    table, memory = calibrated(task), calibrated(task)
    engine = SparkParquetEngine(spark, tmp_path) if from_files else SparkEngine(spark)
    engine.observe(
        table,
        engine.table(frame, 2),
        id="id",
        probs=prob_names(3),
        bucket="bucket",
        label="y",
        category="cat",
    )
    assert marker.exists(), "the injected failure did not happen"
    if isinstance(engine, SparkParquetEngine):
        assert engine.reads == ["files"]
    marker.unlink()
    labels = pl.DataFrame({"rid": np.arange(0, n, 2), "truth": y[::2]})
    got = engine.label(table, engine.table(labels, 2), id="rid", label="truth")
    assert marker.exists(), "the injected failure did not happen"
    replay(memory, frame)
    want = memory.label(np.arange(0, n, 2), y[::2])
    assert (got.matched, got.relabelled) == (want.matched, want.relabelled)
    assert_same_statistics(table, memory)


# ---------------------------------------------------------------------------- bad input
def _at_row(row_id: int, value: Any, column: str) -> pl.Expr:
    """Column ``column`` with ``value`` in the row whose id is ``row_id``."""
    return pl.when(pl.col("id") == row_id).then(value).otherwise(pl.col(column)).alias(column)


Spoil = Callable[[pl.DataFrame], pl.DataFrame]
TWO = ["p0", "p1"]
BAD_LOGS: dict[str, tuple[Spoil, list[str], str]] = {
    "missing column": (lambda f: f.drop("p1"), TWO, "'p1'"),
    "too many probability columns": (
        lambda f: f.with_columns(p2=pl.lit(0.0)),
        [*TWO, "p2"],
        "probs names 3 columns but the monitor has 2",
    ),
    "a probability above 1": (lambda f: f.with_columns(pl.lit(1.5).alias("p0")), TWO, "probs"),
    "a NaN probability": (lambda f: f.with_columns(_at_row(7, float("nan"), "p0")), TWO, "probs"),
    "an id twice in a bucket": (lambda f: f.with_columns(_at_row(40, 0, "id")), TWO, "id column 'id'"),
    "a label outside the classes": (lambda f: f.with_columns(pl.lit(7).alias("y")), TWO, "label column 'y'"),
    "no rows": (lambda f: f.head(0), TWO, "no rows"),
}
#: Errors found on executors cost Spark three attempts, each in a fresh Python worker (one exits
#: after an exception, and the next imports calwatch again): Spark checks one such case per call.
SPARK_SKIPS = {"a NaN probability", "a label outside the classes"}
#: Reading the files in the workers changes only where the kernel's rows come from: the cases the
#: kernel refuses on an executor, and an empty table (the driver-side checks are the same call).
FILE_CASES = {"a probability above 1", "an id twice in a bucket", "no rows"}
BAD_LABELS: dict[str, tuple[pl.DataFrame, str]] = {
    "missing column": (pl.DataFrame({"rid": [1], "answer": [0]}), "'truth'"),
    "a null label": (pl.DataFrame({"rid": [1, 2], "truth": [0, None]}), "label column 'truth' has 1 null"),
    "an id twice": (pl.DataFrame({"rid": [1, 1], "truth": [0, 1]}), "repeats 1 ids"),
    "a label outside the classes": (pl.DataFrame({"rid": [1, 2], "truth": [0, 9]}), "label column 'truth'"),
    "ids of another type": (pl.DataFrame({"rid": ["a"], "truth": [0]}), "ids are integers .* are strings"),
}


def _view(mon: cw.Monitor) -> tuple[Any, ...]:
    return (
        mon.summary().drop("observed_at"),
        mon.class_coverage().drop("observed_at", strict=False),
        mon.status(),
    )


def test_bad_input_is_refused_naming_the_column_and_changes_nothing(engine: Engine) -> None:
    task = task_with(2)
    n = 60
    frame = log_frame(task.P[:n], np.arange(n), np.arange(n) % 2, [int(v) for v in task.y[:n]])
    mon = calibrated(task)
    columns = {"id": "id", "bucket": "bucket", "label": "y", "category": "cat"}
    engine.observe(mon, engine.table(frame.head(10), 2), probs=prob_names(2), **columns)
    before = _view(mon)
    for case, (spoil, probs, named) in BAD_LOGS.items():
        if engine.name.startswith("spark") and case in SPARK_SKIPS:
            continue
        if isinstance(engine, SparkParquetEngine) and case not in FILE_CASES:
            continue
        with pytest.raises(ValueError, match=named) as raised:
            engine.observe(mon, engine.table(spoil(frame), 3), probs=probs, **columns)
        assert "__cw_" not in str(raised.value), case
        after = _view(mon)
        assert after[0].equals(before[0]) and after[1].equals(before[1]) and after[2] == before[2], case
    for case, (labels, named) in BAD_LABELS.items():
        with pytest.raises(ValueError, match=named) as raised:
            engine.label(mon, engine.table(labels, 1), id="rid", label="truth")
        assert "__cw_" not in str(raised.value), case
        after = _view(mon)
        assert after[0].equals(before[0]) and after[1].equals(before[1]) and after[2] == before[2], case
    # Nothing was half-applied: the label log took none of the refused labels.
    report = engine.label(
        mon, engine.table(pl.DataFrame({"rid": [1], "truth": [0]}), 1), id="rid", label="truth"
    )
    assert (report.matched, report.relabelled) == (1, 1)


# ---------------------------------------------------------------------------- the id check
def test_spark_id_check_is_exact_whatever_the_hashes_say(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeats split across partitions are refused, for integer keys and JVM-hashed string keys;
    a repeated hash is confirmed on the rows, so colliding hashes refuse nothing; past
    ``CONFIRM_AT_MOST`` repeated hashes one exact grouped query decides."""
    import calwatch.scale.spark as cw_spark
    from calwatch.scale import spark_ids
    from calwatch.scale.columns import LogColumns
    from calwatch.scale.duplicates import key_hashes

    task = task_with(2)
    n = 80
    engine = SparkEngine(spark)
    for ids in (list(range(n)), [f"r{i}" for i in range(n)]):
        frame = log_frame(task.P[:n], ids, [i % 2 for i in range(n)])
        good = engine.table(frame, 3)
        twice = pl.when(pl.col("id") == ids[7]).then(pl.lit(ids[71])).otherwise(pl.col("id"))
        bad = engine.table(frame.with_columns(twice.alias("id")), 3)  # ids[71] twice in bucket 1
        columns = LogColumns.of(id="id", bucket="bucket", probs=prob_names(2))
        keyed = spark_ids.KeyHashes.of(good, columns)
        assert keyed.in_jvm == isinstance(ids[0], str)
        # Every row's hash "repeated" (as if all collided): rows decide, a good table passes.
        rows = good.select(*keyed.inputs(["bucket", "id"])).toArrow().combine_chunks().to_batches()[0]
        every = keyed.hashes(rows)
        if not keyed.in_jvm:
            assert np.array_equal(every, key_hashes(rows, "id"))
        spark_ids.confirm_repeats(good, columns, keyed, every)
        spark_ids.confirm_repeats(good, columns, keyed, None)
        twice_in_1 = rf"id column 'id': id {ids[71]!r} appears 2 times \(in bucket 1\)"
        with pytest.raises(ValueError, match=twice_in_1):
            spark_ids.confirm_repeats(bad, columns, keyed, None)
        mon = calibrated(task)
        log = {"id": "id", "probs": prob_names(2), "bucket": "bucket", "category": "cat"}
        with pytest.raises(ValueError, match="id column 'id'"):
            cw_spark.observe(mon, bad, **log)
        assert mon.n_batches == 0
        moved = pl.when(pl.col("id") == ids[6]).then(pl.lit(ids[71])).otherwise(pl.col("id"))
        across = engine.table(frame.with_columns(moved.alias("id")), 3)  # rows 6 and 71: buckets 0 and 1
        with pytest.raises(ValueError, match=rf"id {ids[71]!r} appears 2 times \(in buckets 0, 1\)"):
            cw_spark.observe(mon, across, **log)
        assert mon.n_batches == 0
        # A small table's few shards (above) and the most shards (a plan without a size estimate)
        # find the same repeat: a key's hashes share their top bits however many choose a shard.
        assert spark_ids.shard_bits(good) < spark_ids.SHARD_BITS
        monkeypatch.setattr(spark_ids, "BLOB_HASHES", 2)  # and a shard's hashes split over rows
        with pytest.raises(ValueError, match="id column 'id'"):
            cw_spark.observe(mon, bad, **log)
        monkeypatch.setattr(spark_ids, "shard_bits", lambda df: spark_ids.SHARD_BITS)
        with pytest.raises(ValueError, match="id column 'id'"):
            cw_spark.observe(mon, bad, **log)
        assert mon.n_batches == 0
        monkeypatch.setattr(spark_ids, "CONFIRM_AT_MOST", 0)  # the exact grouped query decides
        with pytest.raises(ValueError, match="id column 'id'"):
            cw_spark.observe(mon, bad, **log)
        assert mon.n_batches == 0
        assert cw_spark.observe(mon, good, **log) == (0, 1)
        monkeypatch.undo()


def _a_rewritten_log_is_refused(engine: Any, read: Callable[[str], Any], labels: Any, folder: Path) -> None:
    """Observe a parquet log through ``engine``, rewrite it in place: its next label call is refused."""
    from calwatch.scale.pins import ChangedSourceError

    task = task_with(2)
    n = 120
    frame = log_frame(task.P[:n], list(range(n)), [i % 3 for i in range(n)])
    folder.mkdir()
    frame.write_parquet(folder / "part-0.parquet")
    mon = calibrated(task)
    log = {"id": "id", "probs": prob_names(2), "bucket": "bucket", "category": "cat"}
    engine.observe(mon, read(str(folder)), **log)
    assert [Path(pin.path).name for pin in registry_of(mon).sources[0].pins] == ["part-0.parquet"]
    assert engine.label(mon, labels, id="id", label="y").matched == 3
    before = mon.summary().drop("observed_at")
    shuffled = frame.with_columns(pl.col("p0").reverse(), pl.col("p1").reverse())
    shuffled.write_parquet(folder / "part-0.parquet", row_group_size=7)
    with pytest.raises(
        ChangedSourceError, match=r"part-0\.parquet: the prediction log changed since it was observed"
    ):
        engine.label(mon, labels, id="id", label="y")
    assert mon.summary().drop("observed_at").equals(before)


def test_a_parquet_log_rewritten_under_spark_is_refused_before_labels_move(
    spark: Any, tmp_path: Path
) -> None:
    """Spark keeps its file listing but reads a rewritten file's new bytes: the pins refuse it."""
    import calwatch.scale.spark as cw_spark

    labels = spark.createDataFrame(pl.DataFrame({"id": [1, 2, 3], "y": [0, 1, 0]}).to_pandas())
    _a_rewritten_log_is_refused(cw_spark, spark.read.parquet, labels, tmp_path / "log")


def test_a_parquet_log_rewritten_under_dask_is_refused_before_labels_move(tmp_path: Path) -> None:
    """dd.read_parquet keeps its file list; a file rewritten in place is refused by its pin."""
    import dask.dataframe as dd

    import calwatch.scale.dask as cw_dask

    labels = dd.from_pandas(pl.DataFrame({"id": [1, 2, 3], "y": [0, 1, 0]}).to_pandas(), npartitions=1)
    with DaskEngine("dask-sync").running():
        _a_rewritten_log_is_refused(cw_dask, dd.read_parquet, labels, tmp_path / "log")
