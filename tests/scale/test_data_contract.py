"""The data contract of the table path: labels join only rows the monitor observed, one id per row.

Each case is one that silently corrupted a monitor before: a log rewritten or replaced under it,
a file that landed in an observed folder after a save, an id in two buckets, ids of two types, a
NaN bucket, a corrupt file in a glob, a bucket column of lists. Every refusal names the file or
column and leaves the monitor as it was (its summary, class coverage and status compared whole).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import calwatch as cw
import calwatch.scale.table as table_module
from calwatch.core.codec import SnapshotError
from calwatch.scale.pins import ChangedSourceError, FilePin
from calwatch.stream.row_log import file_sha256
from tests.monitor.snapshot_files import resign
from tests.scale.logs import assert_same_statistics, calibrated, log_frame, prob_names, real_task, replay

TASK = real_task("breast_cancer")
LOG = {"id": "id", "probs": prob_names(2), "bucket": "bucket", "category": "cat"}


def _frame(rows: range, buckets: Any = None, *, shuffle: int | None = None) -> pl.DataFrame:
    index = np.arange(rows.start, rows.stop)
    P = TASK.P[index]
    if shuffle is not None:  # other probabilities under the same ids
        P = TASK.P[np.random.default_rng(shuffle).permutation(TASK.P.shape[0])[: len(index)]]
    bucket = index // 50 if buckets is None else buckets
    return log_frame(P, index, bucket)


def _labels(ids: Any) -> pl.DataFrame:
    ids = np.asarray(ids)
    return pl.DataFrame({"id": ids, "y": TASK.y[ids]})


def _view(mon: cw.Monitor) -> tuple[Any, ...]:
    status = {k: v for k, v in mon.status().items() if k not in ("last_update",)}
    return mon.summary().drop("observed_at"), mon.class_coverage().drop("observed_at", strict=False), status


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return bool(a[0].equals(b[0]) and a[1].equals(b[1]) and a[2] == b[2])


# ------------------------------------------------------------------------------ pins
def test_a_log_rewritten_after_it_was_observed_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    _frame(range(180)).write_parquet(path, row_group_size=40)
    mon = calibrated(TASK)
    mon.observe_table(path, **LOG)
    before = _view(mon)
    # Same ids, other probabilities: before pins, polars read the new bytes at the old footer's
    # offsets ("page header reported the wrong page size") or counted the new rows silently.
    _frame(range(180), shuffle=1).write_parquet(path, row_group_size=33)
    with pytest.raises(
        ChangedSourceError, match=rf"{path}: the prediction log changed since it was observed"
    ):
        mon.label_table(_labels(range(0, 180, 2)), id="id", label="y")
    assert _same(_view(mon), before)


def test_a_rewrite_of_equal_size_and_footer_is_caught_by_its_modification_time(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    frame = _frame(range(100))
    frame.write_parquet(path, statistics=False, compression="uncompressed")
    pin = FilePin.of(path)
    stat = path.stat()
    frame.with_columns(pl.col("p0").reverse(), pl.col("p1").reverse()).write_parquet(
        path, statistics=False, compression="uncompressed"
    )
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000))
    assert FilePin.of(path).size == pin.size and FilePin.of(path).footer_sha256 == pin.footer_sha256
    assert pin.change() == "it was modified"


def test_a_file_replaced_while_it_is_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.parquet"
    _frame(range(180)).write_parquet(path, row_group_size=15)
    other = tmp_path / "other.parquet"
    _frame(range(180), shuffle=2).write_parquet(other, row_group_size=15)
    reads = []
    original = table_module.item_chunks

    def replaced_midway(item: Any, names: list[str], chunk_rows: int) -> Any:
        reads.append(item)
        if len(reads) == 3:  # batches 1-2 from the old file, the rest from the new one
            os.replace(other, path)
        return original(item, names, chunk_rows)

    monkeypatch.setattr(table_module, "item_chunks", replaced_midway)
    mon = calibrated(TASK)
    before = _view(mon)
    with pytest.raises(ChangedSourceError, match=rf"{path}: the prediction log changed while it was read"):
        mon.observe_table(path, chunk_rows=15, **LOG)
    assert len(reads) > 3 and _same(_view(mon), before)


@pytest.mark.parametrize("saved", [False, True], ids=["live", "saved and loaded"])
def test_a_file_that_lands_in_an_observed_folder_later_is_never_read(tmp_path: Path, saved: bool) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    _frame(range(100)).write_parquet(folder / "a.parquet")
    mon = calibrated(TASK)
    mon.observe_table(folder, **LOG)
    if saved:
        mon.save(tmp_path / "snap")
    _frame(range(100, 150), buckets=np.zeros(50, dtype=int)).write_parquet(folder / "b.parquet")
    if saved:
        mon = cw.Monitor.load(tmp_path / "snap")
    before = _view(mon)
    report = mon.label_table(_labels(range(100, 105)), id="id", label="y")
    # Before: the loaded monitor re-scanned the folder, and 5 labels joined rows never observed.
    assert (report.matched, report.unmatched) == (0, 5)
    after = _view(mon)
    assert after[0].equals(before[0]) and after[2]["labels_unmatched"] == before[2]["labels_unmatched"] + 5


def test_labels_for_a_saved_parquet_table_check_its_pins_after_a_load(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    _frame(range(100)).write_parquet(path)
    mon = calibrated(TASK)
    mon.observe_table(path, **LOG)
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    labels = _labels(range(0, 100, 4))
    assert loaded.label_table(labels, id="id", label="y").matched == 25
    mon.label_table(labels, id="id", label="y")
    assert_same_statistics(loaded, mon)
    again = cw.Monitor.load(tmp_path / "snap")
    path.unlink()
    with pytest.raises(ChangedSourceError, match="is gone"):
        again.label_table(labels, id="id", label="y")


def test_a_lazy_query_over_a_file_is_copied_so_its_labels_join_the_rows_observed(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    frame = _frame(range(150))
    frame.write_parquet(path)
    mon, memory = calibrated(TASK), calibrated(TASK)
    mon.observe_table(pl.scan_parquet(path), **LOG)
    replay(memory, frame, label=False)
    _frame(range(150), shuffle=3).write_parquet(path)  # the query now reads other rows
    labels = _labels(range(0, 150, 3))
    assert mon.label_table(labels, id="id", label="y").matched == 50
    memory.label(labels["id"].to_numpy(), labels["y"].to_numpy())
    assert_same_statistics(mon, memory)


# ------------------------------------------------------------------------------ one id contract
@pytest.mark.parametrize("how", ["frame", "parquet"])
def test_an_id_in_two_buckets_is_refused_like_observe_refuses_it(tmp_path: Path, how: str) -> None:
    frame = _frame(range(100)).with_columns(
        pl.when(pl.col("id") == 70).then(pl.lit(7, pl.Int64)).otherwise(pl.col("id")).alias("id")
    )  # id 7 in bucket 0 and in bucket 1
    source: Any = frame
    if how == "parquet":
        source = tmp_path / "log.parquet"
        frame.write_parquet(source, row_group_size=30)
    mon = calibrated(TASK)
    before = _view(mon)
    with pytest.raises(ValueError, match=r"id column 'id': id 7 appears 2 times \(in buckets 0, 1\)"):
        mon.observe_table(source, chunk_rows=30, **LOG)
    assert _same(_view(mon), before)


def test_a_glob_of_integer_and_string_ids_is_refused_naming_both_files(tmp_path: Path) -> None:
    _frame(range(50)).write_parquet(tmp_path / "a.parquet")
    _frame(range(50, 100)).with_columns(pl.col("id").cast(pl.String)).write_parquet(tmp_path / "b.parquet")
    mon = calibrated(TASK)
    before = _view(mon)
    with pytest.raises(
        ValueError, match=r"id column 'id' holds integers in .*a\.parquet and strings in .*b\.parquet"
    ):
        mon.observe_table(tmp_path / "*.parquet", **LOG)
    assert _same(_view(mon), before)


def test_a_monitor_keeps_one_id_type_on_every_path_so_labels_always_join() -> None:
    mon = calibrated(TASK)
    mon.observe_table(_frame(range(50)), **LOG)
    before = _view(mon)
    strings = _frame(range(50, 100)).with_columns(pl.col("id").cast(pl.String))
    with pytest.raises(
        ValueError, match=r"id column 'id': this monitor's ids are integers .* these are strings"
    ):
        mon.observe_table(strings, **LOG)
    with pytest.raises(ValueError, match=r"ids: this monitor's ids are integers .* these are strings"):
        mon.observe(probs=TASK.P[:3], ids=["a", "b", "c"], categories=["x", "y", "z"])
    with pytest.raises(ValueError, match=r"ids: this monitor's ids are integers .* these are strings"):
        mon.label(["1", "2"], [0, 1])
    assert _same(_view(mon), before)
    # Integer labels of another width still join (Int32 labels, Int64 rows).
    labels = _labels(range(0, 50, 5)).with_columns(pl.col("id").cast(pl.Int32))
    assert mon.label_table(labels, id="id", label="y").matched == 10


def test_string_ids_fix_the_type_for_in_memory_batches_and_tables_alike() -> None:
    mon = calibrated(TASK)
    mon.observe(probs=TASK.P[:3], ids=["a", "b", "c"], categories=["x", "y", "z"])
    before = _view(mon)
    with pytest.raises(
        ValueError, match=r"id column 'id': this monitor's ids are strings .* these are integers"
    ):
        mon.observe_table(_frame(range(50)), **LOG)
    assert _same(_view(mon), before)
    mon.observe_table(_frame(range(50)).with_columns(pl.col("id").cast(pl.String)), **LOG)
    assert mon.label_table(pl.DataFrame({"id": ["7"], "y": [1]}), id="id", label="y").matched == 1


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("bucket", float("nan"), "bucket column 'bucket' has 1 NaN rows"),
        ("bucket", None, "bucket column 'bucket' has 1 null rows"),
        ("id", None, "id column 'id' has 1 null rows"),
        ("id", float("nan"), "id column 'id' has 1 NaN rows"),
    ],
)
def test_null_and_nan_buckets_and_ids_are_refused_naming_the_column(
    column: str, value: Any, message: str
) -> None:
    frame = _frame(range(60)).with_columns(pl.col(column).cast(pl.Float64))
    frame = frame.with_columns(
        pl.when(pl.col("p0") == frame["p0"][5]).then(value).otherwise(pl.col(column)).alias(column)
    )
    mon = calibrated(TASK)
    before = _view(mon)
    with pytest.raises(ValueError, match=message):  # a NaN bucket became a batch named "nan"
        mon.observe_table(frame, **LOG)
    assert _same(_view(mon), before)


# ------------------------------------------------------------------------------ messages
@pytest.mark.parametrize("damage", ["truncated", "not parquet", "corrupt footer", "footer length"])
def test_a_damaged_file_in_a_glob_is_named(tmp_path: Path, damage: str) -> None:
    for name, rows in (("a.parquet", range(50)), ("b.parquet", range(50, 100))):
        _frame(rows).write_parquet(tmp_path / name)
    bad = tmp_path / "b.parquet"
    data = bad.read_bytes()
    if damage == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "not parquet":
        bad.write_text("id,bucket\n1,2\n")
    elif damage == "corrupt footer":
        bad.write_bytes(data[:-12] + b"\xff\xff\xff\x7f" + data[-8:])
    else:
        bad.write_bytes(data[:-8] + b"\xff\xff\xff\x7f" + b"PAR1")
    mon = calibrated(TASK)
    before = _view(mon)
    with pytest.raises(ChangedSourceError, match=rf"{bad}: is (not a|not a readable|a corrupt) parquet file"):
        mon.observe_table(tmp_path / "*.parquet", **LOG)
    assert _same(_view(mon), before)


def test_a_corrupt_row_group_is_named_with_its_file(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    _frame(range(180)).write_parquet(path, row_group_size=45, compression="uncompressed")
    data = bytearray(path.read_bytes())
    data[4:400] = b"\x07" * 396  # the first row group's pages: garbage, the footer intact
    path.write_bytes(bytes(data))
    mon = calibrated(TASK)
    before = _view(mon)
    with pytest.raises(ChangedSourceError, match=rf"{path}: its row groups \[.*\] cannot be read"):
        mon.observe_table(path, **LOG)
    assert _same(_view(mon), before)


@pytest.mark.parametrize("kind", ["list", "struct", "binary"])
def test_a_bucket_column_of_lists_or_structs_is_refused_naming_it(kind: str) -> None:
    frame = _frame(range(60))
    bucket = {
        "list": pl.concat_list("bucket"),
        "struct": pl.struct("bucket"),
        "binary": pl.col("bucket").cast(pl.String).cast(pl.Binary),
    }[kind]
    mon = calibrated(TASK)
    with pytest.raises(
        ValueError, match=r"bucket column 'bucket' holds .* values; a bucket must be one plain value"
    ):
        mon.observe_table(frame.with_columns(bucket.alias("bucket")), **LOG)
    assert mon.n_batches == 0


def test_a_string_view_bucket_equals_a_string_bucket() -> None:
    frame = _frame(range(120)).with_columns(pl.format("day-{}", "bucket").alias("bucket"))
    table = frame.to_arrow()
    index = table.schema.get_field_index("bucket")
    viewed = table.set_column(index, "bucket", table.column("bucket").cast(pa.string_view()))
    a, b = calibrated(TASK), calibrated(TASK)
    a.observe_table(viewed, **LOG)
    b.observe_table(frame, **LOG)
    assert_same_statistics(a, b)
    assert a.summary()["name"].unique(maintain_order=True).to_list() == ["day-0", "day-1", "day-2"]


# ------------------------------------------------------------------------------ snapshot tables index
def _saved_with_a_table(tmp_path: Path) -> Path:
    mon = calibrated(TASK)
    mon.observe_table(_frame(range(100)), **LOG)
    mon.label_table(_labels(range(10)), id="id", label="y")
    return mon.save(tmp_path / "snap")


@pytest.mark.parametrize("field", ["buckets", "labels", "copies"])
@pytest.mark.parametrize("outside", ["/etc/passwd", "../outside.parquet", "/nonexistent/x"])
def test_a_tables_index_naming_a_file_outside_the_snapshot_is_refused_alike(
    tmp_path: Path, field: str, outside: str
) -> None:
    snap = _saved_with_a_table(tmp_path)
    index_path = snap / "tables" / "index.json"
    index = json.loads(index_path.read_text())
    entry = index["sources"][0]
    target = Path(outside) if outside.startswith("/") else snap / "tables" / outside
    if not outside.startswith("/"):
        shutil.copyfile(snap / "tables" / entry["buckets"], target)
    sha = file_sha256(target) if target.is_file() else "0" * 64
    if field == "buckets":
        entry["buckets"], entry["buckets_sha256"] = outside, sha
    else:
        entry[field][0] = {"file": outside, "sha256": sha}
    index_path.write_text(json.dumps(index))
    resign(snap, "tables/index.json")
    with pytest.raises(SnapshotError, match=r"names .*, which is not a file of the snapshot") as err:
        cw.Monitor.load(snap)
    assert "lacks" not in str(err.value) and "checksum" not in str(err.value)


def test_a_forged_pin_is_refused_before_a_row_of_the_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    _frame(range(100)).write_parquet(path)
    mon = calibrated(TASK)
    mon.observe_table(path, **LOG)
    snap = mon.save(tmp_path / "snap")
    secret = tmp_path / "secret.parquet"
    pl.DataFrame({"password": ["hunter2"], "id": [1]}).write_parquet(secret)
    index_path = snap / "tables" / "index.json"
    index = json.loads(index_path.read_text())
    index["sources"][0]["pins"][0]["path"] = str(secret)  # the size, time and footer of log.parquet
    index["sources"][0]["location"] = str(secret)
    index_path.write_text(json.dumps(index))
    resign(snap, "tables/index.json")
    loaded = cw.Monitor.load(snap)  # loading reads nothing outside the folder
    with pytest.raises(ChangedSourceError) as err:
        loaded.label_table(_labels([1]), id="id", label="y")
    assert "password" not in str(err.value)  # before: the join error listed the file's columns


def test_a_label_for_an_id_two_tables_hold_is_refused_whole() -> None:
    mon = calibrated(TASK)
    mon.observe_table(_frame(range(50)), **LOG)
    mon.observe_table(_frame(range(45, 95)).with_columns(pl.col("bucket") + 10), **LOG)  # ids 45-49 twice
    before = _view(mon)
    with pytest.raises(ValueError, match="id 47 was observed in two tables: a label cannot tell which row"):
        mon.label_table(_labels([1, 47, 60]), id="id", label="y")
    assert _same(_view(mon), before)
    assert mon.label_table(_labels([1, 60]), id="id", label="y").matched == 2
