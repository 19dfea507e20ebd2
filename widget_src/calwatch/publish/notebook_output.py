"""Static renderings in notebook outputs: the dashboard and charts survive sharing, offline.

A live widget only draws where a widget manager runs with its kernel. An executed notebook that
is exported by nbconvert, shown on GitHub or nbviewer, or opened in a JupyterLab that does not
trust it, shows none: nbconvert's HTML picks the widget view whenever its model is in the
stored widget state and then loads the widget manager from a CDN (blank offline), and untrusted
JupyterLab renders no widget view at all. So :meth:`Monitor.show` displays, after the widget, a
second output of its own (:class:`StaticDashboard`): a ``text/html`` output that carries

* the report's dashboard (:mod:`calwatch.publish.report`: the same bundle, ``renderStatic``, inlined once
  per output) with the widget's current state, drawn by its script wherever scripts run (an
  nbconvert page, a trusted notebook without a kernel);
* a fallback that needs no script and survives JupyterLab's sanitiser for untrusted outputs
  (which keeps ``<img>`` with a ``data:`` source but strips every ``<svg>`` tag and script):
  the headline numbers as an escaped table and the coverage chart as an SVG image;
* a guard script that hides the whole output while a live view of the dashboard is drawn in the
  same output area, so a live JupyterLab shows the dashboard once.

The output is refreshed (``update_display``) when a cell that changed the stream ends (IPython's
``post_run_cell``): once per cell, not per batch, because it carries the 1.4 MB bundle and all
the data (seconds to build for a long stream, under the monitor's lock). A stream fed by another
thread changes during every cell, so its changes refresh the output at most once every
:data:`STATIC_MIN_INTERVAL_S` seconds (longer when one refresh takes more than a
:data:`STATIC_COST_SHARE` of that): running a cell must not cost seconds while a producer runs.
Batches the cell itself observed or labelled (in the main thread) still refresh it at the end
of the cell; notes and acknowledgements made in the widget wait like a producer's batches; and
:meth:`StaticDashboard.refresh` with ``force=True`` refreshes it at once.

:func:`offline_chart` does the same for ``Monitor.chart``: its output is an SVG (and a PNG for
untrusted JupyterLab) drawn in the kernel by vl-convert, with no script and no widget.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import itertools
import math
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import altair as alt
import polars as pl

from calwatch.core.guard import guard_of, one_moment
from calwatch.publish import svg_child
from calwatch.publish.escape import escape_html, script_json
from calwatch.publish.report import ReportParts, coverage_table, report_parts
from calwatch.views import charts
from calwatch.widget import bundle_path
from calwatch.widget.payloads import in_kernel as in_kernel  # re-exported for Monitor.show

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor
    from calwatch.widget import MonitorWidget

#: The MIME type of the dashboard's static output (plain HTML: every exporter knows it).
#: A stream fed by another thread redraws the static output at most this often (seconds)...
STATIC_MIN_INTERVAL_S = 30.0
#: ...and at most this share of the time goes to drawing it (a 3 s drawing: once a minute).
STATIC_COST_SHARE = 0.05
HTML = "text/html"
#: How long (s) a static output waits for a producer's last change to reach the widget's views
#: before it rebuilds the datasets from the monitor instead of copying the views' rows.
CURRENT_WAIT_S = 0.5
#: How long (ms) a static output in a live JupyterLab waits for the widget's view next to it to
#: draw before it shows itself (the view renders asynchronously, often after the static output;
#: on a loaded machine in seconds). A trusted notebook reopened without its kernel shows the
#: static copy after this wait.
LIVE_WAIT_MS = 10_000
#: The widget view's MIME type (JupyterLab marks each output with its ``data-mime-type``).
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

_ids = itertools.count()


@functools.cache
def _bundle_base64() -> str:
    """The widget's bundle, base64 (read and encoded once per process)."""
    return base64.b64encode(bundle_path().read_bytes()).decode("ascii")


def _svg_image(spec: dict[str, Any], alt_text: str) -> str:
    """An ``<img>`` of a Vega-Lite spec drawn as SVG in the kernel ("" if it cannot be drawn).

    An image, not inline SVG: JupyterLab's sanitiser drops ``<svg>`` but keeps ``<img>`` with a
    ``data:`` source, and an SVG in an image runs no script. Drawn in a child process
    (:mod:`calwatch.publish.svg_child`): redrawn every 30 s or more for as long as a stream runs, in
    the kernel it grew vl-convert's JavaScript heap, which is never given back.
    """
    try:
        svg = svg_child.vegalite_to_svg(spec)
    except Exception:  # an empty stream has nothing to draw; the table still shows
        return ""
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    src = f"data:image/svg+xml;base64,{data}"
    return f'<img class="calwatch-static-image" alt="{escape_html(alt_text)}" src="{src}">'


