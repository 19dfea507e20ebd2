"""Charts of the regression kind: interval coverage and width per batch, PIT histogram, the latest fan.

The panels :class:`~calwatch.kinds.regression.RegressionKind` contributes.
"""

from __future__ import annotations

import altair as alt

from calwatch.views.charts.parts import (
    ChartSpec,
    Source,
    base_chart,
    batch_axis,
    series_color,
    target_window,
    titled_chart,
    x_span,
)


def interval_coverage_chart(batches: Source = None) -> ChartSpec:
    """Regression: coverage of each batch's central intervals (labelled rows) against their levels."""
    base = base_chart(batches, "batches", kind="regression").transform_filter("datum.n_labelled > 0")
    x = batch_axis("batch_mid")
    tooltip = [
        alt.Tooltip("name:N", title="batch"), alt.Tooltip("calibrator:N"),
        alt.Tooltip("coverage:Q", format=".3f", title="coverage (headline interval)"),
        alt.Tooltip("coverage_lo:Q", format=".3f", title="95% low"),
        alt.Tooltip("coverage_hi:Q", format=".3f", title="95% high"),
        alt.Tooltip("coverage_50:Q", format=".3f", title="coverage of the 50% interval"),
        alt.Tooltip("target:Q", format=".2f"), alt.Tooltip("n_labelled:Q", title="labelled"),
    ]  # fmt: skip
    band = base.mark_area(opacity=0.18, aria=False).encode(
        x=x, y=alt.Y("coverage_lo:Q", title="coverage"), y2="coverage_hi:Q", color=series_color()
    )
    line = base.mark_line(point=True).encode(
        x=x, y=alt.Y("coverage:Q", scale=alt.Scale(zero=False)), color=series_color(), tooltip=tooltip
    )
    inner = base.mark_line(strokeDash=[4, 3], opacity=0.8).encode(
        x=x, y="coverage_50:Q", color=series_color(), tooltip=tooltip
    )
    target = base.mark_rule(strokeDash=[5, 4], color="#444").encode(y="mean(target):Q")
    half = alt.Chart().mark_rule(strokeDash=[2, 3], color="#888").encode(y=alt.datum(0.5))
    data = alt.NamedData("batches") if batches is None else batches
    return titled_chart(
        alt.layer(target_window(base), band, line, inner, target, half, data=data),
        "Interval coverage: headline (solid) and 50% (dashed) vs levels",
        span=x_span(base_chart(batches, "batches")),
    )


def interval_width_chart(batches: Source = None) -> ChartSpec:
    """Regression: mean width of the headline central interval per batch."""
    base = base_chart(batches, "batches", kind="regression")
    return titled_chart(
        base.mark_line(point=True).encode(
            x=batch_axis("batch_mid"),
            y=alt.Y("mean_width:Q", title="mean interval width"),
            color=series_color(),
            tooltip=[
                alt.Tooltip("name:N", title="batch"),
                alt.Tooltip("calibrator:N"),
                alt.Tooltip("mean_width:Q", format=".4g", title="mean width (headline)"),
                alt.Tooltip("mean_width_50:Q", format=".4g", title="mean width (50%)"),
                alt.Tooltip("crps:Q", format=".4g", title="CRPS (labelled)"),
            ],
        ),
        "Mean interval width",
        span=x_span(base_chart(batches, "batches")),
    )


def pit_chart(pit: Source = None) -> ChartSpec:
    """Regression: histogram of PIT values F(y|x) of labelled rows; flat at 1 when calibrated."""
    base = (
        base_chart(pit, "pit")
        .transform_aggregate(count="sum(count)", groupby=["calibrator", "bin", "lo", "hi"])
        .transform_joinaggregate(total="sum(count)", groupby=["calibrator"])
        .transform_calculate(density="datum.count / datum.total * 10")
    )
    bars = base.mark_bar(opacity=0.8).encode(
        x=alt.X("lo:Q", bin="binned", title="PIT  F(y | x)", scale=alt.Scale(domain=[0, 1])), x2="hi:Q",
        y=alt.Y("density:Q", title="density", stack=None), color=series_color(),
        tooltip=[
            alt.Tooltip("calibrator:N"), alt.Tooltip("lo:Q", title="from", format=".1f"),
            alt.Tooltip("hi:Q", title="to", format=".1f"), alt.Tooltip("count:Q", title="rows", format=","),
            alt.Tooltip("density:Q", format=".3f"),
        ],
    )  # fmt: skip
    uniform = alt.Chart().mark_rule(strokeDash=[5, 4], color="#444").encode(y=alt.datum(1))
    data = alt.NamedData("pit") if pit is None else pit
    return titled_chart(alt.layer(bars, uniform, data=data), "PIT of labelled rows vs uniform (dashed)")


def fan_chart(fan: Source = None) -> ChartSpec:
    """Regression: the latest batch's predicted intervals, rows ranked by their median."""
    base = base_chart(fan, "fan").transform_filter("datum.median != null")
    x = alt.X(
        "rank:Q",
        title="rows of the latest batch, by predicted median",
        axis=alt.Axis(labels=False, ticks=False),
    )
    tooltip = [
        alt.Tooltip("calibrator:N"), alt.Tooltip("median:Q", format=".4g"),
        alt.Tooltip("lower_90:Q", format=".4g", title="outer interval low"),
        alt.Tooltip("upper_90:Q", format=".4g", title="outer interval high"),
        alt.Tooltip("lower_50:Q", format=".4g", title="50% low"),
        alt.Tooltip("upper_50:Q", format=".4g", title="50% high"),
        alt.Tooltip("label:Q", format=".4g", title="true value"),
    ]  # fmt: skip
    outer = base.mark_rule(opacity=0.35, strokeWidth=3).encode(
        x=x, y=alt.Y("lower_90:Q", title="value"), y2="upper_90:Q", color=series_color()
    )
    inner = base.mark_rule(opacity=0.8, strokeWidth=3).encode(
        x=x, y="lower_50:Q", y2="upper_50:Q", color=series_color()
    )
    median = base.mark_tick(color="#222", thickness=1, size=6).encode(x=x, y="median:Q", tooltip=tooltip)
    label = (
        base.transform_filter("datum.label != null")
        .mark_point(shape="diamond", filled=True, size=25, color="#d62728")
        .encode(x=x, y="label:Q", tooltip=tooltip)
    )
    return titled_chart(
        alt.layer(outer, inner, median, label), "Latest batch: 50% / outer intervals, true values ◆"
    )


__all__ = [
    "fan_chart",
    "interval_coverage_chart",
    "interval_width_chart",
    "pit_chart",
]
