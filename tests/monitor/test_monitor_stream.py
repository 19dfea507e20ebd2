"""Monitor: observe, late labels, summaries, the raw-row window."""

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.engine.conformal.classifier import SplitConformalClassifier

from ..synthetic import softmax_data


def test_summary_counts_match_direct_engine_computation(monitor):
    P, y = softmax_data(1000, seed=7)
    ids = [f"row-{i}" for i in range(1000)]
    monitor.observe(probs=P, ids=ids, name="first")
    report = monitor.label(ids[:600], y[:600])
    assert report == cw.LabelReport(matched=600, unmatched=0, relabelled=0, batches=(0,))
    summary = monitor.summary()
    assert summary.height == 2 and summary["name"].to_list() == ["first", "first"]
    for key, cal in monitor.calibrators.items():
        sets = cal.predict_sets(P, ids=ids)  # the monitor keys randomised draws by row id
        row = summary.filter(pl.col("calibrator") == key).row(0, named=True)
        assert row["n_rows"] == 1000 and row["n_labelled"] == 600 and row["n_pending"] == 400
        assert row["n_covered"] == int(sets[np.arange(600), y[:600]].sum())
        assert row["coverage"] == pytest.approx(row["n_covered"] / 600)
        assert row["coverage_lo"] < row["coverage"] < row["coverage_hi"]
        assert row["mean_set_size"] == pytest.approx(sets.sum(axis=1).mean())
        assert row["singleton_share"] == pytest.approx((sets.sum(axis=1) == 1).mean())
        assert row["full_share"] == pytest.approx(sets.all(axis=1).mean())
        assert row["target"] == pytest.approx(0.9)


def test_coverage_is_null_until_labels_arrive(monitor):
    P, _ = softmax_data(50, seed=2)
    monitor.observe(probs=P)
    summary = monitor.summary()
    assert summary["coverage"].null_count() == 2
    assert summary["coverage_lo"].null_count() == 2


def test_late_labels_update_the_batch_they_belong_to(monitor):
    batches = [softmax_data(300, seed=s) for s in range(3)]
    ids = [[(s, i) for i in range(300)] for s in range(3)]
    for (P, _), batch_ids in zip(batches, ids, strict=True):
        monitor.observe(probs=P, ids=batch_ids)
    # labels for batch 0 arrive after batch 2, in shuffled order, mixed with batch 1's
    order = np.random.default_rng(0).permutation(600)
    mixed_ids = ids[0] + ids[1]
    mixed_y = np.concatenate([batches[0][1], batches[1][1]])
    report = monitor.label([mixed_ids[i] for i in order], mixed_y[order])
    assert report.matched == 600 and report.batches == (0, 1)
    s = monitor.summary().filter(pl.col("calibrator") == "aps")
    assert s["n_labelled"].to_list() == [300, 300, 0]
    cal = monitor.calibrators["aps"]
    for b in (0, 1):
        P, y = batches[b]
        expected = int(cal.predict_sets(P, ids=ids[b])[np.arange(300), y].sum())
        assert s["n_covered"][b] == expected


def test_relabelling_replaces_the_old_label(monitor):
    P, y = softmax_data(100, seed=3)
    monitor.observe(probs=P, ids=range(100), y=y)
    wrong = (y + 1) % 4
    report = monitor.label(list(range(100)), wrong)
    assert report.relabelled == 100
    row = monitor.summary().filter(pl.col("calibrator") == "aps").row(0, named=True)
    sets = monitor.calibrators["aps"].predict_sets(P, ids=list(range(100)))
    assert row["n_labelled"] == 100
    assert row["n_covered"] == int(sets[np.arange(100), wrong].sum())
    assert monitor.status()["rows_labelled"] == 100


def test_unknown_ids_are_counted_and_expired_ids_are_applied_from_the_row_log(monitor):
    first, _ = softmax_data(2000, seed=4)
    monitor.observe(probs=first, ids=[f"a{i}" for i in range(2000)])
    for b in range(2):  # window is 2500 rows: batch 0 leaves the window after batch 2
        P, _ = softmax_data(1000, seed=5 + b)
        monitor.observe(probs=P, ids=[f"b{b}-{i}" for i in range(1000)])
    assert monitor.summary()["in_window"].to_list() == [False, False, True, True, True, True]
    report = monitor.label(["a1", "a2", "never-seen", "b0-1"], [0, 1, 2, 3])
    assert (report.matched, report.unmatched, report.batches) == (3, 1, (0, 1))
    status = monitor.status()
    assert status["labels_unmatched"] == 1 and status["rows_in_window"] == 2000
    assert status["rows_seen"] == 4000 and status["rows_pending"] == 3997
    assert (status["rows_logged"], status["labels_from_log"]) == (2000, 2)
    covered = monitor.summary().filter(pl.col("batch") == 0)["n_labelled"].to_list()
    assert covered == [2, 2]


def test_without_the_row_log_expired_ids_are_counted_not_applied():
    P_cal, y_cal = softmax_data(2000, seed=1)
    mon = cw.Monitor(
        calibrators={"aps": cw.SplitConformalClassifier(score="aps")}, window=2500, row_log=False
    )
    mon.calibrate(probs=P_cal, y=y_cal)
    first, _ = softmax_data(2000, seed=4)
    mon.observe(probs=first, ids=[f"a{i}" for i in range(2000)])
    for b in range(2):
        P, _ = softmax_data(1000, seed=5 + b)
        mon.observe(probs=P, ids=[f"b{b}-{i}" for i in range(1000)])
    report = mon.label(["a1", "a2", "never-seen", "b0-1"], [0, 1, 2, 3])
    assert report.matched == 1 and report.unmatched == 3
    status = mon.status()
    assert status["labels_unmatched"] == 3 and status["rows_pending"] == 1999
    assert "rows_logged" not in status


