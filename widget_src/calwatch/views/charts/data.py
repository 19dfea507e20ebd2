"""The charts' datasets: per-batch statistics of a monitor as long-format polars frames.

Every chart reads one of these datasets (see :func:`datasets`), either inline (a static chart of
the stream so far) or by name (``alt.NamedData``), which is how the live widget uses the same
specs and appends rows with Vega changesets (:mod:`calwatch.views.live`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from calwatch.core.guard import one_moment
from calwatch.kinds import KINDS, find_kind
from calwatch.views.resolution import Resolution, bucket_records

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor
    from calwatch.stream.records import BatchRecord


#: The datasets of the charts (the dashboard adds its own: :data:`calwatch.views.dashboard.PANEL_DATASETS`).
CHART_DATASETS = (
    "batches", "set_sizes", "class_coverage", "shift", "admit_class", "admit_features", "selective_curve",
    "selective_confidence", "pit", "fan",
)  # fmt: skip
#: rows of the latest batch drawn in the regression fan chart (evenly spaced through the batch)
FAN_ROWS = 60


@one_moment
def datasets(
    monitor: Monitor, batches: tuple[int, ...] | None = None, *, resolution: Resolution | None = None
) -> dict[str, pl.DataFrame]:
    """The chart datasets, each row with a unique ``key``.

    Per-batch datasets (``batches``, ``set_sizes``, ``class_coverage``, ``admit_class``,
    ``shift``, ``pit``) have one row per *bucket* of consecutive batches at ``resolution``
    (default: the whole stream at most :data:`~calwatch.views.resolution.MAX_POINTS` buckets; one batch
    per bucket until then), with ``batch`` (its first batch), ``batch_end`` (its last),
    ``batch_mid`` (where it is drawn) and ``n_batches``. With ``batches`` given, only the buckets
    holding those batches are computed (what an update sends). The window datasets
    (``admit_features``, ``selective_*``, ``fan``) are always whole.
    """
    if resolution is None:
        resolution = Resolution.whole(monitor.n_batches)
    buckets = bucket_records(monitor.batch_records, resolution, batches)
    return bucket_datasets(monitor, buckets, resolution) | window_datasets(monitor)


@one_moment
def bucket_datasets(
    monitor: Monitor, buckets: Sequence[tuple[BatchRecord, int]], resolution: Resolution
) -> dict[str, pl.DataFrame]:
    """The per-bucket datasets of some pooled records (:func:`~calwatch.views.resolution.bucket_records`).

    ``buckets`` holds each bucket's pooled record and last batch, at ``resolution``.
    """
    records = [record for record, _ in buckets]
    ends = {record.index: end for record, end in buckets}
    if getattr(monitor, "task", None) == "regression":
        regression: Any = monitor  # a RegressionMonitor (a view may not import it)
        pit = _spans(regression.pit_histogram_of(records), ends, resolution, "calibrator", "bin")
        out = {name: _EMPTY for name in CHART_DATASETS if name != "fan"}
        return out | {"batches": _summary_rows(monitor, records, ends, resolution), "pit": pit}
    sizes = monitor.set_size_counts_of(records)
    classes = monitor.class_coverage_of(records).select(
        "batch", "calibrator", "class", "n_labelled", "n_covered", "target"
    )
    return {
        "pit": _EMPTY,
        **_kind_datasets(monitor, records, ends, resolution),
        "shift": _shift(monitor, resolution, ends),
        "batches": _summary_rows(monitor, records, ends, resolution),
        "set_sizes": _spans(sizes, ends, resolution, "calibrator", "size"),
        "class_coverage": _spans(classes, ends, resolution, "calibrator", "class"),
    }


@one_moment
def window_datasets(monitor: Monitor) -> dict[str, pl.DataFrame]:
    """The datasets built from the window's raw rows, always whole.

    The kinds' (``admit_features``, ``selective_*``) and a regression monitor's ``fan``.
    """
    if getattr(monitor, "task", None) == "regression":
        return {"fan": _fan(monitor)}
    kinds = {key: find_kind(cal) for key, cal in monitor.calibrators.items()}
    windows = [r.rows for r in monitor.window_records() if r.rows is not None]
    out: dict[str, pl.DataFrame] = {"fan": _EMPTY}
    for kind in KINDS:
        mine = [key for key, k in kinds.items() if k is kind]
        for name, schema in kind.window_datasets.items():
            rows = [
                row for key in mine for row in kind.window_rows(name, key, monitor.calibrators[key], windows)
            ]
            out[name] = pl.DataFrame(rows, schema=dict(schema))
    return out


def window_dataset_names(monitor: Monitor) -> list[str]:
    """The window datasets that hold rows for ``monitor``'s calibrators (see :func:`window_datasets`)."""
    if getattr(monitor, "task", None) == "regression":
        return ["fan"]
    present = {find_kind(cal) for cal in monitor.calibrators.values()}
    return [name for kind in KINDS if kind in present for name in kind.window_datasets]


