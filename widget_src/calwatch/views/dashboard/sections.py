"""The dashboard's sections (tabs): where each chart kind goes, the layout, and the panel specs.

:mod:`calwatch.views.charts` builds one Altair chart per *chart kind* from per-batch statistics of the
whole stream. The dashboard arranges those charts in sections (Overview, Coverage, Risk,
Calibration, Sets, Shift, Regression) and adds *panels* that the kernel recomputes from the raw
rows still kept in the window (:mod:`calwatch.views.dashboard.panels`).

Every spec reads named datasets and declares the parameters ``calibrator``, ``batch_lo``,
``batch_hi`` and ``class_filter``: the front end sets them as Vega signals, so the brush and the
class filter cost a signal update, never a re-embed. Rows without a ``batch`` (or ``class``)
field are not filtered by them.

Placing chart kinds
-------------------
:data:`SECTIONS` lists the kinds of each section, in tab order. A kind it does not list goes
to :func:`section_of`'s guess from its name (``"pit"`` → Regression, ``"kept_share"`` → Risk…),
else to :data:`DEFAULT_SECTION`; :func:`place` registers a new kind explicitly.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import altair as alt

from calwatch.core.guard import one_moment
from calwatch.engine.metrics.calibration import ROWS_PER_BIN
from calwatch.kinds import find_kind
from calwatch.views import charts, slice_history, where_it_fails

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor


#: Sections (tabs) in display order, each with the chart kinds and panels it shows.
SECTIONS: dict[str, list[str]] = {
    "Overview": ["labels"],
    "Coverage": ["coverage", "what_if", "class_coverage", "admitted"],
    "Risk": ["risk", "risk_gap", "kept_share", "selective_curve"],
    "Calibration": ["reliability"],
    "Sets": ["set_size", "set_by_class", "set_shares", "set_sizes"],
    "Shift": ["shift_lanes", "shift", "aci"],
    "Slices": ["where_it_fails", "slice_values"],
    "Regression": ["interval_width", "fan", "pit", "interval_coverage"],
}
#: Where a kind goes that neither :data:`SECTIONS` nor the name hints place.
DEFAULT_SECTION = "Coverage"
#: Name fragments -> section, for kinds nobody placed yet (first match wins).
_HINTS: tuple[tuple[str, str], ...] = (
    ("interval", "Regression"),
    ("pit", "Regression"),
    ("fan", "Regression"),
    ("regress", "Regression"),
    ("risk", "Risk"),
    ("selective", "Risk"),
    ("kept", "Risk"),
    ("shift", "Shift"),
    ("martingale", "Shift"),
    ("aci", "Shift"),
    ("reliab", "Calibration"),
    ("calib", "Calibration"),
    ("set", "Sets"),
    ("size", "Sets"),
    ("admit", "Coverage"),
    ("cover", "Coverage"),
)
#: Dashboard panels (specs built here, recomputed from the window by the kernel).
PANELS = ("what_if", "reliability", "set_by_class", "shift_lanes", "where_it_fails", "slice_values")
#: The datasets the dashboard adds to :data:`calwatch.views.charts.CHART_DATASETS`.
PANEL_DATASETS = (
    "overview", "health", "notes", "what_if", "reliability", "set_by_class", "timeline", "shift_lanes",
    "slices", "slice_coverage",
)  # fmt: skip
#: Datasets recomputed from the window's raw rows (replaced wholesale, see the protocol);
#: ``slice_coverage`` only while a view has picked a slice (:mod:`calwatch.views.slice_history`).
WINDOW_PANEL_DATASETS = ("what_if", "reliability", "set_by_class", "slice_coverage")

BATCH_LO, BATCH_HI, CLASS_FILTER = "batch_lo", "batch_hi", "class_filter"
#: Rows with no ``batch`` field pass; the others (a bucket from ``batch`` to ``batch_end``, or one
#: batch) must overlap [batch_lo, batch_hi] when set.
BATCH_FILTER = (
    f"{BATCH_LO} == null || datum.batch == null || ((datum.batch_end == null ? datum.batch : datum.batch_end)"
    f" >= {BATCH_LO} && datum.batch <= {BATCH_HI})"
)
CLASS_FILTER_EXPR = f"{CLASS_FILTER} == '' || datum['class'] == null || datum['class'] == {CLASS_FILTER}"

#: Per chart: the dataset and field that must have a non-null value, and the empty-state text.
EMPTY_STATES: dict[str, dict[str, str]] = {
    "coverage": {
        "dataset": "batches",
        "field": "coverage",
        "message": "No labels yet: coverage appears when labels arrive.",
    },
    "class_coverage": {
        "dataset": "class_coverage",
        "field": "n_labelled",
        "message": "No labels yet: coverage by class appears when labels arrive.",
    },
    "what_if": {
        "dataset": "what_if",
        "field": "batch",
        "message": (
            "Move the α slider to recompute sets and coverage on the window at another level (no refitting)."
        ),
    },
    "reliability": {
        "dataset": "reliability",
        "field": "accuracy",
        "message": (
            f"Not enough labelled rows in the window: the reliability diagram needs at least {ROWS_PER_BIN}."
        ),
    },
    "set_by_class": {
        "dataset": "set_by_class",
        "field": "n_rows",
        "message": "No rows in the window yet: set sizes by class appear once batches arrive.",
    },
    "risk": {
        "dataset": "batches",
        "field": "estimated_error",
        "message": "No batches yet: estimated error appears with the first batch.",
    },
    "risk_gap": {
        "dataset": "batches",
        "field": "observed_error",
        "message": "No labels yet: the gap between estimated and observed error appears when labels arrive.",
    },
    "set_size": {
        "dataset": "batches",
        "field": "mean_set_size",
        "message": "No batches yet.",
    },
    "set_shares": {
        "dataset": "batches",
        "field": "mean_set_size",
        "message": "No batches yet.",
    },
    "set_sizes": {
        "dataset": "set_sizes",
        "field": "count",
        "message": "No batches yet.",
    },
    "where_it_fails": {
        "dataset": "slices",
        "field": "slice",
        "message": f"No slice has {where_it_fails.MIN_ROWS} labelled rows yet: slices are tested then.",
    },
    "slice_values": {
        "dataset": "slices",
        "field": "slice",
        "message": "Coverage by value appears once a slice column's values have labelled rows.",
    },
    "shift_lanes": {
        "dataset": "shift_lanes",
        "field": "detector",
        "message": "No shift detectors yet: they start with calibrate().",
    },
    "shift": {
        "dataset": "shift",
        "field": "log10_statistic",
        "message": (
            "No shift statistics yet: detectors report from the first batch (label-based ones "
            "once labels arrive)."
        ),
    },
    "aci": {
        "dataset": "batches",
        "field": "alpha_level",
        "message": "No batches yet.",
    },
    "labels": {
        "dataset": "batches",
        "field": "n_rows",
        "message": "Waiting for the first batch: call observe() to send one.",
    },
}


# --------------------------------------------------------------------------- sections
def place(kind: str, section: str) -> None:
    """Show chart kind ``kind`` in ``section`` (a new section is added after the others).

    Examples
    --------
    >>> place("my_kind", "Risk"); section_of("my_kind")
    'Risk'
    >>> SECTIONS["Risk"].remove("my_kind")
    """
    for kinds in SECTIONS.values():
        if kind in kinds:
            kinds.remove(kind)
    SECTIONS.setdefault(section, []).append(kind)


def section_of(kind: str) -> str:
    """The section that shows chart kind ``kind`` (unknown kinds: guessed from the name).

    Examples
    --------
    >>> section_of("coverage"), section_of("pit"), section_of("kept_share"), section_of("zzz")
    ('Coverage', 'Regression', 'Risk', 'Coverage')
    """
    for section, kinds in SECTIONS.items():
        if kind in kinds:
            return section
    lowered = kind.lower()
    for fragment, section in _HINTS:
        if fragment in lowered:
            return section
    return DEFAULT_SECTION


def layout(kinds: Sequence[str], panels: Sequence[str] = PANELS) -> list[dict[str, Any]]:
    """Sections in tab order, each ``{"name", "charts"}``; empty sections left out (not Overview).

    ``charts`` keeps the order of :data:`SECTIONS` for known names, then the order given.

    Examples
    --------
    >>> [s["name"] for s in layout(["coverage", "labels"], ["reliability"])]
    ['Overview', 'Coverage', 'Calibration']
    """
    names = [*kinds, *(p for p in panels if p not in kinds)]
    order = {name: i for i, name in enumerate(k for ks in SECTIONS.values() for k in ks)}
    by_section: dict[str, list[str]] = {section: [] for section in SECTIONS}
    for name in names:
        by_section.setdefault(section_of(name), []).append(name)
    out = []
    for section, members in by_section.items():
        if not members and section != "Overview":
            continue
        members.sort(key=lambda n: order.get(n, len(order) + names.index(n)))
        out.append({"name": section, "charts": members})
    return out


@one_moment
def panels_for(monitor: Monitor) -> list[str]:
    """The dashboard panels that apply to a monitor."""
    if getattr(monitor, "task", None) == "regression":
        return []  # no classes, sets or confidences: the regression charts are the panels
    out = []
    if monitor.what_if_calibrators():
        out.append("what_if")
    out.append("reliability")
    if any(getattr(find_kind(c), "has_sets", False) for c in monitor.calibrators.values()):
        out.append("set_by_class")
    if monitor.shift_watch is not None:
        out.append("shift_lanes")
    if getattr(monitor, "_slices", None) is not None:  # calibrated with meta=: where it fails
        out += ["where_it_fails", "slice_values"]
    return out


# --------------------------------------------------------------------------- specs
def _params() -> list[dict[str, Any]]:
    return [
        {"name": charts.CALIBRATOR_PARAM, "value": charts.ALL_CALIBRATORS},
        {"name": BATCH_LO, "value": None},
        {"name": BATCH_HI, "value": None},
        {"name": CLASS_FILTER, "value": ""},
        {"name": charts.BATCH_NAMES, "value": None},
    ]


def with_view_filters(spec: dict[str, Any], *, batch: bool = True) -> dict[str, Any]:
    """A copy of a Vega-Lite spec filtered by the brush (batch range) and the class filter.

    The parameters ``batch_lo``, ``batch_hi`` and ``class_filter`` are declared at the top (the
    front end sets them as signals); the filters are prepended to the transforms of every node
    that defines named data, so they act on the raw rows before any aggregate.

    Examples
    --------
    >>> out = with_view_filters({"data": {"name": "batches"}, "mark": "point"})
    >>> [p["name"] for p in out["params"]], len(out["transform"])
    (['calibrator', 'batch_lo', 'batch_hi', 'class_filter', 'batch_names'], 2)
    """
    import copy

    out = copy.deepcopy(spec)
    filters = ([{"filter": BATCH_FILTER}] if batch else []) + [{"filter": CLASS_FILTER_EXPR}]

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for child in node:
                visit(child)
            return
        if not isinstance(node, dict):
            return
        data = node.get("data")
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            node["transform"] = [*filters, *node.get("transform", [])]
        for key in ("layer", "hconcat", "vconcat", "concat"):
            if key in node:
                visit(node[key])

    visit(out)
    own = (BATCH_LO, BATCH_HI, CLASS_FILTER, charts.BATCH_NAMES)
    params = [p for p in out.get("params", []) if p.get("name") not in own]
    out["params"] = [*params, *(p for p in _params() if p["name"] != charts.CALIBRATOR_PARAM)]
    if not any(p.get("name") == charts.CALIBRATOR_PARAM for p in out["params"]):
        out["params"].insert(0, _params()[0])
    return out


def _tooltip(*fields: tuple[str, str, str | None]) -> list[alt.Tooltip]:
    return [
        alt.Tooltip(f, title=t) if fmt is None else alt.Tooltip(f, title=t, format=fmt)
        for f, t, fmt in fields
    ]


def _cal_filter() -> str:
    return charts.CALIBRATOR_FILTER


def _panel_spec(chart: Any, title: str, height: int = charts.CHART_HEIGHT) -> dict[str, Any]:
    """A dashboard panel's Vega-Lite spec: titled and sized, with the view's parameters and filters."""
    spec: dict[str, Any] = chart.properties(width="container", height=height, title=title).to_dict()
    spec["params"] = [*spec.get("params", []), *_params()]
    return with_view_filters(spec)


def what_if_spec() -> dict[str, Any]:
    """Coverage per window batch recomputed at the chosen α, its 95% band and the target."""
    base = alt.Chart(alt.NamedData("what_if")).transform_filter(_cal_filter())
    x = alt.X("batch:Q", title="batch", scale=alt.Scale(nice=False), axis=charts.batch_ticks())
    color = alt.Color("calibrator:N", legend=alt.Legend(orient="bottom", title=None))
    tooltip = _tooltip(
        ("batch:Q", "batch", "d"), ("calibrator:N", "calibrator", None), ("alpha:Q", "α", ".3f"),
        ("coverage:Q", "coverage at α", ".4f"), ("coverage_lo:Q", "95% low", ".3f"),
        ("coverage_hi:Q", "95% high", ".3f"), ("target:Q", "target 1−α", ".3f"),
        ("n_covered:Q", "covered", ","), ("n_labelled:Q", "labelled", ","), ("n_rows:Q", "rows", ","),
        ("mean_set_size:Q", "mean set size", ".3f"), ("singleton_share:Q", "singletons", ".1%"),
    )  # fmt: skip
    labelled = base.transform_filter("datum.n_labelled > 0")
    # The legend is the lines' (solid symbols); the faint bands would give it faded ones.
    band = labelled.mark_area(opacity=0.15).encode(
        x=x, y=alt.Y("coverage_lo:Q", title="coverage"), y2="coverage_hi:Q", color=color.legend(None)
    )
    line = labelled.mark_line(point=True).encode(
        x=x, y=alt.Y("coverage:Q", scale=alt.Scale(zero=False)), color=color, tooltip=tooltip
    )
    target = base.mark_rule(strokeDash=[5, 4], color="#888").encode(
        y="mean(target):Q", tooltip=[alt.Tooltip("mean(target):Q", format=".3f", title="target 1−α")]
    )
    return _panel_spec(alt.layer(band, line, target), "Coverage at the chosen α (recomputed on the window)")


def reliability_spec() -> dict[str, Any]:
    """Reliability diagram: accuracy vs mean top-label confidence per equal-mass bin, 95% band."""
    base = alt.Chart(alt.NamedData("reliability"))
    x = alt.X("confidence:Q", title="mean confidence (top label)", scale=alt.Scale(domain=[0, 1]))
    tooltip = _tooltip(
        ("bin:Q", "bin", "d"), ("confidence:Q", "mean confidence", ".3f"),
        ("conf_lo:Q", "confidence from", ".3f"), ("conf_hi:Q", "confidence to", ".3f"),
        ("accuracy:Q", "accuracy", ".3f"), ("lo:Q", "95% low", ".3f"), ("hi:Q", "95% high", ".3f"),
        ("n_correct:Q", "correct", ","), ("n:Q", "rows", ","), ("gap:Q", "accuracy − confidence", "+.3f"),
    )  # fmt: skip
    diagonal = (
        alt.Chart(alt.InlineData(values=[{"a": 0.0, "b": 1.0}]))
        .mark_rule(strokeDash=[4, 3], color="#888")
        .encode(x="a:Q", y="a:Q", x2="b:Q", y2="b:Q")
    )
    band = base.mark_rule(strokeWidth=6, opacity=0.3).encode(
        x=x, y=alt.Y("lo:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])), y2="hi:Q", tooltip=tooltip
    )
    points = base.mark_line(point=True).encode(x=x, y="accuracy:Q", tooltip=tooltip)
    return _panel_spec(
        alt.layer(diagonal, band, points), "Reliability (labelled window rows, equal-mass bins)", height=200
    )


#: The Vega signal naming the detector whose evidence the ``shift`` chart shows ("": all of them).
DETECTOR_PICK = charts.DETECTOR_PICK
#: Episode states and their colours (as the warning cards and the health strip use them).
LANE_STATES = {"open": "#b42318", "acknowledged": "#9a6700", "closed": "#818b98"}


def shift_lanes_spec() -> dict[str, Any]:
    """A lane per shift detector: its alarm episodes over the batches, its state in words.

    Click a lane to see that detector's evidence alone in the ``shift`` chart below (the
    ``detector_pick`` signal; click it again for every detector). Hover says what the statistic
    means and what the detector promises.
    """
    base = alt.Chart(alt.NamedData("shift_lanes")).transform_filter(charts.MODEL_OR_CALIBRATOR_FILTER)
    y = alt.Y("detector:N", sort=alt.EncodingSortField("order"), title=None, axis=charts.name_axis(170))
    x = alt.X("lo:Q", title="batch", scale=alt.Scale(nice=False), axis=charts.batch_ticks())
    spans = base.transform_calculate(lo="datum.batch - 0.5", hi="datum.batch_end + 0.5")
    picked = f"{DETECTOR_PICK} == '' || datum.detector == {DETECTOR_PICK}"
    dimmed = alt.condition(picked, alt.value(1.0), alt.value(0.4))  # the lanes not picked
    lane_tip = _tooltip(
        ("detector:N", "detector", None), ("words:N", "now", None), ("meaning:N", "what it measures", None)
    )
    lanes = (
        spans.transform_filter("datum.row == 'lane'")
        .mark_bar(color="#e7ebef", height={"band": 0.7}, cursor="pointer")
        .encode(
            x=x,
            x2="hi:Q",
            y=y,
            tooltip=lane_tip,
            opacity=dimmed,
        )
    )
    episode_tip = _tooltip(
        ("detector:N", "detector", None), ("state:N", "state", None), ("words:N", "warning", None),
        ("episode:Q", "episode", "d"),
    )  # fmt: skip
    episodes = (
        spans.transform_filter("datum.row == 'episode'")
        .mark_bar(height={"band": 0.7}, cursor="pointer")
        .encode(
            x=x,
            x2="hi:Q",
            y=y,
            color=alt.Color(
                "state:N",
                scale=alt.Scale(domain=list(LANE_STATES), range=list(LANE_STATES.values())),
                legend=alt.Legend(orient="bottom", title="alarm episodes"),
            ),
            tooltip=episode_tip,
            opacity=dimmed,
        )
    )
    words = (
        spans.transform_filter("datum.row == 'lane'")
        .mark_text(
            align="left", baseline="middle", fontSize=10, dx=2, color="#1f2328", limit={"expr": "width - 4"}
        )
        .encode(x=alt.X("lo:Q"), y=y, text="words:N", tooltip=lane_tip)
    )
    chart = alt.layer(lanes, episodes, words).add_params(alt.param(name=DETECTOR_PICK, value=""))
    spec = _panel_spec(chart, "Shift detectors: alarm episodes (click a lane for its evidence)")
    spec["height"] = {"step": 26}
    return spec


def where_it_fails_spec() -> dict[str, Any]:
    """Slices ranked by evidence of a shortfall, flagged at the stated FDR (:mod:`.where_it_fails`)."""
    title = "Where it fails: slices by evidence of a shortfall"
    spec = _panel_spec(where_it_fails.ranking_chart(), title)
    spec["height"] = {"step": 18}
    return spec


def slice_values_spec() -> dict[str, Any]:
    """Coverage by value of one slice column: the one clicked above, at first the weakest one's."""
    spec = _panel_spec(
        where_it_fails.values_chart(), "Coverage by value (click a slice above for its column)"
    )
    spec["height"] = {"step": 18}
    return spec


