"""Shift detectors inside the Monitor: warnings, episodes, acknowledgements, charts."""

import math

import numpy as np
import polars as pl
import pytest

import calwatch as cw
from calwatch.views import charts

from ..synthetic import softmax_data


def make_monitor(**kwargs):
    P, y = softmax_data(3000, K=4, seed=1)
    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
        },
        **kwargs,
    )
    return mon.calibrate(probs=P, y=y)


def test_default_detectors():
    mon = make_monitor()
    names = [d.name for d in mon.shift_watch.detectors]
    assert names == [
        "confidence martingale",
        "lac: conformity martingale",
        "lac: coverage drop",
        "aps: conformity martingale",
        "aps: coverage drop",
    ]
    assert "shift" in charts.chart_kinds(mon)


def test_exchangeable_stream_raises_no_warning():
    mon = make_monitor()
    pending = None
    for b in range(20):
        P, y = softmax_data(500, K=4, seed=100 + b)
        ids = range(b * 500, (b + 1) * 500)
        mon.observe(probs=P, ids=ids)
        if pending:
            mon.label(*pending)
        pending = (list(ids), y)
    assert mon.warnings().height == 0
    looks = pl.DataFrame(mon.shift_watch.look_rows())
    assert set(looks["detector"]) == {d.name for d in mon.shift_watch.detectors}
    assert not looks["alarm"].any()


def test_confidence_shift_opens_one_warning_that_can_be_acknowledged():
    mon = make_monitor()
    for b in range(3):
        mon.observe(probs=softmax_data(500, K=4, seed=200 + b)[0])
    assert mon.warnings().height == 0
    for b in range(6):  # a flatter model: much less confident rows
        mon.observe(probs=softmax_data(500, K=4, seed=300 + b, scale=0.3)[0])
    warnings = mon.warnings()
    confidence = warnings.filter(pl.col("name") == "confidence martingale")
    assert confidence.height == 1  # one episode, not one warning per alarming batch
    w = confidence.row(0, named=True)
    assert w["first_batch"] >= 3 and w["open"] and not w["acknowledged"]
    assert "exchangeable" in w["explanation"] and "however long" in w["false_alarm_control"]
    # the anytime threshold of the first epoch (10⁵ rows): c = 10⁵·π²/(6·0.01)
    assert w["statistic"] >= w["threshold"] == pytest.approx(math.log10(1e5 * math.pi**2 / 0.06))
    mon.acknowledge(w["episode"], "known: new model version deployed", by="ana")
    w = mon.warnings().filter(pl.col("episode") == w["episode"]).row(0, named=True)
    assert w["acknowledged"] and w["ack_by"] == "ana" and w["ack_note"].startswith("known")
    with pytest.raises(ValueError, match="episode must be one of"):
        mon.acknowledge(99)


def test_wrong_labels_trip_the_label_based_detectors():
    mon = make_monitor()
    for b in range(8):
        P, _ = softmax_data(500, K=4, seed=400 + b)
        ids = list(range(b * 500, (b + 1) * 500))
        mon.observe(probs=P, ids=ids)
        mon.label(ids, (P.argmin(axis=1)))  # labels the model finds least likely
    names = set(mon.warnings()["name"])
    assert {"lac: conformity martingale", "lac: coverage drop", "aps: coverage drop"} <= names
    assert "confidence martingale" not in names  # the inputs did not change


def test_shift_off():
    mon = make_monitor(shift=None)
    mon.observe(probs=softmax_data(100, K=4, seed=5)[0])
    assert mon.shift_watch is None and mon.warnings().height == 0
    assert "shift" not in charts.chart_kinds(mon)
    with pytest.raises(ValueError, match="no shift detectors"):
        mon.acknowledge(0)
    with pytest.raises(ValueError, match="shift must be"):
        cw.Monitor(shift="everything")


def test_widget_gets_warnings_and_acknowledgements(monkeypatch):
    mon = make_monitor()
    widget = mon.widget()
    sent = []
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: sent.append(content))
    for b in range(6):
        mon.observe(probs=softmax_data(500, K=4, seed=500 + b, scale=0.3 if b >= 2 else 2.0)[0])
    assert any(r["detector"] == "confidence martingale" for r in sent[-1]["data"]["shift"])
    assert len(widget._warnings) == 1 and widget._warnings[0]["open"]
    episode = widget._warnings[0]["episode"]
    widget._on_custom_message(widget, {"kind": "acknowledge", "episode": episode, "note": "seen"}, [])
    assert widget._warnings[0]["acknowledged"] and widget._warnings[0]["ack_note"] == "seen"
    widget._on_custom_message(widget, {"kind": "acknowledge", "episode": 42}, [])
    assert "acknowledge failed" in widget._error


