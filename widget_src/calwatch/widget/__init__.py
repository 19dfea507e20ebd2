"""The Python half of the widget (``js/``): the payloads it sends and the anywidget view.

:mod:`calwatch.widget.payloads` turns a monitor into the JSON rows every view draws (the live
widget, the offline report, a notebook's static output); :mod:`calwatch.widget.monitor_widget` is
the live view, :class:`MonitorWidget`. Both are exported here.
"""

from calwatch.widget.monitor_widget import MonitorWidget
from calwatch.widget.payloads import (
    BUCKETED,
    MAX_PAGE_SIZE,
    MAX_TIMINGS,
    UPDATE_INTERVAL_S,
    WINDOW_REFRESH_S,
    bundle_path,
    dashboard_datasets,
    health_rows,
    json_rows,
    json_rows_from_dicts,
    notice_lines,
    status_line,
    view_datasets,
    view_state,
    warning_rows,
    window_payload,
)

__all__ = [
    "BUCKETED",
    "MAX_PAGE_SIZE",
    "MAX_TIMINGS",
    "UPDATE_INTERVAL_S",
    "WINDOW_REFRESH_S",
    "MonitorWidget",
    "bundle_path",
    "dashboard_datasets",
    "health_rows",
    "json_rows",
    "json_rows_from_dicts",
    "notice_lines",
    "status_line",
    "view_datasets",
    "view_state",
    "warning_rows",
    "window_payload",
]
