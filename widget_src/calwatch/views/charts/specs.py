"""Altair chart builders: a dataset in, an ``alt.Chart`` out (no widget needed).

Every chart has a top-level ``calibrator`` parameter (``"(all)"`` by default) that filters to one
calibrator; :func:`build` makes a chart kind from a monitor, :func:`live_specs` the named-data
specs the widget draws.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import altair as alt
import polars as pl

from calwatch.kinds import KINDS, find_kind
from calwatch.kinds.admit import AdmitKind
from calwatch.kinds.regression import RegressionKind
from calwatch.kinds.risk import RiskKind
from calwatch.kinds.selective import SelectiveKind
from calwatch.kinds.sets import SetsKind

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

from calwatch.views.charts.data import datasets

CALIBRATOR_PARAM = "calibrator"
ALL_CALIBRATORS = "(all)"
_FILTER = f"{CALIBRATOR_PARAM} == '{ALL_CALIBRATORS}' || datum.calibrator == {CALIBRATOR_PARAM}"
_HEIGHT = 150

#: A chart's data: a frame inline, or None for the named dataset the live widget fills.
Source = pl.DataFrame | None
ChartSpec = alt.Chart | alt.LayerChart


def _base(source: Source, dataset: str, *, kind: str | None = None) -> alt.Chart:
    """A chart on a dataset, filtered by the calibrator picker (and to one calibrator kind)."""
    data: Any = alt.NamedData(dataset) if source is None else source
    chart = alt.Chart(data).transform_filter(_FILTER)
    return chart if kind is None else chart.transform_filter(f"datum.kind == '{kind}'")


def _finish(chart: Any, title: str, *, span: alt.Chart | None = None) -> ChartSpec:
    """Title, size and the calibrator parameter; ``span`` (an :func:`x_span`) goes underneath."""
    if span is not None:
        chart = alt.layer(span, chart)
    param = alt.param(name=CALIBRATOR_PARAM, value=ALL_CALIBRATORS)
    finished: ChartSpec = chart.add_params(param).properties(width="container", height=_HEIGHT, title=title)
    return finished


def batch_axis(field: str, *, title: str | None = "batch") -> alt.X:
    """The shared x axis: batch index, integer ticks, no padding past the last batch.

    Not from zero: a zoomed range (a brush) starts at its first batch.
    """
    return alt.X(
        f"{field}:Q",
        title=title,
        scale=alt.Scale(nice=False, zero=False),
        axis=alt.Axis(format="d", tickMinStep=1),
    )


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


def _hover_fields(tooltip: list[alt.Tooltip]) -> dict[str, str]:
    """``transform_calculate`` fields holding a row's tooltip and ARIA description, once per row.

    Vega re-evaluates a mark's encoders for every item whenever a scale changes (each update of a
    growing stream), and a tooltip list is formatted anew each time (and makes every item look
    changed, so every item is redrawn). Computed in the data flow, the text is made only for rows
    that change; marks read it with :data:`_HOVER` (``"title: value; …"`` as Vega-Lite writes it).
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


#: Mark properties reading :func:`_hover_fields`.
_HOVER: dict[str, Any] = {
    "tooltip": alt.ExprRef("datum.hover_tooltip"),
    "description": alt.ExprRef("datum.hover_description"),
}


def _color(field: str = "calibrator") -> alt.Color:
    return alt.Color(
        f"{field}:N", legend=alt.Legend(orient="bottom", title=None, symbolOpacity=1, labelLimit=220)
    )


