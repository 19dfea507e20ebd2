"""Display resolution: per-batch datasets pooled into buckets of batches, exactly, and the widget's
stream of bucket rows (re-sent whole with tombstones when the resolution changes) always adds up
to what a new view's replay holds."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.views import charts, dashboard, resolution
from calwatch.views.charts import parts as chart_parts
from calwatch.views.resolution import Resolution, bucket_records, bucket_width
from calwatch.widget import BUCKETED

from ..synthetic import softmax_data


def test_bucket_width_is_the_smallest_power_of_two_that_fits():
    assert [bucket_width(n, 4) for n in (0, 1, 4, 5, 8, 9, 16, 17)] == [1, 1, 1, 2, 2, 4, 4, 8]
    with pytest.raises(ValueError, match="max_points"):
        bucket_width(10, 0)


def test_resolution_buckets_of_the_whole_stream_and_of_a_range():
    whole = Resolution(4)
    assert whole.starts(None, latest=9) == [0, 4, 8]
    assert whole.starts([3, 5, 6, 9, 12], latest=9) == [0, 4, 8]  # 12 is not observed yet
    assert [whole.end_of(s, latest=9) for s in (0, 4, 8)] == [3, 7, 9]
    brushed = Resolution.of_range(5, 14, max_points=4)  # 10 batches: width 4, buckets from 5
    assert (brushed.width, brushed.lo, brushed.hi) == (4, 5, 14)
    assert brushed.starts(None, latest=30) == [5, 9, 13]
    assert [brushed.end_of(s, latest=30) for s in (5, 9, 13)] == [8, 12, 14]
    assert brushed.starts([2, 4, 15, 20], latest=30) == []  # outside the range
    with pytest.raises(ValueError, match="lo <= hi"):
        Resolution.of_range(4, 3)


def test_axis_end_reserves_room_for_a_few_buckets_and_never_shrinks():
    """The x axis moves once per up to 8 buckets, never keeps more than an eighth of the chart
    empty, grows with the stream, and stays inside a brushed range."""
    assert [Resolution(1).axis_end(b) for b in range(16)] == list(range(16))  # up to 16: every batch
    assert [Resolution(1).axis_end(b) for b in (16, 17, 18, 31, 32, 33)] == [17, 17, 19, 31, 35, 35]
    for width in (1, 2, 8):
        res = Resolution(width)
        ends = [res.axis_end(start) for start in range(0, 128 * width, width)]
        assert ends == sorted(ends)  # monotone: the axis never shrinks
        for k, end in enumerate(ends):  # k + 1 buckets drawn
            last = (k + 1) * width - 1  # the last batch of the latest bucket, once full
            assert last <= end <= last + max(0, min(8, (k + 1) // 8) - 1) * width
        moves = len(set(ends[64:]))  # 64..128 buckets (the stream after a doubling): 8 moves
        assert moves == 8
    brushed = Resolution.of_range(100, 300)  # width 2, buckets from 100
    assert brushed.axis_end(298) == 300 and brushed.axis_end(100) == 101


@pytest.fixture
def mon() -> Any:
    P, y = softmax_data(600, seed=3)
    m = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aci": cw.Adaptive(cw.SplitConformalClassifier(score="aps", alpha=0.2), gamma=0.01),
            "risk": cw.RiskEstimator(),
        },
        name="res",
    )
    return m.calibrate(probs=P, y=y)


def _stream(m: Any, n_batches: int, seed: int = 4, label_share: float = 0.7) -> None:
    rng = np.random.default_rng(seed)
    for b in range(n_batches):
        n = int(rng.integers(20, 60))
        P, y = softmax_data(n, seed=seed * 1000 + b)
        ids = [f"{seed}-{b}-{i}" for i in range(n)]
        m.observe(probs=P, ids=ids)
        keep = rng.random(n) < label_share
        m.label([i for i, k in zip(ids, keep, strict=True) if k], y[keep])


def test_pooled_buckets_equal_sums_of_their_batches(mon):
    """Hand check: every rate of a bucket is the ratio of its batches' summed counts."""
    _stream(mon, 10)
    per_batch = mon.summary()
    buckets = charts.datasets(mon, resolution=Resolution(4))["batches"]
    assert sorted(set(buckets["batch"].to_list())) == [0, 4, 8]
    for start, end in ((0, 3), (4, 7), (8, 9)):
        for cal in ("lac", "aci", "risk"):
            part = per_batch.filter(pl.col("batch").is_between(start, end) & (pl.col("calibrator") == cal))
            row = buckets.filter((pl.col("batch") == start) & (pl.col("calibrator") == cal)).row(
                0, named=True
            )
            n_rows, n_lab = part["n_rows"].sum(), part["n_labelled"].sum()
            assert (row["batch_end"], row["n_batches"], row["n_rows"], row["n_labelled"]) == (
                end, end - start + 1, n_rows, n_lab
            )  # fmt: skip
            assert row["batch_mid"] == (start + end) / 2 and row["name"] == f"{start}–{end}"
            if cal == "risk":
                est = (part["estimated_error"] * part["n_rows"]).sum() / n_rows
                assert row["estimated_error"] == pytest.approx(est, rel=1e-12)
                obs = (part["observed_error"] * part["n_labelled"]).sum() / n_lab
                assert row["observed_error"] == pytest.approx(obs, rel=1e-12)
                continue
            covered = part["n_covered"].sum()
            assert row["n_covered"] == covered and row["coverage"] == pytest.approx(covered / n_lab)
            lo, hi = clopper_pearson(np.array([covered]), np.array([n_lab]))
            assert (row["coverage_lo"], row["coverage_hi"]) == pytest.approx((lo[0], hi[0]))
            size = (part["mean_set_size"] * part["n_rows"]).sum() / n_rows
            assert row["mean_set_size"] == pytest.approx(size, rel=1e-12)
            alpha = (part["alpha_level"] * part["n_rows"]).sum() / n_rows
            assert row["alpha_level"] == pytest.approx(alpha, rel=1e-12)
    sizes = charts.datasets(mon, resolution=Resolution(4))["set_sizes"]
    per_batch_sizes = mon.set_size_counts()
    assert sizes["count"].sum() == per_batch_sizes["count"].sum()
    classes = charts.datasets(mon, resolution=Resolution(4))["class_coverage"]
    assert classes["n_covered"].sum() == mon.class_coverage()["n_covered"].sum()


