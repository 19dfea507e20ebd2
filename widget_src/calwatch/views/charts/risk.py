"""Charts of the risk estimators: the label-free error estimate per batch and its gap to the observed error.

The panels :class:`~calwatch.kinds.risk.RiskKind` contributes.
"""

from __future__ import annotations

import altair as alt

from calwatch.views.charts.parts import (
    ChartSpec,
    Source,
    base_chart,
    batch_axis,
    series_color,
    titled_chart,
    x_span,
)


def risk_chart(batches: Source = None) -> ChartSpec:
    """Label-free estimated error rate per batch (solid) and the observed rate once labelled (dashed)."""
    base = base_chart(batches, "batches", kind="risk")
    x = batch_axis("batch_mid")
    tooltip = [
        alt.Tooltip("name:N", title="batch"),
        alt.Tooltip("label:N", title="estimator"),
        alt.Tooltip("estimated_error:Q", format=".3f", title="estimated error"),
        alt.Tooltip("observed_error:Q", format=".3f", title="observed error"),
        alt.Tooltip("error_gap:Q", format="+.3f", title="gap (est. − obs., labelled rows)"),
        alt.Tooltip("n_labelled:Q", title="labelled"),
        alt.Tooltip("n_rows:Q", title="rows"),
    ]
    # A guarded estimator's band for the batch's realised error. The others state no band: theirs
    # collapses onto the estimate (an area of no height), so the layer is never empty (an empty
    # layer makes Vega warn of infinite extents and can size the chart wrongly).
    band = (
        base.transform_calculate(
            band_lo="isValid(datum.error_band_lo) ? datum.error_band_lo : datum.estimated_error",
            band_hi="isValid(datum.error_band_hi) ? datum.error_band_hi : datum.estimated_error",
        )
        .mark_area(opacity=0.15)
        .encode(
            x=x,
            y=alt.Y("band_lo:Q", title="error rate"),
            y2="band_hi:Q",
            color=series_color("label"),
            tooltip=[
                *tooltip,
                alt.Tooltip("error_band_lo:Q", format=".3f", title="band low"),
                alt.Tooltip("error_band_hi:Q", format=".3f", title="band high"),
            ],
        )
    )
    estimated = base.mark_line(point=True).encode(
        x=x, y=alt.Y("estimated_error:Q", title="error rate"), color=series_color("label"), tooltip=tooltip
    )
    observed = (
        base.transform_filter("datum.n_labelled > 0")
        .mark_line(strokeDash=[4, 3], point=alt.OverlayMarkDef(shape="diamond"))
        .encode(x=x, y="observed_error:Q", color=series_color("label"), tooltip=tooltip)
    )
    return titled_chart(
        alt.layer(band, estimated, observed),
        "Estimated error (solid; shaded: its band, where stated) vs observed (dashed)",
        span=x_span(base_chart(batches, "batches")),
    )


def risk_gap_chart(batches: Source = None) -> ChartSpec:
    """Estimated minus observed error on the labelled rows of each batch (paper 004's δ)."""
    base = base_chart(batches, "batches", kind="risk").transform_filter("datum.n_labelled > 0")
    gap = base.mark_line(point=True).encode(
        x=batch_axis("batch_mid"),
        y=alt.Y("error_gap:Q", title="estimate − observed"),
        color=series_color("label"),
        tooltip=[
            alt.Tooltip("name:N", title="batch"),
            alt.Tooltip("label:N", title="estimator"),
            alt.Tooltip("error_gap:Q", format="+.3f", title="gap"),
            alt.Tooltip("estimated_error_labelled:Q", format=".3f", title="estimated (labelled rows)"),
            alt.Tooltip("observed_error:Q", format=".3f", title="observed"),
            alt.Tooltip("n_labelled:Q", title="labelled"),
        ],
    )
    zero = alt.Chart().mark_rule(strokeDash=[5, 4], color="#444").encode(y=alt.datum(0))
    return titled_chart(
        alt.layer(gap, zero, data=alt.NamedData("batches") if batches is None else batches),
        "Risk gap (≥ 0: conservative)",
        span=x_span(base_chart(batches, "batches")),
    )


__all__ = [
    "risk_chart",
    "risk_gap_chart",
]
