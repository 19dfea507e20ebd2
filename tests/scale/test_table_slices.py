"""observe_table(meta=) / label_table: a table's slice counts equal the in-memory monitor's, exactly.

A monitor calibrated with ``meta=`` slices its batches. Given the table's slice columns by name,
``observe_table`` encodes them chunk by chunk with the monitor's fixed encoding and commits each
bucket's slice counts with its batch; ``label_table`` encodes a labelled row's columns again from
the observed table. For random logs of real tasks (K = 10 and 2), random sources, chunkings and
bucket types, labels known at observe time, late labels over several calls with relabels and
unknown ids, ``mon.slices(min_rows=1)`` and the ``SliceStore``'s epochs must equal those of a
monitor that observed the same buckets with ``observe(meta=)`` and took the same ``label`` calls.
Bad ``meta`` is refused naming the column, the monitor (its slices included) unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.stream.slices import SliceTypeError
from tests.scale.logs import (
    assert_same_statistics,
    bucket_values,
    calibrated,
    log_frame,
    prob_names,
    real_task,
)
from tests.scale.slice_logs import (
    META,
    assert_same_slices,
    assert_unchanged,
    replay_sliced,
    slice_meta,
    slice_view,
    slicing_monitor,
)


def _source(frame: pl.DataFrame, how: str, folder: Path, rng: np.random.Generator) -> Any:
    """The log as a polars frame or query, a pyarrow Table, or a folder of 1-3 parquet files."""
    if how == "lazy":
        return frame.lazy()
    if how == "arrow":
        return frame.to_arrow()
    if how == "parquet":
        where = folder / f"log-{len(list(folder.iterdir()))}"
        where.mkdir()
        cuts = np.sort(
            rng.choice(np.arange(1, max(frame.height, 2)), size=min(2, frame.height - 1), replace=False)
        )
        for i, (lo, hi) in enumerate(zip([0, *cuts.tolist()], [*cuts.tolist(), frame.height], strict=True)):
            frame.slice(lo, hi - lo).write_parquet(
                where / f"part-{i}.parquet", row_group_size=int(rng.integers(1, 50))
            )
        return where
    return frame


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    task_name=st.sampled_from(["digits", "breast_cancer"]),
    how=st.sampled_from(["frame", "lazy", "arrow", "parquet"]),
)
def test_table_slices_equal_the_in_memory_monitor(
    data: st.DataObject, task_name: str, how: str, tmp_path: Path
) -> None:
    task = real_task(task_name)
    n = data.draw(st.integers(1, min(200, task.P.shape[0])), label="rows")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    rows = rng.choice(task.P.shape[0], size=n, replace=False)
    P, y = task.P[rows], task.y[rows]
    kind = data.draw(st.sampled_from(["int", "str", "date"]), label="bucket type")
    buckets = bucket_values(kind, rng.integers(0, data.draw(st.integers(1, 5), label="buckets"), size=n))
    ids = rng.permutation(10 * n)[:n]
    known = rng.random(n) < data.draw(st.sampled_from([0.0, 0.3, 1.0]), label="labelled at once")
    frame = log_frame(P, ids, buckets, [int(v) if k else None for v, k in zip(y, known, strict=True)])
    frame = frame.hstack(slice_meta(rng, n))
    table, memory = slicing_monitor(task), slicing_monitor(task)
    meta = [META[i] for i in rng.permutation(len(META))]  # any order: columns are found by name
    table.observe_table(
        _source(frame, how, tmp_path, rng), id="id", probs=prob_names(task.K), bucket="bucket", label="y",
        category="cat", meta=meta, chunk_rows=data.draw(st.integers(1, max(1, n)), label="chunk_rows"),
    )  # fmt: skip
    replay_sliced(memory, frame)
    assert_same_statistics(table, memory)
    assert_same_slices(table, memory)
    for _ in range(data.draw(st.integers(0, 3), label="label calls")):
        pick = rng.random(n) < rng.random()
        wrong = rng.random(n) < 0.3  # some labels are wrong, to be corrected by a later call
        labels = np.where(wrong, rng.integers(0, task.K, size=n), y)[pick]
        unknown = np.unique(rng.integers(10 * n, 20 * n, size=int(rng.integers(0, 3))))
        label_ids = np.concatenate([ids[pick], unknown])
        label_values = np.concatenate([labels, np.zeros(unknown.shape[0], dtype=int)])
        order = rng.permutation(label_ids.shape[0])
        labels_frame = pl.DataFrame({"rid": label_ids[order], "truth": label_values[order]})
        got = table.label_table(labels_frame, id="rid", label="truth", chunk_rows=int(rng.integers(1, n + 2)))
        want = memory.label(label_ids[order], label_values[order])
        assert (got.matched, got.unmatched, got.relabelled) == (want.matched, want.unmatched, want.relabelled)
        assert_same_statistics(table, memory)
        assert_same_slices(table, memory)


# ---------------------------------------------------------------------------- by hand
def test_hand_counted_slices_of_a_small_table() -> None:
    """Sets of one class (LAC on confident rows), so coverage is "label = top class", counted by hand.

    Calibration rows put 0.98 on their label: every score ``1 − p_y`` is 0.02, so ``q̂ = 0.02`` and
    each row's set is its top class alone. Eight rows in two buckets, slice column ``g``:

    ====  ======  ===  =====  ===============================================
    id    bucket  g    top    labels
    ====  ======  ===  =====  ===============================================
    0     0       a    0      0 in the table (covered)
    1     0       a    1      1 late (covered)
    2     0       b    2      0 late (missed), then relabelled 2 (covered)
    3     0       b    0      none
    4     1       a    1      none
    5     1       b    2      2 late (covered)
    6     1       a    0      none
    7     1       b    1      none
    ====  ======  ===  =====  ===============================================

    So ``g = a``: 4 rows, 2 labelled, 2 covered; ``g = b``: 4 rows, 2 labelled, 1 covered after
    the late labels and 2 after the relabel; every set has one class.
    """
    one_hot = np.full((3, 3), 0.01) + np.eye(3) * 0.97
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, shift=None)
    mon.calibrate(probs=np.tile(one_hot, (10, 1)), y=np.tile([0, 1, 2], 10), meta={"g": ["a", "b", "c"] * 10})
    top = [0, 1, 2, 0, 1, 2, 0, 1]
    frame = pl.DataFrame(
        {"id": list(range(8)), "bucket": [0] * 4 + [1] * 4, **{f"p{k}": one_hot[top, k] for k in range(3)},
         "y": pl.Series([0, None, None, None, None, None, None, None], dtype=pl.Int64),
         "g": ["a", "a", "b", "b", "a", "b", "a", "b"]}
    )  # fmt: skip
    assert mon.observe_table(frame, id="id", probs=prob_names(3), bucket="bucket", label="y", meta=["g"]) == (
        0,
        1,
    )

    def counts() -> dict[str, tuple[int, int, int, float]]:
        got = mon.slices(by="g", min_rows=1).sort("slice")
        rows = got.select("slice", "n_rows", "n_labelled", "n_covered", "mean_set_size").iter_rows()
        return {s: (n, nl, nc, m) for s, n, nl, nc, m in rows}

    assert counts() == {"g = a": (4, 1, 1, 1.0)}  # g = b has no labelled row yet: not tested
    mon.label_table(pl.DataFrame({"id": [1, 2, 5], "y": [1, 0, 2]}), id="id", label="y")
    assert counts() == {"g = a": (4, 2, 2, 1.0), "g = b": (4, 2, 1, 1.0)}
    report = mon.label_table(pl.DataFrame({"id": [2], "y": [2]}), id="id", label="y")
    assert report.relabelled == 1
    assert counts() == {"g = a": (4, 2, 2, 1.0), "g = b": (4, 2, 2, 1.0)}
    store = mon._slices
    assert store is not None and store.starts == [0, 1]
    by_batch = [store.epochs[0][:, :4].tolist(), store.epochs[1][:, :4].tolist()]  # cells g = a, b, c, other
    assert by_batch == [
        [[2, 2, 0, 0], [2, 1, 0, 0], [2, 1, 0, 0], [2, 2, 0, 0]],  # rows, labelled, covered, set sizes
        [[2, 2, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0], [2, 2, 0, 0]],
    ]


def test_buckets_counted_in_blocks_give_the_same_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk of many buckets is counted a block of buckets at a time (bounded memory): the same counts."""
    from calwatch.scale import slice_partials

    task = real_task("digits")
    n = 150
    rng = np.random.default_rng(12)
    y = task.y[:n]
    frame = log_frame(task.P[:n], np.arange(n), rng.integers(0, 9, n), [int(v) for v in y])
    frame = frame.hstack(slice_meta(rng, n))
    memory = slicing_monitor(task)
    replay_sliced(memory, frame)
    relabel = np.arange(0, n, 4)
    memory.label(relabel.tolist(), (y[relabel] + 1) % task.K)
    store = memory._slices
    assert store is not None
    per_bucket = (2 + 2 * len(store.calibrators)) * store.encoding.n_cells  # entries of one bucket
    for block in (1, 4):  # buckets per block (a chunk here holds all nine)
        monkeypatch.setattr(slice_partials, "BLOCK_ENTRIES", block * per_bucket)
        table = slicing_monitor(task)
        table.observe_table(
            frame, id="id", probs=prob_names(task.K), bucket="bucket", label="y", category="cat", meta=META
        )
        table.label_table(pl.DataFrame({"id": relabel, "y": (y[relabel] + 1) % task.K}), id="id", label="y")
        assert_same_slices(table, memory)


