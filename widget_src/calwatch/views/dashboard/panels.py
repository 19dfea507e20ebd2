"""The panels the kernel recomputes from the window's raw rows, and the timeline of the whole stream.

- ``what_if``: coverage and set sizes recomputed at another level α from the fitted scores
  (:meth:`Monitor.what_if`, no refitting), for the most recent ``window_rows`` rows;
- ``reliability``: a reliability diagram of the labelled window rows (top-label confidence in
  ``m = min(15, ⌊n/25⌋)`` equal-mass bins, observed accuracy with a 95% Clopper-Pearson band);
- ``set_by_class``: singleton share and mean set size by predicted class;
- ``timeline``: rows and labels per batch, notes pinned to batches; it always spans the whole
  stream (:func:`timeline`); past :data:`~calwatch.views.resolution.MAX_POINTS` batches it, like the
  per-batch charts, draws buckets of consecutive batches (:mod:`calwatch.views.resolution`);
- the overview cards, the notes and a page of the row table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.guard import one_moment
from calwatch.engine.metrics.calibration import MAX_BINS, ROWS_PER_BIN
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.kinds.sets import POPCOUNT
from calwatch.views import charts
from calwatch.views.cards import overview_rows
from calwatch.views.slice_history import slice_cell

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor
    from calwatch.stream.slices import SliceEncoding
from calwatch.views.dashboard.row_cache import RowCache, Run, SetCounts


@one_moment
def timeline(
    monitor: Monitor, batches: Sequence[int] | None = None, *, width: int | None = None
) -> pl.DataFrame:
    """The ``timeline`` dataset: rows and labelled rows per bucket of batches, whole stream.

    One row per bucket of ``width`` batches (default: the whole stream's
    :func:`~calwatch.views.resolution.bucket_width`), or only the buckets holding ``batches``. Columns
    ``key, batch, batch_end, n_batches, name, n_rows, n_labelled, rows, labelled, span_end,
    axis_end`` (``rows`` and ``labelled`` are per batch: the bucket's means; ``span_end`` is the
    last batch the bucket holds once full, ``axis_end`` how far the x axis reaches while it is the
    latest bucket).
    """
    from calwatch.views.resolution import Resolution, bucket_records

    schema: dict[str, Any] = {
        "key": pl.String, "batch": pl.Int64, "batch_end": pl.Int64, "n_batches": pl.Int64, "name": pl.String,
        "n_rows": pl.Int64, "n_labelled": pl.Int64, "rows": pl.Float64, "labelled": pl.Float64,
        "span_end": pl.Int64, "axis_end": pl.Int64,
    }  # fmt: skip
    resolution = Resolution.whole(monitor.n_batches) if width is None else Resolution(width)
    if monitor.calibration_ is None:
        return pl.DataFrame(schema=schema)
    rows = []
    for record, end in bucket_records(monitor.batch_records, resolution, batches):
        n = end - record.index + 1
        rows.append(
            {
                "key": str(record.index), "batch": record.index, "batch_end": end, "n_batches": n,
                "name": record.name, "n_rows": record.n_rows, "n_labelled": record.n_labelled,
                "rows": record.n_rows / n, "labelled": record.n_labelled / n,
                "span_end": record.index + resolution.width - 1,
                "axis_end": resolution.axis_end(record.index),
            }
        )  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


# --------------------------------------------------------------------------- window rows
@one_moment
def window_batches(monitor: Monitor, window_rows: int = 0) -> list[int]:
    """Indices of the most recent window batches holding at most ``window_rows`` rows (0 = all).

    The newest batch is always included, even when it alone exceeds ``window_rows``.
    """
    records = monitor.window_records()
    if window_rows <= 0:
        return [r.index for r in records]
    out: list[int] = []
    total = 0
    for record in reversed(records):
        if out and total + record.n_rows > window_rows:
            break
        out.append(record.index)
        total += record.n_rows
    return sorted(out)


def _selected_records(monitor: Monitor, window_rows: int, batch_range: Sequence[int] | None) -> list[Any]:
    keep = set(window_batches(monitor, window_rows))
    lo, hi = (batch_range[0], batch_range[1]) if batch_range else (-math.inf, math.inf)
    return [r for r in monitor.window_records() if r.index in keep and lo <= r.index <= hi]


def reliability_bins(
    confidence: npt.ArrayLike,
    correct: npt.ArrayLike,
    *,
    max_bins: int = MAX_BINS,
    per_bin: int = ROWS_PER_BIN,
) -> pl.DataFrame:
    """Equal-mass reliability bins of top-label confidence with 95% Clopper-Pearson bands.

    ``m = min(max_bins, ⌊n / per_bin⌋)`` bins of (almost) equal size over the rows sorted by
    confidence (ties keep their input order); no bins below ``per_bin`` rows.

    Examples
    --------
    >>> out = reliability_bins([0.9, 0.6, 0.8, 0.7], [1, 0, 1, 1], per_bin=2)
    >>> out["n"].to_list(), out["confidence"].round(6).to_list(), out["accuracy"].to_list()
    ([2, 2], [0.65, 0.85], [0.5, 1.0])
    """
    conf = np.asarray(confidence, dtype=np.float64)
    hit = np.asarray(correct, dtype=bool)
    order = np.argsort(conf, kind="stable")
    return sorted_reliability_bins(conf[order], hit[order], max_bins=max_bins, per_bin=per_bin)


def sorted_reliability_bins(
    confidence: npt.NDArray[np.float64],
    correct: npt.NDArray[np.bool_],
    *,
    max_bins: int = MAX_BINS,
    per_bin: int = ROWS_PER_BIN,
) -> pl.DataFrame:
    """:func:`reliability_bins` of rows already sorted by confidence."""
    conf, hit = confidence, correct
    n = conf.shape[0]
    m = min(max_bins, n // per_bin)
    schema: dict[str, Any] = {
        "key": pl.String, "bin": pl.Int64, "n": pl.Int64, "n_correct": pl.Int64,
        "confidence": pl.Float64, "conf_lo": pl.Float64, "conf_hi": pl.Float64,
        "accuracy": pl.Float64, "lo": pl.Float64, "hi": pl.Float64, "gap": pl.Float64,
    }  # fmt: skip
    if m == 0:
        return pl.DataFrame(schema=schema)
    parts = np.array_split(np.arange(n), m)
    sizes = np.array([part.shape[0] for part in parts], dtype=np.int64)
    correct = np.array([int(hit[part].sum()) for part in parts], dtype=np.int64)
    means = np.array([float(conf[part].mean()) for part in parts])
    lo, hi = clopper_pearson(correct, sizes)
    accuracy = correct / sizes
    columns = {
        "key": [str(i) for i in range(m)], "bin": list(range(m)), "n": sizes, "n_correct": correct,
        "confidence": means, "conf_lo": [float(conf[part].min()) for part in parts],
        "conf_hi": [float(conf[part].max()) for part in parts], "accuracy": accuracy, "lo": lo, "hi": hi,
        "gap": accuracy - means,
    }  # fmt: skip
    return pl.DataFrame(columns, schema=schema)


def _by_confidence(record: Any, cache: RowCache | None) -> tuple[Any, Any, Any]:
    """A window batch's rows by top-label confidence (stable): the order, the confidences, the top labels."""
    values = {} if cache is None else cache.values(record)
    found = values.get("by_confidence")
    if found is None:
        probs = record.rows.probs
        conf, top = probs.max(axis=1), probs.argmax(axis=1)
        order = np.argsort(conf, kind="stable")
        found = values["by_confidence"] = (order, conf[order], top[order])
    return found