def test_adaptive_calibrator_moves_its_level_as_labels_arrive():
    P, y = softmax_data(3000, K=4, seed=1)
    mon = cw.Monitor(
        calibrators={
            "aci": cw.Adaptive(cw.SplitConformalClassifier(score="lac", alpha=0.1), gamma=0.01),
            "plain": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        }
    ).calibrate(probs=P, y=y)
    aci = mon.calibrators["aci"]
    assert aci.alpha_t_ == pytest.approx(0.1)
    levels = []
    for b in range(6):  # a shifted stream: a flatter model (full sets: over-coverage)
        Pb, yb = softmax_data(300, K=4, seed=600 + b, scale=0.5)
        ids = list(range(b * 300, (b + 1) * 300))
        mon.observe(probs=Pb, ids=ids)
        levels.append(aci.alpha_t_)
        mon.label(ids, yb)
    # each batch's sets were taken at the level current when it was observed
    summary = mon.summary().filter(pl.col("calibrator") == "aci").sort("batch")
    assert summary["alpha_level"].to_list() == pytest.approx(levels)
    assert aci.n_updates_ == 1800
    # the update replays exactly what the monitor recorded: α_T+1 − α_1 = γ Σ (α − err)
    missed = summary["n_labelled"].sum() - summary["n_covered"].sum()
    assert missed < 0.1 * 1800 and aci.alpha_t_ > 0.1  # over-coverage raises the level
    assert aci.alpha_t_ - 0.1 == pytest.approx(0.01 * (0.1 * 1800 - missed))
    plain = mon.summary().filter(pl.col("calibrator") == "plain")
    assert plain["alpha_level"].to_list() == [0.1] * 6
    assert "aci" in charts.chart_kinds(mon)
    assert mon.chart("aci").to_dict()["layer"][1]["encoding"]["y"]["field"] == "alpha_level"  # [0]: x span


# ACI takes corrected labels (issue 36 item 5); the detectors keep the first (tests above and in
# test_kept_on_failure...). Monitors: one ACI calibrator, γ = .01, α = .1.
def _aci_monitor(**kwargs):
    P, y = softmax_data(3000, K=4, seed=1)
    aci = cw.Adaptive(cw.SplitConformalClassifier(score="lac", alpha=0.1), gamma=0.01)
    return cw.Monitor(calibrators={"aci": aci}, **kwargs).calibrate(probs=P, y=y)


def _sets(mon, batch):
    return mon.rows(batch=batch)["set_aci"].to_list()


def test_aci_after_a_correction_equals_a_stream_that_only_got_the_final_labels():
    corrected, final_only, wrong_only = _aci_monitor(), _aci_monitor(), _aci_monitor()
    a, b = corrected.calibrators["aci"], final_only.calibrators["aci"]
    before, after = [], []
    for batch in range(4):
        Pb, yb = softmax_data(300, K=4, seed=600 + batch)
        ids = list(range(batch * 300, (batch + 1) * 300))
        for mon in (corrected, final_only, wrong_only):
            mon.observe(probs=Pb, ids=ids)
        assert _sets(corrected, batch) == _sets(final_only, batch)  # sets taken after: equal
        corrected.label(ids, (yb + 1) % 4)  # every label wrong...
        wrong_only.label(ids, (yb + 1) % 4)
        before.append(a.alpha_t_)
        report = corrected.label(ids, yb)  # ...and corrected before the next observe
        assert report.relabelled == 300
        after.append(a.alpha_t_)
        final_only.label(ids, yb)
        # equal up to the rounding of summing the same steps in another order (300 additions of
        # terms ≤ 1, each rounded by ≤ 2^-53; atol, not rtol: α_t passes near 0)
        np.testing.assert_allclose(a.alpha_t_, b.alpha_t_, rtol=0, atol=1e-12)
        assert (a.n_updates_, a.coverage_) == (b.n_updates_, b.coverage_)
    # Batch 0: the wrong labels (all misses but the rows whose set holds the wrong class) took
    # α_t from .1 to −1.61; the correction brings it to .08, the final labels' level. After four
    # batches: .26, where a stream that kept the first labels (ACI before this fix) is at −.71.
    assert before[0] == pytest.approx(-1.61, abs=1e-9) and after[0] == pytest.approx(0.08, abs=1e-9)
    assert a.alpha_t_ == pytest.approx(0.26, abs=1e-9)
    assert wrong_only.calibrators["aci"].alpha_t_ == pytest.approx(-0.71, abs=1e-9)
    summary = [m.summary().sort("batch") for m in (corrected, final_only)]
    assert summary[0]["n_covered"].to_list() == summary[1]["n_covered"].to_list()
    levels = [s["alpha_level"].to_numpy() for s in summary]
    np.testing.assert_allclose(levels[0], levels[1], rtol=0, atol=1e-12)


