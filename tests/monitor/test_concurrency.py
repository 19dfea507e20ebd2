"""One monitor fed by background threads while others read it: serialised, consistent, all-or-nothing.

The stress test runs producers on distinct ids, a labeller (late labels, duplicates, labels for
rows that already left the window), readers checking that each read sees one moment of the
stream, and a widget attached to the monitor. Every call the monitor applied is recorded in the
order it applied them (under its lock); a serial replay of that log on a fresh monitor must give
the same statistics. Then failures are injected inside calls: a call that raises changes nothing.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.core.guard import YIELD_AT_MOST_S, guard_of
from calwatch.views import charts, dashboard
from calwatch.widget import dashboard_datasets

from ..synthetic import softmax_data

K = 5
BATCH = 300
PRODUCERS = 3
BATCHES_EACH = 12


class RecordingMonitor(cw.Monitor):
    """A monitor that logs each observe/label call it applied, in the order it applied them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log = []

    def observe(self, *args, **kwargs):
        with self.lock:  # re-entrant: the call and its log entry are one step
            index = super().observe(*args, **kwargs)
            self.log.append(("observe", args, kwargs))
            return index

    def label(self, ids, y):
        with self.lock:
            report = super().label(ids, y)
            self.log.append(("label", (ids, y), {}))
            return report


def _monitor(cls=cw.Monitor):
    mon = cls(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps-random": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=7),
            "by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
            "aci": cw.Adaptive(cw.SplitConformalClassifier(score="lac", alpha=0.1)),
            "risk": cw.RiskEstimator(),
        },
        window=6 * BATCH,  # small: some late labels find their rows gone (counted, not applied)
    )
    P, y = softmax_data(3000, K=K, seed=0)
    return mon.calibrate(probs=P, y=y)


def _views(mon):
    return {
        "summary": mon.summary().drop("observed_at", "name", "batch"),
        "class_coverage": mon.class_coverage(by_batch=False),
        "warnings": mon.warnings().drop("first_batch", "last_batch", "first_row", "last_row", "ack_at"),
    }


