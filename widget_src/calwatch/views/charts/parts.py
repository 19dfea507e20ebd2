"""What every chart shares: the calibrator picker, the batch axis, hover text, colours, title and size.

Every chart has a top-level ``calibrator`` parameter (``"(all)"`` by default) that filters to one
calibrator (:func:`base_chart`, :func:`titled_chart`); charts over batches share one x axis
(:func:`batch_axis`, :func:`x_span`). The chart modules of this package build on these:
:mod:`~calwatch.views.charts.sets`, :mod:`~calwatch.views.charts.risk`,
:mod:`~calwatch.views.charts.admit_selective`, :mod:`~calwatch.views.charts.regression` and
:mod:`~calwatch.views.charts.labels_shift`.
"""

from __future__ import annotations

import json
from typing import Any

import altair as alt
import polars as pl

#: The charts' top-level parameter: the calibrator shown, or :data:`ALL_CALIBRATORS`.
CALIBRATOR_PARAM = "calibrator"
#: The Vega signal naming the one detector whose evidence the shift chart shows ("": every detector).
DETECTOR_PICK = "detector_pick"
#: The Vega signal holding each batch's name by index (null where a batch has none but its index),
#: set by the front end from the ``batches`` rows: batch axes label a named batch by its name.
BATCH_NAMES = "batch_names"
#: A batch axis's label: the batch's name when it was observed under one, else its index.
_NAMED = f"isArray({BATCH_NAMES}) && isString({BATCH_NAMES}[datum.value])"
BATCH_LABEL_EXPR = f"{_NAMED} ? {BATCH_NAMES}[datum.value] : datum.label"
ALL_CALIBRATORS = "(all)"
#: The Vega expression that keeps the rows of the picked calibrator (every row under "(all)").
_EVERY = f"{CALIBRATOR_PARAM} == '{ALL_CALIBRATORS}'"
CALIBRATOR_FILTER = f"{_EVERY} || datum.calibrator == {CALIBRATOR_PARAM}"
#: The same, keeping rows of no calibrator too (label-free shift detectors watch the model).
MODEL_OR_CALIBRATOR_FILTER = f"{_EVERY} || !datum.calibrator || datum.calibrator == {CALIBRATOR_PARAM}"
#: Height in pixels of a chart (and of a dashboard panel, unless it says otherwise).
CHART_HEIGHT = 150

#: A chart's data: a frame inline, or None for the named dataset the live widget fills.
Source = pl.DataFrame | None
ChartSpec = alt.Chart | alt.LayerChart


def base_chart(source: Source, dataset: str, *, kind: str | None = None) -> alt.Chart:
    """A chart on a dataset, filtered by the calibrator picker (and to one calibrator kind)."""
    data: Any = alt.NamedData(dataset) if source is None else source
    chart = alt.Chart(data).transform_filter(CALIBRATOR_FILTER)
    return chart if kind is None else chart.transform_filter(f"datum.kind == '{kind}'")


def titled_chart(chart: Any, title: str, *, span: alt.Chart | None = None) -> ChartSpec:
    """Title, size and the calibrator parameter; ``span`` (an :func:`x_span`) goes underneath."""
    if span is not None:
        chart = alt.layer(span, chart)
    param = alt.param(name=CALIBRATOR_PARAM, value=ALL_CALIBRATORS)
    names = alt.param(name=BATCH_NAMES, value=None)
    finished: ChartSpec = chart.add_params(param, names).properties(
        width="container", height=CHART_HEIGHT, title=title
    )
    return finished


def batch_axis(field: str, *, title: str | None = "batch") -> alt.X:
    """The shared x axis: batch index, integer ticks, no padding past the last batch.

    Not from zero: a zoomed range (a brush) starts at its first batch.
    """
    return alt.X(
        f"{field}:Q",
        title=title,
        scale=alt.Scale(nice=False, zero=False),
        axis=batch_ticks(),
    )


def name_axis(widest: int) -> alt.Axis:
    """A band axis of names (detectors, slices) taking at most half the plot, ``widest`` px at most.

    A 250 px side panel keeps its plot; a long name ends in an ellipsis (the tooltip has it whole).
    """
    return alt.Axis(labelLimit={"expr": f"max(60, min({widest}, width / 2))"})


def batch_ticks() -> alt.Axis:
    """Integer ticks on a batch axis, each labelled by its batch's name when it has one."""
    return alt.Axis(format="d", tickMinStep=1, labelExpr=BATCH_LABEL_EXPR, labelOverlap=True)


def x_span(base: alt.Chart, *, title: str | None = "batch") -> alt.Chart:
    """An invisible rule from the first batch to the axis end, under a chart with a batch axis.

    The x axis then spans the stream (batches still waiting for labels included, and room for a
    few buckets to come: ``axis_end``) and moves once per few buckets, not with every batch.
    """
    spanned = base.transform_aggregate(first="min(batch)", last="max(axis_end)")
    rule: alt.Chart = spanned.mark_rule(opacity=0, aria=False).encode(
        x=batch_axis("first", title=title), x2="last:Q"
    )
    return rule