def test_memory_window_keeps_only_recent_rows(monitor):
    for b in range(10):
        P, _ = softmax_data(600, seed=b)
        monitor.observe(probs=P)
    assert monitor.status()["rows_in_window"] <= 2500 + 600
    rows = monitor.rows()
    assert rows.height == monitor.status()["rows_in_window"]
    assert rows["batch"].unique().sort().to_list() == [6, 7, 8, 9]
    assert monitor.summary().height == 20  # statistics of every batch stay


def test_rows_frame(monitor):
    P, y = softmax_data(5, seed=8)
    monitor.observe(probs=P, ids=["a", "b", "c", "d", "e"])
    monitor.label(["b"], [y[1]])
    rows = monitor.rows(window=5)
    assert rows["id"].to_list() == ["a", "b", "c", "d", "e"]
    assert rows["prediction"].to_list() == P.argmax(axis=1).tolist()
    assert rows["label"].to_list() == [None, int(y[1]), None, None, None]
    sets = monitor.calibrators["aps"].predict_sets(P, ids=["a", "b", "c", "d", "e"])
    assert rows["set_aps"].to_list() == [np.flatnonzero(s).tolist() for s in sets]
    assert rows["covered_aps"].to_list()[1] == bool(sets[1, y[1]])
    assert rows["covered_aps"].null_count() == 4
    with pytest.raises(ValueError, match="not in the window"):
        monitor.rows(batch=99)


@pytest.mark.parametrize(
    "classes", [None, np.array(["cat", "dog", "eel", "fox", "gnu"])], ids=["ints", "strings"]
)
def test_the_last_rows_are_the_tail_of_all_rows(data, classes):
    """``rows(window=n)`` reads only the newest batches that hold ``n`` rows, and gives their tail."""
    P, y = data(1000, K=5, seed=2)
    mon = cw.Monitor(
        calibrators={"aps": SplitConformalClassifier(score="aps", alpha=0.1), "risk": cw.RiskEstimator()},
        classes=classes,
    ).calibrate(probs=P, y=y if classes is None else classes[y])
    names = np.arange(5) if classes is None else classes
    for b, n in enumerate([30, 1, 45, 20]):
        P, y = data(n, K=5, seed=10 + b)
        mon.observe(probs=P, ids=[f"{b}-{i}" for i in range(n)])
        if b % 2:  # half the batches labelled, so the label and coverage columns mix values and nulls
            mon.label([f"{b}-{i}" for i in range(0, n, 2)], names[y[::2]])
    every = mon.rows()
    assert every.height == 96 and every["label"].null_count() == 96 - 1 - 10
    for n in (0, 1, 19, 20, 21, 66, 95, 96, 500):
        assert_frame_equal(mon.rows(window=n), every.tail(n))
    assert every["set_aps"].dtype == pl.List(pl.String if classes is not None else pl.Int64)


def test_polars_ids_and_string_classes(data):
    P, y = data(500, K=3, seed=9)
    names = np.array(["cat", "dog", "eel"])
    mon = cw.Monitor(calibrators={"lac": SplitConformalClassifier(score="lac", alpha=0.2)}, classes=names)
    mon.calibrate(probs=P, y=names[y])
    Pt, yt = data(40, K=3, seed=10)
    ids = pl.Series("id", [f"x{i}" for i in range(40)])
    mon.observe(probs=Pt, ids=ids)
    report = mon.label(ids, names[yt])
    assert report.matched == 40
    cc = mon.class_coverage(by_batch=False)
    assert set(cc["class"].to_list()) <= {"cat", "dog", "eel"}
    assert cc["n_labelled"].sum() == 40
    with pytest.raises(ValueError, match=r"y holds labels outside the known classes .*'fox'"):
        mon.label(["x0"], ["fox"])


def test_class_coverage_sums(monitor):
    P, y = softmax_data(800, seed=12)
    monitor.observe(probs=P, y=y)
    cc = monitor.class_coverage(by_batch=False).filter(pl.col("calibrator") == "lac-by-class")
    sets = monitor.calibrators["lac-by-class"].predict_sets(P)
    for row in cc.iter_rows(named=True):
        c = int(row["class"])
        assert row["n_labelled"] == int((y == c).sum())
        assert row["n_covered"] == int(sets[y == c, c].sum())


def test_category_mondrian_through_the_monitor(data):
    P, y = data(3000, seed=13)
    groups = np.where(P[:, 0] > 0.3, "high", "low")
    mon = cw.Monitor(
        calibrators={
            "by-group": SplitConformalClassifier(score="lac", alpha=0.1, mondrian="category"),
            "plain": SplitConformalClassifier(score="lac", alpha=0.1),
        }
    )
    mon.calibrate(probs=P, y=y, categories=groups)
    Pt, yt = data(200, seed=14)
    gt = np.where(Pt[:, 0] > 0.3, "high", "low")
    mon.observe(probs=Pt, y=yt, categories=gt)
    expected = mon.calibrators["by-group"].predict_sets(Pt, categories=gt)
    row = mon.summary().filter(pl.col("calibrator") == "by-group").row(0, named=True)
    assert row["n_covered"] == int(expected[np.arange(200), yt].sum())
    with pytest.raises(ValueError, match="categories is required"):
        mon.observe(probs=Pt)
