"""The widget's kernel side: specs, upserts after each batch/label, replay for new views."""

import json

import polars as pl
import pytest

import calwatch as cw
from calwatch.views import charts, dashboard
from calwatch.widget import MonitorWidget

from ..synthetic import softmax_data

# charts of other calibrator kinds or tasks (tested with their monitors), absent from this one
OTHER_TASKS = (
    *charts.RISK_CHARTS,
    *charts.ADMIT_CHARTS,
    *charts.SELECTIVE_CHARTS,
    *charts.REGRESSION_CHARTS,
    "aci",
)


@pytest.fixture
def mon():
    P, y = softmax_data(1000, seed=1)
    m = cw.Monitor(
        calibrators={
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.2),
        },
        name="unit",
    )
    return m.calibrate(probs=P, y=y)


@pytest.fixture
def sent(mon, monkeypatch):
    messages = []
    widget = mon.widget()
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: messages.append(content))
    return widget, messages


def test_one_widget_per_monitor_with_traits(mon):
    w = mon.widget()
    assert w is mon.widget() and isinstance(w, MonitorWidget)
    assert w._title == "unit"
    assert w._calibrators == ["aps", "lac"]
    assert w._chart_order == charts.chart_kinds(mon) == [k for k in charts.CHARTS if k not in OTHER_TASKS]
    assert set(w._specs) == {*w._chart_order, *dashboard.panels_for(mon), "timeline"}
    assert [s["name"] for s in w._sections] == ["Overview", "Coverage", "Calibration", "Sets", "Shift"]
    for name, spec in w._specs.items():
        text = json.dumps(spec)
        assert '"name": "calibrator"' in text, name
        named = (*charts.CHART_DATASETS, *dashboard.PANEL_DATASETS)
        assert any(f'"name": "{d}"' in text for d in named), name
        assert "http" not in text.replace(spec.get("$schema", ""), "")


def test_upsert_after_observe_and_label(mon, sent):
    widget, messages = sent
    P, y = softmax_data(200, seed=2)
    mon.observe(probs=P, ids=range(200), name="b0")
    assert len(messages) == 1 and messages[0]["kind"] == "upsert" and messages[0]["seq"] == 1
    batches = messages[0]["data"]["batches"]
    assert {r["key"] for r in batches} == {"0|aps", "0|lac"}
    assert all(r["coverage"] is None and r["n_pending"] == 200 for r in batches)
    sizes = messages[0]["data"]["set_sizes"]
    assert sum(r["count"] for r in sizes if r["calibrator"] == "aps") == 200
    assert widget._status["rows_seen"] == 200 and widget._status["rows_pending"] == 200

    mon.label(list(range(100)), y[:100])
    assert messages[1]["seq"] == 2
    rows = {r["key"]: r for r in messages[1]["data"]["batches"]}
    assert set(rows) == {"0|aps", "0|lac"}  # the same keys: the view replaces them
    assert rows["0|aps"]["n_labelled"] == 100 and 0 <= rows["0|aps"]["coverage"] <= 1
    classes = messages[1]["data"]["class_coverage"]
    assert sum(r["n_labelled"] for r in classes if r["calibrator"] == "lac") == 100
    assert widget._status["rows_labelled"] == 100
    json.dumps(messages)  # everything sent is JSON-serialisable (no NaN, no datetimes)


def test_replay_goes_to_the_view_that_asked(mon, sent):
    widget, messages = sent
    for b in range(3):
        P, _ = softmax_data(50, seed=10 + b)
        mon.observe(probs=P)
    widget._on_custom_message(widget, {"kind": "replay-request", "view": "v42"}, [])
    replay = messages[-1]
    assert replay["kind"] == "replay" and replay["view"] == "v42" and replay["seq"] == 3
    assert len(replay["data"]["batches"]) == 6
    assert sorted({r["batch"] for r in replay["data"]["batches"]}) == [0, 1, 2]
    widget._on_custom_message(widget, {"kind": "something-else"}, [])
    assert messages[-1] is replay


