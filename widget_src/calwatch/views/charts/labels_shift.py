"""Charts every monitor has, whatever its calibrators: labels received and the shift detectors.

Neither is a kind's panel: the labels chart is always shown, the shift chart when the monitor
watches for shift (``Monitor(shift=[...])``).
"""

from __future__ import annotations

from typing import Any

import altair as alt

from calwatch.views.charts.parts import (
    DETECTOR_PICK,
    HOVER,
    MODEL_OR_CALIBRATOR_FILTER,
    ChartSpec,
    Source,
    batch_axis,
    hover_fields,
    series_color,
    titled_chart,
    x_span,
)


def labels_chart(batches: Source = None) -> ChartSpec:
    """Labelled rows and rows awaiting labels per batch (stacked bars)."""
    data = alt.Chart(alt.NamedData("batches") if batches is None else batches)
    base = (
        data.transform_aggregate(
            labelled_rows="max(n_labelled)",
            awaiting_rows="max(n_pending)",
            groupby=["batch", "span_end", "n_batches", "name"],
        )
        # A quantitative batch axis stays readable at 1,000 batches and 250 px; bars span the
        # bucket's batches ± 0.45 (the last one its batches to come too, so that the axis moves
        # once per bucket), and their heights are rows per batch (the bucket's mean).
        .transform_calculate(
            start="datum.batch - 0.45",
            end="datum.span_end + 0.45",
            labelled="datum.labelled_rows / datum.n_batches",
            awaiting="datum.awaiting_rows / datum.n_batches",
            total="(datum.labelled_rows + datum.awaiting_rows) / datum.n_batches",
        )
    )
    x = batch_axis("start")
    status = alt.Scale(domain=["labelled", "awaiting"], range=["#4c78a8", "#d8d8d8"])
    tooltip = [
        alt.Tooltip("name:N", title="batch"),
        alt.Tooltip("labelled_rows:Q", format=",", title="labelled"),
        alt.Tooltip("awaiting_rows:Q", format=",", title="awaiting labels"),
    ]
    color = alt.Color("status:N", scale=status, legend=alt.Legend(orient="bottom", title=None))
    base = base.transform_calculate(**hover_fields(tooltip))
    labelled = (
        base.transform_calculate(status="'labelled'")
        .mark_bar(**HOVER)
        .encode(x=x, x2="end:Q", y=alt.Y("labelled:Q", title="rows per batch"), y2=alt.datum(0), color=color)
    )
    awaiting = (
        base.transform_calculate(status="'awaiting'")
        .mark_bar(**HOVER)
        .encode(x=x, x2="end:Q", y="labelled:Q", y2="total:Q", color=color)
    )
    return titled_chart(alt.layer(labelled, awaiting), "Labels received", span=x_span(data))


def shift_chart(shift: Source = None) -> ChartSpec:
    """Each shift detector's statistic (log10) per batch, its alarm threshold, and its alarms."""
    data: Any = alt.NamedData("shift") if shift is None else shift
    base = alt.Chart(data).transform_filter(MODEL_OR_CALIBRATOR_FILTER)
    # A lane clicked in the Shift view shows that detector's evidence alone ("": every detector).
    base = base.transform_filter(f"{DETECTOR_PICK} == '' || datum.detector == {DETECTOR_PICK}")
    x = batch_axis("batch_mid")
    tooltip = [
        alt.Tooltip("detector:N"),
        alt.Tooltip("batch:Q", title="batch (first)"),
        alt.Tooltip("batch_end:Q", title="batch (last)"),
        alt.Tooltip("log10_statistic:Q", format=".2f", title="log10 statistic"),
        alt.Tooltip("log10_threshold:Q", format=".1f", title="log10 threshold"),
        alt.Tooltip("alarm:N"),
    ]
    color = series_color("detector")
    line = base.mark_line(point=True).encode(
        x=x, y=alt.Y("log10_statistic:Q", title="log10 statistic"), color=color, tooltip=tooltip
    )
    threshold = base.mark_rule(strokeDash=[5, 4], opacity=0.7).encode(
        y="mean(log10_threshold):Q", color=color
    )
    alarms = (
        base.transform_filter("datum.alarm")
        .mark_point(shape="triangle-up", size=90, filled=True, color="#d62728")
        .encode(x=x, y="log10_statistic:Q", tooltip=tooltip)
    )
    chart = alt.layer(line, threshold, alarms).add_params(alt.param(name=DETECTOR_PICK, value=""))
    return titled_chart(
        chart, "Evidence: log10 statistic per batch (alarm at the dashed line)", span=x_span(base)
    )


__all__ = [
    "labels_chart",
    "shift_chart",
]
