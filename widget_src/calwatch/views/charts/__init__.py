"""Charts of a monitor: its per-batch statistics as datasets, and Altair charts over them.

:mod:`calwatch.views.charts.data` turns a monitor into long-format polars datasets (:func:`datasets`);
one Altair chart per *chart kind* is built over a dataset, inline (a static chart of the stream so
far) or by name (``alt.NamedData``), which is how the live widget uses the same specs and appends
rows with Vega changesets. The builders live in one module per kind of calibrator
(:mod:`~calwatch.views.charts.sets`, :mod:`~calwatch.views.charts.risk`,
:mod:`~calwatch.views.charts.admit_selective`, :mod:`~calwatch.views.charts.regression`), plus
:mod:`~calwatch.views.charts.labels_shift` for the charts every monitor has, on the shared pieces
of :mod:`~calwatch.views.charts.parts`; :mod:`calwatch.views.charts.specs` names the chart kinds
(:data:`CHARTS`) and builds them from a monitor. All are exported here.
"""

from calwatch.views.charts.admit_selective import (
    admit_d_chart,
    admit_q_chart,
    admitted_accuracy_chart,
    admitted_chart,
    kept_confidence_chart,
    kept_share_chart,
    selective_curve_chart,
)
from calwatch.views.charts.data import (
    CHART_DATASETS,
    FAN_ROWS,
    batch_summary,
    bucket_datasets,
    calibrator_labels,
    datasets,
    window_dataset_names,
    window_datasets,
)
from calwatch.views.charts.labels_shift import labels_chart, shift_chart
from calwatch.views.charts.parts import (
    ALL_CALIBRATORS,
    BATCH_NAMES,
    CALIBRATOR_FILTER,
    CALIBRATOR_PARAM,
    CHART_HEIGHT,
    DETECTOR_PICK,
    MODEL_OR_CALIBRATOR_FILTER,
    TARGET_WINDOW,
    ChartSpec,
    Source,
    batch_axis,
    batch_ticks,
    name_axis,
    x_span,
)
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
from calwatch.views.charts.specs import (
    ADMIT_CHARTS,
    CHARTS,
    REGRESSION_CHARTS,
    RISK_CHARTS,
    SELECTIVE_CHARTS,
    SET_CHARTS,
    build,
    chart_kinds,
    enable_offline,
    live_specs,
)

__all__ = [
    "ADMIT_CHARTS",
    "ALL_CALIBRATORS",
    "BATCH_NAMES",
    "CALIBRATOR_FILTER",
    "CALIBRATOR_PARAM",
    "CHARTS",
    "CHART_DATASETS",
    "CHART_HEIGHT",
    "DETECTOR_PICK",
    "FAN_ROWS",
    "MODEL_OR_CALIBRATOR_FILTER",
    "REGRESSION_CHARTS",
    "RISK_CHARTS",
    "SELECTIVE_CHARTS",
    "SET_CHARTS",
    "TARGET_WINDOW",
    "ChartSpec",
    "Source",
    "aci_chart",
    "admit_d_chart",
    "admit_q_chart",
    "admitted_accuracy_chart",
    "admitted_chart",
    "batch_axis",
    "batch_summary",
    "batch_ticks",
    "bucket_datasets",
    "build",
    "calibrator_labels",
    "chart_kinds",
    "class_coverage_chart",
    "coverage_chart",
    "datasets",
    "enable_offline",
    "fan_chart",
    "interval_coverage_chart",
    "interval_width_chart",
    "kept_confidence_chart",
    "kept_share_chart",
    "labels_chart",
    "live_specs",
    "name_axis",
    "pit_chart",
    "risk_chart",
    "risk_gap_chart",
    "selective_curve_chart",
    "set_shares_chart",
    "set_size_chart",
    "set_sizes_chart",
    "shift_chart",
    "window_dataset_names",
    "window_datasets",
    "x_span",
]