@pytest.fixture
def frequent_switches():
    """Switch threads every microsecond (default 5 ms), so interleavings the lock must handle happen."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_threads_feed_label_and_read_one_monitor_like_a_serial_replay(frequent_switches):
    mon = _monitor(RecordingMonitor)
    mon.widget()  # a widget model follows the monitor (no front end: its messages go nowhere)
    labels_due: queue.Queue = queue.Queue()
    errors: list[BaseException] = []
    done = threading.Event()

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as err:
                errors.append(err)

        return run

    def producer(p):
        for b in range(BATCHES_EACH):
            P, y = softmax_data(BATCH, K=K, seed=1000 * p + b, scale=2.0 if b < 6 else 0.6)
            ids = [f"p{p}-b{b}-{i}" for i in range(BATCH)]
            mon.observe(probs=P, ids=ids)
            labels_due.put((ids, y))

    def labeller():
        rng = np.random.default_rng(5)
        pending = []
        while not (done.is_set() and labels_due.empty() and not pending):
            with contextlib.suppress(queue.Empty):
                pending.append(labels_due.get(timeout=0.01))
            if len(pending) > 2 or (done.is_set() and pending):  # late: a few batches behind
                ids, y = pending.pop(0)
                half = rng.permutation(BATCH)[: BATCH // 2]
                mon.label([ids[i] for i in half], y[half])
                mon.label(ids, y)  # the first half again: duplicates with the same labels
                mon.label([f"never-{rng.integers(1 << 30)}"], y[:1])  # an unknown id: counted

    def reader():
        while not done.is_set():
            with mon.lock:  # several views at one moment
                summary, status = mon.summary(), mon.status()
            labelled = summary.filter(calibrator="lac")["n_labelled"].sum()
            assert labelled == status["rows_labelled"], (labelled, status)
            assert summary["n_rows"].sum() == len(mon.calibrators) * status["rows_seen"]

    def lock_free_reader():  # each call on its own: the monitor's lock alone keeps it consistent
        while not done.is_set():
            summary = mon.summary()
            per_calibrator = summary.group_by("calibrator").agg(pl.col("n_labelled").sum())
            assert per_calibrator["n_labelled"].n_unique() <= 1, per_calibrator  # one moment's labels
            assert mon.rows(window=500).height <= 500
            mon.class_coverage()
            mon.warnings()
            mon.status()

    threads = [threading.Thread(target=guarded(lambda p=p: producer(p))) for p in range(PRODUCERS)]
    others = [threading.Thread(target=guarded(f)) for f in (labeller, reader, lock_free_reader)]
    for t in threads + others:
        t.start()
    for t in threads:
        t.join(timeout=120)
    done.set()
    for t in others:
        t.join(timeout=120)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads + others)

    status = mon.status()
    assert status["rows_seen"] == PRODUCERS * BATCHES_EACH * BATCH  # no row lost
    assert status["batches"] == PRODUCERS * BATCHES_EACH
    n_label_calls = sum(1 for call, _, _ in mon.log if call == "label")
    assert n_label_calls == 3 * PRODUCERS * BATCHES_EACH

    # The same calls, one after the other, in the order the monitor applied them.
    replay = _monitor()
    for call, args, kwargs in mon.log:
        getattr(replay, call)(*args, **kwargs)
    assert replay.status() == status
    for name, frame in _views(replay).items():
        assert_frame_equal(_views(mon)[name], frame, check_exact=False, rel_tol=1e-12), name


@pytest.fixture
def fed():
    mon = _monitor()
    for b in range(4):
        P, _ = softmax_data(BATCH, K=K, seed=b + 1)
        mon.observe(probs=P, ids=[f"{b}-{i}" for i in range(BATCH)])
    mon.label([f"0-{i}" for i in range(BATCH)], softmax_data(BATCH, K=K, seed=1)[1])
    return mon


def _state(mon):
    rows = mon.rows()
    return _views(mon) | {
        "status": pl.DataFrame([mon.status()]),
        "rows": rows.drop(*[c for c in rows.columns if c.startswith("set_")]),
        "alpha_t": pl.DataFrame({"a": [float(mon.calibrators["aci"].alpha_t_)]}),
    }


def _unchanged(before, after):
    for name in before:
        assert_frame_equal(before[name], after[name]), name


def test_a_label_call_that_fails_inside_changes_nothing(fed, monkeypatch):
    before = _state(fed)
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise MemoryError("detector failed")

    monkeypatch.setattr(fed.shift_watch, "labelled", broken)
    y = softmax_data(BATCH, K=K, seed=2)[1]
    with pytest.raises(MemoryError):
        fed.label([f"1-{i}" for i in range(BATCH)] + ["unknown"], np.r_[y, 0])
    assert calls
    _unchanged(before, _state(fed))
    monkeypatch.undo()
    fed.label([f"1-{i}" for i in range(BATCH)], y)  # and the monitor goes on
    assert fed.status()["rows_labelled"] == 2 * BATCH


def test_an_observe_call_that_fails_inside_changes_nothing(fed, monkeypatch):
    before = _state(fed)
    P, y = softmax_data(BATCH, K=K, seed=9)
    ids = [f"new-{i}" for i in range(BATCH)]
    risk = fed.calibrators["risk"]  # the last calibrator: the others have already run
    monkeypatch.setattr(type(risk), "row_risk", lambda self, P: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        fed.observe(probs=P, ids=ids, y=y)
    _unchanged(before, _state(fed))
    monkeypatch.undo()
    monkeypatch.setattr(fed.shift_watch, "observe", lambda *a, **k: (_ for _ in ()).throw(MemoryError()))
    with pytest.raises(MemoryError):
        fed.observe(probs=P, ids=ids, y=y)
    _unchanged(before, _state(fed))
    monkeypatch.undo()
    assert fed.observe(probs=P, ids=ids, y=y) == 4  # the ids were not taken by the failed calls


def test_listeners_hear_of_a_change_after_the_lock_is_released(fed):
    heard = []

    def listener(batches):
        # Another thread can take the lock now: the call that changed the monitor released it.
        got = []
        t = threading.Thread(
            target=lambda: got.append(fed.lock.acquire(timeout=5) and fed.lock.release() is None)
        )
        t.start()
        t.join()
        heard.append((batches, got))

    fed.subscribe(listener)
    P, _ = softmax_data(BATCH, K=K, seed=11)
    fed.observe(probs=P, ids=[f"x-{i}" for i in range(BATCH)])
    assert heard == [((4,), [True])]
    with pytest.raises(ValueError, match="distinct"):  # a rejected call notifies nobody
        fed.label(["x-1", "x-1"], [0, 0])
    assert len(heard) == 1


def _wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


@pytest.mark.parametrize("attempt", range(3))  # the same order every time, whatever the timing
def test_a_waiting_label_goes_before_observations_not_yet_queued(attempt):
    """Producers hold one place in the lock's queue, and a waiting label goes before the rest.

    With a plain lock, queued in the order P1, P2, L, the label would come after both producers'
    batches; the window holds two batches, so its rows would have left (``labels_from_log``).
    """
    P, y = softmax_data(BATCH, K=K, seed=3 + attempt)
    mon = cw.Monitor(
        calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, window=2 * BATCH
    )
    cal_P, cal_y = softmax_data(600, K=K, seed=0)
    mon.calibrate(probs=cal_P, y=cal_y)
    mon.observe(probs=P, ids=[f"a-{i}" for i in range(BATCH)])
    guard = guard_of(mon)
    reports = []

    def observe(name):
        return threading.Thread(
            target=lambda: mon.observe(probs=P, ids=[f"{name}-{i}" for i in range(BATCH)])
        )

    with mon.lock:
        first, second = observe("p1"), observe("p2")
        first.start()
        _wait_until(guard.turnstile.locked)  # p1 is queued for the lock
        second.start()  # p2 waits behind it
        time.sleep(0.02)
        labeller = threading.Thread(
            target=lambda: reports.append(mon.label([f"a-{i}" for i in range(BATCH)], y))
        )
        labeller.start()
        _wait_until(lambda: guard.urgent == 1)
    for thread in (first, second, labeller):
        thread.join(10)
    status = mon.status()
    assert reports[0].matched == BATCH and status["batches"] == 3
    assert status["labels_from_log"] == 0  # labelled in the window: before p2's batch came


def test_a_thread_holding_the_lock_never_waits_at_the_gate():
    """An observation made while its thread holds the lock does not yield to a label waiting for it
    (the label could not get in before the lock is released anyway)."""
    mon = _monitor()
    P, y = softmax_data(BATCH, K=K, seed=4)
    mon.observe(probs=P, ids=[f"a-{i}" for i in range(BATCH)])
    with mon.lock:
        labeller = threading.Thread(target=lambda: mon.label([f"a-{i}" for i in range(BATCH)], y))
        labeller.start()
        _wait_until(lambda: guard_of(mon).urgent == 1)
        started = time.monotonic()
        mon.observe(probs=P, ids=[f"b-{i}" for i in range(BATCH)])
        assert time.monotonic() - started < YIELD_AT_MOST_S / 2
    labeller.join(10)
    assert mon.status()["rows_labelled"] == BATCH


def _detector_states(mon):
    """Every detector's state as plain values (the martingales' state(), the betting tests' counters)."""
    out = []
    for det in mon.shift_watch.detectors:
        m = getattr(det, "martingale_", None)
        if m is not None:
            arrays, info = m.state()
            out.append((det.name, {k: v.tolist() for k, v in arrays.items()}, info))
        test = getattr(det, "test_", None)
        inner = getattr(test, "test_", None)  # a CoverageDrop's BernoulliBetting
        if inner is not None:
            out.append((det.name, inner._log_sr.tolist(), inner.rows_, inner.events_, list(inner.alarms_)))
        elif test is not None and hasattr(test, "sr"):  # the per-class GroupedBetting
            out.append((det.name, *(getattr(test, name).tolist() for name in test._STATE)))
    return out, dict(mon.shift_watch.looks), mon.shift_watch.warning_records()