def test_replay_before_any_batch_is_empty(mon, sent):
    widget, messages = sent
    widget._on_custom_message(widget, {"kind": "replay-request", "view": "v1"}, [])
    data = messages[-1]["data"]
    assert set(data) == {*charts.CHART_DATASETS, *dashboard.PANEL_DATASETS}
    assert all(rows == [] for name, rows in data.items() if name not in ("overview", "health", "shift_lanes"))
    # the Shift view's lanes name their detectors from the start, each waiting for its first look
    assert {r["state"] for r in data["shift_lanes"]} == {"waiting"}
    # one card per calibrator, saying there is nothing yet; one health chip each, waiting
    cards = [(c["key"], c["n_batches"], c["coverage"]) for c in data["overview"]]
    assert cards == [("aps", 0, None), ("lac", 0, None)]
    chips = [(c["key"], c["state"], c["reason"], c["spark"]) for c in data["health"]]
    assert chips == [("aps", "waiting", "no batches yet", []), ("lac", "waiting", "no batches yet", [])]


def test_closed_widget_stops_following(mon, sent):
    widget, messages = sent
    widget.close()
    mon.observe(probs=softmax_data(10, seed=3)[0])
    assert messages == []


def test_pause_and_resume_are_trait_changes(mon):
    w = mon.widget()
    w.pause()
    assert w.paused and w._paused
    w.resume()
    assert not w.paused


@pytest.mark.parametrize("kind", [k for k in charts.CHARTS if k not in OTHER_TASKS])
def test_static_charts_render_to_svg_offline(mon, kind):
    vl_convert = pytest.importorskip("vl_convert", reason="installed by `make test`")
    for b in range(3):
        P, y = softmax_data(80, seed=20 + b)
        mon.observe(probs=P, y=y)
    spec = mon.chart(kind).to_dict()
    svg = vl_convert.vegalite_to_svg(spec)
    assert svg.startswith("<svg")
    # Vega draws lines, areas, bars and rules as <path> elements inside mark groups
    assert svg.count("<path") >= 3
    assert spec["title"] in svg


def test_unknown_chart_kind(mon):
    with pytest.raises(ValueError, match="kind must be one of"):
        mon.chart("pie")


def test_row_table_keeps_the_rows_of_the_picked_class(monkeypatch):
    """A rows-request under the class filter: only rows predicted as or labelled that class, counted
    and paged as such, and the reply names the filter."""
    from ..synthetic import PET_CLASSES, pets_monitor

    mon = pets_monitor()
    widget = mon.widget()
    replies = []
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: replies.append(content))
    rows = mon.rows(batch=1)
    owl = rows.filter((pl.col("prediction") == "owl") | (pl.col("label") == "owl"))
    assert 0 < owl.height < rows.height
    widget._on_custom_message(
        widget,
        {"kind": "rows-request", "view": "v", "batch": 1, "page": 0, "page_size": 200, "class_filter": "owl"},
        [],
    )
    reply = replies[-1]
    assert reply["class_filter"] == "owl" and reply["n_rows"] == owl.height
    assert [r[0] for r in reply["rows"]] == [str(i) for i in owl["id"].to_list()[:200]]
    assert all(r[1] == "owl" or r[5] == "owl" for r in reply["rows"])
    widget._class_filter = PET_CLASSES[2]
    widget._on_custom_message(widget, {"kind": "rows-request", "view": "v", "batch": 1}, [])
    assert replies[-1]["class_filter"] == PET_CLASSES[2]
    assert all(PET_CLASSES[2] in (r[1], r[5]) for r in replies[-1]["rows"])
    unfiltered = dashboard.rows_page(mon, 1, page_size=200)
    assert unfiltered["n_rows"] == rows.height and unfiltered["class_filter"] == ""


def test_a_rows_page_carries_the_name_the_batch_was_observed_under() -> None:
    from tests.synthetic import PET_CLASSES

    mon = cw.Monitor(classes=PET_CLASSES, shift=None)
    P, y = softmax_data(300, seed=0)
    mon.calibrate(probs=P, y=[PET_CLASSES[i] for i in y])
    mon.observe(probs=softmax_data(40, seed=1)[0])
    mon.observe(probs=softmax_data(40, seed=2)[0], name="2009 #12")
    assert dashboard.rows_page(mon, 0)["batch_name"] == "0"
    assert dashboard.rows_page(mon, 1)["batch_name"] == "2009 #12"