_EMPTY = pl.DataFrame(schema={"key": pl.String})


@one_moment
def batch_summary(monitor: Monitor, batches: tuple[int, ...] | None = None) -> pl.DataFrame:
    """The ``batches`` dataset one batch per row (exact per batch, whatever the stream's length)."""
    single = Resolution()
    buckets = bucket_records(monitor.batch_records, single, batches)
    ends = {record.index: end for record, end in buckets}
    return _summary_rows(monitor, [record for record, _ in buckets], ends, single)


def _summary_rows(
    monitor: Monitor, records: list[BatchRecord], ends: dict[int, int], resolution: Resolution
) -> pl.DataFrame:
    """The ``batches`` dataset of some (pooled) records: the summary with labels and spans."""
    labels = calibrator_labels(monitor)
    summary = monitor.summary_of(records).drop("observed_at")
    summary = summary.with_columns(label=pl.col("calibrator").replace_strict(labels, return_dtype=pl.String))
    return _spans(summary, ends, resolution, "calibrator")


def _spans(frame: pl.DataFrame, ends: dict[int, int], resolution: Resolution, *keys: str) -> pl.DataFrame:
    """``frame`` (a ``batch`` column of bucket starts) with each bucket's span and a ``key``.

    ``batch_end`` is the bucket's last observed batch, ``span_end`` the last batch it will hold
    once full and ``axis_end`` how far the x axis reaches while it is the latest bucket
    (:meth:`~calwatch.views.resolution.Resolution.axis_end`): charts span their x axis to the highest
    ``axis_end``, so the axis moves once per few buckets, not with every batch.
    """
    starts: list[int] = frame["batch"].to_list()
    last = [ends.get(b, b) for b in starts]
    full = [b + resolution.width - 1 for b in starts]
    hi = resolution.hi
    # Columns built in Python: the frames hold a few buckets, and one polars call beats six.
    return frame.with_columns(
        pl.Series("batch_end", last, dtype=pl.Int64),
        pl.Series("batch_mid", [(b + e) / 2 for b, e in zip(starts, last, strict=True)], dtype=pl.Float64),
        pl.Series("span_end", full if hi is None else [min(f, hi) for f in full], dtype=pl.Int64),
        pl.Series("axis_end", [resolution.axis_end(b) for b in starts], dtype=pl.Int64),
        pl.Series("n_batches", [e - b + 1 for b, e in zip(starts, last, strict=True)], dtype=pl.Int64),
        key=pl.concat_str("batch", *keys, separator="|"),
    )


def _shift(monitor: Monitor, resolution: Resolution, ends: dict[int, int]) -> pl.DataFrame:
    """Detector statistics per bucket: the highest in it (alarm if any batch alarmed)."""
    schema: dict[str, Any] = {
        "batch": pl.Int64, "detector": pl.String, "calibrator": pl.String,
        "log10_statistic": pl.Float64, "log10_threshold": pl.Float64, "alarm": pl.Boolean,
    }  # fmt: skip
    watch = monitor.shift_watch
    latest = monitor.n_batches - 1
    # label-based detectors look when labels arrive and are charted at the latest batch
    starts = set(ends)
    if resolution.contains(latest) and latest >= 0:
        start = resolution.start_of(latest)
        if start not in ends:
            ends = ends | {start: resolution.end_of(start, latest=latest)}
        starts.add(start)
    wanted = tuple(b for s in sorted(starts) for b in range(s, ends[s] + 1))
    looks = [] if watch is None or not wanted else watch.look_rows(wanted)
    frame = pl.DataFrame(looks, schema=schema)
    if resolution.width > 1:
        bucket = (
            pl.lit(resolution.lo) + (pl.col("batch") - resolution.lo) // resolution.width * resolution.width
        )
        frame = (
            frame.sort("batch")
            .group_by(bucket.alias("start"), "detector", maintain_order=True)
            .agg(
                pl.col("calibrator").last(),
                pl.col("log10_statistic").max(),
                pl.col("log10_threshold").last(),
                pl.col("alarm").any(),
            )
            .rename({"start": "batch"})
            .select(*schema)
        )
    return _spans(frame, ends, resolution, "detector").with_columns(
        key=pl.concat_str("detector", "batch", separator="|")
    )