def coverage_chart(batches: Source = None) -> ChartSpec:
    """Coverage of labelled rows per batch, its 95% Clopper-Pearson band, and the target 1−α."""
    base = _base(batches, "batches", kind="sets")
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
        color=_color(),
    )
    line = labelled.mark_line(aria=False).encode(
        x=x, y=alt.Y("coverage:Q", scale=alt.Scale(zero=False)), color=_color()
    )
    points = (
        labelled.transform_calculate(**_hover_fields(tooltip))
        .mark_point(filled=True, opacity=1, **_HOVER)
        .encode(x=x, y="coverage:Q", color=_color())
    )
    target = base.mark_rule(strokeDash=[5, 4], opacity=0.8).encode(
        y=alt.Y("mean(target):Q"),
        color=_color(),
        tooltip=[alt.Tooltip("mean(target):Q", format=".3f", title="target")],
    )
    layers = (x_span(base), _target_window(base), band, line, points, target)
    return _finish(alt.layer(*layers), "Coverage vs target (dashed)")


#: Half-width of the coverage range a coverage chart's y axis always shows around its target.
TARGET_WINDOW = 0.05


def _target_window(base: alt.Chart) -> alt.Chart:
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


def set_size_chart(batches: Source = None) -> ChartSpec:
    """Mean prediction-set size per batch."""
    base = _base(batches, "batches", kind="sets")
    return _finish(
        base.mark_line(point=True).encode(
            x=batch_axis("batch_mid"),
            y=alt.Y("mean_set_size:Q", title="mean set size", scale=alt.Scale(zero=False)),
            color=_color("label"),
            tooltip=[
                alt.Tooltip("name:N", title="batch"),
                alt.Tooltip("label:N", title="calibrator"),
                alt.Tooltip("mean_set_size:Q", format=".3f", title="mean size"),
                alt.Tooltip("singleton_share:Q", format=".1%", title="singletons"),
                alt.Tooltip("full_share:Q", format=".1%", title="full sets"),
                alt.Tooltip("n_rows:Q", title="rows"),
            ],
        ),
        "Mean set size",
        span=x_span(_base(batches, "batches")),
    )


def set_shares_chart(batches: Source = None) -> ChartSpec:
    """Share of singleton sets and of full sets (every class) per batch."""
    base = (
        _base(batches, "batches", kind="sets")
        .transform_calculate(singletons="datum.singleton_share", full_sets="datum.full_share")
        .transform_fold(["singletons", "full_sets"], as_=["kind", "share"])
        .transform_calculate(kind="datum.kind == 'singletons' ? 'singletons' : 'full sets'")
    )
    return _finish(
        base.mark_line().encode(
            x=batch_axis("batch_mid"),
            y=alt.Y("share:Q", axis=alt.Axis(format="%"), title="share of rows"),
            color=_color(),
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
        span=x_span(_base(batches, "batches")),
    )


def set_sizes_chart(set_sizes: Source = None) -> ChartSpec:
    """Distribution of prediction-set sizes over the whole stream."""
    base = _base(set_sizes, "set_sizes")
    return _finish(
        base.mark_bar().encode(
            x=alt.X("size:O", title="set size", axis=alt.Axis(labelAngle=0)),
            xOffset="calibrator:N",
            y=alt.Y("sum(count):Q", title="rows"),
            color=_color(),
            tooltip=[
                alt.Tooltip("calibrator:N"),
                alt.Tooltip("size:O", title="set size"),
                alt.Tooltip("sum(count):Q", title="rows", format=","),
            ],
        ),
        "Set-size distribution",
    )


def _rate_by_class_chart(
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
        _base(source, dataset)
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
        color=_color(),
        tooltip=tooltip,
    )
    errors = base.mark_rule().encode(x=x, xOffset="calibrator:N", y="lo:Q", y2="hi:Q")
    target = base.mark_rule(strokeDash=[5, 4], color="#444").encode(y="mean(target):Q")
    return _finish(alt.layer(bars, errors, target), title)


def class_coverage_chart(class_coverage: Source = None) -> ChartSpec:
    """Coverage by true class over the stream, with a 95% Wilson interval and the target."""
    return _rate_by_class_chart(
        class_coverage, "class_coverage", count="n_labelled", hits="n_covered", rate="coverage",
        axis_title="coverage", count_title="labelled", title="Coverage by class",
    )  # fmt: skip


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
    base = base.transform_calculate(**_hover_fields(tooltip))
    labelled = (
        base.transform_calculate(status="'labelled'")
        .mark_bar(**_HOVER)
        .encode(x=x, x2="end:Q", y=alt.Y("labelled:Q", title="rows per batch"), y2=alt.datum(0), color=color)
    )
    awaiting = (
        base.transform_calculate(status="'awaiting'")
        .mark_bar(**_HOVER)
        .encode(x=x, x2="end:Q", y="labelled:Q", y2="total:Q", color=color)
    )
    return _finish(alt.layer(labelled, awaiting), "Labels received", span=x_span(data))


def risk_chart(batches: Source = None) -> ChartSpec:
    """Label-free estimated error rate per batch (solid) and the observed rate once labelled (dashed)."""
    base = _base(batches, "batches", kind="risk")
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
            color=_color("label"),
            tooltip=[
                *tooltip,
                alt.Tooltip("error_band_lo:Q", format=".3f", title="band low"),
                alt.Tooltip("error_band_hi:Q", format=".3f", title="band high"),
            ],
        )
    )
    estimated = base.mark_line(point=True).encode(
        x=x, y=alt.Y("estimated_error:Q", title="error rate"), color=_color("label"), tooltip=tooltip
    )
    observed = (
        base.transform_filter("datum.n_labelled > 0")
        .mark_line(strokeDash=[4, 3], point=alt.OverlayMarkDef(shape="diamond"))
        .encode(x=x, y="observed_error:Q", color=_color("label"), tooltip=tooltip)
    )
    return _finish(
        alt.layer(band, estimated, observed),
        "Estimated error (solid; shaded: its band, where stated) vs observed (dashed)",
        span=x_span(_base(batches, "batches")),
    )