def _labelled_run(record: Any, wanted: int | None, cache: RowCache | None) -> Run:
    """A window batch's labelled rows (predicted as class ``wanted``, if given) by confidence."""
    order, conf, top = _by_confidence(record, cache)
    labels = record.rows.labels[order]
    labelled = labels >= 0
    conf, top, labels = conf[labelled], top[labelled], labels[labelled]
    if wanted is None:
        return conf, top == labels
    keep = top == wanted
    return conf[keep], (top == labels)[keep]


@one_moment
def reliability(
    monitor: Monitor,
    *,
    window_rows: int = 0,
    batch_range: Sequence[int] | None = None,
    class_filter: str = "",
    cache: RowCache | None = None,
) -> pl.DataFrame:
    """Reliability diagram of the labelled window rows (see :func:`reliability_bins`).

    Parameters
    ----------
    window_rows : int
        Only the most recent batches holding at most this many rows (0 = the whole window).
    batch_range : (int, int), optional
        Only batches in this inclusive range.
    class_filter : str
        Only rows predicted as this class ("" = all).
    cache : RowCache, optional
        What an earlier call of a live view kept (the same result, at the cost of what changed).
    """
    if cache is not None:
        return sorted_reliability_bins(
            *_sorted_labelled(monitor, window_rows, batch_range, class_filter, cache)
        )
    wanted, records = _labelled_records(monitor, window_rows, batch_range, class_filter)
    # Each batch's labelled rows by confidence (ties in row order): the stable sort of all of them
    # gives the order it gives the window's rows taken in stream order.
    runs = [_labelled_run(r, wanted, None) for r in records]
    if not runs:
        return reliability_bins(np.zeros(0), np.zeros(0, dtype=bool))
    return reliability_bins(np.concatenate([c for c, _ in runs]), np.concatenate([h for _, h in runs]))


