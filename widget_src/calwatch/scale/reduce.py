"""Reduce the kernel's partial statistics and rebuild each bucket's statistics objects.

The reduction is a group-by over (bucket, calibrator, field, index) taking ``sum(count)``,
``sum(total)`` and ``max(constant)``; :func:`reduce_partials` does it with
:mod:`calwatch.scale.fold` (Spark and Dask do the same with their own aggregations and hand the
small result here). Integer counts come out exactly; float sums equal the in-memory monitor's to
rounding (the order of additions differs). A slicing monitor's slice counts
(:mod:`calwatch.scale.slice_partials`) are integers too, and come out exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from calwatch.scale.fold import KEYS, FoldedPartials
from calwatch.scale.frozen import FrozenMonitor
from calwatch.scale.kernel import (
    BUCKET,
    CONFIDENCE_RANK_SUM,
    CONSTANT_FIELDS,
    N_NEW_LABELS,
    N_RELABELLED,
    N_ROWS,
)
from calwatch.scale.slice_partials import SLICE_COUNTS, slice_counts_of
from calwatch.stream.records import BatchStats
from calwatch.stream.slice_counts import SliceCounts


@dataclass
class BucketStatistics:
    """One bucket's reduced statistics: its row counts and each calibrator's statistics object."""

    bucket: Any
    n_rows: int = 0
    n_new_labels: int = 0
    n_relabelled: int = 0
    stats: dict[str, BatchStats] = field(default_factory=dict)
    #: Its rows' confidence rank-sum against the calibration rows (None when not computed).
    confidence_rank_sum: float | None = None
    #: Its slice counts (observed rows, or the labels' contribution), for a monitor that slices a
    #: table with ``meta``; None when the partials carry none (or, in label mode, all cancel).
    slices: SliceCounts | None = None


def reduce_partials(partials: Iterable[pa.RecordBatch | pa.Table | pl.DataFrame]) -> pl.DataFrame:
    """Sum partial statistics over every part (one row per bucket, calibrator, field and index)."""
    folded = FoldedPartials()
    for part in partials:
        folded.add(part.to_arrow() if isinstance(part, pl.DataFrame) else part)
    table = folded.result()
    if table is None:
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
    return as_frame(table)


def as_frame(table: pa.Table) -> pl.DataFrame:
    """A reduced Arrow table as the polars frame :func:`bucket_statistics` reads."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def bucket_statistics(
    reduced: pl.DataFrame, frozen: FrozenMonitor, *, observed: bool
) -> list[BucketStatistics]:
    """Each bucket's statistics, buckets in sorted order.

    ``observed=True``: statistics of observed rows (every calibrator has them, also for a bucket
    of unlabelled rows). ``False``: the labels' contribution, to merge into the batches' own.
    The reduced table is read once, as runs of equal (bucket, calibrator, field) in sorted order:
    its size, not the number of runs, sets the cost.
    """
    K = frozen.n_classes
    kinds = frozen.kinds()
    if reduced.height == 0:
        return []
    reduced = reduced.sort(KEYS)
    codes = reduced["bucket"].rank("dense").to_numpy().astype(np.int64)
    calibrator = reduced["calibrator"].to_numpy()
    field_of = reduced["field"].to_numpy()
    index = reduced["index"].to_numpy().astype(np.intp)
    count = reduced["count"].fill_null(0).to_numpy().astype(np.int64)
    total = reduced["total"].fill_null(0.0).to_numpy().astype(np.float64)
    constant = reduced["constant"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    change = (codes[1:] != codes[:-1]) | (calibrator[1:] != calibrator[:-1]) | (field_of[1:] != field_of[:-1])
    starts = np.concatenate([[0], np.flatnonzero(change) + 1])
    ends = np.concatenate([starts[1:], [codes.shape[0]]])
    firsts = np.concatenate([[0], np.flatnonzero(codes[1:] != codes[:-1]) + 1])
    entries = {
        int(codes[i]): BucketStatistics(bucket=v)
        for i, v in zip(firsts, reduced["bucket"].gather(firsts).to_list(), strict=True)
    }
    templates = {key: kind.stats_type.empty(K).to_row() for key, kind in kinds.items()}
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        code, key, name = int(codes[s]), str(calibrator[s]), str(field_of[s])
        if key == BUCKET:
            value = int(count[s:e].sum())
            entry = entries[code]
            if name == CONFIDENCE_RANK_SUM:
                entry.confidence_rank_sum = float(total[s:e].sum())
            elif name == SLICE_COUNTS:
                if frozen.slices is None:
                    msg = "partial statistics carry slice counts, but the monitor keeps no slices"
                    raise ValueError(msg)
                entry.slices = slice_counts_of(frozen.slices, index[s:e], count[s:e])
            elif name == N_ROWS:
                entry.n_rows = value
            elif name == N_NEW_LABELS:
                entry.n_new_labels = value
            elif name == N_RELABELLED:
                entry.n_relabelled = value
            continue
        if key not in templates:
            msg = f"partial statistics name a calibrator {key!r} the monitor does not have"
            raise ValueError(msg)
        row = rows.get((code, key))
        if row is None:
            row = rows[(code, key)] = _template_copy(templates[key])
        _fill(row, name, index[s:e], count[s:e], total[s:e], constant[s:e])
    out = []
    for code in sorted(entries):
        entry = entries[code]
        for key, kind in kinds.items():
            row = rows.get((code, key))
            if row is None:
                if not observed:
                    continue
                row = _template_copy(templates[key])
            finished = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()}
            finished["n_rows"] = entry.n_rows if observed else 0
            entry.stats[key] = kind.from_row(finished)
        out.append(entry)
    return out


def _template_copy(template: dict[str, Any]) -> dict[str, Any]:
    """The kind's ``to_row()`` of no rows, lists as arrays to fill."""
    return {name: (np.asarray(v).copy() if isinstance(v, list) else v) for name, v in template.items()}


def _fill(row: dict[str, Any], name: str, index: Any, count: Any, total: Any, constant: Any) -> None:
    """Put one field's reduced values in place."""
    if name not in row:
        msg = f"partial statistics name a field {name!r} that the calibrator's kind does not have"
        raise ValueError(msg)
    current = row[name]
    if name in CONSTANT_FIELDS:
        value = float(np.nanmax(constant)) if not np.isnan(constant).all() else float("nan")
        if not np.isnan(value):
            row[name] = round(value) if isinstance(current, int) else value
    elif isinstance(current, np.ndarray):
        if current.dtype.kind in "iub":
            np.add.at(current, index, count)
        else:
            np.add.at(current, index, total)
    elif isinstance(current, int):
        row[name] = current + int(count.sum())
    else:
        row[name] = current + float(total.sum())


__all__ = ["KEYS", "BucketStatistics", "as_frame", "bucket_statistics", "reduce_partials"]
