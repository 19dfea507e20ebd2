"""Charts of the kinds that admit or keep some rows: Venn-ADMIT and selective calibration.

The panels :class:`~calwatch.kinds.admit.AdmitKind` adds to the sets' (admitted share and
accuracy, its q and d features) and those :class:`~calwatch.kinds.selective.SelectiveKind`
contributes (kept share, the selective calibration curve, kept rows' confidence).
"""

from __future__ import annotations

import altair as alt

from calwatch.views.charts.parts import (
    ChartSpec,
    Source,
    base_chart,
    batch_axis,
    rate_by_class_chart,
    series_color,
    titled_chart,
    x_span,
)


def admitted_chart(batches: Source = None) -> ChartSpec:
    """Venn-ADMIT: share of rows admitted per batch, and the accuracy of labelled admitted rows."""
    base = base_chart(batches, "batches", kind="sets").transform_filter("datum.admitted_share != null")
    x = batch_axis("batch_mid")
    tooltip = [
        alt.Tooltip("name:N", title="batch"),
        alt.Tooltip("calibrator:N"),
        alt.Tooltip("admitted_share:Q", format=".3f", title="admitted share"),
        alt.Tooltip("admitted_accuracy:Q", format=".3f", title="admitted accuracy"),
        alt.Tooltip("n_admitted_labelled:Q", title="labelled admitted rows"),
        alt.Tooltip("target:Q", format=".3f", title="target accuracy"),
    ]
    share = base.mark_line(point=True).encode(
        x=x, y=alt.Y("admitted_share:Q", title="share / accuracy", scale=alt.Scale(domain=[0, 1])),
        color=series_color(), tooltip=tooltip,
    )  # fmt: skip
    accuracy = (
        base.transform_filter("datum.n_admitted_labelled > 0")
        .mark_line(strokeDash=[4, 3], point=alt.OverlayMarkDef(shape="diamond"))
        .encode(x=x, y="admitted_accuracy:Q", color=series_color(), tooltip=tooltip)
    )
    target = base.mark_rule(strokeDash=[2, 2], opacity=0.6, color="#444").encode(y="mean(target):Q")
    return titled_chart(
        alt.layer(share, accuracy, target),
        "Admitted share (solid), admitted accuracy (dashed)",
        span=x_span(base_chart(batches, "batches")),
    )


def admitted_accuracy_chart(admit_class: Source = None) -> ChartSpec:
    """Venn-ADMIT: accuracy of admitted predictions by true class (labelled rows), 95% Wilson, 1−α."""
    return rate_by_class_chart(
        admit_class, "admit_class", count="n_admitted", hits="n_correct", rate="accuracy",
        axis_title="admitted accuracy", count_title="labelled admitted rows",
        title="Admitted accuracy by class vs 1−α (dashed)",
    )  # fmt: skip


def _admit_feature_chart(admit_features: Source, feature: str, title: str, axis_title: str) -> ChartSpec:
    base = base_chart(admit_features, "admit_features").transform_filter(f"datum.feature == '{feature}'")
    return titled_chart(
        base.mark_bar().encode(
            x=alt.X(
                "bin_label:N",
                title=axis_title,
                sort=alt.EncodingSortField("bin"),
                axis=alt.Axis(labelAngle=0),
            ),
            xOffset=alt.XOffset("source:N", sort=["calibration", "window"]),
            y=alt.Y("share:Q", title="share of rows"),
            color=alt.Color(
                "source:N", sort=["calibration", "window"], legend=alt.Legend(orient="bottom", title=None)
            ),
            tooltip=[
                alt.Tooltip("calibrator:N"),
                alt.Tooltip("source:N"),
                alt.Tooltip("bin_label:N", title=axis_title),
                alt.Tooltip("share:Q", format=".3f"),
                alt.Tooltip("count:Q", title="rows", format=","),
                alt.Tooltip("n:Q", title="rows in source", format=","),
            ],
        ),
        title,
    )


def admit_q_chart(admit_features: Source = None) -> ChartSpec:
    """Venn-ADMIT's q (agreeing, correct leading neighbours) in the window vs the calibration set."""
    return _admit_feature_chart(admit_features, "q", "q: window vs calibration", "q")