def hover_fields(tooltip: list[alt.Tooltip]) -> dict[str, str]:
    """``transform_calculate`` fields holding a row's tooltip and ARIA description, once per row.

    Vega re-evaluates a mark's encoders for every item whenever a scale changes (each update of a
    growing stream), and a tooltip list is formatted anew each time (and makes every item look
    changed, so every item is redrawn). Computed in the data flow, the text is made only for rows
    that change; marks read it with :data:`HOVER` (``"title: value; …"`` as Vega-Lite writes it).
    """
    values: list[tuple[str, str]] = []
    for tip in tooltip:
        spec: dict[str, Any] = tip.to_dict()  # type: ignore[assignment]
        field, fmt = str(spec["field"]), spec.get("format")
        title = str(spec.get("title", field))
        ref = f"datum[{json.dumps(field)}]"
        quantitative = spec.get("type") == "quantitative"
        if fmt and quantitative:
            values.append((title, f"(isValid({ref}) ? format({ref}, {json.dumps(fmt)}) : '' + {ref})"))
        else:
            values.append((title, f"('' + {ref})"))
    obj = "{" + ", ".join(f"{json.dumps(t)}: {v}" for t, v in values) + "}"
    desc = " + '; ' + ".join(f"{json.dumps(t + ': ')} + {v}" for t, v in values)
    return {"hover_tooltip": obj, "hover_description": desc}


#: Mark properties reading :func:`hover_fields`.
HOVER: dict[str, Any] = {
    "tooltip": alt.ExprRef("datum.hover_tooltip"),
    "description": alt.ExprRef("datum.hover_description"),
}


def series_color(field: str = "calibrator") -> alt.Color:
    """One colour per value of ``field`` (a calibrator by default), its legend under the chart.

    Its entries wrap into the columns that fit the chart's width, each label shortened to its
    column (the views' ``fitTextToWidth``, ``js/charts.ts``): no label limit is fixed here.
    """
    return alt.Color(f"{field}:N", legend=alt.Legend(orient="bottom", title=None, symbolOpacity=1))


#: Half-width of the coverage range a coverage chart's y axis always shows around its target.
TARGET_WINDOW = 0.05


def target_window(base: alt.Chart) -> alt.Chart:
    """An invisible rule over target ± :data:`TARGET_WINDOW` (within [0, 1]), under a coverage chart.

    The y axis then always shows that much around the target and moves only when coverage (or
    its band) leaves it: a coverage axis fitted to the data alone zooms to a few thousandths
    and moves with almost every batch, and each move redraws every mark of the chart.
    """
    window = base.transform_aggregate(lowest="min(target)", highest="max(target)").transform_calculate(
        low=f"max(0, datum.lowest - {TARGET_WINDOW})", high=f"min(1, datum.highest + {TARGET_WINDOW})"
    )
    rule: alt.Chart = window.mark_rule(opacity=0, aria=False).encode(y="low:Q", y2="high:Q")
    return rule


def rate_by_class_chart(
    source: Source,
    dataset: str,
    *,
    count: str,
    hits: str,
    rate: str,
    axis_title: str,
    count_title: str,
    title: str,
) -> ChartSpec:
    """A rate per calibrator and true class over the stream: bars, a 95% Wilson interval, the target.

    ``count`` and ``hits`` are the dataset's per-batch count columns (summed over batches);
    ``rate`` names the computed ``hits / count``.
    """
    z = 1.959964
    sums: dict[str, Any] = {count: f"sum({count})", hits: f"sum({hits})"}
    base = (
        base_chart(source, dataset)
        .transform_aggregate(**sums, target="mean(target)", groupby=["calibrator", "class"])
        .transform_calculate(
            **{rate: f"datum.{hits} / datum.{count}"},
            centre=f"(datum.{rate} + {z**2} / (2 * datum.{count})) / (1 + {z**2} / datum.{count})",
            half=(
                f"{z} / (1 + {z**2} / datum.{count}) * sqrt(datum.{rate} * (1 - datum.{rate})"
                f" / datum.{count} + {z**2} / (4 * datum.{count} * datum.{count}))"
            ),
            lo="datum.centre - datum.half",
            hi="datum.centre + datum.half",
        )
    )
    x = alt.X("class:N", title="true class", axis=alt.Axis(labelAngle=0, labelLimit=80))
    tooltip = [
        alt.Tooltip("calibrator:N"),
        alt.Tooltip("class:N"),
        alt.Tooltip(f"{rate}:Q", format=".3f", title=axis_title),
        alt.Tooltip("lo:Q", format=".3f", title="95% low"),
        alt.Tooltip("hi:Q", format=".3f", title="95% high"),
        alt.Tooltip(f"{count}:Q", title=count_title),
        alt.Tooltip("target:Q", format=".3f"),
    ]
    bars = base.mark_bar(opacity=0.85).encode(
        x=x,
        xOffset="calibrator:N",
        y=alt.Y(f"{rate}:Q", title=axis_title, scale=alt.Scale(domain=[0, 1])),
        color=series_color(),
        tooltip=tooltip,
    )
    errors = base.mark_rule().encode(x=x, xOffset="calibrator:N", y="lo:Q", y2="hi:Q")
    target = base.mark_rule(strokeDash=[5, 4], color="#444").encode(y="mean(target):Q")
    return titled_chart(alt.layer(bars, errors, target), title)


__all__ = [
    "ALL_CALIBRATORS",
    "CALIBRATOR_FILTER",
    "CALIBRATOR_PARAM",
    "CHART_HEIGHT",
    "HOVER",
    "MODEL_OR_CALIBRATOR_FILTER",
    "TARGET_WINDOW",
    "ChartSpec",
    "Source",
    "base_chart",
    "batch_axis",
    "batch_ticks",
    "hover_fields",
    "name_axis",
    "rate_by_class_chart",
    "series_color",
    "target_window",
    "titled_chart",
    "x_span",
]
