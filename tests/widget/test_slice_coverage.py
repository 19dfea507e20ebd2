"""A slice's coverage over time (issue "Where it fails", 3): the ``slice_coverage`` dataset and its flow.

A tiny monitor whose every set is known: 50 calibration rows put 0.98 on their label and 10 put
0.3 on it, so the threshold of 1 − p (the 55th of 60 scores) is 0.7 and a set holds each class of
probability ≥ 0.3. A stream row's set is ``{0}`` (probabilities 0.99, 0.005, 0.005: label 0 is
covered, any other label is not), ``{0, 1}`` (0.5, 0.45, 0.05) or ``{0, 1, 2}`` (0.34, 0.33,
0.33). Each batch's rows in ``g = a`` and ``g = b``, labelled or not, and their set sizes are
counted by hand.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from scipy.stats import beta

import calwatch as cw
from calwatch.views import dashboard
from calwatch.views.slice_history import SCHEMA, is_slice, slice_coverage
from calwatch.widget.monitor_widget import MAX_SLICE_VIEWS

A, B = "g = a", "g = b"
N = None  # no label yet
#: (g of each row, label of each row, set size of each row): labels 1 and 2 fall in sets of size 1
#: (not covered), label 0 is in every set (covered).
BATCHES = (
    (
        ["a", "a", "b", "a", "b"],
        [0, 1, 0, N, 1],
        [2, 1, 1, 3, 1],
    ),  # g = a: 2 labelled, 1 covered; g = b: 2, 1
    (["b", "b", "b"], [0, 0, 1], [1, 1, 1]),  # no row of g = a
    (["a", "a", "a", "b"], [N, N, N, 0], [1, 1, 3, 3]),  # g = a: rows, none labelled yet
    (["a", "a", "a", "a"], [0, 0, 0, 2], [1, 2, 1, 1]),  # g = a: 4 labelled, 3 covered
)
#: A stream row's probabilities by the size of its set.
PROBS = {1: [0.99, 0.005, 0.005], 2: [0.5, 0.45, 0.05], 3: [0.34, 0.33, 0.33]}


def _cp(k: int, n: int) -> tuple[float, float]:
    """The exact 95% interval from the Beta quantiles (independent of the code under test)."""
    lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return lo, hi


def _monitor(window: int = 1000, batches: int = len(BATCHES)) -> cw.Monitor:
    y_cal = np.arange(60) % 3
    P_cal = np.full((60, 3), 0.01)
    P_cal[np.arange(60), y_cal] = 0.98
    P_cal[50:] = 0.35  # 10 rows: 0.3 on the label (score 0.7), 0.35 on the others
    P_cal[np.arange(50, 60), y_cal[50:]] = 0.3
    mon = cw.Monitor(
        calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, window=window, shift=None
    )
    mon.calibrate(probs=P_cal, y=y_cal, meta=pl.DataFrame({"g": ["a", "b"] * 30}))
    for b in range(batches):
        _observe(mon, b)
    return mon


def _observe(mon: cw.Monitor, b: int) -> None:
    groups, labels, sizes = BATCHES[b]
    n = len(groups)
    probs = np.array([PROBS[size] for size in sizes])
    ids = [f"b{b}-{i}" for i in range(n)]
    mon.observe(probs=probs, ids=ids, meta=pl.DataFrame({"g": groups}))
    known = [(i, y) for i, y in zip(ids, labels, strict=True) if y is not None]
    if known:
        mon.label([i for i, _ in known], [y for _, y in known])


def _counts(frame: pl.DataFrame) -> list[tuple[str, int, int, int]]:
    return [(r["slice"], r["batch"], r["n_labelled"], r["n_covered"]) for r in frame.iter_rows(named=True)]


def _sizes(frame: pl.DataFrame) -> list[tuple[str, int, int, float]]:
    """(slice, batch, its rows, their mean set size) per row."""
    return [(r["slice"], r["batch"], r["n_rows"], r["mean_set_size"]) for r in frame.iter_rows(named=True)]


def test_a_slice_s_coverage_per_window_batch_counted_by_hand():
    mon = _monitor()
    rows = mon.rows()
    assert rows["covered_lac"].to_list()[:3] == [True, False, True]
    assert rows["size_lac"].to_list() == [s for _, _, sizes in BATCHES for s in sizes]  # the sets as planned
    frame = slice_coverage(mon, [A])
    assert frame.schema == pl.Schema(SCHEMA)
    # batch 1 has no row of g = a: left out; batch 2 none labelled: its sizes, no coverage
    assert _counts(frame) == [(A, 0, 2, 1), (A, 2, 0, 0), (A, 3, 4, 3)]
    assert frame["key"].to_list() == [f"{A}|0|lac", f"{A}|2|lac", f"{A}|3|lac"]
    assert frame["calibrator"].to_list() == ["lac"] * 3 and frame["target"].to_list() == [0.9] * 3
    assert frame["label"].to_list() == ["lac: 1−α=0.9"] * 3  # the legend label, as in `batches`
    # every row of the slice, labelled or not: sizes 2, 1, 3 | 1, 1, 3 | 1, 2, 1, 1
    assert _sizes(frame) == [
        (A, 0, 3, pytest.approx(6 / 3)),
        (A, 2, 3, pytest.approx(5 / 3)),
        (A, 3, 4, pytest.approx(5 / 4)),
    ]
    assert frame["coverage"].to_list() == [0.5, None, 0.75]
    assert frame["coverage_lo"][1] is None and frame["coverage_hi"][1] is None
    for row, (k, n) in zip(
        frame.filter(pl.col("n_labelled") > 0).iter_rows(named=True), [(1, 2), (3, 4)], strict=True
    ):
        lo, hi = _cp(k, n)
        assert row["coverage_lo"] == pytest.approx(lo, abs=1e-12)
        assert row["coverage_hi"] == pytest.approx(hi, abs=1e-12)
    assert frame["coverage_lo"][0] == pytest.approx(1 - np.sqrt(0.975))  # Beta(1, 2): closed form

    both = slice_coverage(mon, [A, B, A])  # two slices (a repeat counted once)
    assert _counts(both) == [
        (A, 0, 2, 1), (B, 0, 2, 1), (B, 1, 3, 2), (A, 2, 0, 0), (B, 2, 1, 1), (A, 3, 4, 3),
    ]  # fmt: skip
    assert [(s, b, n, size) for s, b, n, size in _sizes(both) if s == B] == [
        (B, 0, 2, 1.0), (B, 1, 3, 1.0), (B, 2, 1, 3.0),
    ]  # fmt: skip

    # a late label of batch 2's g = a row: that batch gets a coverage, its sizes stay
    mon.label(["b2-0"], [0])
    assert _counts(slice_coverage(mon, [A])) == [(A, 0, 2, 1), (A, 2, 1, 1), (A, 3, 4, 3)]
    assert _sizes(slice_coverage(mon, [A])) == _sizes(frame)
    row = slice_coverage(mon, [A]).row(1, named=True)
    assert (row["coverage"], row["coverage_hi"]) == (1.0, 1.0)
    assert row["coverage_lo"] == pytest.approx(0.025)  # k = n = 1: (α/2)^(1/n)


def test_only_window_batches_are_counted():
    mon = _monitor(window=12, batches=3)  # 12 rows kept: batches 0-2
    assert [r.index for r in mon.window_records()] == [0, 1, 2]
    assert _counts(slice_coverage(mon, [A])) == [(A, 0, 2, 1), (A, 2, 0, 0)]
    _observe(mon, 3)  # 16 rows: batch 0 leaves the window
    assert [r.index for r in mon.window_records()] == [1, 2, 3]
    assert _counts(slice_coverage(mon, [A])) == [(A, 2, 0, 0), (A, 3, 4, 3)]


def test_slices_are_slices_of_the_monitor():
    mon = _monitor()
    assert is_slice(mon, A) and not is_slice(mon, "g = z") and not is_slice(mon, "a")
    assert slice_coverage(mon, []).is_empty()
    with pytest.raises(ValueError, match="not a slice"):
        slice_coverage(mon, ["g = z"])
    plain = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(alpha=0.1)}, shift=None)
    assert not is_slice(plain, A)
    with pytest.raises(ValueError, match="keeps no slices"):
        slice_coverage(plain, [A])


@pytest.fixture
def bridged(monkeypatch):
    mon = _monitor(batches=3)
    widget = mon.widget()
    messages: list[dict] = []
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: messages.append(content))
    # As in a script: no kernel loop to defer window refreshes to, every update sent as it comes
    # (whatever an earlier test in this process left behind).
    monkeypatch.setattr(widget, "_loop", None)
    monkeypatch.setattr(widget._outbox, "interval_s", 0.0)
    monkeypatch.setattr(widget, "_window_due", lambda: True)  # the refresh pace is tested elsewhere
    return mon, widget, messages


def _pick(widget, view: str, words: str) -> None:
    widget._on_custom_message(widget, {"kind": "slice-filter", "view": view, "slice_filter": words}, [])


def _sent(messages: list[dict]) -> list[dict]:
    return [r for m in messages if m["kind"] == "upsert" for r in m["data"].get("slice_coverage", [])]


def test_a_picked_slice_s_series_is_sent_refreshed_and_removed(bridged):
    mon, widget, messages = bridged
    for chart in ("coverage", "set_size"):  # a monitor that slices: both charts draw the slice
        spec = json.dumps(widget._specs[chart])
        assert '"slice_coverage"' in spec and '"slice_filter"' in spec, chart
    assert widget.replay_payload()["slice_coverage"] == []  # nothing picked: nothing computed

    _pick(widget, "v1", A)
    assert [r["key"] for r in _sent(messages)] == [f"{A}|0|lac", f"{A}|2|lac"]  # batch 2: sizes only
    assert _sent(messages)[0]["n_labelled"] == 2 and _sent(messages)[0]["n_covered"] == 1
    assert (_sent(messages)[1]["n_rows"], _sent(messages)[1]["coverage"]) == (3, None)
    assert _sent(messages)[1]["mean_set_size"] == pytest.approx(5 / 3)
    assert [r["key"] for r in widget.replay_payload()["slice_coverage"]] == [f"{A}|0|lac", f"{A}|2|lac"]

    # a new batch and a late label refresh it (no event loop here: at every update)
    messages.clear()
    _observe(mon, 3)  # its rows (sizes), then its labels (coverage): sent at each
    assert [r["key"] for r in _sent(messages)] == [f"{A}|3|lac"] * 2
    assert [(r["n_rows"], r["n_labelled"]) for r in _sent(messages)] == [(4, 0), (4, 4)]
    messages.clear()
    mon.label(["b2-1"], [1])
    (row,) = _sent(messages)
    assert (row["key"], row["n_labelled"], row["n_covered"], row["coverage"]) == (f"{A}|2|lac", 1, 0, 0.0)

    # another view's slice joins; each view draws its own (its slice_filter signal)
    messages.clear()
    _pick(widget, "v2", B)
    assert {r["slice"] for r in _sent(messages)} == {B}
    assert {r["slice"] for r in widget.replay_payload()["slice_coverage"]} == {A, B}

    # cleared ("✕ slice", a second click): tombstones for its rows, the other view's stay
    messages.clear()
    _pick(widget, "v1", "")
    gone = _sent(messages)
    assert gone and all(r.get("_deleted") for r in gone)
    assert {r["key"] for r in gone} == {f"{A}|0|lac", f"{A}|2|lac", f"{A}|3|lac"}
    assert {r["slice"] for r in widget.replay_payload()["slice_coverage"]} == {B}
    json.dumps(messages)


def test_a_slice_filter_names_a_slice_and_few_views_are_kept(bridged):
    _mon, widget, messages = bridged
    _pick(widget, "v1", "g = z")
    assert widget._error.startswith("slice filter:") and not _sent(messages)
    _pick(widget, "v1", A)
    assert widget._error == ""
    for i in range(MAX_SLICE_VIEWS + 2):
        _pick(widget, f"w{i}", B)
    assert len(widget._slice_views) == MAX_SLICE_VIEWS and "v1" not in widget._slice_views
    assert {r["slice"] for r in widget.replay_payload()["slice_coverage"]} == {B}


def test_a_monitor_without_slices_and_the_report_have_no_slice_series():
    P = np.tile([0.99, 0.005, 0.005], (60, 1))
    plain = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(alpha=0.1)}, shift=None)
    plain.calibrate(probs=P, y=np.zeros(60, dtype=int))
    specs = plain.widget()._specs
    assert "slice_coverage" not in json.dumps(specs["coverage"]) + json.dumps(specs["set_size"])
    from calwatch.widget.payloads import window_payload

    mon = _monitor()
    assert window_payload(mon)["slice_coverage"] == []  # a report keeps no raw rows: nothing changes
    assert "slice_coverage" in dashboard.WINDOW_PANEL_DATASETS
