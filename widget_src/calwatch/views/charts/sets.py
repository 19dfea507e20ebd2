"""Charts of the prediction-set kinds: coverage against its target, set sizes, ACI's level.

The panels :class:`~calwatch.kinds.sets.SetsKind` contributes (coverage per batch and by class,
mean set size, singleton and full sets, the set-size distribution) and ACI's level α_t.
"""

from __future__ import annotations

import altair as alt

from calwatch.views.charts.parts import (
    HOVER,
    ChartSpec,
    Source,
    base_chart,
    batch_axis,
    hover_fields,
    rate_by_class_chart,
    series_color,
    target_window,
    titled_chart,
    x_span,
)

#: The coverage chart's title.
COVERAGE_TITLE = "Coverage vs target (dashed)"
#: The set-size chart's title and y axis title.
SET_SIZE_TITLE = "Mean set size"
SET_SIZE_AXIS = "mean set size"


def coverage_chart(batches: Source = None) -> ChartSpec:
    """Coverage of labelled rows per batch, its 95% Clopper-Pearson band, and the target 1−α."""
    return titled_chart(alt.layer(*coverage_layers(batches)), COVERAGE_TITLE)


def coverage_layers(batches: Source = None) -> tuple[alt.Chart, ...]:
    """The coverage chart's layers (a slice's series goes on top: :mod:`calwatch.views.slice_history`)."""
    base = base_chart(batches, "batches", kind="sets")
    x = batch_axis("batch_mid")
    tooltip = [
        alt.Tooltip("name:N", title="batch"),
        alt.Tooltip("calibrator:N"),
        alt.Tooltip("coverage:Q", format=".3f"),
        alt.Tooltip("coverage_lo:Q", format=".3f", title="95% low"),
        alt.Tooltip("coverage_hi:Q", format=".3f", title="95% high"),
        alt.Tooltip("target:Q", format=".3f"),
        alt.Tooltip("n_labelled:Q", title="labelled"),
        alt.Tooltip("n_pending:Q", title="awaiting labels"),
    ]
    labelled = base.transform_filter("datum.n_labelled > 0")
    # The band and the line are aria-hidden: the points carry the numbers (tooltip and ARIA text),
    # and a path's items would otherwise format a description each on every redraw.
    band = labelled.mark_area(opacity=0.18, aria=False).encode(
        x=x,
        y=alt.Y("coverage_lo:Q", title="coverage"),
        y2="coverage_hi:Q",
        color=series_color(),
    )
    line = labelled.mark_line(aria=False).encode(
        x=x, y=alt.Y("coverage:Q", scale=alt.Scale(zero=False)), color=series_color()
    )
    points = (
        labelled.transform_calculate(**hover_fields(tooltip))
        .mark_point(filled=True, opacity=1, **HOVER)
        .encode(x=x, y="coverage:Q", color=series_color())
    )
    target = base.mark_rule(strokeDash=[5, 4], opacity=0.8).encode(
        y=alt.Y("mean(target):Q"),
        color=series_color(),
        tooltip=[alt.Tooltip("mean(target):Q", format=".3f", title="target")],
    )
    return (x_span(base), target_window(base), band, line, points, target)


def class_coverage_chart(class_coverage: Source = None) -> ChartSpec:
    """Coverage by true class over the stream, with a 95% Wilson interval and the target."""
    return rate_by_class_chart(
        class_coverage, "class_coverage", count="n_labelled", hits="n_covered", rate="coverage",
        axis_title="coverage", count_title="labelled", title="Coverage by class",
    )  # fmt: skip


def set_size_chart(batches: Source = None) -> ChartSpec:
    """Mean prediction-set size per batch."""
    return titled_chart(alt.layer(*set_size_layers(batches)), SET_SIZE_TITLE)


