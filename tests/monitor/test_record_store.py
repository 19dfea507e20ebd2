"""Settled batch records (kept as columns) read exactly like the objects they replace.

:class:`calwatch.stream.records.RecordStore` moves batches that left the window into columns; every read
of the monitor (tables, snapshots, late labels through the row log, comparisons) must give what
the per-object records gave. Each test runs a stream twice, with settling off (``HOT_BATCHES``
past the stream's length) and with every settled batch in columns (``HOT_BATCHES = 0``, one batch
a chunk), and compares.
"""

import shutil
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
import calwatch.stream.records as stream_module
from calwatch.stream.columns import StatsColumns
from calwatch.stream.records import BatchRecord, RecordStore

from ..fixtures.make_legacy_snapshot import continue_stream
from ..synthetic import softmax_data, three_set_monitor

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy-pets" / "snapshot"
VIEWS = ("summary", "class_coverage", "warnings", "notes")


def _settle_everything(monkeypatch, on):
    monkeypatch.setattr(stream_module, "HOT_BATCHES", 0 if on else 10**9)
    monkeypatch.setattr(stream_module, "SETTLE_CHUNK", 1)


def _stream(tmp_path):
    """A recorded stream: 3 kinds, a small window, a row log, late and relabelled batches."""
    P, y = softmax_data(3000, seed=1)
    mon = three_set_monitor(P[:1000], y[:1000], tmp_path / "rows")
    for b in range(12):
        lo = 1000 + 150 * b
        mon.observe(probs=P[lo : lo + 150], ids=np.arange(lo, lo + 150))
        if b % 3 == 2:  # labels of three batches back: two of them already left the window
            back = lo - 450
            mon.label(np.arange(back, back + 150), y[back : back + 150])
    mon.label(np.arange(1000, 1150), y[1000:1150])  # a settled batch's statistics change (row log)
    return mon


def _views(mon):
    return {
        "summary": mon.summary().drop("observed_at"),
        "class_coverage": mon.class_coverage(),
        "warnings": mon.warnings().drop("ack_at"),
        "notes": mon.notes().drop("at"),
    }


def _assert_same(a, b):
    for name in VIEWS:
        assert_frame_equal(a[name], b[name], check_exact=True)


def test_settled_stream_reads_like_objects(tmp_path, monkeypatch):
    _settle_everything(monkeypatch, on=False)
    plain = _stream(tmp_path / "plain")
    assert plain._stream.batches.n_settled == 0
    _settle_everything(monkeypatch, on=True)
    settled = _stream(tmp_path / "settled")
    store = settled._stream.batches
    assert store.n_settled > 0
    fields = store._stats._calibrators["lac"].fields
    assert {name: f.kind for name, f in fields.items()} == {
        "size_counts": "array", "class_labelled": "array", "class_covered": "array", "alpha_level": "float"
    }  # fmt: skip
    _assert_same(_views(plain), _views(settled))
    for a, b in zip(plain.batch_records, settled.batch_records, strict=True):
        assert a.stats == b.stats
        assert (a.index, a.name, a.n_rows, a.n_labelled) == (b.index, b.name, b.n_rows, b.n_labelled)
        assert (a.rows is None) == (b.rows is None)
    assert [r.index for r in store[-3:]] == [9, 10, 11]
    assert store[0] == store[0] and store[0].observed_at.tzinfo is UTC
    # Snapshots of a settled stream load to the same views, and load settles again as it streams.
    settled.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    _assert_same(_views(settled), _views(loaded))
    assert_frame_equal(settled.summary(), loaded.summary())


def test_old_snapshot_loads_settles_and_streams_on(tmp_path, monkeypatch):
    views = {}
    for on in (False, True):
        _settle_everything(monkeypatch, on)
        shutil.copytree(LEGACY, tmp_path / str(on))
        mon = cw.Monitor.load(tmp_path / str(on))
        mon._stream.batches.settle(keep=0)
        continue_stream(mon)
        views[on] = _views(mon)
    _assert_same(views[False], views[True])


def test_record_store_keeps_odd_values_as_they_were(monkeypatch):
    _settle_everything(monkeypatch, on=True)
    zone = timezone(timedelta(hours=5))
    stamps = [
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 6),
        datetime(2026, 3, 1, tzinfo=zone),
    ]
    records = [
        BatchRecord(i, name, at, 10, {})
        for i, (name, at) in enumerate(zip(["0", "june", "2"], stamps, strict=True))
    ]
    store = RecordStore(records)
    assert store.settle(keep=0) == 3
    assert list(store) == records
    assert [r.observed_at.tzinfo for r in store] == [UTC, None, zone]


def test_stats_columns_fall_back_per_field():
    from dataclasses import dataclass

    @dataclass
    class Odd:
        counts: np.ndarray
        level: float | None = None
        tag: object = None

    columns = StatsColumns()
    values = [
        Odd(np.array([1, 2]), 0.5, (1, 2)),
        Odd(np.array([1, 2, 3]), None, "x"),  # another shape: the field becomes a list
        Odd(np.array([4.0, 5.0]), np.float64(0.25)),  # a numpy scalar: kept as it was
    ]
    for i, value in enumerate(values):
        columns.put(i, {"k": value})
    for i, value in enumerate(values):
        got = columns.get(i)["k"]
        assert got.counts.dtype == value.counts.dtype and got.counts.tolist() == value.counts.tolist()
        assert type(got.level) is type(value.level) and got.level == value.level
        assert got.tag == value.tag
    columns.put(0, {"k": Odd(np.array([7, 8]), 1.0)})  # an update in place
    assert columns.get(0)["k"].counts.tolist() == [7, 8]
    counts = StatsColumns()  # int64 counts stored narrow, widened when a count needs it
    for i, big in enumerate([3, 40_000, 2**40, -5]):
        counts.put(i, {"k": Odd(np.array([1, big]))})
    assert [counts.get(i)["k"].counts.tolist() for i in range(4)] == [
        [1, 3],
        [1, 40_000],
        [1, 2**40],
        [1, -5],
    ]
    assert counts.get(0)["k"].counts.dtype == np.int64
    assert counts._calibrators["k"].fields["counts"].kind == "array"  # a column, not a list of arrays
    with pytest.raises(IndexError):
        columns.put(5, {})
