"""The live widget: a thin anywidget view over a :class:`~calwatch.monitor.Monitor`.

The kernel sends only what changed (rows of the chart datasets, keyed) as custom messages; the
front end (``js/``) appends them to the Vega views with changesets. Views created later (a
second ``display``, a sidecar panel) ask for a replay of the whole state. The protocol is in
``docs/widget-protocol.md``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets

from calwatch import charts

if TYPE_CHECKING:
    from calwatch.monitor import Monitor

_BUNDLE = Path(__file__).parent / "static" / "widget.js"


def _bundle() -> Path:
    if not _BUNDLE.exists():
        msg = (
            f"the widget's JavaScript bundle is missing ({_BUNDLE}). Build it with `npm ci && "
            "npm run build` or reinstall calwatch with `pip install .`"
        )
        raise FileNotFoundError(msg)
    return _BUNDLE


def _json_rows(frame: Any) -> list[dict[str, Any]]:
    """Frame rows as JSON-safe dicts (NaN and inf become null)."""
    return _json_rows_from_dicts(frame.to_dicts())


def _json_rows_from_dicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dicts with NaN and inf replaced by null (JSON has neither)."""
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                row[key] = None
    return rows


def view_state(monitor: Monitor) -> dict[str, Any]:
    """The synced traits a view of ``monitor`` starts from (also what a static report renders)."""
    kinds = charts.chart_kinds(monitor)
    return {
        "_title": monitor.name,
        "_specs": charts.live_specs(kinds),
        "_chart_order": kinds,
        "_calibrators": list(monitor.calibrators),
        "_status": monitor.status(),
        "_warnings": warning_rows(monitor),
    }


def warning_rows(monitor: Monitor) -> list[dict[str, Any]]:
    """The shift warning log as JSON-safe dicts, oldest first."""
    watch = monitor.shift_watch
    return [] if watch is None else _json_rows_from_dicts(watch.warning_records())


def view_datasets(
    monitor: Monitor, batches: tuple[int, ...] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Rows of every chart dataset (of ``batches``, default all), JSON-safe."""
    if monitor.calibration_ is None or monitor.n_batches == 0:
        return {name: [] for name in charts.DATASETS}
    return {name: _json_rows(frame) for name, frame in charts.datasets(monitor, batches).items()}


class MonitorWidget(anywidget.AnyWidget):
    """Live coverage, set-size and label-progress charts of a monitor.

    Create it with ``monitor.widget()`` or display it with ``monitor.show()``.
    """

    _esm = _BUNDLE

    _title = traitlets.Unicode("").tag(sync=True)
    """Header text (the monitor's name)."""
    _specs = traitlets.Dict().tag(sync=True)
    """Vega-Lite spec of each chart, reading named datasets."""
    _chart_order = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Order in which the charts are laid out."""
    _calibrators = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Calibrator names, for the picker."""
    _selected = traitlets.Unicode("").tag(sync=True)
    """Picked calibrator ("" = all); written by the picker in the browser."""
    _paused = traitlets.Bool(False).tag(sync=True)
    """Whether views hold back updates (they queue them and apply them on resume)."""
    _status = traitlets.Dict().tag(sync=True)
    """Stream counters for the status line (see ``Monitor.status``)."""
    _error = traitlets.Unicode("").tag(sync=True)
    """Error text drawn in the widget ("" = none)."""
    _warnings = traitlets.List(traitlets.Dict()).tag(sync=True)
    """The shift warning log (see ``Monitor.warnings``), oldest first, with acknowledgements."""

    def __init__(self, monitor: Monitor, **kwargs: Any) -> None:
        _bundle()
        super().__init__(**kwargs)
        self._monitor = monitor
        self._seq = 0
        self._panels: list[Any] = []
        self.refresh_layout()
        self._unsubscribe = monitor.subscribe(self._on_batches)
        self.on_msg(self._on_custom_message)

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
        """Re-send specs, calibrator names and status (after calibrate)."""
        with self.hold_sync():
            for trait, value in view_state(self._monitor).items():
                setattr(self, trait, value)

    def replay_payload(self) -> dict[str, list[dict[str, Any]]]:
        """Every dataset row of the stream so far (what a new view receives)."""
        return view_datasets(self._monitor)

    # ----------------------------------------------------------------- kernel side
    def _on_batches(self, batches: tuple[int, ...]) -> None:
        try:
            data = view_datasets(self._monitor, batches)
        except Exception as err:  # draw the error in the widget instead of losing it
            self._error = f"{type(err).__name__}: {err}"
            raise
        self._seq += 1
        self.send({"kind": "upsert", "seq": self._seq, "data": data})
        with self.hold_sync():
            self._status = self._monitor.status()
            self._warnings = warning_rows(self._monitor)

    def _on_custom_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("kind") == "acknowledge":
            try:
                self._monitor.acknowledge(int(content["episode"]), str(content.get("note", "")))
            except (KeyError, TypeError, ValueError) as err:
                self._error = f"acknowledge failed: {err}"
            return
        if isinstance(content, dict) and content.get("kind") == "replay-request":
            view = str(content.get("view", ""))
            self.send({"kind": "replay", "view": view, "seq": self._seq, "data": self.replay_payload()})

    def close(self) -> None:
        """Stop following the monitor and close every view."""
        self._unsubscribe()
        super().close()