# ---------------------------------------------------------------------------- snapshots
def test_a_loaded_monitor_counts_late_labels_of_its_table_rows_in_their_slices(tmp_path: Path) -> None:
    """The monitor's copy of an in-memory table keeps its slice columns, and the snapshot their names."""
    task = real_task("breast_cancer")
    n = 120
    rng = np.random.default_rng(4)
    frame = log_frame(task.P[:n], np.arange(n), np.arange(n) % 3).hstack(slice_meta(rng, n))
    table, memory = slicing_monitor(task), slicing_monitor(task)
    table.observe_table(frame, id="id", probs=prob_names(2), bucket="bucket", category="cat", meta=META)
    replay_sliced(memory, frame)
    table.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert_same_slices(loaded, memory)
    ids = np.arange(0, n, 3)
    loaded.label_table(pl.DataFrame({"id": ids, "y": task.y[ids]}), id="id", label="y")
    memory.label(ids.tolist(), task.y[ids])
    assert_same_statistics(loaded, memory)
    assert_same_slices(loaded, memory)


# ---------------------------------------------------------------------------- bad input
def _changed_in_one_file(frame: pl.DataFrame, folder: Path) -> Path:
    """A folder of two parquet files whose second holds ``hour`` as text."""
    folder.mkdir()
    frame.head(30).write_parquet(folder / "part-0.parquet")
    frame.slice(30).with_columns(pl.col("hour").cast(pl.String)).write_parquet(folder / "part-1.parquet")
    return folder


