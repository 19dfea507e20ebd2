"""The dashboard around the charts: its layout, the window panels, and what they keep between draws.

:mod:`calwatch.views.dashboard.sections` places the chart kinds in sections (tabs) and builds the panel
specs; :mod:`calwatch.views.dashboard.panels` computes the panels from the window's raw rows (what-if,
reliability, set sizes by class), the timeline, the overview cards and the row table's pages;
:mod:`calwatch.views.dashboard.row_cache` keeps what a redraw can reuse. All are exported here.
"""

from calwatch.engine.metrics.calibration import MAX_BINS, ROWS_PER_BIN
from calwatch.views.dashboard.panels import (
    keep_current,
    note_rows,
    overview,
    reliability,
    reliability_bins,
    rows_page,
    set_by_class,
    sorted_reliability_bins,
    timeline,
    what_if,
    what_if_info,
    window_batches,
)
from calwatch.views.dashboard.row_cache import (
    RowCache,
    Run,
    SetCounts,
)
from calwatch.views.dashboard.sections import (
    BATCH_FILTER,
    CLASS_FILTER_EXPR,
    DEFAULT_SECTION,
    EMPTY_STATES,
    PANEL_DATASETS,
    PANEL_SPECS,
    PANELS,
    SECTIONS,
    WINDOW_PANEL_DATASETS,
    layout,
    panels_for,
    place,
    reliability_spec,
    section_of,
    set_by_class_spec,
    specs,
    timeline_spec,
    what_if_spec,
    with_view_filters,
)

__all__ = [
    "BATCH_FILTER",
    "CLASS_FILTER_EXPR",
    "DEFAULT_SECTION",
    "EMPTY_STATES",
    "MAX_BINS",
    "PANELS",
    "PANEL_DATASETS",
    "PANEL_SPECS",
    "ROWS_PER_BIN",
    "SECTIONS",
    "WINDOW_PANEL_DATASETS",
    "RowCache",
    "Run",
    "SetCounts",
    "keep_current",
    "layout",
    "note_rows",
    "overview",
    "panels_for",
    "place",
    "reliability",
    "reliability_bins",
    "reliability_spec",
    "rows_page",
    "section_of",
    "set_by_class",
    "set_by_class_spec",
    "sorted_reliability_bins",
    "specs",
    "timeline",
    "timeline_spec",
    "what_if",
    "what_if_info",
    "what_if_spec",
    "window_batches",
    "with_view_filters",
]