def admit_d_chart(admit_features: Source = None) -> ChartSpec:
    """Venn-ADMIT's d (distance to the nearest reference row) in the window vs the calibration set."""
    return _admit_feature_chart(admit_features, "d", "d: window vs calibration (deciles)", "d")


def kept_share_chart(batches: Source = None) -> ChartSpec:
    """Selective calibrators: share of rows kept per batch (solid), accuracy of kept vs all (dashed)."""
    base = base_chart(batches, "batches", kind="selective")
    x = batch_axis("batch_mid")
    tooltip = [
        alt.Tooltip("name:N", title="batch"),
        alt.Tooltip("calibrator:N"),
        alt.Tooltip("kept_share:Q", format=".3f", title="kept share"),
        alt.Tooltip("kept_accuracy:Q", format=".3f", title="accuracy of kept rows"),
        alt.Tooltip("accuracy:Q", format=".3f", title="accuracy of all rows"),
        alt.Tooltip("n_kept_labelled:Q", title="labelled kept rows"),
        alt.Tooltip("threshold:Q", format=".4f"),
    ]
    share = base.mark_line(point=True).encode(
        x=x, y=alt.Y("kept_share:Q", title="share / accuracy", scale=alt.Scale(domain=[0, 1])),
        color=series_color(), tooltip=tooltip,
    )  # fmt: skip
    labelled = base.transform_filter("datum.n_kept_labelled > 0")
    kept_accuracy = labelled.mark_line(strokeDash=[4, 3], point=alt.OverlayMarkDef(shape="diamond")).encode(
        x=x, y="kept_accuracy:Q", color=series_color(), tooltip=tooltip
    )
    all_accuracy = labelled.mark_line(strokeDash=[1, 3], opacity=0.7).encode(
        x=x, y="accuracy:Q", color=series_color(), tooltip=tooltip
    )
    return titled_chart(
        alt.layer(share, kept_accuracy, all_accuracy),
        "Kept share (solid); accuracy of kept (dashed) vs all rows (dotted)",
        span=x_span(base_chart(batches, "batches")),
    )


def selective_curve_chart(selective_curve: Source = None) -> ChartSpec:
    """Selective calibration error (ℓ2) of the window's labelled rows against the share kept."""
    base = base_chart(selective_curve, "selective_curve")
    return titled_chart(
        base.mark_line(point=True).encode(
            x=alt.X("coverage:Q", title="share of rows kept (ξ)", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("error:Q", title="selective calibration error (ℓ2)"),
            color=alt.Color("selector:N", legend=alt.Legend(orient="bottom", title=None)),
            strokeDash=alt.StrokeDash("calibrator:N", legend=None),
            tooltip=[
                alt.Tooltip("calibrator:N"),
                alt.Tooltip("selector:N"),
                alt.Tooltip("coverage:Q", format=".2f", title="kept share"),
                alt.Tooltip("error:Q", format=".4f", title="calibration error"),
                alt.Tooltip("n:Q", title="labelled rows in the window", format=","),
            ],
        ),
        "Selective calibration error vs coverage (window, labelled)",
    )


def kept_confidence_chart(selective_confidence: Source = None) -> ChartSpec:
    """Top-label confidence of the window's rows: all rows against the kept ones (002 Fig. 4)."""
    base = base_chart(selective_confidence, "selective_confidence")
    return titled_chart(
        base.mark_bar().encode(
            x=alt.X("bin:N", title="confidence", axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("group:N", sort=["all rows", "kept"]),
            y=alt.Y("share:Q", title="share of rows"),
            color=alt.Color(
                "group:N", sort=["all rows", "kept"], legend=alt.Legend(orient="bottom", title=None)
            ),
            tooltip=[
                alt.Tooltip("calibrator:N"),
                alt.Tooltip("group:N"),
                alt.Tooltip("bin:N", title="confidence"),
                alt.Tooltip("share:Q", format=".3f"),
                alt.Tooltip("count:Q", title="rows", format=","),
            ],
        ),
        "Confidence: kept vs all rows (window)",
    )


__all__ = [
    "admit_d_chart",
    "admit_q_chart",
    "admitted_accuracy_chart",
    "admitted_chart",
    "kept_confidence_chart",
    "kept_share_chart",
    "selective_curve_chart",
]
