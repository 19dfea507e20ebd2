"""What the widget sends, as plain JSON rows: the view state, datasets, health, warnings, the bundle.

Module functions the live widget, the offline report and the notebook's static output share: a
report or an exported notebook draws the same payloads the kernel sends a live view
(``docs/widget-protocol.md``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calwatch.core.guard import one_moment
from calwatch.kinds import kind_of
from calwatch.views import charts, dashboard, health
from calwatch.views.resolution import Resolution
from calwatch.views.shift_lanes import lane_rows
from calwatch.views.where_it_fails import slice_rows

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor


_BUNDLE = Path(__file__).parents[1] / "static" / "widget.js"
#: While a stream runs, window-derived panels are recomputed at most this often (seconds); a
#: last refresh follows once the kernel is idle, and every control change refreshes at once.
WINDOW_REFRESH_S = 0.5
#: In a kernel, updates reach the views at most this often (seconds): faster calls are merged by
#: key into one message (:class:`~calwatch.widget.outbox.Outbox`), so a producer faster than the browser
#: draws never builds a backlog in the page. The first update after a pause is sent at once.
UPDATE_INTERVAL_S = 0.2
#: Row-table page sizes the kernel accepts.
MAX_PAGE_SIZE = 200
#: Kernel timings kept (:attr:`MonitorWidget.kernel_ms`), the most recent.
MAX_TIMINGS = 10_000


def bundle_path() -> Path:
    """The widget's JavaScript bundle (``static/widget.js``, built from ``js/`` by esbuild).

    Raises
    ------
    FileNotFoundError
        If the bundle was not built (a source checkout before ``make``).
    """
    if not _BUNDLE.exists():
        msg = (
            f"the widget's JavaScript bundle is missing ({_BUNDLE}). Build it with `npm ci && "
            "npm run build` or reinstall calwatch with `pip install .`"
        )
        raise FileNotFoundError(msg)
    return _BUNDLE


def json_rows(frame: Any) -> list[dict[str, Any]]:
    """Frame rows as JSON-safe dicts (NaN and inf become null)."""
    return json_rows_from_dicts(frame.to_dicts())


def json_rows_from_dicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dicts with NaN and inf replaced by null (JSON has neither)."""
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                row[key] = None
    return rows


def _unindex(index: dict[Any, set[str]], key: str, batch: Any) -> None:
    """Take ``key`` out of ``batch``'s held keys, and the bucket out once it holds none."""
    keys = index.get(batch)
    if keys is not None:
        keys.discard(key)
        if not keys:  # a bucket gone at a coarser resolution: no entry left behind
            del index[batch]


def in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (where views are pages that draw what is sent)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


@one_moment
def status_line(monitor: Any) -> dict[str, Any]:
    """The status line's data: the monitor's counters, and where its table batches came from."""
    status: dict[str, Any] = dict(monitor.status())
    sources = getattr(monitor, "sources", None)
    if callable(sources):
        status["sources"] = sources()
    return status


def _classes(monitor: Monitor) -> list[str]:
    return [] if monitor.calibration_ is None else [str(c) for c in monitor.classes_.tolist()]


@one_moment
def view_state(monitor: Monitor) -> dict[str, Any]:
    """The synced traits a view of ``monitor`` starts from (also what a static report renders)."""
    from calwatch.core.who import default_author
    from calwatch.kinds import find_kind

    kinds = charts.chart_kinds(monitor)
    panels = dashboard.panels_for(monitor) if monitor.calibration_ is not None else []
    return {
        "_title": monitor.name,
        "_specs": dashboard.specs(kinds, panels),
        "_chart_order": kinds,
        "_sections": dashboard.layout(kinds, panels),
        "_empty_states": {k: v for k, v in dashboard.EMPTY_STATES.items() if k in kinds or k in panels},
        "_calibrators": list(monitor.calibrators),
        "_classes": _classes(monitor),
        "_status": status_line(monitor),
        "_notices": notice_lines(monitor),
        "_warnings": warning_rows(monitor),
        "_default_author": default_author(),
        "_alpha_info": dashboard.what_if_info(monitor, None),
        "_selectives": [
            key for key, cal in monitor.calibrators.items() if getattr(find_kind(cal), "retunable", False)
        ],
    }


@one_moment
def notice_lines(monitor: Monitor) -> list[str]:
    """What the monitor does by rule (``Monitor.notices()``), one line each, for the status line."""
    notices = getattr(monitor, "notices", None)  # the regression monitor applies no such rule
    if notices is None:
        return []
    return [
        f"{row['calibrator']}: {row['message']} ({row['examples']})"
        for row in notices().iter_rows(named=True)
    ]


