"""A selective calibrator in the Monitor: kept rows per batch, their accuracy, re-tuning on the window."""

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.engine.selective.calibrator import SelectiveCalibrator

from ..synthetic import softmax_data

FAST = {"epochs": 1, "steps_per_epoch": 3, "sample_size": 64, "progress": False, "n_threads": 1}


@pytest.fixture(scope="module")
def streamed():
    P, y = softmax_data(1500, K=3, seed=0)
    mon = cw.Monitor(
        calibrators={
            "sel": SelectiveCalibrator(coverage=0.7, seed=0, **FAST),
            "lac": cw.SplitConformalClassifier(),
        }
    )
    mon.calibrate(probs=P, y=y)
    data = [softmax_data(300, K=3, seed=10 + b, scale=2.0 if b < 2 else 1.0) for b in range(4)]
    for b, (P_b, _) in enumerate(data):
        mon.observe(probs=P_b, ids=[f"{b}-{i}" for i in range(300)])
    for b, (_, y_b) in enumerate(data[:3]):
        mon.label([f"{b}-{i}" for i in range(300)], y_b)
    return mon, data


def test_kept_rows_and_their_accuracy_match_the_engine(streamed):
    mon, data = streamed
    sel = mon.calibrators["sel"]
    summary = mon.summary().filter(pl.col("calibrator") == "sel").sort("batch")
    assert summary["kind"].unique().to_list() == ["selective"]
    for b, (P_b, y_b) in enumerate(data):
        kept = sel.select(P_b)
        row = summary.row(b, named=True)
        assert row["kept_share"] == pytest.approx(kept.mean())
        assert row["threshold"] == pytest.approx(sel.threshold_)
        if b < 3:
            right = P_b.argmax(axis=1) == y_b
            assert row["n_kept_labelled"] == kept.sum()
            assert row["kept_accuracy"] == pytest.approx(right[kept].mean())
            assert row["accuracy"] == pytest.approx(right.mean())
        else:
            assert row["kept_accuracy"] is None
    rows = mon.rows().filter(pl.col("batch") == 0)
    assert np.allclose(rows["score_sel"].to_numpy(), sel.scores(data[0][0]))
    assert rows["kept_sel"].to_list() == sel.select(data[0][0]).tolist()


def test_retune_sets_the_threshold_on_the_window_and_recounts(streamed, tmp_path):
    mon, data = streamed
    mon.save(tmp_path / "before")
    threshold = mon.retune(0.5)
    scores = np.concatenate([mon.calibrators["sel"].scores(P_b) for P_b, _ in data])
    assert (scores >= threshold).mean() >= 0.5  # Eq. 16: at least ξ of the tuning rows kept
    assert (scores > threshold).mean() < 0.5
    summary = mon.summary().filter(pl.col("calibrator") == "sel")
    kept = summary["kept_share"].to_numpy() * 300
    assert kept.sum() == (scores >= threshold).sum()
    assert summary["threshold"].unique().to_list() == [threshold]
    assert mon.calibrators["sel"].coverage == 0.5
    with pytest.raises(ValueError, match=r"coverage must be a number in \(0, 1\]"):
        mon.retune(1.5)
    with pytest.raises(ValueError, match="one of the selective calibrators"):
        mon.retune(0.5, "lac")
    loaded = cw.Monitor.load(tmp_path / "before")  # the snapshot taken before re-tuning
    assert loaded.calibrators["sel"].coverage == 0.7


def test_snapshot_round_trip_scores_the_same(streamed, tmp_path):
    mon, _data = streamed
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert_frame_equal(loaded.summary(), mon.summary())
    assert_frame_equal(loaded.rows(), mon.rows())
    P_new, _ = softmax_data(50, K=3, seed=99)
    np.testing.assert_allclose(loaded.calibrators["sel"].scores(P_new), mon.calibrators["sel"].scores(P_new))


def test_selective_panels(streamed):
    from calwatch.engine.metrics.calibration import selective_curve
    from calwatch.views import charts

    mon, data = streamed
    kinds = charts.chart_kinds(mon)
    assert set(charts.SELECTIVE_CHARTS) <= set(kinds)
    for kind in charts.SELECTIVE_CHARTS:
        charts.build(kind, mon).to_dict()
    frames = charts.datasets(mon)
    curve = frames["selective_curve"].filter(pl.col("selector") == "selector").sort("coverage")
    P = np.concatenate([P_b for P_b, _ in data[:3]])
    y = np.concatenate([y_b for _, y_b in data[:3]])
    scores = mon.calibrators["sel"].scores(P)
    _xi, values = selective_curve(P, y, scores, coverages=curve["coverage"].to_list())
    np.testing.assert_allclose(curve["error"].to_numpy(), values)
    conf = frames["selective_confidence"]
    for group in ("all rows", "kept"):
        assert conf.filter(pl.col("group") == group)["share"].sum() == pytest.approx(1.0)
    assert conf.filter(pl.col("group") == "all rows")["count"].sum() == 1200
    only = cw.Monitor(calibrators={"sel": mon.calibrators["sel"]})
    assert not set(charts.SET_CHARTS) & set(charts.chart_kinds(only))


def test_the_widgets_kept_share_slider_retunes_on_the_window(streamed):
    mon, _ = streamed
    widget = mon.widget()
    assert widget._selectives == ["sel"]
    widget._kept_share = 0.3
    assert mon.calibrators["sel"].coverage == 0.3
    share = mon.summary().filter(pl.col("calibrator") == "sel")["kept_share"].mean()
    assert share == pytest.approx(0.3, abs=0.02)
    widget._kept_share = 1.5
    assert widget._error.startswith("kept share: coverage must be a number in (0, 1]")
    assert mon.calibrators["sel"].coverage == 0.3


def test_baseline_selectors_with_outlier_models_round_trip(tmp_path):
    from calwatch.engine.selective.calibrator import BaselineSelector

    rng = np.random.default_rng(3)
    P, y = softmax_data(800, K=3, seed=3)
    E = rng.normal(size=(800, 4)).astype(np.float32)
    mon = cw.Monitor(calibrators={"iforest": BaselineSelector("isolation_forest", coverage=0.7)}, shift=None)
    mon.calibrate(probs=P, y=y, embeddings=E)
    mon.observe(probs=P[:100], embeddings=E[:100])
    mon.save(tmp_path / "s")
    loaded = cw.Monitor.load(tmp_path / "s")
    assert_frame_equal(loaded.rows(), mon.rows())
    np.testing.assert_allclose(
        loaded.calibrators["iforest"].scores(P[100:200], embeddings=E[100:200]),
        mon.calibrators["iforest"].scores(P[100:200], embeddings=E[100:200]),
    )