def risk_gap_chart(batches: Source = None) -> ChartSpec:
    """Estimated minus observed error on the labelled rows of each batch (paper 004's δ)."""
    base = _base(batches, "batches", kind="risk").transform_filter("datum.n_labelled > 0")
    gap = base.mark_line(point=True).encode(
        x=batch_axis("batch_mid"),
        y=alt.Y("error_gap:Q", title="estimate − observed"),
        color=_color("label"),
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
    return _finish(
        alt.layer(gap, zero, data=alt.NamedData("batches") if batches is None else batches),
        "Risk gap (≥ 0: conservative)",
        span=x_span(_base(batches, "batches")),
    )


def shift_chart(shift: Source = None) -> ChartSpec:
    """Each shift detector's statistic (log10) per batch, its alarm threshold, and its alarms."""
    data: Any = alt.NamedData("shift") if shift is None else shift
    model_wide = "!datum.calibrator"  # label-free detectors watch the model, not one calibrator
    base = alt.Chart(data).transform_filter(
        f"{CALIBRATOR_PARAM} == '{ALL_CALIBRATORS}' || {model_wide} || datum.calibrator == {CALIBRATOR_PARAM}"
    )
    x = batch_axis("batch_mid")
    tooltip = [
        alt.Tooltip("detector:N"),
        alt.Tooltip("batch:Q", title="batch (first)"),
        alt.Tooltip("batch_end:Q", title="batch (last)"),
        alt.Tooltip("log10_statistic:Q", format=".2f", title="log10 statistic"),
        alt.Tooltip("log10_threshold:Q", format=".1f", title="log10 threshold"),
        alt.Tooltip("alarm:N"),
    ]
    color = _color("detector")
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
    return _finish(
        alt.layer(line, threshold, alarms), "Shift detectors (alarm at dashed line)", span=x_span(base)
    )


def aci_chart(batches: Source = None) -> ChartSpec:
    """The level α at which each batch's sets were taken: constant, or moved by ACI (``cw.Adaptive``)."""
    base = _base(batches, "batches", kind="sets").transform_filter("datum.alpha_level != null")
    return _finish(
        base.mark_line(point=True, interpolate="step-after").encode(
            x=batch_axis("batch_mid"),
            y=alt.Y("alpha_level:Q", title="level α_t"),
            color=_color("label"),
            tooltip=[
                alt.Tooltip("name:N", title="batch"),
                alt.Tooltip("label:N", title="calibrator"),
                alt.Tooltip("alpha_level:Q", format=".4f", title="α_t"),
                alt.Tooltip("coverage:Q", format=".3f", title="realised coverage"),
                alt.Tooltip("target:Q", format=".3f"),
            ],
        ),
        "ACI level α_t (sets taken at it)",
        span=x_span(_base(batches, "batches")),
    )


def admitted_chart(batches: Source = None) -> ChartSpec:
    """Venn-ADMIT: share of rows admitted per batch, and the accuracy of labelled admitted rows."""
    base = _base(batches, "batches", kind="sets").transform_filter("datum.admitted_share != null")
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
        color=_color(), tooltip=tooltip,
    )  # fmt: skip
    accuracy = (
        base.transform_filter("datum.n_admitted_labelled > 0")
        .mark_line(strokeDash=[4, 3], point=alt.OverlayMarkDef(shape="diamond"))
        .encode(x=x, y="admitted_accuracy:Q", color=_color(), tooltip=tooltip)
    )
    target = base.mark_rule(strokeDash=[2, 2], opacity=0.6, color="#444").encode(y="mean(target):Q")
    return _finish(
        alt.layer(share, accuracy, target),
        "Admitted share (solid), admitted accuracy (dashed)",
        span=x_span(_base(batches, "batches")),
    )