@pytest.mark.parametrize("call", ["observe", "label"])
def test_a_detector_failing_half_way_leaves_every_detector_as_it_was(call, monkeypatch):
    # The last label-based detector raises after the others have been fed: the ones fed before it
    # are put back too, and the monitor then goes on exactly like a twin that never saw the call.
    mon, twin = _monitor(), _monitor()
    for m in (mon, twin):
        for b in range(3):
            P, y = softmax_data(BATCH, K=K, seed=b + 1)
            m.observe(probs=P, ids=[f"{b}-{i}" for i in range(BATCH)])
        m.label([f"0-{i}" for i in range(BATCH)], softmax_data(BATCH, K=K, seed=1)[1])
    before = _detector_states(mon)
    last = [d for d in mon.shift_watch.detectors if d.needs_labels][-1]
    monkeypatch.setattr(last, "labelled", lambda *a, **k: (_ for _ in ()).throw(MemoryError("late")))
    P, y = softmax_data(BATCH, K=K, seed=9)
    if call == "observe":  # the label-free detectors are fed first, then the labels
        failing = lambda: mon.observe(probs=P, ids=[f"new-{i}" for i in range(BATCH)], y=y)  # noqa: E731
    else:
        failing = lambda: mon.label([f"1-{i}" for i in range(BATCH)], softmax_data(BATCH, K=K, seed=2)[1])  # noqa: E731
    with pytest.raises(MemoryError, match="late"):
        failing()
    assert _detector_states(mon) == before
    monkeypatch.undo()
    for m in (mon, twin):
        m.observe(probs=P, ids=[f"new-{i}" for i in range(BATCH)], y=y)
        m.label([f"1-{i}" for i in range(BATCH)], softmax_data(BATCH, K=K, seed=2)[1])
    assert _detector_states(mon) == _detector_states(twin)


