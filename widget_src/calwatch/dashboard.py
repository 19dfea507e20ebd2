"""The dashboard around the charts: sections (tabs), overview cards, and window-derived panels.

:mod:`calwatch.charts` builds one Altair chart per *chart kind* from per-batch statistics of the
whole stream. The dashboard arranges those charts in sections (Overview, Coverage, Risk,
Calibration, Sets, Shift, Regression) and adds *panels* that the kernel recomputes from the raw
rows still kept in the window:

- ``what_if``: coverage and set sizes recomputed at another level α from the fitted scores
  (:meth:`Monitor.what_if`, no refitting), for the most recent ``window_rows`` rows;
- ``reliability``: a reliability diagram of the labelled window rows (top-label confidence in
  ``m = min(15, ⌊n/25⌋)`` equal-mass bins, observed accuracy with a 95% Clopper-Pearson band);
- ``set_by_class``: singleton share and mean set size by predicted class;
- ``timeline``: rows and labels per batch, notes pinned to batches, and the brush (an interval
  selection) that filters every other view to a range of batches. It always spans the whole
  stream (:func:`timeline`); past :data:`~calwatch.resolution.MAX_POINTS` batches it, like the
  per-batch charts, draws buckets of consecutive batches (:mod:`calwatch.resolution`), and the
  live widget re-sends the other panels at the brushed range's own resolution.

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
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import altair as alt
import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch import charts
from calwatch.cards import overview_rows
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.guard import one_moment
from calwatch.kinds import find_kind
from calwatch.kinds.sets import POPCOUNT

if TYPE_CHECKING:
    from calwatch.monitor import Monitor

#: Sections (tabs) in display order, each with the chart kinds and panels it shows.
SECTIONS: dict[str, list[str]] = {
    "Overview": ["labels"],
    "Coverage": ["coverage", "what_if", "class_coverage", "admitted"],
    "Risk": ["risk", "risk_gap", "kept_share", "selective_curve"],
    "Calibration": ["reliability"],
    "Sets": ["set_size", "set_by_class", "set_shares", "set_sizes"],
    "Shift": ["shift", "aci"],
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
PANELS = ("what_if", "reliability", "set_by_class")
#: The datasets the dashboard adds to :data:`calwatch.charts.DATASETS`.
DATASETS = ("overview", "health", "notes", "what_if", "reliability", "set_by_class", "timeline")
#: Datasets recomputed from the window's raw rows (replaced wholesale, see the protocol).
WINDOW_DATASETS = ("what_if", "reliability", "set_by_class")

BATCH_LO, BATCH_HI, CLASS_FILTER = "batch_lo", "batch_hi", "class_filter"
#: Rows with no ``batch`` field pass; the others (a bucket from ``batch`` to ``batch_end``, or one
#: batch) must overlap [batch_lo, batch_hi] when set.
BATCH_FILTER = (
    f"{BATCH_LO} == null || datum.batch == null || ((datum.batch_end == null ? datum.batch : datum.batch_end)"
    f" >= {BATCH_LO} && datum.batch <= {BATCH_HI})"
)
CLASS_FILTER_EXPR = f"{CLASS_FILTER} == '' || datum['class'] == null || datum['class'] == {CLASS_FILTER}"
MAX_BINS = 15
ROWS_PER_BIN = 25
_HEIGHT = 150

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
        "message": "No batches yet: observe a batch to start.",
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
    return out


# --------------------------------------------------------------------------- specs
def _params() -> list[dict[str, Any]]:
    return [
        {"name": charts.CALIBRATOR_PARAM, "value": charts.ALL_CALIBRATORS},
        {"name": BATCH_LO, "value": None},
        {"name": BATCH_HI, "value": None},
        {"name": CLASS_FILTER, "value": ""},
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
    (['calibrator', 'batch_lo', 'batch_hi', 'class_filter'], 2)
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
    params = [p for p in out.get("params", []) if p.get("name") not in (BATCH_LO, BATCH_HI, CLASS_FILTER)]
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
    param = charts.CALIBRATOR_PARAM
    return f"{param} == '{charts.ALL_CALIBRATORS}' || datum.calibrator == {param}"


def _finish(chart: Any, title: str, height: int = _HEIGHT) -> dict[str, Any]:
    spec: dict[str, Any] = chart.properties(width="container", height=height, title=title).to_dict()
    spec["params"] = [*spec.get("params", []), *_params()]
    return with_view_filters(spec)


def what_if_spec() -> dict[str, Any]:
    """Coverage per window batch recomputed at the chosen α, its 95% band and the target."""
    base = alt.Chart(alt.NamedData("what_if")).transform_filter(_cal_filter())
    x = alt.X("batch:Q", title="batch", scale=alt.Scale(nice=False), axis=alt.Axis(format="d", tickMinStep=1))
    color = alt.Color("calibrator:N", legend=alt.Legend(orient="bottom", title=None))
    tooltip = _tooltip(
        ("batch:Q", "batch", "d"), ("calibrator:N", "calibrator", None), ("alpha:Q", "α", ".3f"),
        ("coverage:Q", "coverage at α", ".4f"), ("coverage_lo:Q", "95% low", ".3f"),
        ("coverage_hi:Q", "95% high", ".3f"), ("target:Q", "target 1−α", ".3f"),
        ("n_covered:Q", "covered", ","), ("n_labelled:Q", "labelled", ","), ("n_rows:Q", "rows", ","),
        ("mean_set_size:Q", "mean set size", ".3f"), ("singleton_share:Q", "singletons", ".1%"),
    )  # fmt: skip
    labelled = base.transform_filter("datum.n_labelled > 0")
    band = labelled.mark_area(opacity=0.15).encode(
        x=x, y=alt.Y("coverage_lo:Q", title="coverage"), y2="coverage_hi:Q", color=color
    )
    line = labelled.mark_line(point=True).encode(
        x=x, y=alt.Y("coverage:Q", scale=alt.Scale(zero=False)), color=color, tooltip=tooltip
    )
    target = base.mark_rule(strokeDash=[5, 4], color="#888").encode(
        y="mean(target):Q", tooltip=[alt.Tooltip("mean(target):Q", format=".3f", title="target 1−α")]
    )
    return _finish(alt.layer(band, line, target), "Coverage at the chosen α (recomputed on the window)")


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
    return _finish(
        alt.layer(diagonal, band, points), "Reliability (labelled window rows, equal-mass bins)", height=200
    )


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
    return _finish(bars, "Singleton share by predicted class (window)")


@one_moment
def timeline(
    monitor: Monitor, batches: Sequence[int] | None = None, *, width: int | None = None
) -> pl.DataFrame:
    """The ``timeline`` dataset: rows and labelled rows per bucket of batches, whole stream.

    One row per bucket of ``width`` batches (default: the whole stream's
    :func:`~calwatch.resolution.bucket_width`), or only the buckets holding ``batches``. Columns
    ``key, batch, batch_end, n_batches, name, n_rows, n_labelled, rows, labelled, span_end,
    axis_end`` (``rows`` and ``labelled`` are per batch: the bucket's means; ``span_end`` is the
    last batch the bucket holds once full, ``axis_end`` how far the x axis reaches while it is the
    latest bucket).
    """
    from calwatch.resolution import Resolution, bucket_records

    schema: dict[str, Any] = {
        "key": pl.String, "batch": pl.Int64, "batch_end": pl.Int64, "n_batches": pl.Int64, "name": pl.String,
        "n_rows": pl.Int64, "n_labelled": pl.Int64, "rows": pl.Float64, "labelled": pl.Float64,
        "span_end": pl.Int64, "axis_end": pl.Int64,
    }  # fmt: skip
    resolution = Resolution.whole(monitor.n_batches) if width is None else Resolution(width)
    if monitor.calibration_ is None:
        return pl.DataFrame(schema=schema)
    rows = []
    for record, end in bucket_records(monitor.batch_records, resolution, batches):
        n = end - record.index + 1
        rows.append(
            {
                "key": str(record.index), "batch": record.index, "batch_end": end, "n_batches": n,
                "name": record.name, "n_rows": record.n_rows, "n_labelled": record.n_labelled,
                "rows": record.n_rows / n, "labelled": record.n_labelled / n,
                "span_end": record.index + resolution.width - 1,
                "axis_end": resolution.axis_end(record.index),
            }
        )  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


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


PANEL_SPECS = {"what_if": what_if_spec, "reliability": reliability_spec, "set_by_class": set_by_class_spec}


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
    for name in panels:
        out[name] = PANEL_SPECS[name]()
    out["timeline"] = timeline_spec()
    return json.dumps(out)


# --------------------------------------------------------------------------- window rows
@one_moment
def window_batches(monitor: Monitor, window_rows: int = 0) -> list[int]:
    """Indices of the most recent window batches holding at most ``window_rows`` rows (0 = all).

    The newest batch is always included, even when it alone exceeds ``window_rows``.
    """
    records = monitor.window_records()
    if window_rows <= 0:
        return [r.index for r in records]
    out: list[int] = []
    total = 0
    for record in reversed(records):
        if out and total + record.n_rows > window_rows:
            break
        out.append(record.index)
        total += record.n_rows
    return sorted(out)


def _selected_records(monitor: Monitor, window_rows: int, batch_range: Sequence[int] | None) -> list[Any]:
    keep = set(window_batches(monitor, window_rows))
    lo, hi = (batch_range[0], batch_range[1]) if batch_range else (-math.inf, math.inf)
    return [r for r in monitor.window_records() if r.index in keep and lo <= r.index <= hi]


def reliability_bins(
    confidence: npt.ArrayLike,
    correct: npt.ArrayLike,
    *,
    max_bins: int = MAX_BINS,
    per_bin: int = ROWS_PER_BIN,
) -> pl.DataFrame:
    """Equal-mass reliability bins of top-label confidence with 95% Clopper-Pearson bands.

    ``m = min(max_bins, ⌊n / per_bin⌋)`` bins of (almost) equal size over the rows sorted by
    confidence (ties keep their input order); no bins below ``per_bin`` rows.

    Examples
    --------
    >>> out = reliability_bins([0.9, 0.6, 0.8, 0.7], [1, 0, 1, 1], per_bin=2)
    >>> out["n"].to_list(), out["confidence"].round(6).to_list(), out["accuracy"].to_list()
    ([2, 2], [0.65, 0.85], [0.5, 1.0])
    """
    conf = np.asarray(confidence, dtype=np.float64)
    hit = np.asarray(correct, dtype=bool)
    order = np.argsort(conf, kind="stable")
    return sorted_reliability_bins(conf[order], hit[order], max_bins=max_bins, per_bin=per_bin)


def sorted_reliability_bins(
    confidence: npt.NDArray[np.float64],
    correct: npt.NDArray[np.bool_],
    *,
    max_bins: int = MAX_BINS,
    per_bin: int = ROWS_PER_BIN,
) -> pl.DataFrame:
    """:func:`reliability_bins` of rows already sorted by confidence."""
    conf, hit = confidence, correct
    n = conf.shape[0]
    m = min(max_bins, n // per_bin)
    schema: dict[str, Any] = {
        "key": pl.String, "bin": pl.Int64, "n": pl.Int64, "n_correct": pl.Int64,
        "confidence": pl.Float64, "conf_lo": pl.Float64, "conf_hi": pl.Float64,
        "accuracy": pl.Float64, "lo": pl.Float64, "hi": pl.Float64, "gap": pl.Float64,
    }  # fmt: skip
    if m == 0:
        return pl.DataFrame(schema=schema)
    parts = np.array_split(np.arange(n), m)
    sizes = np.array([part.shape[0] for part in parts], dtype=np.int64)
    correct = np.array([int(hit[part].sum()) for part in parts], dtype=np.int64)
    means = np.array([float(conf[part].mean()) for part in parts])
    lo, hi = clopper_pearson(correct, sizes)
    accuracy = correct / sizes
    columns = {
        "key": [str(i) for i in range(m)], "bin": list(range(m)), "n": sizes, "n_correct": correct,
        "confidence": means, "conf_lo": [float(conf[part].min()) for part in parts],
        "conf_hi": [float(conf[part].max()) for part in parts], "accuracy": accuracy, "lo": lo, "hi": hi,
        "gap": accuracy - means,
    }  # fmt: skip
    return pl.DataFrame(columns, schema=schema)


#: A window batch's labelled rows by confidence: confidences, whether the top label is right.
Run = tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]
#: Per set calibrator: rows, singleton rows and summed set sizes, by predicted class.
SetCounts = dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]]
#: Past this many tied confidences a run is merged by sorting the whole window again.
_MAX_TIES = 64


def _version(record: Any) -> Any:
    """What changes when a batch's labels change: its statistics are replaced (never changed in place)."""
    return next(iter(record.stats.values()))


