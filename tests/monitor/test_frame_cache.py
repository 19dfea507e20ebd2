"""``summary()`` and ``class_coverage()`` kept between calls equal the same reads built from scratch.

The whole-stream reads recompute only the batches whose statistics changed
(:mod:`calwatch.core.frame_cache`). Each test runs random streams — new batches, late labels for
recent batches and for batches long out of the window (applied from the row log to settled
batches), relabels, re-tuning and re-calibration — and after every call compares the kept read
with the read of all records built afresh (``summary_of`` / ``class_coverage_of``), dtypes and
row order included. Settling is on at every batch, so settled and recent batches both change.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.core.frame_cache import BatchFrameCache, same_context, same_token
from calwatch.engine.selective.calibrator import SelectiveCalibrator
from calwatch.stream import records as stream_module

from ..synthetic import softmax_data, stream_monitor

K = 4
FAST = {"epochs": 1, "steps_per_epoch": 3, "sample_size": 64, "progress": False, "n_threads": 1}


def _monitor(window: int = 80) -> cw.Monitor:
    """Set, adaptive, risk and selective calibrators (the last one re-tunable)."""
    mon: cw.Monitor = stream_monitor(window, K=K, sel=SelectiveCalibrator(coverage=0.7, seed=0, **FAST))
    return mon


def _assert_reads_are_fresh(mon: cw.Monitor) -> None:
    records = list(mon.batch_records)
    assert_frame_equal(mon.summary(), mon.summary_of(records))
    assert_frame_equal(mon.class_coverage(), mon.class_coverage_of(records))
    assert_frame_equal(mon.class_coverage(by_batch=False), mon.class_coverage_of(records, by_batch=False))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_reads_equal_fresh_ones_through_a_stream(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_module, "HOT_BATCHES", 2)
    monkeypatch.setattr(stream_module, "SETTLE_CHUNK", 1)
    rng = np.random.default_rng(seed)
    mon = _monitor()
    observed: list[tuple[list[str], np.ndarray]] = []
    for step in range(45):
        roll = rng.random()
        if roll < 0.5 or not observed:
            P, y = softmax_data(int(rng.integers(5, 40)), K=K, seed=100 * seed + step)
            ids = [f"{step}-{i}" for i in range(len(y))]
            mon.observe(probs=P, ids=ids)
            observed.append((ids, y))
        elif roll < 0.85:  # labels for any earlier batch (settled ones from the row log), maybe relabels
            ids, y = observed[int(rng.integers(0, len(observed)))]
            pick = rng.choice(len(ids), size=int(rng.integers(1, len(ids) + 1)), replace=False)
            shift = int(rng.integers(0, K)) if rng.random() < 0.3 else 0
            mon.label([ids[i] for i in pick], (y[pick] + shift) % K)
        elif roll < 0.93:
            mon.retune(float(rng.choice([0.6, 0.7, 0.9])), "sel")
        else:
            P, y = softmax_data(300, K=K, seed=7 + step)
            mon.calibrate(probs=P, y=y)
        _assert_reads_are_fresh(mon)
    assert mon.batch_records.n_settled > 0  # type: ignore[attr-defined]


def test_an_unchanged_stream_is_read_without_recomputing(monkeypatch: pytest.MonkeyPatch) -> None:
    mon = _monitor(window=1000)
    for b in range(6):
        P, y = softmax_data(20, K=K, seed=b)
        mon.observe(probs=P, ids=[f"{b}-{i}" for i in range(20)], y=y)
    first = mon.summary()
    asked: list[int] = []
    real = mon.summary_of

    def spy(records):  # type: ignore[no-untyped-def]
        asked.extend(r.index for r in records)
        return real(records)

    monkeypatch.setattr(mon, "summary_of", spy)
    assert_frame_equal(mon.summary(), first)
    assert asked == []
    P, y = softmax_data(20, K=K, seed=99)
    mon.observe(probs=P, ids=[f"new-{i}" for i in range(20)])
    mon.summary()
    assert asked == [6]  # the new batch only
    asked.clear()
    mon.label([f"2-{i}" for i in range(5)], [0] * 5)
    mon.summary()
    assert asked == [2]  # the labelled batch only
    asked.clear()
    P, y = softmax_data(990, K=K, seed=98)
    mon.observe(probs=P, ids=[f"big-{i}" for i in range(990)])
    mon.summary()
    assert asked == [0, 1, 2, 3, 4, 5, 6, 7]  # batches 0..6 left the window: in_window changed


def test_the_returned_frame_is_the_callers_to_change() -> None:
    mon = _monitor()
    P, y = softmax_data(20, K=K, seed=1)
    mon.observe(probs=P, ids=list(range(20)), y=y)
    frame = mon.summary()
    frame.drop_in_place("coverage")
    assert "coverage" in mon.summary().columns


def test_a_failed_read_leaves_the_cache_as_it_was() -> None:
    cache = BatchFrameCache()
    frame = pl.DataFrame({"batch": [0, 1], "x": [1.0, 2.0]})
    kept = cache.frame(("c",), [1, 1], lambda picked: frame.filter(pl.col("batch").is_in(picked)))
    assert_frame_equal(kept, frame)

    def fail(picked: list[int]) -> pl.DataFrame:
        raise MemoryError

    with pytest.raises(MemoryError):
        cache.frame(("c",), [1, 2, 0], fail)
    # still the old tokens: only batch 1 (token changed) and the new batch 2 are recomputed
    asked: list[list[int]] = []

    def compute(picked: list[int]) -> pl.DataFrame:
        asked.append(picked)
        return pl.DataFrame({"batch": picked, "x": [10.0 * b for b in picked]})

    out = cache.frame(("c",), [1, 2, 0], compute)
    assert asked == [[1, 2]]
    assert out.to_dict(as_series=False) == {"batch": [0, 1, 2], "x": [1.0, 10.0, 20.0]}


def test_tokens_and_contexts_compare_as_documented() -> None:
    stats: dict[str, object] = {}
    assert same_token(3, 3) and not same_token(3, 4) and not same_token((stats, True), 3)
    assert same_token((stats, True), (stats, True))
    assert not same_token((stats, True), ({}, True)) and not same_token((stats, True), (stats, False))
    obj = object()
    assert same_context((obj, "a", 0.5), (obj, "a", 0.5))
    assert not same_context((obj, "a"), (object(), "a")) and not same_context(None, (obj,))
    assert not same_context(([],), ([],))  # unhashable values: compared by identity only
