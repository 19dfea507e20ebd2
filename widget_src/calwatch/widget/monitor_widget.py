"""The live widget: a thin anywidget view over a :class:`~calwatch.monitor.monitor.Monitor`.

The kernel sends only what changed (rows of the chart datasets, keyed) as custom messages; the
front end (``js/``) appends them to the Vega views with changesets. What an update costs the
kernel does not grow with the stream: the rows of the buckets a call touched come from
:mod:`calwatch.views.live`, the window panels from per-batch arrays kept in a
:class:`~calwatch.views.dashboard.RowCache`, and only rows that differ from what the views hold are
sent. Views created later (a second ``display``, a sidecar panel) ask for a replay of the whole
state: the rows the other views hold. The dashboard's
controls (α, class filter, window size, the timeline brush) are synced traits: the kernel
recomputes what depends on them and sends it to every view. The protocol is in
``docs/widget-protocol.md``; the layout and window-derived panels in :mod:`calwatch.views.dashboard`.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from calwatch.core.guard import guard_of
from calwatch.views import charts, dashboard, health
from calwatch.views.cards import CardTotals, ExactIntervals
from calwatch.views.live import LiveDatasets, bucketed_names
from calwatch.views.resolution import Resolution, bucket_width
from calwatch.views.shift_lanes import lane_rows
from calwatch.views.slice_history import is_slice, slice_coverage
from calwatch.views.where_it_fails import slice_rows
from calwatch.widget.outbox import Outbox

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor
from calwatch.widget.payloads import (
    _BUNDLE,
    MAX_PAGE_SIZE,
    MAX_TIMINGS,
    UPDATE_INTERVAL_S,
    WINDOW_REFRESH_S,
    _unindex,
    bundle_path,
    health_rows,
    in_kernel,
    json_rows,
    json_rows_from_dicts,
    status_line,
    view_state,
    warning_rows,
    window_payload,
)

#: Views whose picked slice the kernel keeps a series of (the newest ones; a view that closed
#: never says so, so older picks are dropped).
MAX_SLICE_VIEWS = 8


class MonitorWidget(anywidget.AnyWidget):
    """Live dashboard of a monitor: sections of charts, controls recomputed in the kernel, notes.

    Create it with ``monitor.widget()`` or display it with ``monitor.show()``.
    """

    _esm = _BUNDLE

    _title = traitlets.Unicode("").tag(sync=True)
    """Header text (the monitor's name)."""
    _specs = traitlets.Dict().tag(sync=True)
    """Vega-Lite spec of each chart and panel (and ``timeline``), reading named datasets."""
    _chart_order = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Order in which the chart kinds are laid out."""
    _sections = traitlets.List(traitlets.Dict()).tag(sync=True)
    """Tabs in order: ``{"name", "charts"}`` (chart kinds and panels of each)."""
    _empty_states = traitlets.Dict().tag(sync=True)
    """Per chart: ``{"dataset", "field", "message"}`` shown while no row has ``field`` set."""
    _calibrators = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Calibrator names, for the picker."""
    _classes = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Class names, for the class filter."""
    _selected = traitlets.Unicode("").tag(sync=True)
    """Picked calibrator ("" = all); written by the picker in the browser."""
    _class_filter = traitlets.Unicode("").tag(sync=True)
    """Picked class ("" = all); written by the class filter in the browser."""
    _alpha = traitlets.Float(None, allow_none=True).tag(sync=True)
    """What-if level α (None = off); written by the α slider in the browser."""
    _alpha_info = traitlets.Dict().tag(sync=True)
    """What the α control applies to (see :func:`calwatch.views.dashboard.what_if_info`)."""
    _selectives = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Selective calibrators (``cw.SelectiveCalibrator``), for the kept-share slider."""
    _kept_share = traitlets.Float(None, allow_none=True).tag(sync=True)
    """Target share ξ of rows the selective calibrators keep (None = as fitted); written by the
    kept-share slider: the kernel re-tunes their thresholds on the window (``Monitor.retune``)."""
    _window_rows = traitlets.Int(0).tag(sync=True)
    """Rows of the window the window panels use, most recent first (0 = all kept rows)."""
    _batch_range = traitlets.List(traitlets.Int()).tag(sync=True)
    """The timeline brush: ``[first, last]`` batch (inclusive) or ``[]``; written by the browser."""
    _default_author = traitlets.Unicode("").tag(sync=True)
    """Author of notes typed in the widget when none is given (from the environment)."""
    _paused = traitlets.Bool(False).tag(sync=True)
    """Whether views hold back updates (they queue them and apply them on resume)."""
    _status = traitlets.Dict().tag(sync=True)
    """Stream counters for the status line (see ``Monitor.status``)."""
    _notices = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """What the monitor does by rule (``Monitor.notices()``): the status line's tooltip."""
    _error = traitlets.Unicode("").tag(sync=True)
    """Error text drawn in the widget ("" = none)."""
    _warnings = traitlets.List(traitlets.Dict()).tag(sync=True)
    """The shift warning log (see ``Monitor.warnings``), oldest first, with acknowledgements."""

    def __repr__(self) -> str:
        """The text a notebook shows where the live view cannot be drawn (an export, a viewer)."""
        n = self._monitor.n_batches
        return f"calwatch dashboard: {self._monitor.name} ({n} batch{'' if n == 1 else 'es'})"

    def __init__(self, monitor: Monitor, **kwargs: Any) -> None:
        bundle_path()
        super().__init__(**kwargs)
        self._monitor = monitor
        self._seq = 0
        self._seq_by_main_thread = 0  # the last update after batches the main thread fed
        self._panels: list[Any] = []
        try:  # the kernel's event loop, where trailing refreshes run (also for producer threads)
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # created outside a running loop (a script, a test)
            self._loop = None
        #: Upserts computed under the monitor's lock, merged and sent once it is released; in a
        #: Jupyter kernel at most one every UPDATE_INTERVAL_S (elsewhere each as it comes).
        self._outbox = Outbox(
            lambda message: self.send(message),  # looked up at each send (tests replace ``send``)
            self._set_synced,
            interval_s=UPDATE_INTERVAL_S if in_kernel() else 0.0,
            on_error=self._show_error,
        )
        self._kernel_ms: deque[float] = deque(maxlen=MAX_TIMINGS)
        self._intervals = ExactIntervals()
        self._live_data: LiveDatasets  # set by refresh_layout, and again after each calibrate
        self._updates_failed = False  # an update raised since the last full send (refresh_layout)
        #: Per-batch summary rows and their running per-calibrator sums (the overview cards), and
        #: the same over the brushed range (built when a range is brushed).
        self._card_totals = self._new_card_totals()
        self._range_totals: tuple[tuple[int, int], CardTotals] | None = None
        #: The health strip's qualifiers and floors (recomputed after calibrate).
        self._promises: tuple[dict[str, str], dict[str, float]] | None = None
        #: Resolution of the per-batch datasets as sent (the brushed range or the whole stream) and
        #: the timeline's bucket width.
        self._detail = Resolution()
        self._timeline_width = 1
        #: Rows every view holds (or gets in its replay) of the keyed datasets the kernel keeps
        #: current row by row: per-bucket datasets, timeline, the kinds' window datasets, overview.
        self._sent: dict[str, dict[str, dict[str, Any]]] = {}
        #: The same rows' keys by their ``batch`` (bucket start), per dataset.
        self._held_by_bucket: dict[str, dict[Any, set[str]]] = {}
        self._notes_sent = 0
        #: Rows of the window datasets as last sent (what a replay repeats), per dataset by key.
        self._window_rows_sent: dict[str, dict[str, dict[str, Any]]] = {
            n: {} for n in dashboard.WINDOW_PANEL_DATASETS
        }
        self._row_cache = dashboard.RowCache()
        #: The slice each view picked (a click in the Slices view; "slice-filter" messages), newest
        #: last, at most MAX_SLICE_VIEWS views: ``slice_coverage`` holds those slices' series.
        self._slice_views: dict[str, str] = {}
        self._window_refreshed = -math.inf
        self._refresh_scheduled = False
        self._live = False
        self.refresh_layout()
        with monitor.lock:
            self._window_data()  # what the first replay repeats
            # and the slices tested so far: a view of a monitor shown after its stream (or loaded)
            # has a Slices tab before the next batch
            self._diff("slices", json_rows_from_dicts(slice_rows(monitor)), whole=True)
        self._live = True
        self._unsubscribe = monitor.subscribe(self._on_batches)
        self.on_msg(self._on_custom_message)
        self.observe(self._on_control, names=["_alpha", "_class_filter", "_window_rows", "_batch_range"])
        self.observe(self._on_kept_share, names=["_kept_share"])

    # ----------------------------------------------------------------- public
    @property
    def monitor(self) -> Monitor:
        """The monitor this widget shows."""
        return self._monitor

    @property
    def paused(self) -> bool:
        """Whether the views hold back updates."""
        return bool(self._paused)

    @property
    def selected(self) -> str:
        """The calibrator picked in the widget ("" = all)."""
        return str(self._selected)

    @property
    def seq(self) -> int:
        """Number of updates sent so far."""
        return self._seq

    @property
    def seq_by_main_thread(self) -> int:
        """The :attr:`seq` of the last update that followed batches observed or labelled in the main thread.

        In a kernel the main thread runs the cells: batches a cell observed or labelled are the
        user's own, those a producer thread fed are not, nor are notes and acknowledgements from
        the controls (see :class:`calwatch.publish.notebook_output.StaticDashboard`).
        """
        return self._seq_by_main_thread

    @property
    def kernel_ms(self) -> list[float]:
        """Kernel milliseconds of each recent update, oldest first (the last 10,000).

        An update follows a batch or label call: computing what changed (under the monitor's
        lock) and sending it.
        """
        return list(self._kernel_ms)

    @property
    def batch_range(self) -> tuple[int, int] | None:
        """The batches brushed on the timeline (inclusive), or None when nothing is brushed."""
        return (int(self._batch_range[0]), int(self._batch_range[1])) if len(self._batch_range) == 2 else None

    @batch_range.setter
    def batch_range(self, value: tuple[int, int] | None) -> None:
        if value is None:
            self._batch_range = []
            return
        lo, hi = (int(v) for v in value)
        if lo > hi:
            msg = f"batch_range must be (first, last) with first <= last; got {value!r}"
            raise ValueError(msg)
        self._batch_range = [lo, hi]

    @property
    def alpha(self) -> float | None:
        """The what-if level α set with the slider (None = each calibrator's own)."""
        return None if self._alpha is None else float(self._alpha)

    @alpha.setter
    def alpha(self, value: float | None) -> None:
        self._alpha = None if value is None else float(value)

    @property
    def class_filter(self) -> str:
        """The class picked in the class filter ("" = all)."""
        return str(self._class_filter)

    def pause(self) -> None:
        """Hold back updates in every view (nothing is lost; resume applies them)."""
        self._paused = True

    def resume(self) -> None:
        """Apply held-back updates and go live again."""
        self._paused = False

    def keep_panel(self, panel: Any) -> None:
        """Keep a reference to a sidecar panel showing this widget (so it stays open)."""
        self._panels.append(panel)

    def refresh_layout(self) -> None:
        """Re-send specs, calibrator names and status (after calibrate); the data starts again."""
        with self.hold_sync():
            for trait, value in view_state(self._monitor).items():
                setattr(self, trait, value)
            self._alpha_info = self._info()
        with self._monitor.lock:
            self._updates_failed = False  # every held row is sent again below
            self._live_data = LiveDatasets(self._monitor)  # the calibrators (and detectors) changed
            self._card_totals = self._new_card_totals()
            self._card_totals.update(self._live_data.card_rows(None))
            self._range_totals = None
            self._promises = None  # the health strip's qualifiers and floors: calibrate changes them
            self._row_cache = dashboard.RowCache()
            data = self._resend_buckets(force=True) | self._kind_windows()
            data |= self._derived(window=self._live, notes=self._live)
            if self._live:  # after calibrate: every view moves to the new state
                self._queue_upsert(data)
        # no view yet: the first one's replay holds what self._sent does
        self._outbox.flush()

    def refresh(self) -> None:
        """Recompute the window panels and overview now and send them to every view."""
        with self._monitor.lock:
            self._queue_upsert(self._derived(window=True, notes=True))
        self._outbox.flush()

    def replay_payload(self) -> dict[str, list[dict[str, Any]]]:
        """Every dataset row of the stream so far (what a new view receives).

        The rows every other view holds: those sent so far, at the resolutions last sent.
        """
        mon = self._monitor
        names = [
            *charts.CHART_DATASETS,
            *dashboard.PANEL_DATASETS,
            *bucketed_names(),
            *charts.window_dataset_names(mon),
        ]
        data: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for name, rows in self._sent.items():
            data[name] = list(rows.values())
        data["overview"] = list(self._sent.get("overview", {}).values()) or self._overview()
        data["notes"] = json_rows_from_dicts(dashboard.note_rows(mon))
        for name, rows in self._window_rows_sent.items():
            data[name] = list(rows.values())
        return data

    def current_datasets(self) -> dict[str, list[dict[str, Any]]] | None:
        """Every dataset of :func:`view_datasets` ``(monitor, dashboard_data=True)``, without a rebuild.

        A rebuild reads every batch: seconds under the monitor's lock at 10⁵ batches. The rows
        views hold are kept current batch by batch, so when they are at the whole stream's
        resolutions and every change has reached this widget (no notification still owed), they
        are those rows (the same keys and values; the cards are running sums, equal to rounding).
        The bounded datasets (:func:`window_payload`) are computed afresh at the monitor's own
        settings, the cards from the running sums. Returns None when the held rows are not
        those (a brushed range, a change not yet delivered, an update that failed since the
        last full send, nothing observed): rebuild then. Call it under the monitor's lock, or
        its answer may be stale on return.
        """
        mon = self._monitor
        n = mon.n_batches
        if mon.calibration_ is None or n == 0 or guard_of(mon).undelivered or self._updates_failed:
            return None
        if self._detail != Resolution.whole(n) or self._timeline_width != bucket_width(n):
            return None
        data: dict[str, list[dict[str, Any]]] = {name: [] for name in charts.CHART_DATASETS}
        data |= {name: list(rows.values()) for name, rows in self._sent.items()}
        data |= window_payload(mon)
        data["overview"] = json_rows_from_dicts(self._card_totals.cards(warning_rows(mon)))
        return data

    @property
    def sent_rows(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The rows every view holds of the datasets kept current row by row, per dataset by key.

        Per-bucket datasets, ``timeline``, the calibrator kinds' window datasets and
        ``overview``: what a from-scratch rebuild at the same resolutions gives (for tests).
        """
        return self._sent

    # ----------------------------------------------------------------- kernel side
    def _diff(
        self, name: str, rows: list[dict[str, Any]], *, whole: bool, buckets: set[int] | None = None
    ) -> list[dict[str, Any]]:
        """The rows of ``name`` that views do not hold yet, recorded as held from now on.

        With ``whole`` (``rows`` is the whole dataset), tombstones first for the keys it lost; with
        ``buckets`` (``rows`` are all the rows of those buckets), for the keys those buckets lost
        (a relabel can empty a class's row of a bucket). Held keys are indexed by their row's
        ``batch`` (the bucket), so the second case reads only those buckets' keys.
        """
        sent = self._sent.setdefault(name, {})
        index = self._held_by_bucket.setdefault(name, {})
        out: list[dict[str, Any]] = []
        if whole or buckets:
            fresh = {r["key"] for r in rows}
            if whole:
                lost = [k for k in sent if k not in fresh]
            else:
                lost = [k for b in buckets or () for k in index.get(b, ()) if k not in fresh]
            for key in lost:
                _unindex(index, key, sent.pop(key).get("batch"))
                out.append({"key": key, "_deleted": True})
        for row in rows:
            key = row["key"]
            held = sent.get(key)
            if held != row:
                if held is not None and held.get("batch") != row.get("batch"):
                    _unindex(index, key, held.get("batch"))  # a window row keyed without its batch
                sent[key] = row
                index.setdefault(row.get("batch"), set()).add(key)
                out.append(row)
        return out

    def _wanted_detail(self) -> Resolution:
        """The per-batch datasets' resolution: the brushed range, else the whole stream."""
        brushed = self.batch_range
        if brushed is not None:
            return Resolution.of_range(max(0, brushed[0]), max(0, brushed[0], brushed[1]))
        return Resolution.whole(self._monitor.n_batches)

    def _resend_buckets(self, *, force: bool = False) -> dict[str, list[dict[str, Any]]]:
        """Whole bucketed datasets again where their resolution changed (or ``force``).

        Only the rows that changed, and tombstones for the buckets that went away.
        """
        live = self._live_data
        data: dict[str, list[dict[str, Any]]] = {}
        detail = self._wanted_detail()
        if force or detail != self._detail:
            self._detail = detail
            fresh = live.rows(detail)
            data |= {name: self._diff(name, rows, whole=True) for name, rows in fresh.items()}
        width = bucket_width(self._monitor.n_batches)
        if force or width != self._timeline_width:
            self._timeline_width = width
            data["timeline"] = self._diff("timeline", live.timeline(width), whole=True)
        live.keep([self._detail, Resolution(self._timeline_width)])
        return data

    def _bucket_update(self, batches: tuple[int, ...]) -> dict[str, list[dict[str, Any]]]:
        """What an update of ``batches`` sends of the per-bucket datasets and the timeline.

        The changed rows of their buckets (whole datasets at a new resolution), and the
        ``batches`` rows of one-batch buckets whose batch left the window (``in_window``).
        """
        live = self._live_data
        if any(b < live.window_start for b in batches):
            # A late label reached a batch that had left the window (from the row log, or a table's
            # batch): its running merges were dropped as settled. Rare: rebuild, and send it all.
            self._live_data = live = LiveDatasets(self._monitor)
            return self._resend_buckets(force=True)
        left = live.changed(batches)  # before any row is computed: their merges are stale
        whole = self._resend_buckets()
        data: dict[str, list[dict[str, Any]]] = {}
        detail, latest = self._detail, self._monitor.n_batches - 1
        inside = [b for b in batches if detail.contains(b)]
        if "batches" not in whole:
            fresh = live.rows(detail, inside)
            touched = {detail.start_of(b) for b in inside}
            data = {
                name: self._diff(name, rows, whole=False, buckets=touched) for name, rows in fresh.items()
            }
            # ``in_window`` of a one-batch bucket turns false when its batch leaves the window
            starts = {b: detail.start_of(b) for b in left if detail.contains(b)}
            singles = [b for b, start in starts.items() if start == detail.end_of(start, latest=latest)]
            if singles:
                data["batches"] += self._diff("batches", live.summary(detail, singles), whole=False)
        if "timeline" not in whole:
            timeline = live.timeline(self._timeline_width, batches)
            data["timeline"] = self._diff("timeline", timeline, whole=False)
        return data | whole

    def _kind_windows(self) -> dict[str, list[dict[str, Any]]]:
        """The calibrator kinds' window datasets (``admit_features``, ``selective_*``; ``fan``), whole."""
        mon = self._monitor
        names = charts.window_dataset_names(mon)
        if not names or mon.calibration_ is None or mon.n_batches == 0:
            return {}
        frames = charts.window_datasets(mon)
        return {name: self._diff(name, json_rows(frames[name]), whole=True) for name in names}

    def _info(self) -> dict[str, Any]:
        return dashboard.what_if_info(self._monitor, self.alpha, window_rows=int(self._window_rows))

    def _new_card_totals(self) -> CardTotals:
        mon = self._monitor
        return CardTotals(list(mon.calibrators), charts.calibrator_labels(mon), self._intervals)

    def _update_cards(self, rows: dict[str, dict[str, Any]]) -> None:
        """Per-batch summary rows into the cards' running sums (the brushed range's too)."""
        self._card_totals.update(rows)
        if self._range_totals is not None:
            (lo, hi), totals = self._range_totals
            totals.update({k: r for k, r in rows.items() if lo <= r["batch"] <= hi})

    def _overview(self) -> list[dict[str, Any]]:
        """The overview cards: from the running sums, of the whole stream or the brushed range."""
        mon = self._monitor
        warnings = warning_rows(mon)
        brushed = self.batch_range
        if brushed is None:
            return json_rows_from_dicts(self._card_totals.cards(warnings))
        if self._range_totals is None or self._range_totals[0] != brushed:
            lo, hi = brushed
            totals = self._new_card_totals()
            totals.update({k: r for k, r in self._card_totals.rows.items() if lo <= r["batch"] <= hi})
            self._range_totals = (brushed, totals)
        return json_rows_from_dicts(self._range_totals[1].cards(warnings))

    def _health(self) -> list[dict[str, Any]]:
        """The health strip's rows that changed: from the last batches' rows the cards keep.

        Always the latest batches (the strip says how things stand now, whatever is brushed);
        one row per calibrator, sent only when it changed.
        """
        mon = self._monitor
        held = self._card_totals.rows
        n = mon.n_batches
        rows = [
            row
            for b in range(max(0, n - health.SPARK_BATCHES), n)
            for key in mon.calibrators
            if (row := held.get(f"{b}|{key}")) is not None
        ]
        if self._promises is None:
            self._promises = (health.qualifiers(mon), health.floors(mon))
        return self._diff("health", health_rows(mon, rows, promises=self._promises), whole=True)

    def _window_data(self) -> dict[str, list[dict[str, Any]]]:
        """The window datasets at the current controls, with tombstones for keys that went away."""
        mon = self._monitor
        if mon.calibration_ is None or mon.n_batches == 0:
            fresh: dict[str, list[dict[str, Any]]] = {name: [] for name in dashboard.WINDOW_PANEL_DATASETS}
        else:
            n, cache = int(self._window_rows), self._row_cache
            fresh = {
                "reliability": json_rows(
                    dashboard.reliability(
                        mon,
                        window_rows=n,
                        batch_range=self.batch_range,
                        class_filter=self.class_filter,
                        cache=cache,
                    )
                ),
                "set_by_class": json_rows(
                    dashboard.set_by_class(mon, window_rows=n, batch_range=self.batch_range, cache=cache)
                ),
                "what_if": []
                if self.alpha is None
                else json_rows(dashboard.what_if(mon, self.alpha, window_rows=n, cache=cache)),
                "slice_coverage": self._slice_rows(),
            }
        out: dict[str, list[dict[str, Any]]] = {}
        for name, rows in fresh.items():
            out |= self._window_diff(name, rows)
        self._window_refreshed = time.monotonic()
        return out

    def _window_diff(self, name: str, rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """A window dataset's rows that changed, tombstones first for keys it lost; kept as sent."""
        sent = self._window_rows_sent[name]
        keys = {r["key"] for r in rows}
        gone = [{"key": k, "_deleted": True} for k in sent if k not in keys]
        changed = [r for r in rows if sent.get(r["key"]) != r]
        self._window_rows_sent[name] = {r["key"]: r for r in rows}
        return {name: gone + changed} if gone or changed else {}

    def _slice_rows(self) -> list[dict[str, Any]]:
        """``slice_coverage``: the series of the slices views picked (none picked: no rows, no cost)."""
        mon = self._monitor
        picked = [s for s in dict.fromkeys(self._slice_views.values()) if is_slice(mon, s)]
        if not picked or mon.calibration_ is None:
            return []
        return json_rows(slice_coverage(mon, picked))

    def _keep_window_current(self) -> None:
        """Merge what this call changed into the window panels' cache (their next refresh reads it)."""
        n, brushed, picked = int(self._window_rows), self.batch_range, self.class_filter
        cache = self._row_cache
        dashboard.keep_current(self._monitor, cache, window_rows=n, batch_range=brushed, class_filter=picked)

    def _derived(self, *, window: bool, notes: bool) -> dict[str, list[dict[str, Any]]]:
        """The overview cards that changed, new notes, the window panels and the slices tested.

        Notes only with ``notes`` (a call that adds one notifies no batch), the window panels and
        the slices only with ``window``.
        """
        cards = self._diff("overview", self._overview(), whole=True)
        data: dict[str, list[dict[str, Any]]] = {"overview": cards, "health": self._health()}
        # The Shift view's lanes: a row per detector and per episode, sent when one changed.
        data["shift_lanes"] = self._diff(
            "shift_lanes", json_rows_from_dicts(lane_rows(self._monitor)), whole=True
        )
        if notes:
            added = dashboard.note_rows(self._monitor, self._notes_sent)
            if added:
                data["notes"] = json_rows_from_dicts(added)
                self._notes_sent += len(added)
        if window:
            data |= self._window_data()
            # Where it fails: every slice tested again (a few ms, more than an observe), so at the
            # window panels' pace rather than on every update; their trailing refresh sends the last.
            slices = json_rows_from_dicts(slice_rows(self._monitor))
            data["slices"] = self._diff("slices", slices, whole=True)
        return data

    def _queue_upsert(
        self,
        data: dict[str, list[dict[str, Any]]],
        started: float | None = None,
        *,
        traits: dict[str, Any] | None = None,
        urgent: bool = True,
    ) -> None:
        """Number an upsert of the datasets that changed and queue it (call under the monitor's lock).

        ``started`` (epoch ms) is when the kernel began the update: views measure from it how
        long the update took to reach the screen. ``traits``: synced traits to set once it is
        sent. Not ``urgent`` (a stream's update): it may wait up to UPDATE_INTERVAL_S, merged
        with the next ones.
        """
        self._seq += 1
        self._outbox.add(self._seq, data, started, traits=traits, urgent=urgent)

    def _set_synced(self, traits: Any) -> None:
        """Set synced traits in one message (the outbox calls this once the update is sent)."""
        with self.hold_sync():
            for name, value in traits.items():
                setattr(self, name, value)

    def _show_error(self, err: Exception) -> None:
        """Draw ``err`` in the widget instead of losing it."""
        self._error = f"{type(err).__name__}: {err}"

    def _window_due(self) -> bool:
        if time.monotonic() - self._window_refreshed >= WINDOW_REFRESH_S:
            return True
        if not self._refresh_scheduled:
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:  # a producer thread, or no loop at all
                running = None
            loop = running or self._loop
            if loop is None or loop.is_closed():  # no event loop (a script, a test): refresh every time
                return True
            self._refresh_scheduled = True
            if loop is running:
                loop.call_later(WINDOW_REFRESH_S, self._trailing_refresh)
            else:  # fed from another thread: the refresh runs on the kernel's loop
                loop.call_soon_threadsafe(loop.call_later, WINDOW_REFRESH_S, self._trailing_refresh)
        return False

    def _trailing_refresh(self) -> None:
        self._refresh_scheduled = False
        try:
            self.refresh()
        except Exception as err:  # draw the error in the widget instead of losing it
            self._show_error(err)

    def _on_batches(self, batches: tuple[int, ...]) -> None:
        # Called after the monitor's call released its lock, maybe in a producer's thread: read the
        # monitor at one moment (under its lock), then send without holding it.
        clock, started = time.perf_counter(), time.time() * 1000.0
        try:
            with self._monitor.lock:
                data = self._bucket_update(batches) | self._kind_windows() if batches else {}
                window = bool(batches) and self._window_due()
                if batches:
                    self._update_cards(self._live_data.card_rows(batches))
                    if not window:  # this call's share of the window panels' work, now
                        self._keep_window_current()
                data |= self._derived(window=window, notes=not batches)
                traits = {"_status": status_line(self._monitor), "_warnings": warning_rows(self._monitor)}
                if batches:
                    traits["_alpha_info"] = self._info()
                self._queue_upsert(data, started, traits=traits, urgent=not batches)
                if batches and threading.current_thread() is threading.main_thread():
                    self._seq_by_main_thread = self._seq
        except Exception as err:  # draw the error in the widget instead of losing it
            self._updates_failed = True  # the held rows may be part-updated: copies rebuild
            self._show_error(err)
            raise
        self._outbox.flush()
        self._kernel_ms.append(1000.0 * (time.perf_counter() - clock))

    def _on_control(self, change: Any) -> None:
        if change["name"] == "_alpha" and change["new"] is not None:
            value = float(change["new"])
            if not 0.0 < value < 1.0:
                self._error = f"α must be in (0, 1); got {value}"
                return
        if change["name"] == "_window_rows" and int(change["new"]) < 0:
            self._error = f"window size must be >= 0 rows; got {change['new']}"
            return
        try:
            with self._monitor.lock:
                zoom = self._resend_buckets() if change["name"] == "_batch_range" else {}
                self._queue_upsert(
                    zoom | self._derived(window=True, notes=True), traits={"_alpha_info": self._info()}
                )
            self._outbox.flush()
            if self._error.startswith(("α must", "window size")):
                self._error = ""
        except Exception as err:  # draw the error in the widget instead of losing it
            self._show_error(err)

    def _on_kept_share(self, change: Any) -> None:
        """Re-tune every selective calibrator's threshold on the window at the chosen share."""
        if change["new"] is None:
            return
        value = float(change["new"])
        try:
            for key in self._selectives:
                self._monitor.retune(value, key)  # notifies: the panels of the window batches update
            if self._error.startswith("kept share"):
                self._error = ""
        except (ValueError, TypeError) as err:
            self._error = f"kept share: {err}"

    def _on_custom_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        kind = content.get("kind")
        if kind == "acknowledge":
            try:
                self._monitor.acknowledge(int(content["episode"]), str(content.get("note", "")))
            except (KeyError, TypeError, ValueError) as err:
                self._error = f"acknowledge failed: {err}"
        elif kind == "replay-request":
            view = str(content.get("view", ""))
            with self._monitor.lock:  # one moment of the stream, sent after the lock is released
                payload = self.replay_payload()
                self._outbox.put({"kind": "replay", "view": view, "seq": self._seq, "data": payload})
            self._outbox.flush()
        elif kind == "note":
            self._add_note(content)
        elif kind == "rows-request":
            self._send_rows(content)
        elif kind == "slice-filter":
            self._pick_slice(content)

    def _pick_slice(self, content: dict[str, Any]) -> None:
        """A view picked a slice ("" = none): its series in ``slice_coverage``, sent to every view.

        Each view draws only its own slice's rows (its ``slice_filter`` signal); the kernel keeps
        the series of the slices the last :data:`MAX_SLICE_VIEWS` views picked, refreshed with the
        other window datasets while any is picked.
        """
        view = str(content.get("view", ""))
        words = str(content.get("slice_filter") or "")
        if words and not is_slice(self._monitor, words):
            self._error = (
                f"slice filter: {words!r} is not a slice of this monitor (see mon.slices()['slice'])"
            )
            return
        self._slice_views.pop(view, None)
        if words:
            self._slice_views[view] = words
            while len(self._slice_views) > MAX_SLICE_VIEWS:
                del self._slice_views[next(iter(self._slice_views))]
        if self._error.startswith("slice filter:"):
            self._error = ""
        try:
            with self._monitor.lock:
                changed = self._window_diff("slice_coverage", self._slice_rows())
                if changed:
                    self._queue_upsert(changed)
            self._outbox.flush()
        except Exception as err:  # draw the error in the widget instead of losing it
            self._show_error(err)

    def _add_note(self, content: dict[str, Any]) -> None:
        batch, episode = content.get("batch"), content.get("episode")
        try:
            self._monitor.note(
                str(content.get("text", "")),
                batch=None if batch is None else int(batch),
                episode=None if episode is None else int(episode),
                author=str(content.get("author") or "") or None,
            )
        except (TypeError, ValueError) as err:
            self._error = f"note not added: {err}"

    def _send_rows(self, content: dict[str, Any]) -> None:
        view = str(content.get("view", ""))
        reply: dict[str, Any] = {"kind": "rows", "view": view}
        # A slice (words of mon.slices()) is the view's own filter: it travels in the request only.
        slice_filter = str(content.get("slice_filter") or "")
        try:
            # no batch (null) with a slice: the newest window batch holding rows of it
            batch = None if content.get("batch", 0) is None else int(content["batch"])
            page_size = min(MAX_PAGE_SIZE, max(1, int(content.get("page_size", 20))))
            with self._monitor.lock:
                page = dashboard.rows_page(
                    self._monitor,
                    batch,
                    page=int(content.get("page", 0)),
                    page_size=page_size,
                    calibrator=self.selected,
                    class_filter=str(content.get("class_filter", self.class_filter)),
                    slice_filter=slice_filter,
                )
            reply |= page
            reply["rows"] = [
                [None if isinstance(v, float) and not math.isfinite(v) else v for v in r]
                for r in reply["rows"]
            ]
        except (KeyError, TypeError, ValueError) as err:
            reply |= {"batch": content.get("batch"), "slice_filter": slice_filter, "error": str(err)}
        self.send(reply)

    def close(self) -> None:
        """Stop following the monitor and close every view."""
        self._unsubscribe()
        self._outbox.close()
        super().close()