BAD_TABLES: dict[str, tuple[Any, dict[str, Any], type[Exception], str]] = {
    "no meta": (
        lambda f, _: f, {}, ValueError,
        r"slices its batches by the columns \['carrier', 'hour', 'flag', 'dist'\].*given no meta=: name the "
        r"table's slice columns, meta=\['carrier', 'hour', 'flag', 'dist'\]",
    ),
    "a slice column left out": (
        lambda f, _: f, {"meta": META[:3]}, ValueError, r"which lacks \['dist'\]",
    ),
    "a column that is not a slice column": (
        lambda f, _: f, {"meta": [*META, "cat"]}, ValueError, "meta column 'cat' was not a slice column",
    ),
    "the label column": (
        lambda f, _: f, {"meta": [*META, "y"]}, ValueError, "meta names the label column 'y'",
    ),
    "a slice column missing from the table": (
        lambda f, _: f.drop("dist"), {"meta": META}, ValueError, "column 'dist' is not in the table",
    ),
    "a slice column of another type": (
        lambda f, _: f.with_columns(pl.col("hour").cast(pl.String)), {"meta": META}, SliceTypeError,
        "meta column 'hour' holds text values, but number values when the monitor was calibrated",
    ),
    "a slice column of another type in one file": (
        _changed_in_one_file, {"meta": META}, SliceTypeError, "meta column 'hour' holds text values",
    ),
    "nested values": (
        lambda f, _: f.with_columns(pl.concat_list("hour", "hour").alias("hour")), {"meta": META},
        SliceTypeError, "meta column 'hour' holds nested values",
    ),
    "an id twice (found once the table is read)": (
        lambda f, _: f.with_columns(pl.when(pl.col("id") == 23).then(24).otherwise(pl.col("id")).alias("id")),
        {"meta": META}, ValueError, "id column 'id'",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_TABLES))
