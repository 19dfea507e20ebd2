"""The kernel's compiled fast paths give the same numbers as the plain definitions they replace."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calwatch.core.scratch import OWNER
from calwatch.engine.conformal import scores
from calwatch.engine.shift.bucket_tests import confidence_rank_sums, mid_rank_sum
from calwatch.scale import duplicates
from calwatch.scale.duplicates import PARTITIONS, DuplicateCheck, grouped_hashes, key_hashes


def _sorted_path_aps(P: np.ndarray, u: np.ndarray | None, lam: float, k_reg: int) -> np.ndarray:
    _, flat, cumulative = scores._descending_order(P)
    scores._rank_order_scores(cumulative, u, lam, k_reg)
    out = np.empty(P.size)
    out[flat] = cumulative.ravel()
    return out.reshape(P.shape)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("randomised", [False, True])
@pytest.mark.parametrize("raps", [(0.0, 0), (0.07, 0), (0.2, 1), (0.3, 2)])
def test_two_class_aps_scores_are_the_sorted_paths_bits(
    randomised: bool, raps: tuple[float, int], compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scores, "COMPILED_FROM", 0 if compiled else 1 << 60)
    rng = np.random.default_rng(7)
    p = np.concatenate([rng.uniform(size=3000), np.round(rng.uniform(size=1000), 1), [0.5, 0.0, 1.0]])
    P = np.column_stack([p, 1.0 - p])
    u = rng.uniform(size=P.shape[0]) if randomised else None
    got = scores.aps_scores(P, u, raps_lambda=raps[0], raps_k_reg=raps[1])
    want = _sorted_path_aps(P, u, *raps)
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    assert np.array_equal(scores.row_argmax(P), P.argmax(axis=1))


@pytest.mark.parametrize("n_ref", [0, 1, 2, 180, 5000])
@pytest.mark.parametrize("K", [2, 5])
def test_confidence_rank_sums_equal_the_per_group_mid_rank_sums(n_ref: int, K: int) -> None:
    rng = np.random.default_rng(n_ref + K)
    P = rng.dirichlet(np.ones(K), size=4000)
    P[::3] = np.round(P[::3], 2)  # ties with the rounded reference
    P[:50] = np.eye(K)[0]  # confidence 0: the bottom edge
    reference = np.sort(1.0 - rng.dirichlet(np.ones(K), size=n_ref).max(axis=1))
    reference[: n_ref // 3] = np.round(reference[: n_ref // 3], 2)
    reference[: n_ref // 10] = 0.0
    reference = np.sort(reference)
    groups = rng.integers(0, 6, size=P.shape[0]).astype(np.intp)
    got = confidence_rank_sums(reference, P, groups, 6)
    want = [mid_rank_sum(reference, 1.0 - P[groups == g].max(axis=1)) for g in range(6)]
    assert got.tolist() == want


def test_key_hashes_group_and_find_repeats_for_integer_dates_and_strings() -> None:
    days = pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2)] * 500, pa.date32())
    for ids in (pa.array(np.arange(1000)), pa.array([f"r{i}" for i in range(1000)])):
        chunk = pa.record_batch({"day": days, "id": ids})
        hashes = key_hashes(chunk, "id")
        assert np.unique(hashes).shape[0] == 1000  # the ids are all distinct
        # The same id on another day is the same key: ids are distinct across the table.
        moved = pa.record_batch({"day": days.take([1, 0]), "id": ids.take([0, 1])})
        assert np.array_equal(key_hashes(moved, "id"), hashes[:2])
        grouped, bounds = grouped_hashes(chunk, "id")
        assert bounds[-1] == 1000 and np.array_equal(np.sort(grouped), np.sort(hashes))
        top = grouped >> np.uint64(64 - 6)
        assert all((top[bounds[p] : bounds[p + 1]] == p).all() for p in range(PARTITIONS))
        with DuplicateCheck("id") as check:
            check.add(chunk)
            check.add(chunk.slice(10, 3))  # three rows seen twice
            assert check.repeated_hashes().shape[0] == 3


def _grouped(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    top = (hashes >> np.uint64(64 - 6)).astype(np.intp)
    order = np.argsort(top, kind="stable")
    return hashes[order], np.concatenate([[0], np.cumsum(np.bincount(top, minlength=PARTITIONS))])


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 3_000),
    shared_bits=st.sampled_from([0, 6, 12, 30, 64]),
    heavy=st.integers(0, 400),
)
def test_partition_files_too_large_to_sort_are_split_and_find_the_same_repeats(
    seed: int, n: int, shared_bits: int, heavy: int
) -> None:
    """Any file over SORT_LIMIT is split by its next bits, level by level: the repeats found are
    those of one in-memory sort, for hashes sharing long prefixes and for one key seen many times."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)
    if shared_bits:  # most hashes share their top bits: splits go several levels deep
        keep = np.uint64((1 << (64 - shared_bits)) - 1) if shared_bits < 64 else np.uint64(0)
        hashes = (hashes & keep) | (np.uint64(0xA5A5A5A5A5A5A5A5) & ~keep)
    planted = rng.choice(hashes, size=min(n, 50), replace=True) if n else hashes[:0]
    hashes = np.concatenate([hashes, planted, np.full(heavy, 7, dtype=np.uint64)])
    rng.shuffle(hashes)
    values, counts = np.unique(hashes, return_counts=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(duplicates, "SORT_LIMIT", 64)
        patch.setattr(duplicates, "BUFFER", 100)
        with DuplicateCheck("id") as check:
            for part in np.array_split(hashes, 7):
                check.add_grouped(_grouped(part))
            found = check.repeated_hashes()
            assert sorted(set(os.listdir(check.folder)) - {OWNER}) == sorted(
                f.name for f in check._files if f.exists()
            )  # the split files are gone
    assert np.array_equal(np.sort(found), values[counts > 1])


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("columns", [1, 2])
def test_compiled_row_uniforms_are_the_numpy_draws(
    dtype: type, columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from calwatch.engine.conformal import row_draws

    ids = (np.arange(-3000, 30_000) * 7919).astype(dtype)
    compiled = row_draws.row_uniforms(5, ids, stream=1, columns=columns)
    monkeypatch.setattr(row_draws, "COMPILED_FROM", 1 << 60)
    plain = row_draws.row_uniforms(5, ids, stream=1, columns=columns)
    assert np.array_equal(compiled.view(np.uint64), plain.view(np.uint64))


@pytest.mark.parametrize("thresholds", ["scalar", "per row", "per class", None])
def test_two_class_top_class_update_is_the_gather_scatter(thresholds: str | None) -> None:
    from calwatch.engine.conformal.classifier import _add_top_class

    rng = np.random.default_rng(3)
    m = 2000
    p = rng.uniform(size=m)
    p[::5] = 0.5  # ties: the first class is the top
    P = np.column_stack([p, 1.0 - p])
    sets = rng.uniform(size=(m, 2)) < 0.3
    shapes = {"scalar": (1, 1), "per row": (m, 1), "per class": (1, 2)}
    drawn = None if thresholds is None else rng.uniform(-0.2, 0.3, shapes[thresholds])
    limits = None if drawn is None else np.broadcast_to(drawn, (m, 2))
    where = None if limits is None else (lambda rows, top: limits[rows, top] >= 0.0)
    got = sets.copy()
    _add_top_class(got, P, where)
    rows, top = np.arange(m), P.argmax(axis=1)
    want = sets.copy()
    want[rows, top] |= True if limits is None else limits[rows, top] >= 0.0
    assert np.array_equal(got, want)