def test_a_correction_after_the_next_observe_moves_aci_by_its_step_only():
    corrected, final_only = _aci_monitor(), _aci_monitor()
    a, b = corrected.calibrators["aci"], final_only.calibrators["aci"]
    P0, y0 = softmax_data(300, K=4, seed=600)
    P1, y1 = softmax_data(300, K=4, seed=601)
    ids0, ids1 = list(range(300)), list(range(300, 600))
    for mon in (corrected, final_only):
        mon.observe(probs=P0, ids=ids0)
    corrected.label(ids0, (y0 + 1) % 4)
    final_only.label(ids0, y0)
    for mon in (corrected, final_only):
        mon.observe(probs=P1, ids=ids1)  # taken at different levels: -1.61 (full sets) and .08
    missed_old = int((~corrected.rows(batch=0)["covered_aci"].to_numpy()).sum())
    level = a.alpha_t_
    corrected.label(ids0, y0)
    missed_new = int((~corrected.rows(batch=0)["covered_aci"].to_numpy()).sum())
    assert a.alpha_t_ == level + 0.01 * (missed_old - missed_new)  # γ Σ (err_old − err_new), exactly
    np.testing.assert_allclose(a.alpha_t_, b.alpha_t_, rtol=0, atol=1e-12)  # the same rows labelled...
    for mon in (corrected, final_only):
        mon.label(ids1, y1)
    # ...but batch 1's sets were taken at the uncorrected level (full sets: no misses), so the
    # streams part from here on, as expected.
    assert _sets(corrected, 1) != _sets(final_only, 1)
    assert a.alpha_t_ - b.alpha_t_ == pytest.approx(0.01 * b._n_missed - 0.01 * a._n_missed, abs=1e-12)
    assert a.alpha_t_ > b.alpha_t_


def test_a_relabel_to_the_same_label_leaves_aci_where_it_was():
    mon = _aci_monitor()
    aci = mon.calibrators["aci"]
    P, y = softmax_data(300, K=4, seed=600)
    mon.observe(probs=P, ids=list(range(300)))
    mon.label(list(range(300)), y)
    state = (aci.alpha_t_, aci.n_updates_, aci.coverage_, aci.alpha_range_)
    assert mon.label(list(range(300)), y).relabelled == 300
    assert (aci.alpha_t_, aci.n_updates_, aci.coverage_, aci.alpha_range_) == state  # exactly


def test_a_rejected_label_call_leaves_aci_as_it_was(monkeypatch):
    mon = _aci_monitor()
    aci = mon.calibrators["aci"]
    P, y = softmax_data(300, K=4, seed=600)
    ids = list(range(300))
    mon.observe(probs=P, ids=ids)
    mon.label(ids[:200], (y[:200] + 1) % 4)
    state = (aci.alpha_t_, aci.n_updates_, aci.coverage_, aci.alpha_range_, len(aci.history()))
    summary = mon.summary()
    with pytest.raises(ValueError):
        mon.label(ids, np.concatenate([y[:-1], [99]]))  # one label outside the classes
    assert (aci.alpha_t_, aci.n_updates_, aci.coverage_, aci.alpha_range_, len(aci.history())) == state
    # A failure after ACI took the corrections (200 rows) and first labels (100): all undone.
    watch = mon.shift_watch
    original = type(watch).labelled

    def fails(self, *args, **kwargs):
        raise MemoryError("injected")

    monkeypatch.setattr(type(watch), "labelled", fails)
    with pytest.raises(MemoryError):
        mon.label(ids, y)
    assert (aci.alpha_t_, aci.n_updates_, aci.coverage_, aci.alpha_range_, len(aci.history())) == state
    assert mon.summary().equals(summary)
    monkeypatch.setattr(type(watch), "labelled", original)
    mon.label(ids, y)
    final_only = _aci_monitor()
    final_only.observe(probs=P, ids=ids)
    final_only.label(ids[:200], y[:200])
    final_only.label(ids[200:], y[200:])
    np.testing.assert_allclose(aci.alpha_t_, final_only.calibrators["aci"].alpha_t_, rtol=0, atol=1e-12)