def set_by_class_spec() -> dict[str, Any]:
    """Singleton share by predicted class and calibrator over the window's rows."""
    base = alt.Chart(alt.NamedData("set_by_class")).transform_filter(_cal_filter())
    tooltip = _tooltip(
        ("class:N", "predicted class", None), ("calibrator:N", "calibrator", None),
        ("singleton_share:Q", "singletons", ".1%"), ("n_singleton:Q", "singleton rows", ","),
        ("n_rows:Q", "rows", ","), ("mean_set_size:Q", "mean set size", ".3f"),
    )  # fmt: skip
    bars = base.mark_bar().encode(
        x=alt.X("class:N", title="predicted class", axis=alt.Axis(labelAngle=0, labelLimit=80)),
        xOffset="calibrator:N",
        y=alt.Y(
            "singleton_share:Q",
            title="singleton share",
            axis=alt.Axis(format="%"),
            scale=alt.Scale(domain=[0, 1]),
        ),
        color=alt.Color("calibrator:N", legend=alt.Legend(orient="bottom", title=None)),
        tooltip=tooltip,
    )
    return _panel_spec(bars, "Singleton share by predicted class (window)")


def timeline_spec() -> dict[str, Any]:
    """Rows and labelled rows per batch, notes, and the brush that filters every other view."""
    per_batch = alt.Chart(alt.NamedData("timeline"))
    x = charts.batch_axis("batch", title=None)
    tooltip = _tooltip(
        ("name:N", "batch", None),
        ("rows:Q", "rows per batch", ",.0f"),
        ("labelled:Q", "labelled per batch", ",.0f"),
        ("n_rows:Q", "rows", ","),
        ("n_labelled:Q", "labelled", ","),
    )
    brush = alt.selection_interval(name="brush", encodings=["x"])
    rows = (
        per_batch.mark_area(opacity=0.35, interpolate="step-after")
        .encode(
            x=x,
            # not stacked: a stack (and its impute) recomputes every bucket on each update
            y=alt.Y("rows:Q", title="rows", stack=None, axis=alt.Axis(tickCount=2, format="~s")),
            tooltip=tooltip,
        )
        .add_params(brush)
    )
    labelled = per_batch.mark_line(interpolate="step-after", strokeWidth=1.5).encode(x=x, y="labelled:Q")
    span = charts.x_span(per_batch, title=None)
    notes = (
        alt.Chart(alt.NamedData("notes"))
        .transform_filter("datum.batch != null")
        .mark_rule(color="#e45756", strokeWidth=2)
        .encode(
            x="batch:Q",
            tooltip=_tooltip(
                ("batch:Q", "note on batch", "d"),
                ("author:N", "by", None),
                ("at:N", "at", None),
                ("text:N", "note", None),
            ),
        )
    )
    # No title: the widget writes its caption (a Vega title does not wrap in a 250 px sidebar).
    chart = alt.layer(rows, labelled, notes, span).properties(width="container", height=48)
    spec: dict[str, Any] = chart.to_dict()
    spec["params"] = [*spec.get("params", []), *_params()]
    return spec


