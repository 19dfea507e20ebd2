"""History columns in file mappings (:mod:`calwatch.core.paged`) hold the same values as heap columns.

The monitor's per-batch history (settled statistics, detectors' looks, the cards' rows) moves
into shared mappings of unnamed files once a column is large. Each monitor test runs one stream
twice, every column in the heap (``PAGED_FROM_BYTES`` past any column) and every column paged
(``PAGED_FROM_BYTES = 0``), and compares every read exactly.
"""

from __future__ import annotations

import copy
import pickle
import sys

import numpy as np
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
import calwatch.core.paged as paged
import calwatch.stream.records as stream_module
from calwatch.widget import view_datasets

from ..synthetic import softmax_data, three_set_monitor

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")


def _mappings_of_deleted_files() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if line.rstrip().endswith("(deleted)"))


def test_small_columns_stay_in_the_heap(monkeypatch):
    monkeypatch.setattr(paged, "PAGED_FROM_BYTES", 64 * 1024)
    column = paged.empty(10, np.float64)
    assert column.shape == (10,) and not paged.is_paged(column)


def test_a_large_column_is_a_writable_file_mapping(monkeypatch):
    monkeypatch.setattr(paged, "PAGED_FROM_BYTES", 1024)
    column = paged.empty((300, 3), np.int16)
    assert paged.is_paged(column)
    assert column.shape == (300, 3) and column.dtype == np.int16 and column.flags.writeable
    column[:] = np.arange(900, dtype=np.int16).reshape(300, 3)
    assert column[299, 2] == 899 and column.sum() == sum(range(900))
    view = column[10:20]
    assert paged.is_paged(view)
    assert not paged.is_paged(column.copy())  # a copy is an ordinary array
    assert not paged.is_paged(pickle.loads(pickle.dumps(column)))
    np.testing.assert_array_equal(copy.deepcopy(column), column)


def test_grown_keeps_the_rows_and_moves_out_of_the_heap(monkeypatch):
    monkeypatch.setattr(paged, "PAGED_FROM_BYTES", 8 * 100)
    column = np.arange(60, dtype=np.float64)
    same = paged.grown(column, 60)
    assert same is column
    larger = paged.grown(column, 61)
    assert len(larger) == 91 and not paged.is_paged(larger)  # 728 bytes: still the heap
    np.testing.assert_array_equal(larger[:60], column)
    largest = paged.grown(larger, 200, factor=2.0)
    assert len(largest) == 200 and paged.is_paged(largest)
    np.testing.assert_array_equal(largest[:60], column)


def test_no_usable_folder_falls_back_to_the_heap(monkeypatch, tmp_path):
    monkeypatch.setattr(paged, "PAGED_FROM_BYTES", 0)
    monkeypatch.setenv(paged.HISTORY_DIR_ENV, str(tmp_path / "not-there"))
    column = paged.empty(1000, np.float64)  # never raises: the caller did not ask for a file
    assert not paged.is_paged(column) and column.shape == (1000,)
    monkeypatch.setenv(paged.HISTORY_DIR_ENV, str(tmp_path))
    assert paged.is_paged(paged.empty(1000, np.float64))
    assert list(tmp_path.iterdir()) == []  # the file has no name: nothing is left behind


@linux_only
def test_a_mapping_is_unmapped_with_its_last_view(monkeypatch):
    monkeypatch.setattr(paged, "PAGED_FROM_BYTES", 0)
    before = _mappings_of_deleted_files()
    columns = [paged.empty(4096, np.int64) for _ in range(50)]
    views = [c[::2] for c in columns]
    assert _mappings_of_deleted_files() == before + 50
    del columns
    assert _mappings_of_deleted_files() == before + 50  # the views keep theirs
    del views
    assert _mappings_of_deleted_files() == before


def _stream(tmp_path):
    """Three kinds, a window of 250 rows (~6 batches), late and relabelled batches, a widget attached."""
    P, y = softmax_data(4000, seed=3)
    mon = three_set_monitor(P[:1000], y[:1000], tmp_path / "rows")
    widget = mon.widget()
    for b in range(75):  # past the 64 batches whose card rows the widget keeps as dicts
        lo = 1000 + 40 * b
        mon.observe(probs=P[lo : lo + 40], ids=np.arange(lo, lo + 40))
        if b % 3 == 2:  # labels of eight batches back: already left the window
            back = lo - 320
            mon.label(np.arange(back, back + 120), y[back : back + 120])
    mon.label(np.arange(1000, 1040), y[1000:1040])  # a settled batch changes
    return mon, widget


def _reads(mon, widget):
    return (
        {
            "summary": mon.summary().drop("observed_at"),
            "class_coverage": mon.class_coverage(),
            "warnings": mon.warnings().drop("ack_at"),
        },
        view_datasets(mon, dashboard_data=True),
        widget.current_datasets(),
    )


def test_a_paged_history_reads_like_a_heap_one(tmp_path, monkeypatch):
    monkeypatch.setattr(stream_module, "HOT_BATCHES", 0)
    monkeypatch.setattr(stream_module, "SETTLE_CHUNK", 1)
    monkeypatch.setattr(paged, "PAGED_FROM_BYTES", 2**62)
    heap_mon, heap_widget = _stream(tmp_path / "heap")
    monkeypatch.setattr(paged, "PAGED_FROM_BYTES", 0)
    paged_mon, paged_widget = _stream(tmp_path / "paged")

    store = paged_mon._stream.batches
    assert store.n_settled > 20
    assert paged.is_paged(store._n_rows)
    fields = store._stats._calibrators["lac"].fields.values()
    assert all(paged.is_paged(f.data) for f in fields if f.kind != "object")
    looks = paged_mon._shift.looks._columns
    assert looks and all(paged.is_paged(c.statistic) for c in looks.values())
    card_columns = paged_widget._card_totals.rows._columns
    assert card_columns and all(paged.is_paged(a) for c in card_columns.values() for a in c.arrays.values())
    assert not paged.is_paged(heap_mon._stream.batches._n_rows)

    heap_tables, heap_views, heap_current = _reads(heap_mon, heap_widget)
    paged_tables, paged_views, paged_current = _reads(paged_mon, paged_widget)
    for name, table in heap_tables.items():
        assert_frame_equal(paged_tables[name], table, check_exact=True)
    assert paged_views == heap_views
    assert heap_current is not None and paged_current == heap_current

    heap_mon.save(tmp_path / "heap.snapshot")
    paged_mon.save(tmp_path / "paged.snapshot")
    loaded = cw.Monitor.load(tmp_path / "paged.snapshot")
    for name, table in heap_tables.items():
        fresh = {"summary": loaded.summary().drop("observed_at"), "class_coverage": loaded.class_coverage(),
                 "warnings": loaded.warnings().drop("ack_at")}[name]  # fmt: skip
        assert_frame_equal(fresh, table, check_exact=True)
    assert all(paged.is_paged(c.statistic) for c in loaded._shift.looks._columns.values())  # loaded whole
