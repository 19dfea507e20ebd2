"""A slice's coverage and mean set size over time: per window batch, beside the whole stream's.

A click on a slice in the Slices view (``carrier = B``) filters the row table to its rows and
adds that slice's coverage per batch to the Coverage tab's coverage-over-time chart, and its mean
set size per batch to the Sets tab's mean-set-size chart, for each set calibrator. Slice counts
are kept per epoch of batches (:mod:`calwatch.stream.slice_counts`), not per batch, so the
per-batch series is counted from the raw rows each window batch keeps: labels, slice codes and
each calibrator's per-row sets (the kind protocol: ``results_of``, ``covered``, ``set_sizes``).
Only window batches, so its cost is bounded by the window, and only batches with at least one
row of the slice (the coverage series: at least one labelled row).

- :func:`slice_coverage`: the ``slice_coverage`` dataset, one row per (slice, window batch,
  calibrator) with the mean set size and the exact 95% Clopper–Pearson interval of coverage;
- :func:`coverage_spec`, :func:`set_size_spec`: the coverage and set-size charts with the picked
  slice's series (dotted, diamonds; the Vega signal :data:`SLICE_FILTER` names the slice each
  view picked, ``""`` = none).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import altair as alt
import numpy as np
import polars as pl

from calwatch.core.guard import one_moment
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.kinds import kind_of, stored_hits
from calwatch.views.charts import parts
from calwatch.views.charts.data import calibrator_labels
from calwatch.views.charts.sets import (
    COVERAGE_TITLE,
    SET_SIZE_AXIS,
    SET_SIZE_TITLE,
    coverage_layers,
    set_size_layers,
)

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor
    from calwatch.stream.slices import SliceEncoding

#: The dataset's name.
SLICE_COVERAGE = "slice_coverage"
#: The Vega signal naming the slice a view picked ("" = none): its series alone is drawn.
SLICE_FILTER = "slice_filter"
#: Columns of :func:`slice_coverage`.
SCHEMA: dict[str, Any] = {
    "key": pl.String, "batch": pl.Int64, "name": pl.String, "calibrator": pl.String, "label": pl.String,
    "slice": pl.String, "target": pl.Float64, "n_rows": pl.Int64, "mean_set_size": pl.Float64,
    "n_labelled": pl.Int64, "n_covered": pl.Int64, "coverage": pl.Float64, "coverage_lo": pl.Float64,
    "coverage_hi": pl.Float64,
}  # fmt: skip


@functools.lru_cache(maxsize=16)
def _cells_by_words(encoding: SliceEncoding) -> tuple[dict[str, int], tuple[int, ...]]:
    """Each cell by its words (as :meth:`SliceEncoding.words` says them), and the table of each cell."""
    cells: dict[str, int] = {}
    for cell in range(encoding.n_cells):
        cells.setdefault(encoding.words(cell), cell)
    return cells, tuple(int(t) for t in encoding.cell_tables())


def slice_cell(encoding: SliceEncoding, words: str) -> tuple[int, int] | None:
    """The cell named ``words`` and its table (a column of :meth:`SliceEncoding.cells`), or None.

    The words are looked up in the encoding, never matched against the data.
    """
    cells, tables = _cells_by_words(encoding)
    cell = cells.get(words)
    return None if cell is None else (cell, tables[cell])


def is_slice(monitor: Monitor, words: str) -> bool:
    """Whether ``words`` name a slice of the monitor (a cell of its slice encoding)."""
    store = getattr(monitor, "_slices", None)
    return store is not None and slice_cell(store.encoding, words) is not None


@one_moment
def slice_coverage(monitor: Monitor, slices: Sequence[str]) -> pl.DataFrame:
    """The ``slice_coverage`` dataset: each slice's coverage per window batch and set calibrator.

    ``slices`` are words of the ``slice`` column of :meth:`Monitor.slices` (one value,
    ``"carrier = B"``, or a pair ``"carrier = B & origin = JFK"``). A row per (slice, window batch,
    set calibrator) whose batch holds at least one row of the slice: its rows (``n_rows``), the
    mean size of the calibrator's sets over all of them, labelled or not (``mean_set_size``), its
    labelled rows (``n_labelled``), how many of those the sets cover (``n_covered``), ``coverage``
    and its exact 95% (Clopper–Pearson) interval: null without a labelled row of the slice.
    ``label`` is the calibrator's legend label (as in ``batches``). Rows are picked by their kept
    slice codes; batches that left the window (or rows kept without codes) are not counted. Key
    ``<slice>|<batch>|<calibrator>``.

    Raises
    ------
    ValueError
        If the monitor keeps no slices, or a slice is not one of its slices.
    """
    store = getattr(monitor, "_slices", None)
    if store is None:
        msg = "slices: this monitor keeps no slices (it was calibrated without meta=)"
        raise ValueError(msg)
    encoding = store.encoding
    wanted: dict[str, tuple[int, int]] = {}
    for words in dict.fromkeys(slices):
        found = slice_cell(encoding, words)
        if found is None:
            msg = f"slices: {words!r} is not a slice of this monitor (see mon.slices()['slice'])"
            raise ValueError(msg)
        wanted[words] = found
    calibrators = monitor.calibrators
    keys = [k for k in store.calibrators if k in calibrators]
    out: dict[str, list[Any]] = {c: [] for c in SCHEMA}
    if not wanted or not keys:
        return pl.DataFrame(schema=SCHEMA)
    targets = {k: kind_of(calibrators[k]).target(calibrators[k]) for k in keys}
    names = calibrator_labels(monitor)
    for record in monitor.window_records():
        rows = record.rows
        if rows is None or rows.slice_codes is None:
            continue
        cells = encoding.cells(rows.slice_codes)
        inside = {w: cells[:, table] == cell for w, (cell, table) in wanted.items()}
        counts = {w: int(mask.sum()) for w, mask in inside.items()}
        if not any(counts.values()):
            continue
        for key in keys:
            is_labelled, covered, sizes = stored_hits(rows, key, calibrators[key])
            for words, mask in inside.items():
                if not counts[words]:
                    continue
                ours = mask & is_labelled
                out["key"].append(f"{words}|{record.index}|{key}")
                out["batch"].append(int(record.index))
                out["name"].append(str(record.name))
                out["calibrator"].append(key)
                out["label"].append(names.get(key, key))
                out["slice"].append(words)
                out["target"].append(targets[key])
                out["n_rows"].append(counts[words])
                out["mean_set_size"].append(float(np.mean(sizes[mask])))
                out["n_labelled"].append(int(ours.sum()))
                out["n_covered"].append(int(covered[ours].sum()))
    if not out["key"]:
        return pl.DataFrame(schema=SCHEMA)
    n, k = np.asarray(out["n_labelled"]), np.asarray(out["n_covered"])
    some = n > 0
    lo, hi = clopper_pearson(k[some], n[some])
    for column, values in (("coverage", k[some] / n[some]), ("coverage_lo", lo), ("coverage_hi", hi)):
        full = np.full(n.shape, np.nan)
        full[some] = values
        out[column] = [float(v) if ok else None for v, ok in zip(full, some, strict=True)]
    return pl.DataFrame(out, schema=SCHEMA)


def _picked() -> alt.Chart:
    """The ``slice_coverage`` rows of the slice this view picked (and of the calibrator picker's choice)."""
    return (
        alt.Chart(alt.NamedData(SLICE_COVERAGE))
        .transform_filter(parts.CALIBRATOR_FILTER)
        .transform_filter(f"{SLICE_FILTER} != '' && datum.slice == {SLICE_FILTER}")
    )


def _series(
    base: alt.Chart, y: alt.Y, color: alt.Color, tooltip: list[alt.Tooltip], name: str
) -> tuple[alt.Chart, alt.Chart]:
    """A dotted line (its legend entry naming the slice) and diamonds carrying the hover text."""
    x = parts.batch_axis("batch")
    dash = alt.StrokeDash(
        "slice:N", scale=alt.Scale(range=[[2, 3]]), legend=alt.Legend(orient="bottom", title=None)
    )
    line = base.mark_line(aria=False, strokeWidth=1.5).encode(x=x, y=y, color=color, strokeDash=dash)
    points = (
        base.transform_calculate(**parts.hover_fields(tooltip))
        .mark_point(
            shape="diamond", filled=True, size=45, opacity=1, stroke="white", strokeWidth=0.5, **parts.HOVER
        )
        .encode(x=x, y=y, color=color)
        .properties(name=name)
    )
    return line, points


def slice_layers() -> tuple[alt.Chart, alt.Chart]:
    """The picked slice's coverage per window batch: a dotted line and diamonds, each calibrator's colour.

    Only batches with a labelled row of the slice (a non-null ``coverage``).
    """
    tooltip = [
        alt.Tooltip("slice:N"),
        alt.Tooltip("name:N", title="batch (window)"),
        alt.Tooltip("calibrator:N"),
        alt.Tooltip("coverage:Q", format=".3f", title="slice coverage"),
        alt.Tooltip("coverage_lo:Q", format=".3f", title="95% low (exact)"),
        alt.Tooltip("coverage_hi:Q", format=".3f", title="95% high (exact)"),
        alt.Tooltip("n_covered:Q", title="covered"),
        alt.Tooltip("n_labelled:Q", title="labelled rows of the slice"),
        alt.Tooltip("target:Q", format=".3f"),
    ]
    base = _picked().transform_filter("datum.coverage != null")
    return _series(base, alt.Y("coverage:Q"), parts.series_color(), tooltip, "slice_points")


def slice_size_layers() -> tuple[alt.Chart, alt.Chart]:
    """The picked slice's mean set size per window batch (all its rows), dotted, each calibrator's colour.

    Coloured by ``label``, as the set-size chart's own series.
    """
    tooltip = [
        alt.Tooltip("slice:N"),
        alt.Tooltip("name:N", title="batch (window)"),
        alt.Tooltip("label:N", title="calibrator"),
        alt.Tooltip("mean_set_size:Q", format=".3f", title="slice mean size"),
        alt.Tooltip("n_rows:Q", title="rows of the slice"),
        alt.Tooltip("n_labelled:Q", title="labelled rows of the slice"),
    ]
    y = alt.Y("mean_set_size:Q", title=SET_SIZE_AXIS, scale=alt.Scale(zero=False))
    base = _picked().transform_filter("datum.mean_set_size != null")
    return _series(base, y, parts.series_color("label"), tooltip, "slice_size_points")


def _with_slice_title(chart: Any, title: str) -> dict[str, Any]:
    """``chart`` titled, declaring :data:`SLICE_FILTER`; a second title line while a slice is picked."""
    spec: dict[str, Any] = parts.titled_chart(chart, title).to_dict()
    spec["params"] = [*spec.get("params", []), {"name": SLICE_FILTER, "value": ""}]
    line = f"'◆ dotted: ' + {SLICE_FILTER} + ', window batches only'"
    spec["title"] = {"text": {"expr": f"{SLICE_FILTER} == '' ? {title!r} : [{title!r}, {line}]"}}
    return spec


def coverage_spec() -> dict[str, Any]:
    """The coverage chart with the picked slice's series (a monitor that slices; named data).

    The title gains a line naming the slice and saying its series covers window batches only.
    """
    return _with_slice_title(alt.layer(*coverage_layers(None), *slice_layers()), COVERAGE_TITLE)


def set_size_spec() -> dict[str, Any]:
    """The mean-set-size chart with the picked slice's series (a monitor that slices; named data).

    The title gains the same line as :func:`coverage_spec`'s.
    """
    return _with_slice_title(alt.layer(*set_size_layers(None), *slice_size_layers()), SET_SIZE_TITLE)


__all__ = [
    "SCHEMA",
    "SLICE_COVERAGE",
    "SLICE_FILTER",
    "coverage_spec",
    "is_slice",
    "set_size_spec",
    "slice_coverage",
    "slice_layers",
    "slice_size_layers",
]