def _headline(monitor: Monitor) -> str:
    """The key numbers as escaped HTML: counters, each calibrator's health and coverage."""
    status = monitor.status()
    facts = (
        f"{status['batches']:,} batches, {status['rows_seen']:,} rows, {status['rows_labelled']:,} labelled"
    )
    from calwatch.widget import health_rows

    chips = "".join(
        f"<li><b>{escape_html(row.get('calibrator'))}</b>: {escape_html(row.get('promise'))}: "
        f"{escape_html(row.get('state'))}</li>"
        for row in health_rows(monitor)
    )
    return f"<p>{escape_html(facts)}</p><ul>{chips}</ul>" if chips else f"<p>{escape_html(facts)}</p>"


@dataclass(frozen=True)
class StaticRead:
    """What a static output shows, read at one moment under the monitor's lock (drawn after)."""

    parts: ReportParts
    headline: str
    table: str
    coverage: list[dict[str, Any]] | None  # the coverage chart's rows (None: no chart); drawn after
    name: str


@one_moment
def read_static(monitor: Monitor, datasets: dict[str, list[dict[str, Any]]] | None = None) -> StaticRead:
    """Read what :func:`dashboard_html` shows, at one moment (under the monitor's lock).

    ``datasets``: the dashboard's datasets when already at hand, read under the same hold of
    the lock (a live widget's :meth:`~calwatch.widget.MonitorWidget.current_datasets`);
    default: built from the monitor, which reads every batch. The coverage table is then summed
    from their whole-stream cards, not from :meth:`Monitor.summary`, whose kept frame of every
    batch would otherwise grow in the kernel for as long as a stream runs (see
    :func:`~calwatch.publish.report.coverage_table`).
    """
    parts = report_parts(monitor, datasets=datasets, sections=False)  # the copy shows no sections
    return StaticRead(
        parts=parts,
        headline=_headline(monitor),
        table=coverage_table(monitor, cards=None if datasets is None else datasets.get("overview")),
        coverage=_coverage_rows(monitor, parts.payload["datasets"]),
        name=monitor.name,
    )


def draw_static(read: StaticRead, uid: str) -> str:
    """The static output's HTML from what was read (no lock: the SVG takes a while to draw).

    ``uid`` is the output's id (one per :class:`StaticDashboard`): the elements of two outputs
    on one page do not mix.
    """
    parts = read.parts
    image = ""
    if read.coverage is not None:
        image = _svg_image(_coverage_spec(read.coverage), f"coverage of {read.name}")
    fallback = (
        f"<h3>{escape_html(parts.title)}</h3>{read.headline}{image}{read.table}"
        f'<p class="calwatch-static-note">{escape_html(parts.generated)}; a static copy of the live '
        "dashboard.</p>"
    )
    return _OUTPUT.format(
        uid=escape_html(uid),
        fallback=fallback,
        payload=script_json(parts.payload),
        bundle=script_json(_bundle_base64()),
        wait=LIVE_WAIT_MS,
        view_mime=WIDGET_VIEW,
    )


def dashboard_html(monitor: Monitor, uid: str) -> str:
    """The dashboard's static output: the frozen dashboard, its script-free fallback and the guard.

    Read at one moment (:func:`read_static`, rebuilding every dataset from the monitor), drawn
    after (:func:`draw_static`).
    """
    return draw_static(read_static(monitor), uid)


def _coverage_rows(
    monitor: Monitor, datasets: dict[str, list[dict[str, Any]]]
) -> list[dict[str, Any]] | None:
    """The ``batches`` rows the coverage chart draws (None where the dashboard has no such chart).

    The rows are the dashboard's own, never changed once made (a view's update replaces a row),
    so the chart may be built from them after the monitor's lock is released.
    """
    rows = datasets.get(charts.CHARTS["coverage"][1]) or []
    if monitor.calibration_ is None or not rows or "coverage" not in charts.chart_kinds(monitor):
        return None
    return list(rows)