@one_moment
def warning_rows(monitor: Monitor) -> list[dict[str, Any]]:
    """The shift warning log as JSON-safe dicts, oldest first."""
    watch = monitor.shift_watch
    return [] if watch is None else json_rows_from_dicts(watch.warning_records())


#: The built-in datasets with a row per bucket of batches (see :mod:`calwatch.views.resolution`): re-sent
#: whole, with tombstones for the buckets that went away, when their resolution changes
#: (:func:`calwatch.views.live.bucketed_names` adds those of kinds registered since).
BUCKETED = ("batches", "set_sizes", "class_coverage", "admit_class", "shift", "pit")


@one_moment
def view_datasets(
    monitor: Monitor,
    batches: tuple[int, ...] | None = None,
    *,
    dashboard_data: bool = False,
    resolution: Resolution | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Rows of every chart dataset (of the buckets holding ``batches``, default all), JSON-safe.

    ``resolution`` is how per-batch datasets are bucketed (default: the whole stream, see
    :func:`calwatch.views.charts.datasets`). With ``dashboard_data=True`` (a whole state: a replay, a
    report) the dashboard's datasets come too (:func:`dashboard_datasets`).
    """
    if monitor.calibration_ is None or monitor.n_batches == 0:
        out: dict[str, list[dict[str, Any]]] = {name: [] for name in charts.CHART_DATASETS}
    else:
        frames = charts.datasets(monitor, batches, resolution=resolution)
        out = {name: json_rows(frame) for name, frame in frames.items()}
    return out | dashboard_datasets(monitor) if dashboard_data else out


@one_moment
def dashboard_datasets(monitor: Monitor) -> dict[str, list[dict[str, Any]]]:
    """The dashboard's datasets at the monitor's own settings (no α, whole window, no brush).

    ``overview`` (cards), ``timeline``, and the bounded ones of :func:`window_payload`.
    """
    out = window_payload(monitor)
    out["overview"] = json_rows(dashboard.overview(monitor))
    out["timeline"] = json_rows(dashboard.timeline(monitor))
    return out


@one_moment
def window_payload(monitor: Monitor) -> dict[str, list[dict[str, Any]]]:
    """The dashboard's datasets whose cost does not grow with the stream, at the monitor's settings.

    ``health`` (the strip), ``notes``, ``shift_lanes`` (the Shift view's lanes), and the window panels
    ``reliability`` and ``set_by_class`` (whole window, no brush); ``what_if`` is empty (it needs
    the α slider of a live widget). Not ``overview`` and ``timeline``: they read every batch
    (:func:`dashboard_datasets`).
    """
    bounded = [name for name in dashboard.PANEL_DATASETS if name not in ("overview", "timeline")]
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in bounded}
    out["notes"] = json_rows_from_dicts(dashboard.note_rows(monitor))
    out["health"] = health_rows(monitor)
    out["shift_lanes"] = json_rows_from_dicts(lane_rows(monitor))
    out["slices"] = json_rows_from_dicts(slice_rows(monitor))
    if monitor.calibration_ is not None and monitor.n_batches > 0:
        out["reliability"] = json_rows(dashboard.reliability(monitor))
        out["set_by_class"] = json_rows(dashboard.set_by_class(monitor))
    return out


@one_moment
def health_rows(
    monitor: Monitor, rows: Any = None, *, promises: tuple[dict[str, str], dict[str, float]] | None = None
) -> list[dict[str, Any]]:
    """The health strip's rows (:func:`calwatch.views.health.health`): from ``rows``, else ``summary()``.

    ``rows`` are per-batch summary rows holding at least the last
    :data:`~calwatch.views.health.SPARK_BATCHES` batches; ``promises`` the monitor's
    :func:`~calwatch.views.health.qualifiers` and :func:`~calwatch.views.health.floors` (computed when not
    given; they change only with calibrate). Per-class promises are judged on their worst class,
    from :meth:`Monitor.class_coverage` of the same batches (read only when there is one).
    """
    if monitor.calibration_ is None:
        return []
    n = monitor.n_batches
    recent = tuple(range(max(0, n - health.SPARK_BATCHES), n))
    if rows is None:
        rows = monitor.summary(recent) if n else []
    quals, lows = promises if promises is not None else (health.qualifiers(monitor), health.floors(monitor))
    per_class = health.per_class_calibrators(monitor)
    targets = monitor.targets()
    stated = {
        key: {"kind": kind_of(cal).name, "target": targets.get(key)}
        for key, cal in monitor.calibrators.items()
    }
    out = health.health(
        rows,
        warning_rows(monitor),
        calibrators=list(monitor.calibrators),
        qualifiers=quals,
        floors=lows,
        classes=monitor.class_coverage(recent) if per_class and n else None,
        stated=stated,
        per_class=per_class,
    )
    return json_rows_from_dicts(out)