def test_width_one_is_the_per_batch_summary(mon):
    _stream(mon, 5)
    rows = charts.datasets(mon)["batches"]  # 5 batches: one per bucket
    expected = mon.summary().drop("observed_at")
    assert_frame_equal(rows.select(expected.columns), expected)
    assert rows["batch_end"].to_list() == rows["batch"].to_list()


def test_rows_carry_the_axis_end_of_their_bucket(mon, monkeypatch):
    _stream(mon, 20)
    for res in (Resolution(1), Resolution(4), Resolution.of_range(3, 13, max_points=4)):
        for name in ("batches", "set_sizes", "class_coverage", "shift"):
            frame = charts.datasets(mon, resolution=res)[name]
            expected = [res.axis_end(b) for b in frame["batch"].to_list()]
            assert frame["axis_end"].to_list() == expected, (name, res)
    monkeypatch.setattr(resolution, "MAX_POINTS", 4)
    timeline = dashboard.timeline(mon)  # 20 batches: width 8
    assert timeline["axis_end"].to_list() == [Resolution(8).axis_end(b) for b in (0, 8, 16)] == [7, 15, 23]


def test_timeline_pools_rows_per_bucket(mon, monkeypatch):
    monkeypatch.setattr(resolution, "MAX_POINTS", 4)
    _stream(mon, 9)
    frame = dashboard.timeline(mon)
    per_batch = mon.summary().filter(pl.col("calibrator") == "lac")
    assert frame["batch"].to_list() == [0, 4, 8] and frame["batch_end"].to_list() == [3, 7, 8]
    assert frame["n_rows"].sum() == per_batch["n_rows"].sum() == mon.status()["rows_seen"]
    assert frame["rows"].to_list()[-1] == per_batch["n_rows"].to_list()[-1]  # a one-batch bucket


def _apply(store: dict[str, dict[str, dict[str, Any]]], data: dict[str, list[dict[str, Any]]]) -> None:
    """What a view's RowStore does with an upsert: rows by key, tombstones delete."""
    for name, rows in data.items():
        current = store.setdefault(name, {})
        for row in rows:
            if row.get("_deleted"):
                current.pop(row["key"], None)
            else:
                current[row["key"]] = row


def test_updates_add_up_to_the_replay_across_resolution_changes(mon, monkeypatch):
    """Every upsert applied in order (a live view) holds exactly the rows of a fresh replay, also
    when the stream outgrows a resolution (width 1 → 2 → 4), under a brush and after it."""
    monkeypatch.setattr(resolution, "MAX_POINTS", 4)
    widget = mon.widget()
    messages: list[dict[str, Any]] = []
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: messages.append(content))
    store: dict[str, dict[str, dict[str, Any]]] = {}
    _apply(store, widget.replay_payload())

    def check() -> None:
        for message in messages:
            _apply(store, message["data"])
        messages.clear()
        replay = widget.replay_payload()
        for name in (*BUCKETED, "timeline"):
            assert store.get(name, {}) == {r["key"]: r for r in replay[name]}, name

    _stream(mon, 3)
    check()
    assert widget._detail.width == 1
    _stream(mon, 7, seed=5)  # 10 batches: width 4
    check()
    assert widget._detail.width == 4 and widget._timeline_width == 4
    assert sorted({r["batch"] for r in store["batches"].values()}) == [0, 4, 8]

    widget.batch_range = (2, 5)  # zoom: single batches of the range, the timeline stays whole
    check()
    assert sorted({r["batch"] for r in store["batches"].values()}) == [2, 3, 4, 5]
    assert sorted(r["batch"] for r in store["timeline"].values()) == [0, 4, 8]
    mon.label([f"4-3-{i}" for i in range(20)], np.zeros(20, dtype=int))  # relabels rows of batch 3
    _stream(mon, 2, seed=6)  # batches 10, 11: outside the brush, only the timeline moves
    check()
    assert sorted({r["batch"] for r in store["batches"].values()}) == [2, 3, 4, 5]
    widget.batch_range = None
    check()
    assert sorted({r["batch"] for r in store["batches"].values()}) == [0, 4, 8]
    _stream(mon, 6, seed=7)  # 18 batches: width 8 everywhere
    check()
    assert sorted({r["batch"] for r in store["batches"].values()}) == [0, 8, 16]
    assert sorted(r["batch"] for r in store["timeline"].values()) == [0, 8, 16]