def _labelled_records(
    monitor: Monitor, window_rows: int, batch_range: Sequence[int] | None, class_filter: str
) -> tuple[int | None, list[Any]]:
    """The class index picked (None: all) and the selected window batches with labelled rows."""
    classes = [str(c) for c in monitor.classes_.tolist()]
    wanted = classes.index(class_filter) if class_filter in classes else None
    records = [
        r
        for r in _selected_records(monitor, window_rows, batch_range)
        if r.rows.probs.shape[1] > 0 and r.n_labelled > 0  # not a regression row; labelled
    ]
    return wanted, records


def _sorted_labelled(
    monitor: Monitor, window_rows: int, batch_range: Sequence[int] | None, class_filter: str, cache: RowCache
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The selected labelled window rows by confidence, and whether their top label is right (kept)."""
    wanted, records = _labelled_records(monitor, window_rows, batch_range, class_filter)
    cache.prune(monitor)
    return cache.sorted_window(records, wanted, lambda r: _labelled_run(r, wanted, cache))


@one_moment
def keep_current(
    monitor: Monitor,
    cache: RowCache,
    *,
    window_rows: int = 0,
    batch_range: Sequence[int] | None = None,
    class_filter: str = "",
) -> None:
    """Bring a live view's cache up to the window as it is now, ahead of the panels' next refresh.

    Called after each batch or label call, it spreads the panels' work over the calls (each merges
    in its own batch) instead of leaving it all to the refresh, which then only builds the bins.
    """
    if monitor.calibration_ is None or monitor.n_batches == 0:
        return
    _sorted_labelled(monitor, window_rows, batch_range, class_filter, cache)
    _set_totals(monitor, window_rows, batch_range, cache)


def _set_counts(record: Any, K: int, cache: RowCache | None = None) -> SetCounts:
    """Per set calibrator of a window batch: rows, singleton rows and set sizes summed, by predicted class."""
    values = {} if cache is None else cache.values(record)
    found: SetCounts | None = values.get("set_counts")
    if found is None:
        rows = record.rows
        top = rows.probs.argmax(axis=1)
        found = {}
        for key, packed in rows.packed_sets.items():
            sizes = POPCOUNT[packed].sum(axis=1)
            found[key] = (
                np.bincount(top, minlength=K),
                np.bincount(top, weights=sizes == 1, minlength=K).astype(np.int64),
                np.bincount(top, weights=sizes, minlength=K).astype(np.int64),
            )
        values["set_counts"] = found
    return found


def _set_totals(
    monitor: Monitor, window_rows: int, batch_range: Sequence[int] | None, cache: RowCache
) -> SetCounts:
    """Set counts of the selected window batches summed per calibrator, kept in ``cache``."""
    K = len(monitor.classes_)
    # no set calibrator: risk, selective or regression rows
    records = [r for r in _selected_records(monitor, window_rows, batch_range) if r.rows.packed_sets]
    return cache.window_sums(records, lambda r: _set_counts(r, K, cache))


@one_moment
def set_by_class(
    monitor: Monitor,
    *,
    window_rows: int = 0,
    batch_range: Sequence[int] | None = None,
    cache: RowCache | None = None,
) -> pl.DataFrame:
    """Per set calibrator and predicted class: rows, singleton rows and mean set size (window).

    ``cache`` holds what an earlier call of a live view kept (the same result: integer counts).
    """
    classes = [str(c) for c in monitor.classes_.tolist()]
    totals = _set_totals(monitor, window_rows, batch_range, RowCache() if cache is None else cache)
    out: dict[str, list[Any]] = {
        k: [] for k in ("key", "calibrator", "class", "n_rows", "n_singleton", "size_sum")
    }
    for key, (n, single, size_sum) in totals.items():
        for c in np.flatnonzero(n):
            out["key"].append(f"{key}|{classes[c]}")
            out["calibrator"].append(key)
            out["class"].append(classes[c])
            out["n_rows"].append(int(n[c]))
            out["n_singleton"].append(int(single[c]))
            out["size_sum"].append(int(size_sum[c]))
    schema: dict[str, Any] = {
        "key": pl.String, "calibrator": pl.String, "class": pl.String,
        "n_rows": pl.Int64, "n_singleton": pl.Int64, "size_sum": pl.Int64,
    }  # fmt: skip
    n_rows = np.array(out["n_rows"], dtype=np.int64)
    shares = np.array(out["n_singleton"], dtype=np.int64) / n_rows
    sizes = np.array(out.pop("size_sum"), dtype=np.int64) / n_rows
    schema |= {"singleton_share": pl.Float64, "mean_set_size": pl.Float64}
    del schema["size_sum"]
    return pl.DataFrame(out | {"singleton_share": shares, "mean_set_size": sizes}, schema=schema)


@one_moment
def what_if(
    monitor: Monitor, alpha: float, *, window_rows: int = 0, cache: RowCache | None = None
) -> pl.DataFrame:
    """:meth:`Monitor.what_if` at ``alpha`` for the most recent ``window_rows`` rows, keyed.

    With ``cache`` (a live view's), only the batches that changed since its last call are
    recomputed (:meth:`RowCache.what_if`); the result is the same.
    """
    if not monitor.what_if_calibrators():
        return pl.DataFrame()
    keep = window_batches(monitor, window_rows)
    frame = monitor.what_if(alpha, batches=keep) if cache is None else cache.what_if(monitor, alpha, keep)
    return frame.with_columns(key=pl.concat_str("batch", "calibrator", separator="|"))


@one_moment
def what_if_info(monitor: Monitor, alpha: float | None, *, window_rows: int = 0) -> dict[str, Any]:
    """What the α control applies to: the calibrators, the window batches and rows."""
    records = {r.index: r.n_rows for r in monitor.window_records()}
    keep = window_batches(monitor, window_rows) if monitor.calibration_ is not None else []
    return {
        "alpha": alpha,
        "calibrators": monitor.what_if_calibrators() if monitor.calibration_ is not None else [],
        "first_batch": keep[0] if keep else None,
        "last_batch": keep[-1] if keep else None,
        "n_batches": len(keep),
        "n_rows": sum(records[i] for i in keep),
        "window": monitor.window,
        "targets": monitor.targets() if monitor.calibration_ is not None else {},
    }


# --------------------------------------------------------------------------- overview cards
@one_moment
def overview(monitor: Monitor, *, batch_range: Sequence[int] | None = None) -> pl.DataFrame:
    """Status cards of a monitor, over all batches or ``batch_range``.

    Per calibrator: target vs observed coverage, estimated vs observed error, admitted share and
    open warnings (see :func:`overview_rows`).
    """
    if monitor.calibration_ is None or monitor.n_batches == 0:
        batch_rows: list[dict[str, Any]] = []
    else:
        batch_rows = charts.batch_summary(monitor).to_dicts()
    watch = monitor.shift_watch
    return pl.DataFrame(
        overview_rows(
            batch_rows,
            calibrators=list(monitor.calibrators),
            labels=charts.calibrator_labels(monitor),
            warnings=[] if watch is None else watch.warning_records(),
            batch_range=batch_range,
        )
    )


@one_moment
def note_rows(monitor: Monitor, start: int = 0) -> list[dict[str, Any]]:
    """The monitor's notes from ``start`` on as ``notes`` dataset rows (key: the note id)."""
    return [{"key": str(r["note_id"]), **r} for r in monitor.notes().slice(start).to_dicts()]


def _slice_encoding(monitor: Monitor) -> SliceEncoding | None:
    """The slice columns' encoding of a monitor calibrated with ``meta=`` (None otherwise)."""
    store = getattr(monitor, "_slices", None)
    return None if store is None else store.encoding


def slice_rows_mask(monitor: Monitor, record: Any, slice_filter: str) -> npt.NDArray[np.bool_]:
    """Which rows of a window batch lie in the slice ``slice_filter`` (words of ``mon.slices()``).

    The words name a cell of the monitor's slice encoding (one value of a column, or a pair of
    values of two columns: a row is in the pair when it has both); the rows are picked by their
    kept slice codes, never by matching their values as text.

    Raises
    ------
    ValueError
        If the monitor keeps no slices, or ``slice_filter`` names no slice of it.
    """
    encoding = _slice_encoding(monitor)
    if encoding is None:
        msg = "slice_filter: this monitor keeps no slices (it was calibrated without meta=)"
        raise ValueError(msg)
    found = slice_cell(encoding, slice_filter)
    if found is None:
        msg = f"slice_filter: {slice_filter!r} is not a slice of this monitor (see mon.slices()['slice'])"
        raise ValueError(msg)
    cell, table = found
    codes = record.rows.slice_codes
    if codes is None:  # rows kept without their slice codes: none is known to be in the slice
        return np.zeros(record.n_rows, dtype=bool)
    mask: npt.NDArray[np.bool_] = encoding.cells(codes)[:, table] == cell
    return mask


def _newest_with_slice(monitor: Monitor, slice_filter: str) -> int:
    """The newest window batch holding rows of ``slice_filter`` (the newest one if none does)."""
    records = monitor.window_records()
    if not records:
        msg = "no batch is in the window: no rows to show"
        raise ValueError(msg)
    if slice_filter:
        for record in reversed(records):
            if slice_rows_mask(monitor, record, slice_filter).any():
                return int(record.index)
    return int(records[-1].index)


@one_moment
def rows_page(
    monitor: Monitor,
    batch: int | None,
    *,
    page: int = 0,
    page_size: int = 20,
    calibrator: str = "",
    class_filter: str = "",
    slice_filter: str = "",
) -> dict[str, Any]:
    """One page of a window batch's rows for the row table: id, prediction, set, risk, label.

    ``calibrator`` picks the set / risk shown (default: the first of each kind);
    ``class_filter`` (a class name, "" = all) keeps the rows predicted as or labelled that class;
    ``slice_filter`` (a slice in the words of the ``slice`` column of :meth:`Monitor.slices`,
    ``"carrier = B6"`` or a pair ``"carrier = B6 & hour ≥ 18"``; "" = all) keeps the rows in that
    slice, picked by their slice codes (:func:`slice_rows_mask`). ``batch=None`` opens the newest
    window batch holding rows of the slice (the newest window batch if none does, or without a
    slice filter); the reply names the batch shown.

    Raises
    ------
    ValueError
        If the batch is not in the window (or none is), or ``slice_filter`` names no slice.
    """
    if batch is None:
        batch = _newest_with_slice(monitor, slice_filter)
    frame = monitor.rows(batch=batch)
    if slice_filter:
        record = next(r for r in monitor.window_records() if r.index == batch)
        frame = frame.filter(pl.Series(slice_rows_mask(monitor, record, slice_filter)))
    if class_filter and "prediction" in frame.columns:
        as_text = [pl.col(c).cast(pl.String) == class_filter for c in ("prediction", "label")]
        frame = frame.filter(as_text[0] | as_text[1].fill_null(False))
    cal = monitor.calibrators
    set_keys = [k for k in cal if f"set_{k}" in frame.columns]
    risk_keys = [k for k in cal if f"risk_{k}" in frame.columns]
    set_key = calibrator if calibrator in set_keys else (set_keys[0] if set_keys else None)
    risk_key = calibrator if calibrator in risk_keys else (risk_keys[0] if risk_keys else None)
    n = frame.height
    n_pages = max(1, math.ceil(n / page_size))
    page = min(max(0, page), n_pages - 1)
    part = frame.slice(page * page_size, page_size)
    columns = ["id", "prediction", "confidence", "set", "risk", "label"]
    rows = []
    for r in part.iter_rows(named=True):
        s = r.get(f"set_{set_key}") if set_key else None
        risk = r.get(f"risk_{risk_key}") if risk_key else None
        rows.append(
            [
                str(r["id"]), str(r["prediction"]), float(r["confidence"]),
                None if s is None else [str(c) for c in s],
                None if risk is None or not math.isfinite(risk) else float(risk),
                None if r["label"] is None else str(r["label"]),
            ]
        )  # fmt: skip
    return {
        "batch": batch, "batch_name": monitor.batch_records[batch].name, "page": page, "page_size": page_size,
        "n_rows": n, "n_pages": n_pages, "columns": columns, "rows": rows, "set_calibrator": set_key or "",
        "risk_calibrator": risk_key or "", "class_filter": class_filter, "slice_filter": slice_filter,
    }  # fmt: skip
