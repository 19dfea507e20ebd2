"""Blocks as the unit of exchangeability (calwatch.engine.shift.blocks): hand-computed cases and splits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calwatch.engine.shift.blocks import (
    GRID,
    BlockAccumulator,
    block_keys,
    calibration_blocks,
    grid_counts,
    grid_mean,
    ks_distance,
    split_blocks,
)


def test_grid_counts_put_each_score_in_its_cell() -> None:
    counts = grid_counts(np.array([0.0, 0.00005, 0.0001, 0.5, 1.0, 1.2, -0.1]))
    assert counts.shape == (GRID + 1,)
    assert counts[0] == 3  # 0, 0.00005 and the clipped -0.1
    assert counts[1] == 1  # 0.0001
    assert counts[5000] == 1
    assert counts[GRID] == 2  # 1.0 and the clipped 1.2
    grouped = grid_counts(np.array([0.0, 1.0, 0.5]), np.array([1, 0, 1]), 2)
    assert grouped[0, GRID] == 1 and grouped[1, 0] == 1 and grouped[1, 5000] == 1


def test_ks_distance_by_hand() -> None:
    # Reference: half the mass at 0, half at 1, so F_ref = 0.5 on [0, 1) and 1 at 1.
    reference = grid_counts(np.array([0.0, 0.0, 1.0, 1.0]))
    cdf = np.cumsum(reference) / reference.sum()
    assert ks_distance(grid_counts(np.array([0.0, 0.0, 0.0])), cdf) == pytest.approx(0.5)
    assert ks_distance(grid_counts(np.array([0.0, 1.0])), cdf) == pytest.approx(0.0)
    # One of four at 0 (F = 0.25 on [0, 0.5)), three at 0.5 (F = 1 from 0.5): max |F - F_ref| = 0.5.
    assert ks_distance(grid_counts(np.array([0.0, 0.5, 0.5, 0.5])), cdf) == pytest.approx(0.5)


def test_grid_mean_by_hand() -> None:
    assert grid_mean(grid_counts(np.array([0.2, 0.4]))) == pytest.approx(0.3)
    assert grid_mean(grid_counts(np.array([0.25]))) == pytest.approx(0.25)


def test_calibration_blocks_group_by_key_in_any_order() -> None:
    names, counts = calibration_blocks(np.array([0.1, 0.2, 0.1, 0.3]), ["b", "a", "b", "a"])
    assert names == ["a", "b"]
    assert counts[0, 2000] == 1 and counts[0, 3000] == 1
    assert counts[1, 1000] == 2


def test_split_blocks_is_seeded_and_disjoint() -> None:
    ref, scored = split_blocks(9, seed=3)
    assert len(ref) == 4 and len(scored) == 5
    assert set(ref).isdisjoint(scored) and set(ref) | set(scored) == set(range(9))
    again = split_blocks(9, seed=3)
    assert (again[0] == ref).all() and (again[1] == scored).all()


def test_block_keys_name_the_argument_and_the_row() -> None:
    assert block_keys(np.array([3, 3, 4]), 3) == ["3", "3", "4"]
    with pytest.raises(ValueError, match=r"blocks must hold one key per row: expected 4, got 3"):
        block_keys([1, 2, 3], 4)
    with pytest.raises(ValueError, match=r"blocks\[1\] is missing"):
        block_keys([1, None, 3], 3)
    with pytest.raises(ValueError, match=r"when\[0\] is missing"):
        block_keys([float("nan")], 1, "when")
    with pytest.raises(TypeError, match="blocks must hold one key per row"):
        block_keys("2013-05-01", 10)
    with pytest.raises(TypeError, match=r"blocks\[0\] must be a scalar key"):
        block_keys([[1, 2]], 1)


def test_a_block_closes_when_another_key_arrives() -> None:
    acc = BlockAccumulator()
    done, counts = acc.feed(np.array([0.1, 0.1, 0.2]), ["d1", "d1", "d2"])
    assert done == ["d1"] and counts[0][1000] == 2 and counts[0].sum() == 2
    assert acc.open_key_ == "d2" and acc.open_counts_.sum() == 1
    done, counts = acc.feed(np.array([0.3]), ["d2"])  # d2 goes on in the next batch
    assert done == [] and acc.open_counts_.sum() == 2
    done, counts = acc.feed(np.array([0.4]), ["d3"])
    assert done == ["d2"] and counts[0][2000] == 1 and counts[0][3000] == 1


def test_a_complete_block_may_not_come_back_and_the_check_changes_nothing() -> None:
    acc = BlockAccumulator()
    acc.feed(np.array([0.1, 0.2]), ["d1", "d2"])
    before = (acc.open_key_, acc.open_counts_.copy(), list(acc.closed_))
    for keys in (["d1"], ["d2", "d3", "d2"], ["d3", "d1"]):
        with pytest.raises(ValueError, match="comes back after its block was complete"):
            acc.check(keys)
    acc.check(["d2", "d3"])  # continuing the open block, then a new one, is fine
    assert acc.open_key_ == before[0] and (acc.open_counts_ == before[1]).all() and acc.closed_ == before[2]


def test_checkpoint_restores_the_open_block() -> None:
    acc = BlockAccumulator()
    acc.feed(np.array([0.1]), ["d1"])
    restore = acc.checkpoint()
    acc.feed(np.array([0.1, 0.5]), ["d1", "d2"])
    restore()
    assert acc.open_key_ == "d1" and acc.open_counts_.sum() == 1 and acc.closed_ == []


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    seed=st.integers(0, 2**16),
)
def test_any_cut_into_batches_gives_the_same_blocks(sizes: list[int], cuts: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = [f"day{i}" for i, n in enumerate(sizes) for _ in range(n)]
    scores = rng.uniform(size=len(keys))
    whole = BlockAccumulator()
    expected = whole.feed(scores, keys)
    parts = BlockAccumulator()
    got_keys: list[str] = []
    got_counts: list[np.ndarray] = []
    bounds = sorted({0, len(keys), *(c for c in cuts if c < len(keys))})
    for lo, hi in itertools.pairwise(bounds):
        parts.check(keys[lo:hi])
        k, c = parts.feed(scores[lo:hi], keys[lo:hi])
        got_keys += k
        got_counts += c
    assert got_keys == expected[0]
    assert all((a == b).all() for a, b in zip(got_counts, expected[1], strict=True))
    assert (parts.open_counts_ == whole.open_counts_).all() and parts.open_key_ == whole.open_key_