def _sorted_runs(
    runs: dict[int, Run],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """Rows of ``runs`` (by batch, in batch order) by (confidence, batch, row): confidences, hits, batches."""
    parts = list(runs.values())
    conf = np.concatenate([c for c, _ in parts]) if parts else np.zeros(0)
    hit = np.concatenate([h for _, h in parts]) if parts else np.zeros(0, dtype=bool)
    batch = np.repeat(np.fromiter(runs, dtype=np.int64, count=len(runs)), [c.shape[0] for c, _ in parts])
    # Each run is sorted (ties in row order) and runs come in batch order: a stable sort gives
    # the order of the rows taken in stream order.
    order = np.argsort(conf, kind="stable")
    return conf[order], hit[order], batch[order]


class _SortedWindow:
    """The labelled rows of some window batches sorted by (confidence, batch, row)."""

    def __init__(self, wanted: int | None, runs: dict[int, tuple[Any, Run]]) -> None:
        self.wanted = wanted
        self.versions = {batch: version for batch, (version, _) in runs.items()}
        self.conf, self.hit, self.batch = _sorted_runs({batch: run for batch, (_, run) in runs.items()})

    def update(self, stale: list[int], fresh: dict[int, tuple[Any, Run]]) -> bool:
        """Take out the rows of ``stale`` batches and merge in those of ``fresh`` ones (in batch order).

        False (and nothing changed) when too many confidences tie to merge them.
        """
        if stale:
            keep = ~np.isin(self.batch, stale)
            base_conf, base_hit, base_batch = self.conf[keep], self.hit[keep], self.batch[keep]
        else:
            base_conf, base_hit, base_batch = self.conf, self.hit, self.batch
        kept = [b for b in self.versions if b not in stale]
        if not fresh:
            self.conf, self.hit, self.batch = base_conf, base_hit, base_batch
            self.versions = {b: self.versions[b] for b in kept}
            return True
        conf, hit, batch = _sorted_runs({b: run for b, (_, run) in fresh.items()})
        # Equal confidences go after the rows of earlier batches, before those of later ones.
        if not kept or min(fresh) > max(kept):  # the usual case: labels of the newest batches
            at = np.searchsorted(base_conf, conf, side="right")
        elif max(fresh) < min(kept):
            at = np.searchsorted(base_conf, conf, side="left")
        else:
            at = np.searchsorted(base_conf, conf, side="left")
            hi = np.searchsorted(base_conf, conf, side="right")
            tied = np.flatnonzero(hi > at)
            if tied.shape[0] > _MAX_TIES:
                return False
            for i in tied.tolist():  # a tie group is sorted by batch
                at[i] += np.searchsorted(base_batch[at[i] : hi[i]], batch[i])
        # Rows of fresh batches at one place go in their own (confidence, batch, row) order.
        self.conf = np.insert(base_conf, at, conf)
        self.hit = np.insert(base_hit, at, hit)
        self.batch = np.insert(base_batch, at, batch)
        self.versions = {b: self.versions[b] for b in kept} | {b: v for b, (v, _) in fresh.items()}
        return True


class RowCache:
    """What the window panels derive from a batch's raw rows, kept across refreshes of a live view.

    A batch's probabilities and prediction sets do not change once it is observed, and its labels
    change only in a call that replaces its statistics. So a refresh of the window panels merges
    in the batches that arrived or changed since the last one and takes out those that left:
    the reliability diagram's rows stay sorted by confidence (a merge, not a sort of the window)
    and the set counts by class are running sums. Results are those of a computation from scratch
    (integer counts; the same sorted order). It holds about 40 bytes per window row.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Any, dict[str, Any]]] = {}
        self._sorted: _SortedWindow | None = None
        self._sums: tuple[dict[int, SetCounts], SetCounts] | None = None
        #: The what-if panel's rows at one α: per batch, (its rows, their version, its rows at α).
        self._what_if: tuple[float, dict[int, tuple[Any, Any, pl.DataFrame]]] | None = None

    def what_if(self, monitor: Monitor, alpha: float, batches: Sequence[int]) -> pl.DataFrame:
        """:meth:`Monitor.what_if` at ``alpha`` for the window batches ``batches``, in its order.

        A batch's rows at ``alpha`` depend only on its probabilities (fixed once observed), its
        labels (which change only by replacing its statistics: :func:`_version`) and the fitted
        calibration scores (a calibrate builds a new cache), so only the batches that arrived or
        changed since the last call at the same ``alpha`` are recomputed: about two per call of a
        stream with labels one batch late, instead of the whole window.
        """
        records = {r.index: r for r in monitor.window_records()}
        held = self._what_if[1] if self._what_if is not None and self._what_if[0] == alpha else {}
        fresh = [
            b
            for b in batches
            if (entry := held.get(b)) is None
            or entry[0] is not records[b].rows
            or entry[1] is not _version(records[b])
        ]
        if fresh:
            computed = monitor.what_if(alpha, batches=fresh)
            parts = computed.partition_by("batch", as_dict=True, maintain_order=True)
            for b in fresh:
                part = parts.get((b,), computed.clear())
                held[b] = (records[b].rows, _version(records[b]), part)
        self._what_if = (alpha, {b: held[b] for b in batches})
        frames = [held[b][2] for b in batches]
        if not frames:
            return monitor.what_if(alpha, batches=())
        order = {key: i for i, key in enumerate(monitor.what_if_calibrators())}
        rank = pl.col("calibrator").replace_strict(order, return_dtype=pl.Int64)
        return pl.concat(frames).sort(rank, "batch", maintain_order=True)

    def prune(self, monitor: Monitor) -> None:
        """Drop the per-batch entries of batches that are no longer in the window."""
        kept = {r.index for r in monitor.window_records()}
        for index in [i for i in self._entries if i not in kept]:
            del self._entries[index]

    def values(self, record: Any) -> dict[str, Any]:
        """The cached values of a window batch (a new entry if its rows changed)."""
        entry = self._entries.get(record.index)
        if entry is None or entry[0] is not record.rows:
            entry = self._entries[record.index] = (record.rows, {})
        return entry[1]

    def sorted_window(
        self, records: Sequence[Any], wanted: int | None, run: Callable[[Any], Run]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """The labelled rows of ``records`` (``run`` of each) by confidence, kept from the last call."""
        versions = {r.index: _version(r) for r in records}
        state = self._sorted
        if state is not None and state.wanted == wanted:
            stale = [b for b, v in state.versions.items() if versions.get(b) is not v]
            fresh = [r for r in records if state.versions.get(r.index) is not versions[r.index]]
            # a merge copies the arrays once: unless most batches changed, cheaper than a sort
            if fresh and len(stale) + len(fresh) < len(records):
                if state.update(stale, {r.index: (versions[r.index], run(r)) for r in fresh}):
                    return state.conf, state.hit
            elif not fresh:
                if stale:
                    state.update(stale, {})
                return state.conf, state.hit
        state = self._sorted = _SortedWindow(wanted, {r.index: (versions[r.index], run(r)) for r in records})
        return state.conf, state.hit

    def window_sums(self, records: Sequence[Any], counts: Callable[[Any], SetCounts]) -> SetCounts:
        """Set counts of ``records`` summed per calibrator, kept from the last call.

        The last call's sums, less the batches that left, plus those that arrived: integer counts,
        so the sum of them all.
        """
        parts, totals = self._sums if self._sums is not None else ({}, {})
        wanted = {r.index: r for r in records}
        for batch in [b for b in parts if b not in wanted]:
            for key, old in parts.pop(batch).items():
                for total, value in zip(totals[key], old, strict=True):
                    total -= value
        for index, record in wanted.items():
            if index in parts:
                continue
            added = parts[index] = counts(record)
            for key, (n, single, size) in added.items():
                if key not in totals:
                    K = n.shape[0]
                    totals[key] = (np.zeros(K, np.int64), np.zeros(K, np.int64), np.zeros(K, np.int64))
                for total, value in zip(totals[key], (n, single, size), strict=True):
                    total += value
        self._sums = (parts, totals)
        return totals


def _by_confidence(record: Any, cache: RowCache | None) -> tuple[Any, Any, Any]:
    """A window batch's rows by top-label confidence (stable): the order, the confidences, the top labels."""
    values = {} if cache is None else cache.values(record)
    found = values.get("by_confidence")
    if found is None:
        probs = record.rows.probs
        conf, top = probs.max(axis=1), probs.argmax(axis=1)
        order = np.argsort(conf, kind="stable")
        found = values["by_confidence"] = (order, conf[order], top[order])
    return found


def _labelled_run(record: Any, wanted: int | None, cache: RowCache | None) -> Run:
    """A window batch's labelled rows (predicted as class ``wanted``, if given) by confidence."""
    order, conf, top = _by_confidence(record, cache)
    labels = record.rows.labels[order]
    labelled = labels >= 0
    conf, top, labels = conf[labelled], top[labelled], labels[labelled]
    if wanted is None:
        return conf, top == labels
    keep = top == wanted
    return conf[keep], (top == labels)[keep]


@one_moment
def reliability(
    monitor: Monitor,
    *,
    window_rows: int = 0,
    batch_range: Sequence[int] | None = None,
    class_filter: str = "",
    cache: RowCache | None = None,
) -> pl.DataFrame:
    """Reliability diagram of the labelled window rows (see :func:`reliability_bins`).

    Parameters
    ----------
    window_rows : int
        Only the most recent batches holding at most this many rows (0 = the whole window).
    batch_range : (int, int), optional
        Only batches in this inclusive range.
    class_filter : str
        Only rows predicted as this class ("" = all).
    cache : RowCache, optional
        What an earlier call of a live view kept (the same result, at the cost of what changed).
    """
    if cache is not None:
        return sorted_reliability_bins(
            *_sorted_labelled(monitor, window_rows, batch_range, class_filter, cache)
        )
    wanted, records = _labelled_records(monitor, window_rows, batch_range, class_filter)
    # Each batch's labelled rows by confidence (ties in row order): the stable sort of all of them
    # gives the order it gives the window's rows taken in stream order.
    runs = [_labelled_run(r, wanted, None) for r in records]
    if not runs:
        return reliability_bins(np.zeros(0), np.zeros(0, dtype=bool))
    return reliability_bins(np.concatenate([c for c, _ in runs]), np.concatenate([h for _, h in runs]))


def _labelled_records(
    monitor: Monitor, window_rows: int, batch_range: Sequence[int] | None, class_filter: str
) -> tuple[int | None, list[Any]]:
    """The class index picked (None: all) and the selected window batches with labelled rows."""
    classes = [str(c) for c in monitor.classes_.tolist()]
    wanted = classes.index(class_filter) if class_filter in classes else None
    records = [
        r
        for r in _selected_records(monitor, window_rows, batch_range)
        if r.rows.probs.shape[1] > 0 and r.n_labelled > 0  # not a regression row; labelled
    ]
    return wanted, records


def _sorted_labelled(
    monitor: Monitor, window_rows: int, batch_range: Sequence[int] | None, class_filter: str, cache: RowCache
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The selected labelled window rows by confidence, and whether their top label is right (kept)."""
    wanted, records = _labelled_records(monitor, window_rows, batch_range, class_filter)
    cache.prune(monitor)
    return cache.sorted_window(records, wanted, lambda r: _labelled_run(r, wanted, cache))


@one_moment
def keep_current(
    monitor: Monitor,
    cache: RowCache,
    *,
    window_rows: int = 0,
    batch_range: Sequence[int] | None = None,
    class_filter: str = "",
) -> None:
    """Bring a live view's cache up to the window as it is now, ahead of the panels' next refresh.

    Called after each batch or label call, it spreads the panels' work over the calls (each merges
    in its own batch) instead of leaving it all to the refresh, which then only builds the bins.
    """
    if monitor.calibration_ is None or monitor.n_batches == 0:
        return
    _sorted_labelled(monitor, window_rows, batch_range, class_filter, cache)
    _set_totals(monitor, window_rows, batch_range, cache)


def _set_counts(record: Any, K: int, cache: RowCache | None = None) -> SetCounts:
    """Per set calibrator of a window batch: rows, singleton rows and set sizes summed, by predicted class."""
    values = {} if cache is None else cache.values(record)
    found: SetCounts | None = values.get("set_counts")
    if found is None:
        rows = record.rows
        top = rows.probs.argmax(axis=1)
        found = {}
        for key, packed in rows.packed_sets.items():
            sizes = POPCOUNT[packed].sum(axis=1)
            found[key] = (
                np.bincount(top, minlength=K),
                np.bincount(top, weights=sizes == 1, minlength=K).astype(np.int64),
                np.bincount(top, weights=sizes, minlength=K).astype(np.int64),
            )
        values["set_counts"] = found
    return found


def _set_totals(
    monitor: Monitor, window_rows: int, batch_range: Sequence[int] | None, cache: RowCache
) -> SetCounts:
    """Set counts of the selected window batches summed per calibrator, kept in ``cache``."""
    K = len(monitor.classes_)
    # no set calibrator: risk, selective or regression rows
    records = [r for r in _selected_records(monitor, window_rows, batch_range) if r.rows.packed_sets]
    return cache.window_sums(records, lambda r: _set_counts(r, K, cache))


@one_moment
def set_by_class(
    monitor: Monitor,
    *,
    window_rows: int = 0,
    batch_range: Sequence[int] | None = None,
    cache: RowCache | None = None,
) -> pl.DataFrame:
    """Per set calibrator and predicted class: rows, singleton rows and mean set size (window).

    ``cache`` holds what an earlier call of a live view kept (the same result: integer counts).
    """
    classes = [str(c) for c in monitor.classes_.tolist()]
    totals = _set_totals(monitor, window_rows, batch_range, RowCache() if cache is None else cache)
    out: dict[str, list[Any]] = {
        k: [] for k in ("key", "calibrator", "class", "n_rows", "n_singleton", "size_sum")
    }
    for key, (n, single, size_sum) in totals.items():
        for c in np.flatnonzero(n):
            out["key"].append(f"{key}|{classes[c]}")
            out["calibrator"].append(key)
            out["class"].append(classes[c])
            out["n_rows"].append(int(n[c]))
            out["n_singleton"].append(int(single[c]))
            out["size_sum"].append(int(size_sum[c]))
    schema: dict[str, Any] = {
        "key": pl.String, "calibrator": pl.String, "class": pl.String,
        "n_rows": pl.Int64, "n_singleton": pl.Int64, "size_sum": pl.Int64,
    }  # fmt: skip
    n_rows = np.array(out["n_rows"], dtype=np.int64)
    shares = np.array(out["n_singleton"], dtype=np.int64) / n_rows
    sizes = np.array(out.pop("size_sum"), dtype=np.int64) / n_rows
    schema |= {"singleton_share": pl.Float64, "mean_set_size": pl.Float64}
    del schema["size_sum"]
    return pl.DataFrame(out | {"singleton_share": shares, "mean_set_size": sizes}, schema=schema)


@one_moment
def what_if(
    monitor: Monitor, alpha: float, *, window_rows: int = 0, cache: RowCache | None = None
) -> pl.DataFrame:
    """:meth:`Monitor.what_if` at ``alpha`` for the most recent ``window_rows`` rows, keyed.

    With ``cache`` (a live view's), only the batches that changed since its last call are
    recomputed (:meth:`RowCache.what_if`); the result is the same.
    """
    if not monitor.what_if_calibrators():
        return pl.DataFrame()
    keep = window_batches(monitor, window_rows)
    frame = monitor.what_if(alpha, batches=keep) if cache is None else cache.what_if(monitor, alpha, keep)
    return frame.with_columns(key=pl.concat_str("batch", "calibrator", separator="|"))


@one_moment
def what_if_info(monitor: Monitor, alpha: float | None, *, window_rows: int = 0) -> dict[str, Any]:
    """What the α control applies to: the calibrators, the window batches and rows."""
    records = {r.index: r.n_rows for r in monitor.window_records()}
    keep = window_batches(monitor, window_rows) if monitor.calibration_ is not None else []
    return {
        "alpha": alpha,
        "calibrators": monitor.what_if_calibrators() if monitor.calibration_ is not None else [],
        "first_batch": keep[0] if keep else None,
        "last_batch": keep[-1] if keep else None,
        "n_batches": len(keep),
        "n_rows": sum(records[i] for i in keep),
        "window": monitor.window,
        "targets": monitor.targets() if monitor.calibration_ is not None else {},
    }


# --------------------------------------------------------------------------- overview cards
@one_moment
def overview(monitor: Monitor, *, batch_range: Sequence[int] | None = None) -> pl.DataFrame:
    """Status cards of a monitor, over all batches or ``batch_range``.

    Per calibrator: target vs observed coverage, estimated vs observed error, admitted share and
    open warnings (see :func:`overview_rows`).
    """
    if monitor.calibration_ is None or monitor.n_batches == 0:
        batch_rows: list[dict[str, Any]] = []
    else:
        batch_rows = charts.batch_summary(monitor).to_dicts()
    watch = monitor.shift_watch
    return pl.DataFrame(
        overview_rows(
            batch_rows,
            calibrators=list(monitor.calibrators),
            labels=charts.calibrator_labels(monitor),
            warnings=[] if watch is None else watch.warning_records(),
            batch_range=batch_range,
        )
    )


@one_moment
def note_rows(monitor: Monitor, start: int = 0) -> list[dict[str, Any]]:
    """The monitor's notes from ``start`` on as ``notes`` dataset rows (key: the note id)."""
    return [{"key": str(r["note_id"]), **r} for r in monitor.notes().slice(start).to_dicts()]


@one_moment
def rows_page(
    monitor: Monitor,
    batch: int,
    *,
    page: int = 0,
    page_size: int = 20,
    calibrator: str = "",
    class_filter: str = "",
) -> dict[str, Any]:
    """One page of a window batch's rows for the row table: id, prediction, set, risk, label.

    ``calibrator`` picks the set / risk shown (default: the first of each kind);
    ``class_filter`` (a class name, "" = all) keeps the rows predicted as or labelled that class.
    """
    frame = monitor.rows(batch=batch)
    if class_filter and "prediction" in frame.columns:
        as_text = [pl.col(c).cast(pl.String) == class_filter for c in ("prediction", "label")]
        frame = frame.filter(as_text[0] | as_text[1].fill_null(False))
    cal = monitor.calibrators
    set_keys = [k for k in cal if f"set_{k}" in frame.columns]
    risk_keys = [k for k in cal if f"risk_{k}" in frame.columns]
    set_key = calibrator if calibrator in set_keys else (set_keys[0] if set_keys else None)
    risk_key = calibrator if calibrator in risk_keys else (risk_keys[0] if risk_keys else None)
    n = frame.height
    n_pages = max(1, math.ceil(n / page_size))
    page = min(max(0, page), n_pages - 1)
    part = frame.slice(page * page_size, page_size)
    columns = ["id", "prediction", "confidence", "set", "risk", "label"]
    rows = []
    for r in part.iter_rows(named=True):
        s = r.get(f"set_{set_key}") if set_key else None
        risk = r.get(f"risk_{risk_key}") if risk_key else None
        rows.append(
            [
                str(r["id"]), str(r["prediction"]), float(r["confidence"]),
                None if s is None else [str(c) for c in s],
                None if risk is None or not math.isfinite(risk) else float(risk),
                None if r["label"] is None else str(r["label"]),
            ]
        )  # fmt: skip
    return {
        "batch": batch, "page": page, "page_size": page_size, "n_rows": n, "n_pages": n_pages,
        "columns": columns, "rows": rows, "set_calibrator": set_key or "", "risk_calibrator": risk_key or "",
        "class_filter": class_filter,
    }  # fmt: skip
