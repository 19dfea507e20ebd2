"""The live what-if panel recomputes only the batches that changed, and gives what a fresh call does."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.views import dashboard

from ..synthetic import softmax_data, stream_monitor

K = 4


def _monitor(window: int) -> cw.Monitor:
    mon: cw.Monitor = stream_monitor(window, K=K)
    return mon


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_what_if_equals_a_fresh_one_through_a_stream(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mon = _monitor(window=250)
    cache = dashboard.RowCache()
    asked: list[list[int]] = []
    real = mon.what_if

    def spy(alpha: float, calibrators: Any = None, *, batches: Any = None) -> pl.DataFrame:
        asked.append(sorted(batches))
        return real(alpha, calibrators, batches=batches)

    observed: list[tuple[list[str], Any]] = []
    alpha = 0.2
    for step in range(40):
        roll = rng.random()
        if roll < 0.5 or not observed:
            P, y = softmax_data(int(rng.integers(10, 60)), K=K, seed=100 + step)
            ids = [f"{step}-{i}" for i in range(len(y))]
            mon.observe(probs=P, ids=ids)
            observed.append((ids, y))
        elif roll < 0.8:  # labels for some rows of a recent batch, maybe relabelling them
            ids, y = observed[int(rng.integers(max(0, len(observed) - 4), len(observed)))]
            pick = rng.choice(len(ids), size=int(rng.integers(1, len(ids) + 1)), replace=False)
            shift = int(rng.integers(0, K)) if rng.random() < 0.3 else 0
            mon.label([ids[i] for i in pick], (y[pick] + shift) % K)
        elif roll < 0.9:
            alpha = float(rng.choice([0.05, 0.2, 0.3]))
        window_rows = int(rng.choice([0, 120]))
        asked.clear()
        mon.what_if = spy  # type: ignore[method-assign]
        try:
            cached = dashboard.what_if(mon, alpha, window_rows=window_rows, cache=cache)
        finally:
            del mon.what_if
        fresh = dashboard.what_if(mon, alpha, window_rows=window_rows)
        assert_frame_equal(cached, fresh)
        keep = dashboard.window_batches(mon, window_rows)
        assert all(set(b) <= set(keep) for b in asked)
    # a stream with labels one batch late: each call recomputes the new and the labelled batch only
    cache = dashboard.RowCache()
    dashboard.what_if(mon, alpha, cache=cache)
    P, y = softmax_data(30, K=K, seed=999)
    mon.observe(probs=P, ids=[f"new-{i}" for i in range(30)])
    ids, labels = observed[-1]
    mon.label(ids, labels)
    asked.clear()
    mon.what_if = spy  # type: ignore[method-assign]
    try:
        cached = dashboard.what_if(mon, alpha, cache=cache)
    finally:
        del mon.what_if
    assert asked == [sorted({mon.n_batches - 1, mon.n_batches - 2} & set(dashboard.window_batches(mon)))]
    assert_frame_equal(cached, dashboard.what_if(mon, alpha))


def test_what_if_of_some_batches_is_those_rows_of_the_whole() -> None:
    mon = _monitor(window=10_000)
    for b in range(5):
        P, y = softmax_data(40, K=K, seed=b)
        ids = [f"{b}-{i}" for i in range(40)]
        mon.observe(probs=P, ids=ids)
        mon.label(ids[:20], y[:20])
    whole = mon.what_if(0.15)
    some = mon.what_if(0.15, batches=[3, 1, np.int64(4), 99])
    assert_frame_equal(some, whole.filter(pl.col("batch").is_in([1, 3, 4])))
    assert mon.what_if(0.15, batches=[]).height == 0


@pytest.mark.parametrize("bad", [3, "12", [1.5], [True], [None]])
def test_what_if_refuses_batches_that_are_not_indices(bad: Any) -> None:
    mon = _monitor(window=1_000)
    P, _ = softmax_data(20, K=K, seed=1)
    mon.observe(probs=P, ids=list(range(20)))
    with pytest.raises(TypeError, match="batches"):
        mon.what_if(0.2, batches=bad)