def admitted_accuracy_chart(admit_class: Source = None) -> ChartSpec:
    """Venn-ADMIT: accuracy of admitted predictions by true class (labelled rows), 95% Wilson, 1−α."""
    return _rate_by_class_chart(
        admit_class, "admit_class", count="n_admitted", hits="n_correct", rate="accuracy",
        axis_title="admitted accuracy", count_title="labelled admitted rows",
        title="Admitted accuracy by class vs 1−α (dashed)",
    )  # fmt: skip


def _admit_feature_chart(admit_features: Source, feature: str, title: str, axis_title: str) -> ChartSpec:
    base = _base(admit_features, "admit_features").transform_filter(f"datum.feature == '{feature}'")
    return _finish(
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
    base = _base(batches, "batches", kind="selective")
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
        color=_color(), tooltip=tooltip,
    )  # fmt: skip
    labelled = base.transform_filter("datum.n_kept_labelled > 0")
    kept_accuracy = labelled.mark_line(strokeDash=[4, 3], point=alt.OverlayMarkDef(shape="diamond")).encode(
        x=x, y="kept_accuracy:Q", color=_color(), tooltip=tooltip
    )
    all_accuracy = labelled.mark_line(strokeDash=[1, 3], opacity=0.7).encode(
        x=x, y="accuracy:Q", color=_color(), tooltip=tooltip
    )
    return _finish(
        alt.layer(share, kept_accuracy, all_accuracy),
        "Kept share (solid); accuracy of kept (dashed) vs all rows (dotted)",
        span=x_span(_base(batches, "batches")),
    )