def test_buckets_of_a_compared_run_missing_batches(mon):
    """A calibrator absent from some batches of a bucket (a shorter run in cw.compare) still pools."""
    _stream(mon, 4)
    records = list(mon._stream.batches)
    records[3].stats.pop("risk")
    ((pooled, end),) = bucket_records(records, Resolution(4))
    assert end == 3 and set(pooled.stats) == {"lac", "aci", "risk"}
    assert pooled.stats["risk"].n_rows == sum(r.n_rows for r in records[:3])


def test_hover_text_is_computed_per_row_in_the_data_flow():
    """Per-bucket marks read their tooltip and ARIA description from fields a calculate transform
    makes once per row (titles in tooltip order, formats kept), not from per-item encoders."""
    tips = [
        alt.Tooltip("name:N", title="batch"),
        alt.Tooltip("coverage:Q", format=".3f"),
        alt.Tooltip("n_labelled:Q", title="labelled"),
    ]
    fields = chart_parts.hover_fields(tips)
    coverage = 'isValid(datum["coverage"]) ? format(datum["coverage"], ".3f") : \'\' + datum["coverage"]'
    assert fields["hover_description"] == (
        f'"batch: " + (\'\' + datum["name"]) + \'; \' + "coverage: " + ({coverage})'
        " + '; ' + \"labelled: \" + ('' + datum[\"n_labelled\"])"
    )
    assert fields["hover_tooltip"].startswith('{"batch": (\'\' + datum["name"]), "coverage": (isValid(')
    spec = charts.coverage_chart().to_dict()
    (points,) = [layer for layer in spec["layer"] if layer["mark"].get("type") == "point"]
    assert points["mark"]["tooltip"] == {"expr": "datum.hover_tooltip"}
    assert points["mark"]["description"] == {"expr": "datum.hover_description"}
    assert {"calculate": chart_parts.hover_fields([])["hover_tooltip"], "as": "hover_tooltip"} not in points[
        "transform"
    ]
    assert [t["as"] for t in points["transform"] if "calculate" in t] == [
        "hover_tooltip",
        "hover_description",
    ]


def _axis_labels(spec: dict[str, Any]) -> list[list[float]]:
    """The tick labels of each axis of a spec as Vega lays it out (vl-convert's scene graph)."""
    vl_convert = pytest.importorskip("vl_convert", reason="installed by `make test`")
    found: list[list[float]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("role") == "axis-label":
                found.append([float(item["text"]) for item in node.get("items", [])])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(vl_convert.vegalite_to_scenegraph(spec))
    return found


def _coverage_rows(batches: range, coverage: list[float], target: float = 0.9) -> pl.DataFrame:
    rows = [
        {
            "batch": b,
            "batch_mid": b,
            "batch_end": b,
            "span_end": b,
            "axis_end": b,
            "name": str(b),
            "calibrator": "lac",
            "label": "lac",
            "kind": "sets",
            "coverage": c,
            "coverage_lo": c - 0.004,
            "coverage_hi": c + 0.004,
            "target": target,
            "n_labelled": 1000,
            "n_pending": 0,
        }
        for b, c in zip(batches, coverage, strict=True)
    ]
    return pl.DataFrame(rows)


def test_coverage_axis_shows_the_target_window_and_a_zoomed_range():
    """The y axis of a coverage chart spans at least target ± 0.05 (it does not zoom to the few
    thousandths the points cover, moving with every batch), widens when coverage leaves that
    window, and the batch axis of a zoomed range starts at its first batch, not at 0."""
    near = _coverage_rows(range(100, 106), [0.897, 0.903, 0.899, 0.901, 0.898, 0.902])
    x, y = _axis_labels(charts.coverage_chart(near.to_pandas()).to_dict())
    assert min(y) <= 0.86 and max(y) >= 0.94
    assert min(x) >= 100 and max(x) <= 105
    low = _coverage_rows(range(6), [0.9, 0.9, 0.7, 0.9, 0.9, 0.9], target=0.98)
    _, y = _axis_labels(charts.coverage_chart(low.to_pandas()).to_dict())
    assert min(y) <= 0.7 and max(y) <= 1.0
