"""observe_table / label_table: the out-of-core path equals the in-memory monitor, exactly.

For random prediction logs of a real task (scikit-learn's digits, K = 10, and breast cancer,
K = 2), random chunkings, random sources (DataFrame, LazyFrame, parquet, pyarrow Table/Dataset),
labels known at observe time, late labels in random calls, relabels and unknown ids, a monitor fed
the table must hold the statistics of a monitor that observed the same rows bucket by bucket and
took the same label calls (counts exactly, float sums to 1e-12 relative).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import calwatch as cw
from tests.scale.logs import (
    assert_same_statistics,
    calibrated,
    log_frame,
    prob_names,
    real_task,
    replay,
)


def _as_source(frame: pl.DataFrame, how: str, folder: Path) -> Any:
    if how == "lazy":
        return frame.lazy()
    if how == "arrow":
        return frame.to_arrow()
    if how == "dataset":
        return pads.dataset(frame.to_arrow())
    if how == "parquet":
        path = folder / f"log-{len(list(folder.iterdir()))}.parquet"
        frame.write_parquet(path, row_group_size=37)
        return path
    return frame


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    task_name=st.sampled_from(["digits", "breast_cancer"]),
    how=st.sampled_from(["frame", "lazy", "arrow", "dataset", "parquet"]),
)
def test_table_path_equals_the_in_memory_monitor(
    data: st.DataObject, task_name: str, how: str, tmp_path: Path
) -> None:
    task = real_task(task_name)
    n = data.draw(st.integers(1, min(240, task.P.shape[0])), label="rows")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    rows = rng.choice(task.P.shape[0], size=n, replace=False)
    P, y = task.P[rows], task.y[rows]
    buckets = rng.integers(0, data.draw(st.integers(1, 6), label="buckets"), size=n)
    ids = rng.permutation(10 * n)[:n]
    known = rng.random(n) < data.draw(st.sampled_from([0.0, 0.3, 1.0]), label="labelled at once")
    frame = log_frame(P, ids, buckets, [int(v) if k else None for v, k in zip(y, known, strict=True)])
    table, memory = calibrated(task), calibrated(task)
    chunk_rows = data.draw(st.integers(1, max(1, n)), label="chunk_rows")
    table.observe_table(
        _as_source(frame, how, tmp_path), id="id", probs=prob_names(task.K), bucket="bucket", label="y",
        category="cat", chunk_rows=chunk_rows,
    )  # fmt: skip
    replay(memory, frame)
    assert_same_statistics(table, memory)
    for _ in range(data.draw(st.integers(0, 3), label="label calls")):
        pick = rng.random(n) < rng.random()
        wrong = rng.random(n) < 0.2  # some labels are wrong, to be corrected by a later call
        labels = np.where(wrong, rng.integers(0, task.K, size=n), y)[pick]
        unknown = rng.integers(10 * n, 20 * n, size=int(rng.integers(0, 3)))
        label_ids = np.concatenate([ids[pick], np.unique(unknown)])
        label_values = np.concatenate([labels, np.zeros(np.unique(unknown).shape[0], dtype=int)])
        order = rng.permutation(label_ids.shape[0])
        labels_frame = pl.DataFrame({"rid": label_ids[order], "truth": label_values[order]})
        got = table.label_table(_as_source(labels_frame, how, tmp_path), id="rid", label="truth")
        want = memory.label(label_ids[order], label_values[order])
        assert (got.matched, got.unmatched, got.relabelled) == (want.matched, want.unmatched, want.relabelled)
        assert set(got.batches) == set(want.batches)
        assert_same_statistics(table, memory)


def test_a_list_column_of_probabilities_equals_class_columns() -> None:
    task = real_task("digits")
    n = 300
    frame = log_frame(task.P[:n], range(n), np.arange(n) % 3, [int(v) for v in task.y[:n]], list_column=True)
    table, memory = calibrated(task), calibrated(task)
    table.observe_table(
        frame, id="id", probs="probs", bucket="bucket", label="y", category="cat", chunk_rows=64
    )
    replay(memory, frame)
    assert_same_statistics(table, memory)


def test_buckets_become_batches_in_sorted_order_and_status_counts_them() -> None:
    task = real_task("breast_cancer")
    n = 90
    days = np.array(["2026-03-02", "2026-03-01", "2026-03-03"])[np.arange(n) % 3]
    frame = log_frame(task.P[:n], [f"r{i}" for i in range(n)], days)
    mon = calibrated(task)
    assert mon.observe_table(frame, id="id", probs=prob_names(2), bucket="bucket", category="cat") == (
        0,
        1,
        2,
    )
    assert mon.summary()["name"].unique(maintain_order=True).to_list() == [
        "2026-03-01",
        "2026-03-02",
        "2026-03-03",
    ]
    status = mon.status()
    assert (status["rows_seen"], status["rows_from_tables"], status["rows_pending"]) == (n, n, n)
    report = mon.label_table(pl.DataFrame({"id": ["r0", "r1", "nope"], "y": [0, 1, 1]}), id="id", label="y")
    assert (report.matched, report.unmatched, report.relabelled) == (2, 1, 0)
    status = mon.status()
    assert (status["rows_labelled"], status["rows_pending"], status["labels_unmatched"]) == (2, n - 2, 1)


def test_a_label_for_a_bucket_long_gone_still_counts() -> None:
    """Table batches keep no rows in memory: a label arriving 10^5 rows later is applied all the same."""
    task = real_task("digits")
    rng = np.random.default_rng(3)
    n = 100_000
    rows = rng.integers(0, task.P.shape[0], size=n)
    frame = log_frame(task.P[rows], np.arange(n), np.arange(n) // 1_000)
    mon = calibrated(task)
    mon.observe_table(
        frame, id="id", probs=prob_names(task.K), bucket="bucket", category="cat", progress=False
    )
    report = mon.label_table(pl.DataFrame({"id": [5, 6], "y": task.y[rows[[5, 6]]]}), id="id", label="y")
    assert (report.matched, report.batches) == (2, (0,))
    assert mon.summary().filter(pl.col("batch") == 0)["n_labelled"].to_list() == [2] * len(mon.calibrators)


# ---------------------------------------------------------------------------- bad input
def _frozen_view(mon: cw.Monitor) -> tuple[Any, ...]:
    return mon.summary().drop("observed_at"), mon.class_coverage(), mon.status()


def _at_row(row_id: int, value: Any, column: str) -> pl.Expr:
    """Column ``column`` with ``value`` in the row whose id is ``row_id``."""
    return pl.when(pl.col("id") == row_id).then(value).otherwise(pl.col(column)).alias(column)


BAD_LOGS = {
    "missing column": (lambda f: f.drop("p1"), "'p1'"),
    "a probability above 1": (lambda f: f.with_columns(pl.lit(1.5).alias("p0")), "probs"),
    "a NaN probability": (lambda f: f.with_columns(_at_row(7, float("nan"), "p0")), "probs"),
    "rows that do not sum to 1": (lambda f: f.with_columns((pl.col("p0") * 0.5).alias("p0")), "probs"),
    "an id twice in a bucket": (lambda f: f.with_columns(_at_row(40, 0, "id")), "id column 'id'"),
    "a null bucket": (lambda f: f.with_columns(_at_row(3, None, "bucket")), "bucket column"),
    "a label outside the classes": (lambda f: f.with_columns(pl.lit(7).alias("y")), "label column 'y'"),
    "no rows": (lambda f: f.head(0), "no rows"),
    "a string probability column": (lambda f: f.with_columns(pl.col("p0").cast(pl.String)), "'p0'"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_LOGS))
def test_a_bad_log_is_refused_naming_the_column_and_changes_nothing(case: str) -> None:
    task = real_task("breast_cancer")
    n = 60
    frame = log_frame(task.P[:n], np.arange(n), np.arange(n) % 2, [int(v) for v in task.y[:n]])
    mon = calibrated(task)
    mon.observe_table(
        frame.head(10), id="id", probs=prob_names(2), bucket="bucket", label="y", category="cat"
    )
    before = _frozen_view(mon)
    spoil, named = BAD_LOGS[case]
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        mon.observe_table(spoil(frame), id="id", probs=prob_names(2), bucket="bucket", label="y",
                          category="cat", chunk_rows=16)  # fmt: skip
    after = _frozen_view(mon)
    assert after[0].equals(before[0]) and after[1].equals(before[1]) and after[2] == before[2]


def test_wrong_arguments_are_named() -> None:
    task = real_task("breast_cancer")
    frame = log_frame(task.P[:20], np.arange(20), np.zeros(20, dtype=int))
    mon = calibrated(task)
    with pytest.raises(ValueError, match="probs names 3 columns but the monitor has 2 classes"):
        mon.observe_table(
            frame.with_columns(p2=0.0), id="id", probs=["p0", "p1", "p2"], bucket="bucket", category="cat"
        )
    with pytest.raises(TypeError, match="source must be a parquet path"):
        mon.observe_table(42, id="id", probs=prob_names(2), bucket="bucket")
    with pytest.raises(ValueError, match="does not exist"):
        mon.observe_table("/nonexistent/log.parquet", id="id", probs=prob_names(2), bucket="bucket")
    with pytest.raises(ValueError, match="bucket must name a column"):
        mon.observe_table(frame, id="id", probs=prob_names(2), bucket="")
    with pytest.raises(ValueError, match="none was observed"):
        mon.label_table(pl.DataFrame({"id": [1], "y": [0]}), id="id", label="y")
    mon.observe_table(frame, id="id", probs=prob_names(2), bucket="bucket", category="cat")
    before = _frozen_view(mon)
    with pytest.raises(ValueError, match="label column 'y' has 1 null rows"):
        mon.label_table(pl.DataFrame({"id": [1, 2], "y": [0, None]}), id="id", label="y")
    with pytest.raises(ValueError, match="repeats 1 ids"):
        mon.label_table(pl.DataFrame({"id": [1, 1], "y": [0, 1]}), id="id", label="y")
    with pytest.raises(ValueError, match="outside the known classes"):
        mon.label_table(pl.DataFrame({"id": [1, 2], "y": [0, 9]}), id="id", label="y")
    with pytest.raises(ValueError, match=r"this monitor's ids are integers .* these are strings"):
        mon.label_table(pl.DataFrame({"id": ["a"], "y": [0]}), id="id", label="y")
    after = _frozen_view(mon)
    assert after[0].equals(before[0]) and after[2] == before[2]
    assert mon.label_table(pl.DataFrame({"id": [1], "y": [1]}), id="id", label="y").matched == 1


def test_calibrators_a_table_cannot_reproduce_are_refused_by_name() -> None:
    task = real_task("breast_cancer")
    frame = log_frame(task.P[:20], np.arange(20), np.zeros(20, dtype=int))
    mon = cw.Monitor(
        calibrators={"raps": cw.SplitConformalClassifier(score="aps", randomized=True)}, shift=None
    )
    with pytest.raises(cw.NotFittedError):
        mon.observe_table(frame, id="id", probs=prob_names(2), bucket="bucket")
    mon.calibrate(probs=task.P_cal, y=task.y_cal)
    # A randomised calibrator fitted now keys its draws by row id: tables take it (the property
    # tests above compare it with the in-memory monitor). One restored from a snapshot written
    # before id-keyed draws lacks the attribute and draws from its seeded stream: refused.
    del mon._calibrators["raps"].__dict__["_u_from_ids"]
    assert not mon.calibrators["raps"].draws_by_row_id
    with pytest.raises(TypeError, match="'raps' randomises its sets from one sequential random stream"):
        mon.observe_table(frame, id="id", probs=prob_names(2), bucket="bucket")
    aci = cw.Monitor(calibrators={"aci": cw.Adaptive(cw.SplitConformalClassifier(score="lac"))}, shift=None)
    aci.calibrate(probs=task.P_cal, y=task.y_cal)
    with pytest.raises(TypeError, match=r"'aci'.*adaptive.*cannot run on a table"):
        aci.observe_table(frame, id="id", probs=prob_names(2), bucket="bucket")


def test_a_pyarrow_table_with_a_date_bucket(tmp_path: Path) -> None:
    from datetime import date

    task = real_task("breast_cancer")
    n = 50
    frame = log_frame(task.P[:n], np.arange(n), [date(2026, 1, 1 + i % 4) for i in range(n)])
    (tmp_path / "part").mkdir()
    frame.write_parquet(tmp_path / "part" / "a.parquet")
    mon = calibrated(task)
    mon.observe_table(tmp_path / "part", id="id", probs=prob_names(2), bucket="bucket", category="cat")
    assert mon.summary()["name"].unique(maintain_order=True).to_list() == [
        f"2026-01-0{d}" for d in range(1, 5)
    ]
    assert isinstance(pa.table({"a": [1]}), pa.Table)


def test_table_batches_are_tested_as_buckets_and_the_looks_survive_a_snapshot(tmp_path: Path) -> None:
    task = real_task("digits")
    rng = np.random.default_rng(5)
    n = 600
    rows = rng.integers(0, task.P.shape[0], size=n)
    frame = log_frame(task.P[rows], np.arange(n), np.arange(n) // 200, [int(v) for v in task.y[rows]])
    frame.drop("y").write_parquet(tmp_path / "log.parquet")
    mon = calibrated(task, shift="default")
    mon.observe_table(
        tmp_path / "log.parquet", id="id", probs=prob_names(task.K), bucket="bucket", category="cat"
    )
    assert mon.shift_watch is not None
    looks = [
        look for look in mon.shift_watch.look_rows() if look["detector"] == "bucket confidence vs calibration"
    ]
    assert [look["batch"] for look in looks] == [0, 1, 2]
    assert all(look["log10_threshold"] > 0 for look in looks)
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    for m in (mon, loaded):
        m.label_table(frame.select("id", "y"), id="id", label="y")
    assert loaded.shift_watch is not None
    assert loaded.shift_watch.look_rows() == mon.shift_watch.look_rows()
    assert loaded.warnings().drop("ack_at").equals(mon.warnings().drop("ack_at"))
    coverage = [look for look in mon.shift_watch.look_rows() if look["detector"] == "lac: bucket coverage"]
    assert len(coverage) == 3  # the marginal calibrator: Mondrian ones promise per group, not tested here
    assert_same_statistics(loaded, mon)  # float sums to rounding: the reduction's order may differ


def test_a_table_that_was_a_frame_takes_labels_after_a_load_from_its_copy(tmp_path: Path) -> None:
    task = real_task("breast_cancer")
    frame = log_frame(task.P[:40], np.arange(40), np.zeros(40, dtype=int))
    mon = calibrated(task)
    mon.observe_table(frame, id="id", probs=prob_names(2), bucket="bucket", category="cat")
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert loaded.status()["rows_from_tables"] == 40
    labels = pl.DataFrame({"id": np.arange(0, 40, 3), "y": task.y[:40:3]})
    assert loaded.label_table(labels, id="id", label="y").matched == 14
    assert mon.label_table(labels, id="id", label="y").matched == 14
    assert_same_statistics(loaded, mon)


def test_the_widget_status_line_names_the_tables() -> None:
    from calwatch.widget import status_line

    task = real_task("breast_cancer")
    frame = log_frame(task.P[:60], np.arange(60), np.arange(60) % 3)
    mon = calibrated(task)
    assert status_line(mon)["sources"] == "" and mon.sources() == ""
    mon.observe_table(frame, id="id", probs=prob_names(2), bucket="bucket", category="cat")
    assert mon.sources() == "polars: 60 rows, 3 buckets"
    assert status_line(mon)["sources"] == "polars: 60 rows, 3 buckets"
    assert mon.widget()._status["sources"] == "polars: 60 rows, 3 buckets"
