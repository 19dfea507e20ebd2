"""Per-batch memory stays bounded: the detectors' looks are columns, not a dict per look.

A monitor keeps every batch's looks for the whole stream (the shift chart reads them). These
tests check the columnar store against the dict it replaced (same keys, values, order and
overwrite/delete semantics), that snapshots keep it (and that a snapshot holding the old dict
still loads), and a structural bound: the store holds O(1) Python objects however many batches
it has seen, and its arrays grow by a fixed number of bytes per look.
"""

from __future__ import annotations

import gc
import math
import random
import sys

import numpy as np
import pytest

import calwatch as cw
import calwatch.stream.records as stream_module
from calwatch.core.codec import StateDecoder, StateEncoder
from calwatch.shift.looks import LookStore
from calwatch.shift.watch import ShiftWatch

from ..synthetic import softmax_data


def _look(name: str, batch: int, rng: random.Random, calibrators: list[str | None]) -> dict[str, object]:
    statistic = rng.choice([None, rng.uniform(-5, 5), 5e-324])
    return {
        "batch": batch,
        "detector": name,
        "calibrator": rng.choice(calibrators),
        "log10_statistic": statistic,
        "log10_threshold": rng.choice([None, math.inf, rng.uniform(0, 10)]),
        "alarm": rng.random() < 0.1,
    }


def test_the_store_reads_like_the_dict_it_replaces_under_random_writes_and_deletes():
    rng = random.Random(0)
    names = ["confidence martingale", "lac: coverage drop", "aps: conformity martingale"]
    calibrators: list[str | None] = [None, "lac", "aps"]
    store, twin = LookStore(), {}
    for step in range(3000):
        name, batch = rng.choice(names), rng.randrange(400)
        key = (name, batch)
        if key in twin and rng.random() < 0.2:
            del store[key], twin[key]
        else:
            store[key] = twin[key] = _look(name, batch, rng, calibrators)
        if step % 500 == 0:
            assert list(store.items()) == list(twin.items())
    assert len(store) == len(twin)
    assert list(store) == list(twin)
    assert list(store.items()) == list(twin.items())  # the dict's order: first write of each key
    assert store == twin
    assert all(store.get(key) == look for key, look in twin.items())
    assert store.get(("nobody", 1)) is None and ("nobody", 1) not in store
    assert ("lac: coverage drop", True) not in store and "a string" not in store
    with pytest.raises(KeyError):
        store[("nobody", 1)]
    assert store.detectors() == list(dict.fromkeys(name for name, _ in twin))
    copy = store.copy()
    copy[(names[0], 10_000)] = _look(names[0], 10_000, rng, calibrators)
    assert (names[0], 10_000) not in store  # a copy is independent


def test_the_store_round_trips_through_the_snapshot_codec_and_reads_an_old_dict():
    rng = random.Random(1)
    looks = {(f"d{j}", b): _look(f"d{j}", b, rng, [None, "x"]) for b in range(50) for j in range(3)}
    watch = ShiftWatch([])
    for key, look in looks.items():
        watch.looks[key] = look
    encoder = StateEncoder()
    tree = encoder.encode(watch)
    back = StateDecoder(encoder.arrays).decode(tree)
    assert isinstance(back.looks, LookStore)
    assert list(back.looks.items()) == list(looks.items())
    back.looks[("d0", 50)] = _look("d0", 50, rng, [None])  # decoded columns take new looks
    assert back.looks[("d0", 50)]["batch"] == 50

    legacy = ShiftWatch([])
    legacy.__dict__["looks"] = dict(looks)  # the layout of snapshots written before the store
    encoder = StateEncoder()
    tree = encoder.encode(legacy)
    old = StateDecoder(encoder.arrays).decode(tree)
    assert isinstance(old.looks, LookStore)
    assert list(old.looks.items()) == list(looks.items())


def _monitor() -> cw.Monitor:
    P, y = softmax_data(3000, K=4, seed=1)
    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True),
        },
        window=2_000,
    )
    return mon.calibrate(probs=P, y=y)


def _stream(mon: cw.Monitor, batches: range, rows: int = 100) -> None:
    for b in batches:
        P, y = softmax_data(rows, K=4, seed=1000 + b)
        ids = np.arange(b * rows, (b + 1) * rows)
        mon.observe(probs=P, ids=ids)
        mon.label(ids, y)


def test_the_looks_of_a_long_stream_hold_a_fixed_number_of_objects_and_bytes_per_look(tmp_path):
    mon = _monitor()
    watch = mon.shift_watch
    assert watch is not None
    _stream(mon, range(40))
    objects, looks = watch.looks.python_objects(), len(watch.looks)
    _stream(mon, range(40, 400))
    assert len(watch.looks) == 5 * len(mon.batch_records)  # five detectors, one look a batch each
    assert watch.looks.python_objects() == objects  # O(1) objects, whatever the batches
    gc.collect()
    # what the columns hold: the filled part plus the doubling's spare room, ~26 bytes a look
    held = sum(
        sys.getsizeof(column)
        for columns in watch.looks._columns.values()
        for column in (getattr(columns, name) for name in columns.__slots__ if name != "n")
    )
    assert held <= 2 * 26 * len(watch.looks) + 5_000
    assert len(watch.looks) > looks
    path = tmp_path / "snap"
    mon.save(path)
    back = cw.Monitor.load(path)
    assert list(back.shift_watch.looks.items()) == list(watch.looks.items())
    assert back.shift_watch.look_rows() == watch.look_rows()


def _reachable(root: object) -> list[object]:
    """The Python objects reachable from ``root`` (a class is shared: neither counted nor walked)."""
    seen: dict[int, object] = {}
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen[id(obj)] = obj
        todo.extend(gc.get_referents(obj))
    return list(seen.values())


def _longest_container(objects: list[object]) -> int:
    return max((len(o) for o in objects if isinstance(o, (list, tuple, dict, set))), default=0)


def test_settled_statistics_and_the_row_log_index_keep_no_python_object_per_batch(monkeypatch):
    """A long stream's settled statistics and row-log index are columns: no object, no slot per batch.

    (The row log's index held each batch's number as a Python int in a list, and the settled
    statistics each batch's type in a list: ~36 and 8 bytes a batch and calibrator, for ever.)
    """
    monkeypatch.setattr(stream_module, "HOT_BATCHES", 0)  # every batch out of the window settles
    monkeypatch.setattr(stream_module, "SETTLE_CHUNK", 1)
    mon = _monitor()
    log = mon._row_log
    assert log is not None
    log.part_rows = 1_000  # a part every 10 batches
    _stream(mon, range(300))
    stats, index = _reachable(mon._stream.batches._stats), _reachable(log.parts)
    _stream(mon, range(300, 600))
    more_stats, more_index = _reachable(mon._stream.batches._stats), _reachable(log.parts)
    assert len(log.parts) >= 55  # the log wrote its parts
    assert len(more_stats) == len(stats)  # O(1) objects, whatever the batches
    assert _longest_container(more_stats) < 10  # and no list growing with them
    per_part = (len(more_index) - len(index)) / 30
    assert per_part < 12  # a part's entry (9 objects: dict, file name, checksum, mapping), not 10 ints more
    assert _longest_container(more_index) <= len(log.parts) < 100
    assert all(isinstance(p["batches"], np.ndarray) for p in log.parts)
    last = log.describe()["parts"][-1]["batches"]  # the index as JSON writes it: a list of ints
    assert type(last) is list and last == list(range(last[0], last[0] + 10)) and type(last[0]) is int