def _fan(monitor: Any) -> pl.DataFrame:
    """The latest batch's predicted intervals: ``FAN_ROWS`` rows per calibrator (fixed keys).

    Rows are evenly spaced through the batch and ranked by their median; slots beyond a small
    batch are null, so every update replaces the same keys.
    """
    schema: dict[str, Any] = {
        "key": pl.String, "calibrator": pl.String, "rank": pl.Int64, "batch": pl.Int64, "median": pl.Float64,
        "lower_50": pl.Float64, "upper_50": pl.Float64, "lower_90": pl.Float64, "upper_90": pl.Float64,
        "label": pl.Float64,
    }  # fmt: skip
    if monitor.n_batches == 0 or monitor.batch_records[-1].rows is None:
        return pl.DataFrame(schema=schema)
    record = monitor.batch_records[-1]
    rows = monitor.rows(batch=record.index)
    pick = np.unique(np.linspace(0, rows.height - 1, min(FAN_ROWS, rows.height)).round().astype(int))
    levels = [f"{100 * v:g}".replace(".", "_") for v in monitor.levels]
    inner, outer = levels[0], levels[-1]
    out: list[dict[str, Any]] = []
    for name in monitor.calibrators:
        part = rows[pick].sort(f"median_{name}")
        values = part.to_dicts()
        for rank in range(FAN_ROWS):
            row = values[rank] if rank < len(values) else None
            out.append(
                {
                    "key": f"{name}|{rank}", "calibrator": name, "rank": rank, "batch": record.index,
                    "median": None if row is None else row[f"median_{name}"],
                    "lower_50": None if row is None else row[f"lower_{inner}_{name}"],
                    "upper_50": None if row is None else row[f"upper_{inner}_{name}"],
                    "lower_90": None if row is None else row[f"lower_{outer}_{name}"],
                    "upper_90": None if row is None else row[f"upper_{outer}_{name}"],
                    "label": None if row is None else row["label"],
                }
            )  # fmt: skip
    return pl.DataFrame(out, schema=schema)


def _kind_datasets(
    monitor: Monitor, records: list[BatchRecord], ends: dict[int, int], resolution: Resolution
) -> dict[str, pl.DataFrame]:
    """The per-bucket datasets the calibrators' kinds build for their panels (empty for kinds not present)."""
    classes = [str(c) for c in monitor.classes_.tolist()] if monitor.calibration_ else []
    targets = monitor.targets()
    kinds = {key: find_kind(cal) for key, cal in monitor.calibrators.items()}
    out: dict[str, pl.DataFrame] = {}
    for kind in KINDS:
        mine = [key for key, k in kinds.items() if k is kind]
        for name, (row_schema, keys) in kind.record_datasets.items():
            rows = [
                {"batch": record.index, "target": targets.get(key)} | row
                for record in records
                for key, stats in record.stats.items()
                if key in mine
                for row in kind.record_rows(name, key, stats, classes)
            ]
            frame = pl.DataFrame(rows, schema={"batch": pl.Int64, **row_schema})
            out[name] = _spans(frame, ends, resolution, *keys)
    return out


def calibrator_labels(monitor: Monitor) -> dict[str, str]:
    """A short description of each calibrator for legends: its promise, stated."""
    out = {}
    for key, cal in monitor.calibrators.items():
        if getattr(monitor, "task", None) == "regression":
            out[key] = f"{key}: {getattr(cal, 'prediction', '?')}, {getattr(cal, 'interpolation', '?')}"
            continue
        epsilon, delta = getattr(cal, "epsilon", None), getattr(cal, "delta", None)
        alpha = getattr(cal, "alpha", None)
        if getattr(cal, "kind", None) == "risk":
            promise = getattr(cal, "promise", None)  # "upper estimate (conservative)" for InvCP
            out[key] = f"{key}: {getattr(cal, 'method', 'risk')}, top-{getattr(cal, 'top_k', 1)}" + (
                f", {promise}" if promise else ""
            )
        elif epsilon is not None and delta is not None:
            out[key] = f"{key}: PAC ε={epsilon:g}, δ={delta:g}"
        elif alpha is not None:
            out[key] = f"{key}: 1−α={1 - float(alpha):g}"
        else:
            out[key] = key
    return out
