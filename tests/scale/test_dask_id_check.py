"""calwatch.scale.dask's id check: hashed keys sorted by hash partition, each repeat confirmed on the rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pytest

from calwatch.scale.duplicates import PARTITIONS
from tests.scale.engines import DaskEngine, task_with
from tests.scale.logs import assert_same_statistics, calibrated, log_frame, prob_names, replay

LOG = {"id": "id", "probs": prob_names(2), "bucket": "bucket", "category": "cat"}


def _colliding(part: Any, id: str) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Every key hashed to 0: all of them in hash partition 0, every one "repeated"."""
    bounds = np.full(PARTITIONS + 1, len(part), dtype=np.int64)
    bounds[0] = 0
    return np.zeros(len(part), dtype=np.uint64), bounds


@pytest.mark.parametrize("string_ids", [False, True])
def test_dask_refuses_a_repeat_across_partitions_and_no_hash_collision(
    string_ids: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("dask.dataframe")
    import calwatch.scale.dask as cw_dask

    task = task_with(2)
    n = 80
    ids: list[Any] = [f"r{i}" for i in range(n)] if string_ids else list(range(n))
    frame = log_frame(task.P[:n], ids, [i % 2 for i in range(n)])
    twice = pl.when(pl.col("id") == ids[7]).then(pl.lit(ids[71])).otherwise(pl.col("id"))
    bad = frame.with_columns(twice.alias("id"))  # ids[71] twice in bucket 1, rows 7 and 71
    engine = DaskEngine("dask-sync")
    with engine.running():
        mon = calibrated(task)
        twice_in_1 = rf"id column 'id': id {ids[71]!r} appears 2 times \(in bucket 1\)"
        with pytest.raises(ValueError, match=twice_in_1):
            cw_dask.observe(mon, engine.table(bad, 4), **LOG)  # rows 7 and 71 in different partitions
        assert mon.n_batches == 0
        moved = pl.when(pl.col("id") == ids[6]).then(pl.lit(ids[71])).otherwise(pl.col("id"))
        across = frame.with_columns(moved.alias("id"))
        with pytest.raises(ValueError, match=rf"id {ids[71]!r} appears 2 times \(in buckets 0, 1\)"):
            cw_dask.observe(mon, engine.table(across, 4), **LOG)  # rows 6 and 71: buckets 0 and 1
        assert mon.n_batches == 0
        # Every hash collides: the rows decide, so a good log passes with the statistics of the
        # in-memory monitor and a bad one is still refused naming its repeat.
        monkeypatch.setattr(cw_dask, "grouped_hashes", _colliding)
        monkeypatch.setattr(cw_dask, "key_hashes", lambda batch, i: np.zeros(len(batch), dtype=np.uint64))
        with pytest.raises(ValueError, match=rf"id {ids[71]!r} appears 2 times \(in bucket 1\)"):
            cw_dask.observe(mon, engine.table(bad, 4), **LOG)
        assert cw_dask.observe(mon, engine.table(frame, 4), **LOG) == (0, 1)
    memory = calibrated(task)
    replay(memory, frame)
    assert_same_statistics(mon, memory)


def test_repeats_of_a_hash_partition_are_found_across_dask_partitions() -> None:
    """``_repeats_in_group``: the repeated hashes of one group, gathered from every partition."""
    from calwatch.scale.dask import _grouped_keys, _repeats_in_group

    parts = [
        pa.table({"b": [0, 0, 1], "i": [1, 2, 3]}).to_pandas(),
        pa.table({"b": [0, 1, 1], "i": [2, 3, 4]}).to_pandas(),  # (0, 2) and (1, 3) again
    ]
    keyed = [_grouped_keys(part, "i") for part in parts]
    found = np.concatenate([_repeats_in_group(keyed, p) for p in range(PARTITIONS)])
    every = np.concatenate([hashes for hashes, _ in keyed])
    values, counts = np.unique(every, return_counts=True)
    assert found.shape[0] == 2 and np.array_equal(np.sort(found), values[counts > 1])