def test_coverage_drop_warning_reports_the_evidence_that_crossed_the_threshold():
    mon = make_monitor()
    for b in range(6):
        P, _ = softmax_data(500, K=4, seed=700 + b)
        ids = list(range(b * 500, (b + 1) * 500))
        mon.observe(probs=P, ids=ids)
        mon.label(ids, P.argmin(axis=1))
    drop = mon.warnings().filter(pl.col("name") == "lac: coverage drop").row(0, named=True)
    assert drop["statistic"] >= drop["threshold"]  # not the value after the post-alarm reset


def test_default_detectors_accept_classes_too_small_to_test():
    # Many classes, Mondrian by label: some classes have 3-7 calibration rows, too few for a finite
    # threshold at α = 0.1 (their sets always hold them). The default detectors the user never asked
    # for must not refuse the monitor: those classes get no test, the others do.
    rng = np.random.default_rng(4)
    K = 60
    P = rng.dirichlet(np.full(K, 0.3), size=2000)
    y = np.concatenate([np.repeat(np.arange(5), [3, 4, 5, 6, 7]), rng.integers(5, K, 2000 - 25)])
    mon = cw.Monitor(
        calibrators={"by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label")}
    )
    mon.calibrate(probs=P, y=y)
    detector = next(d for d in mon.shift_watch.detectors if d.name == "by-class: class coverage drop")
    counts = np.bincount(y, minlength=K)
    assert set(np.flatnonzero(detector.test_.testable)) == {c for c in range(K) if counts[c] >= 9}  # k ≤ n
    assert detector.untested_ == [c for c in range(K) if counts[c] < 9]
    Pb = rng.dirichlet(np.full(K, 0.3), size=500)
    mon.observe(probs=Pb, ids=list(range(500)), y=rng.integers(0, K, 500))
    assert mon.summary()["n_labelled"].to_list() == [500]


def _detector_state(detector):
    """A detector's state as plain values (its martingale's state(), its betting test's arrays)."""
    martingale = getattr(detector, "martingale_", None)
    if martingale is not None:
        arrays, info = martingale.state()
        return {k: v.tolist() for k, v in arrays.items()}, info
    test = getattr(detector, "test_", None)
    inner = getattr(test, "test_", None)
    if inner is not None:
        return inner._log_sr.tolist(), inner.rows_, inner.events_, list(inner.alarms_)
    return [getattr(test, name).tolist() for name in test._STATE]


def test_kept_on_failure_undoes_what_the_block_fed_and_wrote_even_nested():
    # A block that raises puts back the detectors it fed, the looks it wrote (a nested block's
    # too, though that one succeeded) and the episodes; the monitor then goes on like a twin
    # that never saw the block.
    P_cal, y_cal = softmax_data(3000, K=4, seed=1)
    mon, twin = (
        cw.Monitor(
            calibrators={
                "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
                "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
            }
        ).calibrate(probs=P_cal, y=y_cal)
        for _ in range(2)
    )
    P, y = softmax_data(4000, K=4, seed=2)
    for m in (
        mon,
        twin,
    ):  # wrong labels over 12 batches (enough for the runs check): alarms and open episodes
        for lo in range(0, 3000, 250):
            m.observe(probs=P[lo : lo + 250], ids=range(lo, lo + 250))
            m.label(range(lo, lo + 250), (y[lo : lo + 250] + 1) % 4)
    watch = mon.shift_watch

    def state():
        return dict(watch.looks), watch.warning_records(), [_detector_state(d) for d in watch.detectors]

    before = state()
    assert before[1]  # there are episodes to put back
    covered = {"lac": np.zeros(1000, bool), "aps": np.zeros(1000, bool)}
    changed = []

    def feed_then_fail():
        with watch.kept_on_failure():
            watch.observe(12, (3000, 3999), P[3000:])
            with watch.kept_on_failure():
                watch.labelled(12, (3000, 3999), P[3000:], y[3000:], covered)
            changed.append(state() != before)
            raise RuntimeError("late")

    with pytest.raises(RuntimeError, match="late"):
        feed_then_fail()
    assert changed == [True]
    assert state() == before
    for m in (mon, twin):
        m.observe(probs=P[3000:], ids=range(3000, 4000))
        m.label(range(3000, 4000), y[3000:])
    assert dict(mon.shift_watch.looks) == dict(twin.shift_watch.looks)
    assert mon.shift_watch.warning_records() == twin.shift_watch.warning_records()
    assert [_detector_state(d) for d in mon.shift_watch.detectors] == [
        _detector_state(d) for d in twin.shift_watch.detectors
    ]
