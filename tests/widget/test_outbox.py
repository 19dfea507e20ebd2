"""The widget's outbox: merged upserts leave the views exactly where the unmerged ones would."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calwatch.widget.outbox import Outbox

from ..synthetic import softmax_data
from .test_widget_incremental import _apply

SAMPLED_DATASETS = ("batches", "timeline", "overview")


row = st.builds(
    lambda key, value, deleted: {"key": key, "_deleted": True} if deleted else {"key": key, "v": value},
    st.sampled_from("abcdef"),
    st.integers(0, 9),
    st.booleans(),
)
upsert = st.dictionaries(st.sampled_from(SAMPLED_DATASETS), st.lists(row, max_size=6), max_size=3)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.log: list[tuple[str, Any]] = []  # messages and trait sets, in the order they went out
        self.lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self.lock:
            self.sent.append(message)
            self.log.append(("message", message))

    def set_traits(self, traits: Any) -> None:
        with self.lock:
            self.log.append(("traits", dict(traits)))


def wait_until(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the outbox's timer did not send in time"
        time.sleep(0.01)


def test_without_an_interval_every_update_goes_out_as_it_comes() -> None:
    rec = Recorder()
    box = Outbox(rec.send, rec.set_traits, interval_s=0.0)
    for seq in (1, 2, 3):
        box.add(seq, {"batches": [{"key": str(seq)}]}, started=100.0 + seq, traits={"_status": seq})
        box.flush()
    assert [m["seq"] for m in rec.sent] == [1, 2, 3]
    assert [m["t0"] for m in rec.sent] == [101.0, 102.0, 103.0]
    assert [kind for kind, _ in rec.log] == ["message", "traits"] * 3  # each trait after its update
    assert box.merged == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(upsert, min_size=1, max_size=12))
def test_merged_upserts_leave_a_view_where_every_upsert_would(upserts: list[dict[str, Any]]) -> None:
    rec = Recorder()
    box = Outbox(rec.send, rec.set_traits, interval_s=3600.0)  # everything after the first merges
    expected: dict[str, dict[str, dict[str, Any]]] = {}
    for seq, data in enumerate(upserts, start=1):
        _apply(expected, data)
        box.add(seq, data, started=1000.0 - seq, traits={"_status": seq})
        box.flush()
    box.flush(force=True)
    got: dict[str, dict[str, dict[str, Any]]] = {}
    for message in rec.sent:
        _apply(got, message["data"])
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in expected.items() if v}
    assert rec.sent[0]["seq"] == 1  # the leading edge went out at once
    assert rec.sent[-1]["seq"] == len(upserts)
    assert len(rec.sent) == min(2, len(upserts))
    if len(upserts) > 1:
        assert rec.sent[-1]["t0"] == 1000.0 - len(upserts)  # the earliest start of what it merged
        assert box.merged == len(upserts) - 2
    assert rec.log[-1] == ("traits", {"_status": len(upserts)})  # the newest traits, last


def test_the_timer_sends_a_merged_update_once_the_interval_is_up() -> None:
    rec = Recorder()
    box = Outbox(rec.send, rec.set_traits, interval_s=0.05)
    try:
        box.add(1, {"batches": [{"key": "0", "v": 1}]})
        box.flush()
        box.add(2, {"batches": [{"key": "0", "v": 2}]})
        box.add(3, {"batches": [{"key": "1", "v": 3}]})
        box.flush()
        assert box.pending or len(rec.sent) == 2  # waiting, unless 0.05 s passed in between
        wait_until(lambda: not box.pending)
        assert [m["seq"] for m in rec.sent] == [1, 3]
        assert rec.sent[1]["data"] == {"batches": [{"key": "0", "v": 2}, {"key": "1", "v": 3}]}
    finally:
        box.close()


def test_urgent_updates_and_other_messages_go_out_at_once_and_in_order() -> None:
    rec = Recorder()
    box = Outbox(rec.send, rec.set_traits, interval_s=3600.0)
    try:
        box.add(1, {"batches": [{"key": "0"}]})
        box.flush()
        box.add(2, {"batches": [{"key": "1"}]})  # a stream's update: waits
        box.flush()
        assert len(rec.sent) == 1 and box.pending
        box.put({"kind": "replay", "view": "v", "seq": 2, "data": {}})
        box.flush()
        assert [(m["kind"], m["seq"]) for m in rec.sent] == [("upsert", 1), ("upsert", 2), ("replay", 2)]
        box.add(3, {"notes": [{"key": "n0"}]}, urgent=True)  # a note: sent now
        box.flush()
        assert rec.sent[-1]["seq"] == 3 and not box.pending
    finally:
        box.close()


def test_close_sends_what_is_left_and_stops_the_timer() -> None:
    rec = Recorder()
    box = Outbox(rec.send, rec.set_traits, interval_s=3600.0)
    box.add(1, {})
    box.flush()
    box.add(2, {"batches": [{"key": "0"}]}, traits={"_status": 2})
    box.flush()  # schedules the timer thread
    name = f"calwatch widget outbox {id(box):x}"
    assert any(t.name == name for t in threading.enumerate())
    box.close()
    assert [m["seq"] for m in rec.sent] == [1, 2]
    assert rec.sent[0]["data"] == {}  # an update with no dataset still carries its seq
    assert not any(t.name == name for t in threading.enumerate())


def test_an_idle_timer_thread_ends_and_a_later_deferred_send_starts_another(monkeypatch) -> None:
    import calwatch.widget.outbox

    monkeypatch.setattr(calwatch.widget.outbox, "IDLE_EXIT_S", 0.05)
    rec = Recorder()
    box = Outbox(rec.send, rec.set_traits, interval_s=0.02)
    name = f"calwatch widget outbox {id(box):x}"
    try:
        for first in (1, 3):
            box.add(first, {})
            box.flush()
            box.add(first + 1, {})
            box.flush()  # deferred: the timer sends it, then idles, then ends
            wait_until(lambda: not box.pending and not any(t.name == name for t in threading.enumerate()))
        assert [m["seq"] for m in rec.sent] == [1, 2, 3, 4]
    finally:
        box.close()


def test_an_error_while_the_timer_sends_is_reported_and_the_next_send_goes_out() -> None:
    rec, errors = Recorder(), []
    calls = {"n": 0}

    def flaky(message: dict[str, Any]) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("comm closed")
        rec.send(message)

    box = Outbox(flaky, rec.set_traits, interval_s=0.02, on_error=errors.append)
    try:
        box.add(1, {})
        box.flush()
        box.add(2, {})
        box.flush()
        wait_until(lambda: len(errors) == 1)
        box.add(3, {}, urgent=True)
        box.flush()
        assert [m["seq"] for m in rec.sent] == [1, 3]
        assert isinstance(errors[0], RuntimeError)
    finally:
        box.close()


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        Outbox(print, print, interval_s=-1.0)


def test_a_stream_merged_by_the_widget_leaves_every_view_where_the_kernel_thinks(monkeypatch) -> None:
    """With the kernel's interval (here: everything after the first update merged), a view that
    applies what was sent holds exactly the rows the widget records as held, which equal a
    rebuild from scratch; the status line is the last one computed."""
    import calwatch as cw
    from calwatch.widget import status_line

    from .test_widget_incremental import K, Store, _batch, _calibrators, _rebuild

    mon = cw.Monitor(calibrators=_calibrators(selective=False))
    rng = np.random.default_rng(7)
    P, y = softmax_data(400, K=K, seed=1)
    mon.calibrate(probs=P, y=y)
    widget = mon.widget()
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: sent.append(content))
    widget._outbox.interval_s = 3600.0
    view: Store = {}
    _apply(view, widget.replay_payload())
    pending = None
    for b in range(12):
        P, y = _batch(rng, seed=50 + b)
        ids = [f"{b}-{i}" for i in range(len(y))]
        mon.observe(probs=P, ids=ids)
        if pending is not None:
            mon.label(*pending)
        if b == 6:
            mon.label(ids[:3], (y[:3] + 1) % K)  # labelled now, relabelled with the next batch
        pending = (ids, y)
    mon.label(*pending)
    assert widget._outbox.pending
    widget._outbox.flush(force=True)
    assert len(sent) == 2 and [m["seq"] for m in sent] == [sent[0]["seq"], widget.seq]
    for message in sent:
        _apply(view, message["data"])
    expected = _rebuild(mon, widget)
    for name, rows in expected.items():
        assert view.get(name, {}) == rows == widget.sent_rows.get(name, {}), name
    assert widget._status == status_line(mon)
