"""The "Where it fails" view: slices of the data whose coverage falls short, found at a stated FDR.

Two panels read the ``slices`` dataset (rows of :meth:`Monitor.slices
<calwatch.monitor.Monitor.slices>` with ``method="e-bh"``: a live view is read again after every
batch, so its flags come from e-BH on the anytime-valid e-values, whose FDR holds whenever the
panel is read and acted on; BH on fixed-sample p-values, :meth:`Monitor.slices`'s default for
one planned look, would flag a null slice at some look far more often than its level):

- ``where_it_fails``: the slices ranked by their evidence of a shortfall: each one's coverage
  with its exact 95% interval against its target, the flagged ones (rejected at the stated FDR
  level over the stated family) in red. Clicking a slice picks its column for the panel below.
- ``slice_values``: coverage by value of one column (the picked one; at first the column of the
  strongest evidence), with intervals and the target: which values carry the shortfall.

Rows (keyed ``<view>|<calibrator>|<slice>``): ``view`` (``ranked`` or ``values``), the columns of
:meth:`Monitor.slices`, ``shortfall`` (target − coverage), ``rank``, and ``focus`` (the values of
the column the ranking puts first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt

from calwatch.views import charts

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

#: Slices shown per calibrator in the ranking, strongest evidence first (the frame has them all).
RANKED = 12
#: Slices need this many labelled rows to be tested (as :meth:`Monitor.slices` by default).
MIN_ROWS = 30
#: The multiplicity control of a view read after every batch: e-BH on anytime-valid e-values.
METHOD = "e-bh"
#: The Vega signal naming the column whose values ``slice_values`` shows ("": the focus column).
SLICE_COLUMN = "slice_column"
_FIELDS = (
    "calibrator", "slice", "by", "n_labelled", "n_covered", "coverage", "coverage_lo", "coverage_hi",
    "target", "p_value", "e_value", "q_value", "flagged", "fdr_method", "fdr_level", "n_tested",
    "family",
)  # fmt: skip


def slice_rows(monitor: Monitor) -> list[dict[str, Any]]:
    """The ``slices`` dataset: the ranking and the single-column values (none without slices)."""
    if getattr(monitor, "_slices", None) is None or monitor.calibration_ is None or not monitor.n_batches:
        return []
    try:
        frame = monitor.slices(min_rows=MIN_ROWS, method=METHOD)
    except ValueError:  # no set calibrator, or nothing to test yet
        return []
    if frame.is_empty():
        return []
    rows: list[dict[str, Any]] = [{k: r.get(k) for k in _FIELDS} for r in frame.iter_rows(named=True)]
    for r in rows:
        by = r["by"]
        r["by"] = " & ".join(by) if isinstance(by, (list, tuple)) else str(by)
        coverage, target = r["coverage"], r["target"]
        r["shortfall"] = None if coverage is None or target is None else float(target) - float(coverage)
    out: list[dict[str, Any]] = []
    for calibrator in dict.fromkeys(r["calibrator"] for r in rows):
        mine = [r for r in rows if r["calibrator"] == calibrator]  # strongest evidence first
        shown = mine[:RANKED]  # the strongest evidence first: e-BH flags the largest e-values
        first_by = str(mine[0]["by"])
        focus = first_by.split(" & ")[0]  # a pair's first column
        for rank, r in enumerate(shown):
            out.append(r | {"key": f"ranked|{calibrator}|{r['slice']}", "view": "ranked", "rank": rank})
        for r in mine:
            if " & " in str(r["by"]):
                continue  # the values panel shows one column's values
            out.append(
                r | {"key": f"values|{calibrator}|{r['slice']}", "view": "values", "focus": r["by"] == focus}
            )
    return out


def _tooltip() -> list[alt.Tooltip]:
    return [
        alt.Tooltip("slice:N"),
        alt.Tooltip("calibrator:N"),
        alt.Tooltip("coverage:Q", format=".3f"),
        alt.Tooltip("coverage_lo:Q", format=".3f", title="95% low"),
        alt.Tooltip("coverage_hi:Q", format=".3f", title="95% high"),
        alt.Tooltip("target:Q", format=".3f"),
        alt.Tooltip("n_labelled:Q", format=",", title="labelled rows"),
        alt.Tooltip("p_value:Q", format=".2g", title="p-value (coverage ≥ target)"),
        alt.Tooltip("e_value:Q", format=".3g", title="e-value (anytime-valid)"),
        alt.Tooltip("q_value:Q", format=".2g", title="q-value"),
        alt.Tooltip("flagged:N"),
        alt.Tooltip("family:N", title="FDR controlled over"),
    ]


def _coverage_layers(base: alt.Chart, y: alt.Y) -> alt.LayerChart:
    """Coverage with its interval against the target, flagged slices in red."""
    x = alt.X("coverage_lo:Q", title="coverage", scale=alt.Scale(zero=False))
    color = alt.Color(
        "flagged:N",
        scale=alt.Scale(domain=[True, False], range=["#b42318", "#818b98"]),
        legend=alt.Legend(orient="bottom", title="flagged at the stated FDR"),
    )
    interval = base.mark_rule(strokeWidth=3, opacity=0.6, cursor="pointer").encode(
        x=x, x2="coverage_hi:Q", y=y, color=color, tooltip=_tooltip()
    )
    point = base.mark_point(filled=True, size=50, cursor="pointer").encode(
        x="coverage:Q", y=y, color=color, tooltip=_tooltip()
    )
    target = base.mark_tick(color="#1f2328", thickness=1, size=14).encode(x="target:Q", y=y)
    return alt.LayerChart(layer=[interval, point, target])


def ranking_chart() -> alt.LayerChart:
    """The ranking panel's chart: slices by evidence of a shortfall (a click picks the column)."""
    base = (
        alt.Chart(alt.NamedData("slices"))
        .transform_filter("datum.view == 'ranked'")
        .transform_filter(charts.CALIBRATOR_FILTER)
    )
    y = alt.Y("slice:N", sort=alt.EncodingSortField("rank"), title=None, axis=charts.name_axis(200))
    return _coverage_layers(base, y)


def values_chart() -> alt.LayerChart:
    """Coverage by value of one slice column (the picked one, else the focus column)."""
    base = (
        alt.Chart(alt.NamedData("slices"))
        .transform_filter("datum.view == 'values'")
        .transform_filter(charts.CALIBRATOR_FILTER)
        .transform_filter(f"{SLICE_COLUMN} == '' ? datum.focus : datum.by == {SLICE_COLUMN}")
    )
    y = alt.Y("slice:N", title=None, axis=charts.name_axis(200), sort=None)
    chart = _coverage_layers(base, y).add_params(alt.param(name=SLICE_COLUMN, value=""))
    assert isinstance(chart, alt.LayerChart)
    return chart


__all__ = ["MIN_ROWS", "RANKED", "SLICE_COLUMN", "ranking_chart", "slice_rows", "values_chart"]