def test_a_relabel_is_not_a_new_observation_for_detectors_and_a_correction_for_aci():
    # Two monitors see the same rows and the same first labels; one also gets every label again
    # (a resend) and some rows relabelled. Coverage counts take the final labels; the detectors,
    # sequential tests, saw each row once (with its first label) in both, so their states are the
    # same. ACI's level is a sum of per-row steps: a resend moves nothing, a correction swaps the
    # row's step, so (corrections before the next observe) it is at the level of a third monitor
    # that only got the final labels. ACI's own coverage-drop test is the exception by design:
    # it still takes each row once, but once a correction moved α_t, the later batches' ACI sets
    # (its input) differ.
    once, twice, final = _monitor(), _monitor(), _monitor()
    rng = np.random.default_rng(5)
    for b in range(4):
        P, y = softmax_data(BATCH, K=K, seed=b + 1)
        ids = [f"{b}-{i}" for i in range(BATCH)]
        for m in (once, twice, final):
            m.observe(probs=P, ids=ids)
        for m in (once, twice):
            m.label(ids, y)
        level = twice.calibrators["aci"].alpha_t_
        twice.label(ids, y)  # the same labels again: ACI moves nothing
        assert twice.calibrators["aci"].alpha_t_ == level
        changed = rng.choice(BATCH, size=20, replace=False)
        y_final = y.copy()
        y_final[changed] = (y[changed] + 1) % K
        twice.label([ids[i] for i in changed], y_final[changed])  # corrections
        final.label(ids, y_final)
    states = {name: _detector_states(m) for name, m in (("once", once), ("twice", twice))}
    not_aci = {
        name: (
            [d for d in st[0] if d[0] != "aci: coverage drop"],
            {k: v for k, v in st[1].items() if k[0] != "aci: coverage drop"},
            st[2],
        )
        for name, st in states.items()
    }
    assert not_aci["twice"] == not_aci["once"]
    drop = {name: next(d for d in st[0] if d[0] == "aci: coverage drop") for name, st in states.items()}
    assert drop["twice"][2] == drop["once"][2] == 4 * BATCH  # rows_: each row once, first label
    aci = {name: m.calibrators["aci"] for name, m in (("once", once), ("twice", twice), ("final", final))}
    np.testing.assert_allclose(aci["twice"].alpha_t_, aci["final"].alpha_t_, rtol=0, atol=1e-12)
    assert aci["twice"].n_updates_ == aci["once"].n_updates_ == 4 * BATCH
    assert aci["twice"].alpha_t_ != aci["once"].alpha_t_
    assert twice.status()["rows_labelled"] == once.status()["rows_labelled"] == 4 * BATCH
    assert not twice.summary()["n_covered"].equals(once.summary()["n_covered"])  # counts took the corrections


def test_the_dashboards_views_read_one_moment_while_a_producer_moves_the_window(frequent_switches):
    """Views that read the window's records and then their rows hold the lock in between.

    Without it a producer moves a batch out of the window (its rows become None) half-way through
    a view: in a kernel, the static output's post-cell refresh raised ``AttributeError`` so.
    """
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, window=2_000)
    P, y = softmax_data(2000, K=K, seed=0)
    mon.calibrate(probs=P, y=y)
    errors: list[BaseException] = []
    done = threading.Event()

    def producer():
        try:
            for b in range(400):
                P, y = softmax_data(100, K=K, seed=b)
                ids = [f"{b}-{i}" for i in range(100)]
                mon.observe(probs=P, ids=ids)
                mon.label(ids, y)
        except BaseException as err:
            errors.append(err)
        finally:
            done.set()

    thread = threading.Thread(target=producer)
    thread.start()
    views = 0
    try:
        while not done.is_set():
            dashboard_datasets(mon)  # the reliability diagram and sets by class of the window's rows
            charts.datasets(mon)
            dashboard.what_if(mon, 0.2)
            views += 1
    finally:
        done.set()
        thread.join(timeout=120)
    assert not errors, errors
    assert views > 0 and mon.status()["batches"] == 400