def _coverage_spec(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The coverage chart's Vega-Lite spec with ``rows`` inline, in batch order."""
    frame = pl.DataFrame(rows, infer_schema_length=None).sort("batch", maintain_order=True)
    spec: dict[str, Any] = charts.CHARTS["coverage"][0](frame).to_dict()
    return spec


class StaticDashboard:
    """The static output that follows a widget's live view in a notebook (see the module).

    Created by :func:`static_for`, one per widget; every ``display`` of it is one output with the
    same display id, so a refresh updates them all.
    """

    def __init__(self, widget: MonitorWidget) -> None:
        self._widget = weakref.ref(widget)
        self.uid = f"calwatch-static-{next(_ids)}"
        self.display_id = self.uid
        self.shown_seq: int | None = None
        self.shown = False
        self.shown_at = -math.inf  # time.monotonic() of the last drawing
        self.render_s = 0.0  # how long the last drawing took to build
        self.rebuilt = False  # whether the last drawing rebuilt the datasets from the monitor

    def bundle(self) -> dict[str, str]:
        """The output's mimebundle at the widget's current state."""
        widget = self._widget()
        if widget is None:
            return {}
        started = time.monotonic()
        self.shown_seq = widget.seq
        monitor = widget.monitor
        text = f"<calwatch dashboard: {monitor.name}>"
        bundle = {HTML: draw_static(self._read(widget), self.uid), "text/plain": text}
        self.shown_at = time.monotonic()
        self.render_s = self.shown_at - started
        return bundle

    def _read(self, widget: MonitorWidget) -> StaticRead:
        """What to show: from the rows the widget's views hold, else rebuilt from the monitor.

        The views' rows are those of a rebuild once every change has reached the widget
        (:meth:`~calwatch.widget.MonitorWidget.current_datasets`); a producer thread's last
        change may be on its way (its notification is sent after its call releases the lock), so
        this waits for it up to :data:`CURRENT_WAIT_S` before rebuilding (seconds under the lock
        on a long stream). A thread that holds the lock already (inside a call) rebuilds at once.
        """
        monitor = widget.monitor
        guard = guard_of(monitor)
        waits = not cast(Any, guard.lock)._is_owned()
        give_up = time.monotonic() + CURRENT_WAIT_S
        while True:
            with guard.lock:
                datasets = widget.current_datasets()
                owed = datasets is None and guard.undelivered > 0  # the one reason worth waiting for
                if not (owed and waits and time.monotonic() < give_up):
                    self.rebuilt = datasets is None
                    return read_static(monitor, datasets)
            time.sleep(0.005)

    def display(self) -> None:
        """Display the output (after the widget's view) and refresh it when a cell ends."""
        from IPython.display import display

        display(self.bundle(), raw=True, display_id=self.display_id)  # type: ignore[no-untyped-call]
        self.shown = True
        _watch(self)

    def refresh(self, *, force: bool = False) -> bool:
        """Redraw every display of the output if the stream changed since it was drawn.

        Batches observed or labelled in the main thread (by the cell) redraw it at once; any
        other change (a producer's batches, a note from the widget) when :meth:`due`. Returns
        whether it was redrawn.
        """
        from IPython.display import update_display

        widget = self._widget()
        if widget is None or not self.shown:
            return False
        if not force:
            drawn = -1 if self.shown_seq is None else self.shown_seq
            if widget.seq == self.shown_seq or (widget.seq_by_main_thread <= drawn and not self.due()):
                return False
        update_display(self.bundle(), raw=True, display_id=self.display_id)  # type: ignore[no-untyped-call]
        return True

    def due(self) -> bool:
        """Whether a change the cell did not make may redraw the output now (see the module's doc)."""
        wait = max(STATIC_MIN_INTERVAL_S, self.render_s / STATIC_COST_SHARE)
        return time.monotonic() - self.shown_at >= wait


_STATIC: weakref.WeakKeyDictionary[Any, StaticDashboard] = weakref.WeakKeyDictionary()
_WATCHED: weakref.WeakSet[StaticDashboard] = weakref.WeakSet()
_HOOKED: list[Any] = []


def static_for(widget: MonitorWidget) -> StaticDashboard:
    """The static output of ``widget`` (one per widget, made on first use)."""
    found = _STATIC.get(widget)
    if found is None:
        found = _STATIC[widget] = StaticDashboard(widget)
    return found


def _watch(static: StaticDashboard) -> None:
    """Refresh ``static`` when each cell ends (IPython's ``post_run_cell``; nothing outside IPython)."""
    from IPython import get_ipython

    shell = get_ipython()
    _WATCHED.add(static)
    if shell is None or any(hooked is shell for hooked in _HOOKED):
        return
    shell.events.register("post_run_cell", _refresh_all)
    _HOOKED.append(shell)


def _refresh_all(*_args: Any) -> None:
    """At a cell's end: redraw the static outputs whose stream changed during it."""
    for static in list(_WATCHED):
        static.refresh()


def chart_bundle(chart: alt.TopLevelMixin) -> dict[str, str]:
    """A chart's notebook output: SVG and PNG drawn in the kernel, no script, no widget.

    nbconvert's HTML inlines the SVG; trusted JupyterLab draws the SVG; untrusted JupyterLab and
    GitHub the PNG (JupyterLab counts SVG unsafe). Charts with no data draw an empty SVG and no
    PNG.
    """
    import vl_convert as vlc

    spec = chart.to_dict()
    out = {"image/svg+xml": vlc.vegalite_to_svg(spec), "text/plain": "<calwatch chart>"}
    with contextlib.suppress(Exception):  # vl-convert refuses a PNG of an empty chart (no size)
        out["image/png"] = base64.b64encode(vlc.vegalite_to_png(spec)).decode("ascii")
    return out


Chart = TypeVar("Chart", bound=alt.TopLevelMixin)


def offline_chart(chart: Chart) -> Chart:
    """``chart``, shown in notebooks as a static SVG/PNG (:func:`chart_bundle`).

    The chart itself, with its own ``_repr_mimebundle_`` (an attribute of this instance: Altair's
    global renderer, which needs a CDN or a widget, is left alone, and a chart derived from it with
    ``.properties`` and the like shows through that renderer again).
    """

    def show(*_args: Any, **_kwargs: Any) -> dict[str, str]:
        return chart_bundle(chart)

    object.__setattr__(chart, "_repr_mimebundle_", show)
    return chart


# The guard: hidden at once (no flash) while it decides; a live view of the dashboard drawn in the
# same output area keeps it hidden; otherwise it draws the frozen dashboard from the saved state and
# bundle in place of the fallback. In a live JupyterLab, next to a widget view's output, it first
# waits a while for that view to draw. It watches the output area until a refresh replaces it
# (``globalThis.__calwatchStaticGuards`` counts the guards watching, for tests).
_OUTPUT = """<div class="calwatch-static" id="{uid}">
<div class="calwatch-static-fallback">{fallback}</div>
<div class="calwatch-static-view"></div>
<script type="application/json" class="calwatch-static-state">{payload}</script>
<script type="application/json" class="calwatch-static-bundle">{bundle}</script>
<script>
(() => {{
  const box = document.getElementById("{uid}");
  if (box === null || box.dataset.started) return;
  box.dataset.started = "true";
  box.style.display = "none";
  const area = box.closest(".jp-OutputArea") || box.parentElement || document.body;
  const liveView = () =>
    [...area.querySelectorAll(".calwatch-widget")].some((el) => !el.closest(".calwatch-static"));
  let drawn = false;
  const draw = async () => {{
    if (drawn) return;
    drawn = true;
    try {{
      const read = (name) => JSON.parse(box.querySelector(".calwatch-static-" + name).textContent);
      const code = Uint8Array.from(atob(read("bundle")), (c) => c.charCodeAt(0));
      const url = URL.createObjectURL(new Blob([code], {{ type: "text/javascript" }}));
      const widget = await import(url);
      const state = read("state");
      box.querySelector(".calwatch-static-fallback").style.display = "none";
      widget.renderStatic(box.querySelector(".calwatch-static-view"), state.model, state.datasets);
      box.dataset.rendered = "true";
    }} catch (error) {{
      box.querySelector(".calwatch-static-fallback").style.display = "";
      box.dataset.error = String(error);
    }}
  }};
  const inApp = document.querySelector(".jp-LabShell, .jp-NotebookShell") !== null;
  let waiting = inApp && area.querySelector('[data-mime-type="{view_mime}"]') !== null;
  const decide = () => {{
    const live = liveView();
    box.dataset.live = String(live);
    if (live) {{ box.style.display = "none"; return; }}
    if (waiting) return;
    box.style.display = "";
    draw();
  }};
  // A refresh (update_display) replaces this output and runs a new guard: this one stops
  // watching the area once its box has left the page, or it would keep the old copy alive (its
  // coverage image is a whole SVG document) and answer every later change of the live view.
  const guards = globalThis;
  guards.__calwatchStaticGuards = (guards.__calwatchStaticGuards || 0) + 1;
  const observer = new MutationObserver(() => {{
    if (box.isConnected) return decide();
    observer.disconnect();
    guards.__calwatchStaticGuards -= 1;
  }});
  observer.observe(area, {{ childList: true, subtree: true }});
  if (waiting) setTimeout(() => {{ waiting = false; decide(); }}, {wait});
  decide();
}})();
</script>
</div>"""
