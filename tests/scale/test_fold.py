"""calwatch.scale.fold: the running sum of partial statistics equals one group-by over all parts."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from calwatch.scale.fold import FOLD_EVERY, KEYS, FoldedPartials, sum_partials
from calwatch.scale.kernel import partial_schema


def _part(rng: np.random.Generator, bucket_type: pa.DataType, n: int) -> pa.Table:
    codes = rng.integers(0, 4, n)
    if pa.types.is_integer(bucket_type):
        bucket = pa.array(codes, bucket_type)
    else:
        plain = bucket_type.value_type if pa.types.is_dictionary(bucket_type) else bucket_type
        bucket = pa.array([f"day-{c}" for c in codes], plain)
        if pa.types.is_dictionary(bucket_type):
            bucket = bucket.dictionary_encode()  # each part its own dictionary, as polars' chunks
    constant = np.where(rng.random(n) < 0.2, 0.1, np.nan)
    columns = {
        "bucket": bucket,
        "calibrator": pa.array(rng.choice(["", "lac", "aps"], n).tolist()),
        "field": pa.array(rng.choice(["n_rows", "covered", "alpha_level"], n).tolist()),
        "index": pa.array(rng.integers(0, 3, n), pa.int32()),
        "count": pa.array(rng.integers(0, 50, n), pa.int64()),
        "total": pa.array(rng.random(n)),
        "constant": pa.array(constant),
    }
    schema = partial_schema(bucket.type)
    return pa.table(columns, schema=schema)


def _expected(parts: list[pa.Table]) -> pl.DataFrame:
    frames = [pl.from_arrow(p) for p in parts]
    frame = pl.concat([f for f in frames if isinstance(f, pl.DataFrame)], how="vertical_relaxed")
    frame = frame.with_columns(pl.col("bucket").cast(pl.String))
    return frame.group_by(KEYS).agg(pl.col("count").sum(), pl.col("total").sum(), pl.col("constant").max())


@pytest.mark.parametrize(
    "bucket_type",
    [pa.int64(), pa.string(), pa.large_string(), pa.dictionary(pa.int32(), pa.string())],
    ids=["int", "string", "large_string", "dictionary"],
)
def test_the_running_sum_is_one_group_by_in_the_parts_schema(bucket_type: pa.DataType) -> None:
    rng = np.random.default_rng(3)
    parts = [_part(rng, bucket_type, int(rng.integers(0, 40))) for _ in range(2 * FOLD_EVERY + 5)]
    folded = FoldedPartials()
    for part in parts:
        folded.add(part.to_batches()[0] if part.num_rows and rng.random() < 0.5 else part)
    got = folded.result()
    assert got is not None
    assert got.schema == parts[0].schema
    frame = pl.from_arrow(got)
    assert isinstance(frame, pl.DataFrame)
    frame = frame.with_columns(pl.col("bucket").cast(pl.String)).sort(KEYS)
    want = _expected(parts).sort(KEYS)
    assert frame.select(KEYS, "count").equals(want.select(KEYS, "count"))
    np.testing.assert_allclose(frame["total"].to_numpy(), want["total"].to_numpy(), rtol=1e-12)
    np.testing.assert_array_equal(frame["constant"].to_numpy(), want["constant"].to_numpy())


def test_buckets_of_two_integer_widths_fold_together_and_empty_parts_are_ignored() -> None:
    rng = np.random.default_rng(5)
    narrow, wide = _part(rng, pa.int32(), 30), _part(rng, pa.int64(), 30)
    folded = FoldedPartials()
    assert folded.result() is None
    for part in (narrow, wide.slice(0, 0), wide):
        folded.add(part)
    got = folded.result()
    assert got is not None
    assert got.schema.field("bucket").type == pa.int64()
    assert sum(got.column("count").to_pylist()) == sum(narrow["count"].to_pylist()) + sum(
        wide["count"].to_pylist()
    )
    assert sum_partials(got).num_rows == got.num_rows