def set_size_layers(batches: Source = None) -> tuple[alt.Chart, ...]:
    """The set-size chart's layers (a slice's series goes on top: :mod:`calwatch.views.slice_history`)."""
    line = (
        base_chart(batches, "batches", kind="sets")
        .mark_line(point=True)
        .encode(
            x=batch_axis("batch_mid"),
            y=alt.Y("mean_set_size:Q", title=SET_SIZE_AXIS, scale=alt.Scale(zero=False)),
            color=series_color("label"),
            tooltip=[
                alt.Tooltip("name:N", title="batch"),
                alt.Tooltip("label:N", title="calibrator"),
                alt.Tooltip("mean_set_size:Q", format=".3f", title="mean size"),
                alt.Tooltip("singleton_share:Q", format=".1%", title="singletons"),
                alt.Tooltip("full_share:Q", format=".1%", title="full sets"),
                alt.Tooltip("n_rows:Q", title="rows"),
            ],
        )
    )
    return (x_span(base_chart(batches, "batches")), line)


def set_shares_chart(batches: Source = None) -> ChartSpec:
    """Share of singleton sets and of full sets (every class) per batch."""
    base = (
        base_chart(batches, "batches", kind="sets")
        .transform_calculate(singletons="datum.singleton_share", full_sets="datum.full_share")
        .transform_fold(["singletons", "full_sets"], as_=["kind", "share"])
        .transform_calculate(kind="datum.kind == 'singletons' ? 'singletons' : 'full sets'")
    )
    return titled_chart(
        base.mark_line().encode(
            x=batch_axis("batch_mid"),
            y=alt.Y("share:Q", axis=alt.Axis(format="%"), title="share of rows"),
            color=series_color(),
            strokeDash=alt.StrokeDash(
                "kind:N",
                scale=alt.Scale(domain=["singletons", "full sets"], range=[[1, 0], [4, 3]]),
                legend=alt.Legend(
                    orient="bottom",
                    title=None,
                    symbolType="stroke",
                    symbolStrokeColor="#666",
                    symbolStrokeWidth=2,
                ),
            ),
            tooltip=[
                alt.Tooltip("name:N", title="batch"),
                alt.Tooltip("calibrator:N"),
                alt.Tooltip("kind:N"),
                alt.Tooltip("share:Q", format=".1%"),
            ],
        ),
        "Singleton / full sets",
        span=x_span(base_chart(batches, "batches")),
    )


def set_sizes_chart(set_sizes: Source = None) -> ChartSpec:
    """Distribution of prediction-set sizes over the whole stream."""
    base = base_chart(set_sizes, "set_sizes")
    return titled_chart(
        base.mark_bar().encode(
            x=alt.X("size:O", title="set size", axis=alt.Axis(labelAngle=0)),
            xOffset="calibrator:N",
            y=alt.Y("sum(count):Q", title="rows"),
            color=series_color(),
            tooltip=[
                alt.Tooltip("calibrator:N"),
                alt.Tooltip("size:O", title="set size"),
                alt.Tooltip("sum(count):Q", title="rows", format=","),
            ],
        ),
        "Set-size distribution",
    )


def aci_chart(batches: Source = None) -> ChartSpec:
    """The level α at which each batch's sets were taken: constant, or moved by ACI (``cw.Adaptive``)."""
    base = base_chart(batches, "batches", kind="sets").transform_filter("datum.alpha_level != null")
    return titled_chart(
        base.mark_line(point=True, interpolate="step-after").encode(
            x=batch_axis("batch_mid"),
            y=alt.Y("alpha_level:Q", title="level α_t"),
            color=series_color("label"),
            tooltip=[
                alt.Tooltip("name:N", title="batch"),
                alt.Tooltip("label:N", title="calibrator"),
                alt.Tooltip("alpha_level:Q", format=".4f", title="α_t"),
                alt.Tooltip("coverage:Q", format=".3f", title="realised coverage"),
                alt.Tooltip("target:Q", format=".3f"),
            ],
        ),
        "ACI level α_t (sets taken at it)",
        span=x_span(base_chart(batches, "batches")),
    )


__all__ = [
    "aci_chart",
    "class_coverage_chart",
    "coverage_chart",
    "set_shares_chart",
    "set_size_chart",
    "set_sizes_chart",
]