def selective_curve_chart(selective_curve: Source = None) -> ChartSpec:
    """Selective calibration error (ℓ2) of the window's labelled rows against the share kept."""
    base = _base(selective_curve, "selective_curve")
    return _finish(
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
    base = _base(selective_confidence, "selective_confidence")
    return _finish(
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


def interval_coverage_chart(batches: Source = None) -> ChartSpec:
    """Regression: coverage of each batch's central intervals (labelled rows) against their levels."""
    base = _base(batches, "batches", kind="regression").transform_filter("datum.n_labelled > 0")
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
        x=x, y=alt.Y("coverage_lo:Q", title="coverage"), y2="coverage_hi:Q", color=_color()
    )
    line = base.mark_line(point=True).encode(
        x=x, y=alt.Y("coverage:Q", scale=alt.Scale(zero=False)), color=_color(), tooltip=tooltip
    )
    inner = base.mark_line(strokeDash=[4, 3], opacity=0.8).encode(
        x=x, y="coverage_50:Q", color=_color(), tooltip=tooltip
    )
    target = base.mark_rule(strokeDash=[5, 4], color="#444").encode(y="mean(target):Q")
    half = alt.Chart().mark_rule(strokeDash=[2, 3], color="#888").encode(y=alt.datum(0.5))
    data = alt.NamedData("batches") if batches is None else batches
    return _finish(
        alt.layer(_target_window(base), band, line, inner, target, half, data=data),
        "Interval coverage: headline (solid) and 50% (dashed) vs levels",
        span=x_span(_base(batches, "batches")),
    )


def interval_width_chart(batches: Source = None) -> ChartSpec:
    """Regression: mean width of the headline central interval per batch."""
    base = _base(batches, "batches", kind="regression")
    return _finish(
        base.mark_line(point=True).encode(
            x=batch_axis("batch_mid"),
            y=alt.Y("mean_width:Q", title="mean interval width"),
            color=_color(),
            tooltip=[
                alt.Tooltip("name:N", title="batch"),
                alt.Tooltip("calibrator:N"),
                alt.Tooltip("mean_width:Q", format=".4g", title="mean width (headline)"),
                alt.Tooltip("mean_width_50:Q", format=".4g", title="mean width (50%)"),
                alt.Tooltip("crps:Q", format=".4g", title="CRPS (labelled)"),
            ],
        ),
        "Mean interval width",
        span=x_span(_base(batches, "batches")),
    )


def pit_chart(pit: Source = None) -> ChartSpec:
    """Regression: histogram of PIT values F(y|x) of labelled rows; flat at 1 when calibrated."""
    base = (
        _base(pit, "pit")
        .transform_aggregate(count="sum(count)", groupby=["calibrator", "bin", "lo", "hi"])
        .transform_joinaggregate(total="sum(count)", groupby=["calibrator"])
        .transform_calculate(density="datum.count / datum.total * 10")
    )
    bars = base.mark_bar(opacity=0.8).encode(
        x=alt.X("lo:Q", bin="binned", title="PIT  F(y | x)", scale=alt.Scale(domain=[0, 1])), x2="hi:Q",
        y=alt.Y("density:Q", title="density", stack=None), color=_color(),
        tooltip=[
            alt.Tooltip("calibrator:N"), alt.Tooltip("lo:Q", title="from", format=".1f"),
            alt.Tooltip("hi:Q", title="to", format=".1f"), alt.Tooltip("count:Q", title="rows", format=","),
            alt.Tooltip("density:Q", format=".3f"),
        ],
    )  # fmt: skip
    uniform = alt.Chart().mark_rule(strokeDash=[5, 4], color="#444").encode(y=alt.datum(1))
    data = alt.NamedData("pit") if pit is None else pit
    return _finish(alt.layer(bars, uniform, data=data), "PIT of labelled rows vs uniform (dashed)")


def fan_chart(fan: Source = None) -> ChartSpec:
    """Regression: the latest batch's predicted intervals, rows ranked by their median."""
    base = _base(fan, "fan").transform_filter("datum.median != null")
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
        x=x, y=alt.Y("lower_90:Q", title="value"), y2="upper_90:Q", color=_color()
    )
    inner = base.mark_rule(opacity=0.8, strokeWidth=3).encode(
        x=x, y="lower_50:Q", y2="upper_50:Q", color=_color()
    )
    median = base.mark_tick(color="#222", thickness=1, size=6).encode(x=x, y="median:Q", tooltip=tooltip)
    label = (
        base.transform_filter("datum.label != null")
        .mark_point(shape="diamond", filled=True, size=25, color="#d62728")
        .encode(x=x, y="label:Q", tooltip=tooltip)
    )
    return _finish(
        alt.layer(outer, inner, median, label), "Latest batch: 50% / outer intervals, true values ◆"
    )