def test_bad_meta_is_refused_naming_the_column_and_changes_nothing(case: str, tmp_path: Path) -> None:
    task = real_task("breast_cancer")
    n = 60
    rng = np.random.default_rng(8)
    frame = log_frame(task.P[:n], np.arange(n), np.arange(n) % 2, [int(v) for v in task.y[:n]])
    frame = frame.hstack(slice_meta(rng, n))
    mon = slicing_monitor(task)
    log: dict[str, Any] = {
        "id": "id",
        "probs": prob_names(2),
        "bucket": "bucket",
        "label": "y",
        "category": "cat",
    }
    mon.observe_table(frame.head(20), **log, meta=META)
    before = slice_view(mon)
    spoil, extra, error, named = BAD_TABLES[case]
    with pytest.raises(error, match=named):
        mon.observe_table(spoil(frame.slice(20), tmp_path / "bad"), **log, **extra)
    assert_unchanged(mon, before)
    # Labels outside the classes are refused whole: the slice counts do not move either.
    with pytest.raises(ValueError, match="label column 'truth'"):
        mon.label_table(pl.DataFrame({"rid": [1, 2], "truth": [0, 9]}), id="rid", label="truth")
    assert_unchanged(mon, before)
    # The monitor goes on: the same rows are taken once the table is right.
    mon.observe_table(frame.slice(20), **log, meta=META)
    memory = slicing_monitor(task)
    replay_sliced(memory, frame.head(20))
    replay_sliced(memory, frame.slice(20))
    assert_same_slices(mon, memory)


def test_meta_for_a_monitor_without_slices_is_refused_and_changes_nothing() -> None:
    task = real_task("breast_cancer")
    frame = log_frame(task.P[:40], np.arange(40), np.arange(40) % 2).hstack(
        slice_meta(np.random.default_rng(1), 40)
    )
    mon = calibrated(task)
    log: dict[str, Any] = {"id": "id", "probs": prob_names(2), "bucket": "bucket", "category": "cat"}
    mon.observe_table(frame.head(10), **log)
    before = (mon.summary().drop("observed_at"), mon.status())
    with pytest.raises(
        ValueError, match=r"meta=\['carrier'\]: this monitor keeps no slices; calibrate\(meta=\.\.\.\)"
    ):
        mon.observe_table(frame.slice(10), **log, meta=["carrier"])
    assert_frame_equal(mon.summary().drop("observed_at"), before[0], check_exact=True)
    assert mon.status() == before[1]
    assert mon._slices is None
    with pytest.raises(ValueError, match="keeps no slices"):
        mon.slices()
