"""The chart kinds: each kind's builder and dataset, which apply to a monitor, and their specs.

:data:`CHARTS` names every chart kind with its builder (in this package's modules: one per kind
of calibrator, and :mod:`~calwatch.views.charts.labels_shift` for every monitor) and the dataset
it reads; :func:`build` makes a chart kind from a monitor, with
its data inline, and :func:`live_specs` the named-data specs the widget draws.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt

from calwatch.kinds import KINDS, find_kind
from calwatch.kinds.admit import AdmitKind
from calwatch.kinds.regression import RegressionKind
from calwatch.kinds.risk import RiskKind
from calwatch.kinds.selective import SelectiveKind
from calwatch.kinds.sets import SetsKind
from calwatch.views.charts.admit_selective import (
    admit_d_chart,
    admit_q_chart,
    admitted_accuracy_chart,
    admitted_chart,
    kept_confidence_chart,
    kept_share_chart,
    selective_curve_chart,
)
from calwatch.views.charts.data import datasets
from calwatch.views.charts.labels_shift import labels_chart, shift_chart
from calwatch.views.charts.parts import ChartSpec
from calwatch.views.charts.regression import (
    fan_chart,
    interval_coverage_chart,
    interval_width_chart,
    pit_chart,
)
from calwatch.views.charts.risk import risk_chart, risk_gap_chart
from calwatch.views.charts.sets import (
    aci_chart,
    class_coverage_chart,
    coverage_chart,
    set_shares_chart,
    set_size_chart,
    set_sizes_chart,
)

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor


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


__all__ = [
    "ADMIT_CHARTS",
    "CHARTS",
    "REGRESSION_CHARTS",
    "RISK_CHARTS",
    "SELECTIVE_CHARTS",
    "SET_CHARTS",
    "build",
    "chart_kinds",
    "enable_offline",
    "live_specs",
]
