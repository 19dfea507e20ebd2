"""The row table filtered to a slice: ``Monitor.rows`` slice columns and ``rows_page(slice_filter=)``.

A tiny monitor whose slice columns are known row by row, so every count is checked by hand.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import calwatch as cw
from calwatch.views import dashboard

from ..synthetic import softmax_data

B6 = "carrier = B6"
B6_LATE = "carrier = B6 & hour ≥ 18"
#: A value with " & " in it: the words of its pairs cannot be split at " & ", only looked up.
AMPERSAND_EARLY = "carrier = A & B & hour < 6"

# batch 0: B6 at rows 0, 2, 5, 7 (hours 1, 20, 19, 13): 4 in "carrier = B6", rows 2 and 5 also
# "hour ≥ 18"; UA (not a calibration value) is "other", None is "missing", "A & B" at hour 2.
BATCH_0 = {
    "carrier": ["B6", "AA", "B6", "UA", None, "B6", "DL", "B6", "AA", "A & B"],
    "hour": [1, 5, 20, 23, 7, 19, 12, 13, 14, 2],
}
BATCH_1 = {"carrier": ["AA", "DL", "AA", "DL", "AA", "DL"], "hour": [1, 2, 3, 4, 5, 6]}  # no B6
# batch 2: B6 at rows 0 and 2 (hours 3, 19): 2 in "carrier = B6", row 2 also "hour ≥ 18".
BATCH_2 = {"carrier": ["B6", "AA", "B6", "AA", "AA"], "hour": [3, 4, 19, 19, 8]}


def _monitor() -> cw.Monitor:
    P, y = softmax_data(221, seed=1)
    cal = pl.DataFrame({"carrier": ["AA", "B6", "DL", "A & B"] * 50, "hour": np.arange(200) % 24})
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(alpha=0.1)}, shift=None)
    mon.calibrate(probs=P[:200], y=y[:200], meta=cal, slice_bins={"hour": [6, 18]})
    start = 200
    for b, meta in enumerate((BATCH_0, BATCH_1, BATCH_2)):
        n = len(meta["hour"])
        rows = slice(start, start + n)
        ids = [f"b{b}-{i}" for i in range(n)]
        mon.observe(probs=P[rows], y=y[rows], ids=ids, meta=pl.DataFrame(meta))
        start += n
    return mon


def test_rows_name_each_row_s_slice_in_the_words_of_slices():
    mon = _monitor()
    rows = mon.rows()
    assert rows.columns[-2:] == ["slice_carrier", "slice_hour"]
    assert rows.schema["slice_carrier"] == pl.String and rows.schema["slice_hour"] == pl.String
    first = rows.filter(pl.col("batch") == 0)
    assert first["slice_carrier"].to_list() == [
        "carrier = B6", "carrier = AA", "carrier = B6", "carrier: other", "carrier: missing",
        "carrier = B6", "carrier = DL", "carrier = B6", "carrier = AA", "carrier = A & B",
    ]  # fmt: skip
    assert first["slice_hour"].to_list() == [
        "hour < 6", "hour < 6", "hour ≥ 18", "hour ≥ 18", "6 ≤ hour < 18",
        "hour ≥ 18", "6 ≤ hour < 18", "6 ≤ hour < 18", "6 ≤ hour < 18", "hour < 6",
    ]  # fmt: skip
    # the very words of mon.slices() (single-column slices) and mon.slice_columns()
    tested = set(mon.slices(min_rows=1)["slice"].to_list())
    assert set(rows["slice_carrier"]) | set(rows["slice_hour"]) <= tested
    assert set(rows["slice_carrier"]) <= set(mon.slice_columns()["slice"])
    # one batch, a window: the same columns
    aa = "carrier = AA"
    assert mon.rows(batch=2)["slice_carrier"].to_list() == [B6, aa, B6, aa, aa]
    assert mon.rows(window=3)["slice_hour"].to_list() == ["hour ≥ 18", "hour ≥ 18", "6 ≤ hour < 18"]


def test_rows_of_a_monitor_without_slices_keep_their_columns():
    P, y = softmax_data(300, seed=1)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(alpha=0.1)}, shift=None)
    mon.calibrate(probs=P[:200], y=y[:200])
    mon.observe(probs=P[200:], y=y[200:])
    assert mon.rows().columns == ["batch", "id", "prediction", "confidence", "label", "set_lac", "size_lac",
                                  "covered_lac"]  # fmt: skip


def _ids(page: dict) -> list[str]:
    return [r[0] for r in page["rows"]]


def test_a_rows_page_keeps_the_rows_of_a_slice_counted_by_hand():
    mon = _monitor()
    tested = set(mon.slices(min_rows=1)["slice"].to_list())
    assert {B6, B6_LATE, AMPERSAND_EARLY, "carrier: other", "carrier: missing"} <= tested
    page = dashboard.rows_page(mon, 0, slice_filter=B6)
    assert page["slice_filter"] == B6 and page["batch"] == 0
    assert page["n_rows"] == 4 and _ids(page) == ["b0-0", "b0-2", "b0-5", "b0-7"]
    late = dashboard.rows_page(mon, 0, slice_filter=B6_LATE)  # a pair: both values
    assert late["n_rows"] == 2 and _ids(late) == ["b0-2", "b0-5"]
    assert _ids(dashboard.rows_page(mon, 0, slice_filter="carrier: other")) == ["b0-3"]
    assert _ids(dashboard.rows_page(mon, 0, slice_filter="carrier: missing")) == ["b0-4"]
    assert _ids(dashboard.rows_page(mon, 0, slice_filter=AMPERSAND_EARLY)) == ["b0-9"]
    assert _ids(dashboard.rows_page(mon, 0, slice_filter="carrier = A & B")) == ["b0-9"]
    # paged as the slice's rows
    second = dashboard.rows_page(mon, 0, slice_filter=B6, page=1, page_size=3)
    assert (second["n_rows"], second["n_pages"], _ids(second)) == (4, 2, ["b0-7"])
    # a batch without rows of the slice: no rows, named
    none = dashboard.rows_page(mon, 1, slice_filter=B6)
    assert (none["n_rows"], none["rows"], none["slice_filter"]) == (0, [], B6)
    assert dashboard.rows_page(mon, 2, slice_filter=B6)["n_rows"] == 2
    # with the class filter too: rows in both
    frame = mon.rows(batch=0)
    cls = str(frame["prediction"][2])
    both = dashboard.rows_page(mon, 0, slice_filter=B6, class_filter=cls)
    expected = frame.filter(
        (pl.col("slice_carrier") == B6)
        & ((pl.col("prediction").cast(pl.String) == cls) | (pl.col("label").cast(pl.String) == cls))
    )
    assert _ids(both) == expected["id"].to_list() and both["n_rows"] >= 1
    # no filter: the whole batch, named ""
    assert dashboard.rows_page(mon, 0)["n_rows"] == 10 and dashboard.rows_page(mon, 0)["slice_filter"] == ""


def test_no_batch_open_gives_the_newest_window_batch_with_rows_of_the_slice():
    mon = _monitor()
    assert dashboard.rows_page(mon, None, slice_filter=B6)["batch"] == 2
    assert dashboard.rows_page(mon, None, slice_filter="carrier: other")["batch"] == 0
    assert dashboard.rows_page(mon, None, slice_filter="carrier = DL")["batch"] == 1
    # no window batch has rows of it: the newest batch, with none
    page = dashboard.rows_page(mon, None, slice_filter="hour: missing")
    assert (page["batch"], page["n_rows"]) == (2, 0)
    assert dashboard.rows_page(mon, None)["batch"] == 2


def test_a_slice_filter_is_a_slice_of_the_monitor_never_a_text_match():
    mon = _monitor()
    with pytest.raises(ValueError, match="not a slice of this monitor"):
        dashboard.rows_page(mon, 0, slice_filter="carrier = B")  # a prefix of a value is not a slice
    with pytest.raises(ValueError, match="not a slice of this monitor"):
        dashboard.rows_page(mon, 0, slice_filter="B6")
    with pytest.raises(ValueError, match="not a slice of this monitor"):
        dashboard.rows_page(mon, None, slice_filter="hour ≥ 18 & carrier = B6")  # pairs in column order
    P, y = softmax_data(300, seed=1)
    plain = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(alpha=0.1)}, shift=None)
    plain.calibrate(probs=P[:200], y=y[:200])
    plain.observe(probs=P[200:], y=y[200:])
    with pytest.raises(ValueError, match="keeps no slices"):
        dashboard.rows_page(plain, 0, slice_filter=B6)


def test_the_widget_answers_a_rows_request_with_a_slice(monkeypatch):
    mon = _monitor()
    widget = mon.widget()
    replies: list[dict] = []
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: replies.append(content))

    def ask(**request):
        base = {"kind": "rows-request", "view": "v", "page": 0, "page_size": 20, "class_filter": ""}
        widget._on_custom_message(widget, base | request, [])
        return replies[-1]

    reply = ask(batch=None, slice_filter=B6)  # none open: the newest batch with rows of it
    assert (reply["batch"], reply["n_rows"], reply["slice_filter"]) == (2, 2, B6)
    assert [r[0] for r in reply["rows"]] == ["b2-0", "b2-2"]
    reply = ask(batch=0, slice_filter=B6_LATE)
    assert (reply["batch"], reply["n_rows"], reply["slice_filter"]) == (0, 2, B6_LATE)
    reply = ask(batch=0)  # a front end that sends no slice: every row
    assert (reply["n_rows"], reply["slice_filter"]) == (10, "")
    reply = ask(batch=0, slice_filter="carrier = ZZ")
    assert reply["error"].startswith("slice_filter:") and reply["slice_filter"] == "carrier = ZZ"


def test_a_widget_made_after_the_stream_replays_the_slices_tested():
    """A monitor shown after its stream (or loaded) has its Slices tab before the next batch."""
    from calwatch.views.where_it_fails import slice_rows

    from ..synthetic import planted_slice_monitor

    mon = planted_slice_monitor()
    widget = mon.widget()
    replayed = widget.replay_payload()["slices"]
    assert replayed and [r["key"] for r in replayed] == [r["key"] for r in slice_rows(mon)]