PANEL_SPECS = {
    "what_if": what_if_spec, "reliability": reliability_spec, "set_by_class": set_by_class_spec,
    "shift_lanes": shift_lanes_spec, "where_it_fails": where_it_fails_spec, "slice_values": slice_values_spec,
}  # fmt: skip


def specs(kinds: Sequence[str], panels: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Every live spec: the chart kinds (filtered by brush and class), the panels and ``timeline``.

    The specs depend on the kinds and panels only (they read named datasets), and building them
    through Altair's validation takes about a second: they are built once per kinds and panels
    and each call gets its own copy.
    """
    copy: dict[str, dict[str, Any]] = json.loads(_specs_json(tuple(kinds), tuple(panels)))
    return copy


@functools.lru_cache(maxsize=16)
def _specs_json(kinds: tuple[str, ...], panels: tuple[str, ...]) -> str:
    out = {name: with_view_filters(spec) for name, spec in charts.live_specs(list(kinds)).items()}
    if "where_it_fails" in panels:  # a monitor that slices: a slice's own series
        if "coverage" in out:
            out["coverage"] = with_view_filters(slice_history.coverage_spec())
        if "set_size" in out:
            out["set_size"] = with_view_filters(slice_history.set_size_spec())
    for name in panels:
        out[name] = PANEL_SPECS[name]()
    out["timeline"] = timeline_spec()
    return json.dumps(out)