#: chart name -> (builder, dataset it reads), in display order.
CHARTS: dict[str, tuple[Any, str]] = {
    "coverage": (coverage_chart, "batches"),
    "class_coverage": (class_coverage_chart, "class_coverage"),
    "set_size": (set_size_chart, "batches"),
    "set_shares": (set_shares_chart, "batches"),
    "set_sizes": (set_sizes_chart, "set_sizes"),
    "risk": (risk_chart, "batches"),
    "risk_gap": (risk_gap_chart, "batches"),
    "shift": (shift_chart, "shift"),
    "aci": (aci_chart, "batches"),
    "admitted": (admitted_chart, "batches"),
    "admitted_accuracy": (admitted_accuracy_chart, "admit_class"),
    "admit_q": (admit_q_chart, "admit_features"),
    "admit_d": (admit_d_chart, "admit_features"),
    "kept_share": (kept_share_chart, "batches"),
    "selective_curve": (selective_curve_chart, "selective_curve"),
    "kept_confidence": (kept_confidence_chart, "selective_confidence"),
    "interval_coverage": (interval_coverage_chart, "batches"),
    "interval_width": (interval_width_chart, "batches"),
    "pit": (pit_chart, "pit"),
    "fan": (fan_chart, "fan"),
    "labels": (labels_chart, "batches"),
}
#: The panels each kind of calibrator contributes (declared by the kinds, :mod:`calwatch.kinds`).
SET_CHARTS = SetsKind.panels
RISK_CHARTS = RiskKind.panels
ADMIT_CHARTS = tuple(panel for panel in AdmitKind.panels if panel not in SetsKind.panels)
SELECTIVE_CHARTS = SelectiveKind.panels
REGRESSION_CHARTS = RegressionKind.panels


def chart_kinds(monitor: Monitor) -> list[str]:
    """The charts that apply to a monitor's calibrators, in display order."""
    # Each calibrator's kind contributes its panels; panels no calibrator contributes are left out.
    contributed = {
        panel for cal in monitor.calibrators.values() for panel in getattr(find_kind(cal), "panels", ())
    }
    skip = {panel for kind in KINDS for panel in kind.panels} - contributed
    if monitor.shift_watch is None or not monitor.shift_watch.detectors:
        skip.add("shift")
    return [kind for kind in CHARTS if kind not in skip]


def build(kind: str, monitor: Monitor) -> ChartSpec:
    """A chart of the monitor's stream so far, with the data inline."""
    if kind not in CHARTS:
        msg = f"kind must be one of {list(CHARTS)}; got {kind!r}"
        raise ValueError(msg)
    builder, dataset = CHARTS[kind]
    frame = datasets(monitor)[dataset]
    return builder(frame)  # type: ignore[no-any-return]


def enable_offline() -> None:
    """Show static Altair charts in Jupyter without a network connection.

    Altair 6 writes Vega-Lite 6, which JupyterLab 4 has no built-in renderer for, so by default
    a chart in a notebook loads Vega from a CDN. This switches Altair (globally, for this
    kernel) to its anywidget-based ``JupyterChart`` renderer with the JavaScript bundled in the
    package. calwatch's live widget never needs this.
    """
    alt.JupyterChart.enable_offline()
    alt.renderers.enable("jupyter", offline=True)


def live_specs(kinds: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Vega-Lite specs of the charts (default: all) reading named datasets (for the live widget)."""
    names = list(CHARTS) if kinds is None else kinds
    return {name: CHARTS[name][0](None).to_dict() for name in names}
