"""Reduce the kernel's partial statistics and rebuild each bucket's statistics objects.

The reduction is a group-by over (bucket, calibrator, field, index) taking ``sum(count)``,
``sum(total)`` and ``max(constant)``; :func:`reduce_partials` does it with polars (Spark and Dask
do the same with their own aggregations and hand the small result here). Integer counts come out
exactly; float sums equal the in-memory monitor's to rounding (the order of additions differs).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from calwatch.scale.frozen import FrozenMonitor
from calwatch.scale.kernel import BUCKET, CONSTANT_FIELDS, N_NEW_LABELS, N_RELABELLED, N_ROWS
from calwatch.stream import BatchStats

KEYS = ["bucket", "calibrator", "field", "index"]


@dataclass
class BucketStatistics:
    """One bucket's reduced statistics: its row counts and each calibrator's statistics object."""

    bucket: Any
    n_rows: int = 0
    n_new_labels: int = 0
    n_relabelled: int = 0
    stats: dict[str, BatchStats] = field(default_factory=dict)


def reduce_partials(partials: Iterable[pa.RecordBatch | pa.Table | pl.DataFrame]) -> pl.DataFrame:
    """Sum partial statistics over every part (one row per bucket, calibrator, field and index)."""
    frames = [p if isinstance(p, pl.DataFrame) else _frame(p) for p in partials]
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(
            schema={
                "bucket": pl.Null,
                "calibrator": pl.String,
                "field": pl.String,
                "index": pl.Int32,
                "count": pl.Int64,
                "total": pl.Float64,
                "constant": pl.Float64,
            }
        )
    return aggregate(pl.concat(frames, how="vertical_relaxed"))


def aggregate(frame: pl.DataFrame) -> pl.DataFrame:
    """The group-by sum itself (also used to fold running partial tables as chunks arrive)."""
    return frame.group_by(KEYS).agg(pl.col("count").sum(), pl.col("total").sum(), pl.col("constant").max())


def _frame(part: pa.RecordBatch | pa.Table) -> pl.DataFrame:
    table = pa.Table.from_batches([part]) if isinstance(part, pa.RecordBatch) else part
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def bucket_statistics(
    reduced: pl.DataFrame, frozen: FrozenMonitor, *, observed: bool
) -> list[BucketStatistics]:
    """Each bucket's statistics, buckets in sorted order.

    ``observed=True``: statistics of observed rows (every calibrator has them, also for a bucket
    of unlabelled rows). ``False``: the labels' contribution, to merge into the batches' own.
    """
    K = frozen.n_classes
    kinds = frozen.kinds()
    out: list[BucketStatistics] = []
    if reduced.height == 0:
        return out
    reduced = reduced.sort(KEYS)
    for (bucket,), part in reduced.group_by(["bucket"], maintain_order=True):
        entry = BucketStatistics(bucket=bucket)
        by_calibrator = {key[0]: rows for key, rows in part.group_by(["calibrator"], maintain_order=True)}
        counts = by_calibrator.get(BUCKET)
        if counts is not None:
            totals = dict(zip(counts["field"].to_list(), counts["count"].to_list(), strict=True))
            entry.n_rows = int(totals.get(N_ROWS, 0))
            entry.n_new_labels = int(totals.get(N_NEW_LABELS, 0))
            entry.n_relabelled = int(totals.get(N_RELABELLED, 0))
        for key, kind in kinds.items():
            rows = by_calibrator.get(key)
            if rows is None and not observed:
                continue
            template = kind.stats_type.empty(K).to_row()
            row = _filled(template, rows)
            row["n_rows"] = entry.n_rows if observed else 0
            entry.stats[key] = kind.from_row(row)
        out.append(entry)
    return out


def _filled(template: dict[str, Any], rows: pl.DataFrame | None) -> dict[str, Any]:
    """The kind's ``to_row()`` of no rows, with the reduced values put in place."""
    row = {name: (np.asarray(v).copy() if isinstance(v, list) else v) for name, v in template.items()}
    if rows is None:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()}
    for name, part in rows.group_by(["field"], maintain_order=True):
        field_name = str(name[0])
        if field_name not in row:
            msg = f"partial statistics name a field {field_name!r} that the calibrator's kind does not have"
            raise ValueError(msg)
        current = row[field_name]
        index = part["index"].to_numpy()
        if field_name in CONSTANT_FIELDS:
            value = float(part["constant"].max())  # type: ignore[arg-type]
            row[field_name] = round(value) if isinstance(current, int) else value
        elif isinstance(current, np.ndarray):
            source = part["count"] if current.dtype.kind in "iub" else part["total"]
            current[index] = source.to_numpy()
        elif isinstance(current, int):
            row[field_name] = int(part["count"].sum())
        else:
            row[field_name] = float(part["total"].sum())
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()}


__all__ = ["BucketStatistics", "aggregate", "bucket_statistics", "reduce_partials"]
