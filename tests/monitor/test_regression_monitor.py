"""The regression monitor: calibrated CDFs per row, late labels scored with the CDF the row was shown."""

import numpy as np
import polars as pl
import pytest
from sklearn.linear_model import LinearRegression

import calwatch as cw
from calwatch.engine.regression.calibrator import ModularConformalCalibrator
from calwatch.monitor.regression import RegressionMonitor
from calwatch.views import charts


def _data(rng, n, noise=1.0):
    x = rng.normal(size=n)
    return x, 2 * x + noise * rng.normal(size=n)


@pytest.fixture(scope="module")
def streamed():
    rng = np.random.default_rng(0)
    x, y = _data(rng, 2000)
    mon = cw.Monitor(
        task="regression",
        calibrators={
            "linear": ModularConformalCalibrator(prediction="point"),
            "random": ModularConformalCalibrator(prediction="point", interpolation="random", seed=1),
        },
    )
    mon.calibrate(pred=2 * x, y=y)
    batches = [_data(rng, 400, noise=1.0 if b < 2 else 2.0) for b in range(4)]
    for b, (xb, _) in enumerate(batches):
        mon.observe(pred=2 * xb, ids=[f"{b}-{i}" for i in range(400)])
    for b, (_, yb) in enumerate(batches[:3]):
        mon.label([f"{b}-{i}" for i in range(400)], yb)
    return mon, batches


def test_task_selects_the_regression_monitor():
    assert type(cw.Monitor(task="regression")) is RegressionMonitor
    assert type(cw.Monitor(LinearRegression())) is RegressionMonitor  # a regressor: inferred
    assert type(cw.Monitor()) is cw.Monitor
    with pytest.raises(ValueError, match="task must be 'classification' or 'regression'"):
        cw.Monitor(task="ranking")


def test_batches_count_coverage_pit_and_crps_like_the_engine(streamed):
    mon, batches = streamed
    cal = mon.calibrators["linear"]
    summary = mon.summary().filter(pl.col("calibrator") == "linear").sort("batch")
    for b, (xb, yb) in enumerate(batches):
        out = cal.predict_rows(2 * xb, yb, levels=(0.5, 0.9))
        row = summary.row(b, named=True)
        assert row["mean_width"] == pytest.approx((out["upper_90"] - out["lower_90"]).mean())
        if b < 3:
            assert row["coverage"] == pytest.approx(out["covered_90"].mean())
            assert row["coverage_50"] == pytest.approx(out["covered_50"].mean())
            assert row["crps"] == pytest.approx(out["crps"].mean())
        else:
            assert row["coverage"] is None and row["n_pending"] == 400
    clean = summary.filter(pl.col("batch") < 2)
    noisy = summary.filter(pl.col("batch") == 2)
    assert clean["coverage"].min() > 0.85 and noisy["coverage"][0] < 0.75  # the noise doubled


def test_pit_histogram_and_rows(streamed):
    mon, _batches = streamed
    pit = mon.pit_histogram().filter(pl.col("calibrator") == "random")
    assert pit["count"].sum() == 1200
    rows = mon.rows().filter(pl.col("batch") == 0)
    assert rows["pit_random"].null_count() == 0 and mon.rows()["pit_random"].null_count() == 400
    bins = np.minimum((rows["pit_random"].to_numpy() * 10).astype(int), 9)
    expected = pit.filter(pl.col("batch") == 0).sort("bin")
    assert np.bincount(bins, minlength=10)[expected["bin"].to_numpy()].tolist() == expected["count"].to_list()


def test_random_interpolation_is_scored_with_the_draws_the_row_was_shown(streamed):
    """Relabelling a row with its own value changes nothing: the stored draws are reused."""
    mon, batches = streamed
    before = mon.summary()
    _, yb = batches[0]
    report = mon.label([f"0-{i}" for i in range(400)], yb)
    assert report.relabelled == 400
    assert before.equals(mon.summary())


def test_charts_and_widget(streamed):
    mon, _ = streamed
    assert charts.chart_kinds(mon) == [*charts.REGRESSION_CHARTS, "labels"]
    for kind in charts.chart_kinds(mon):
        charts.build(kind, mon).to_dict()
    fan = charts.datasets(mon)["fan"]
    assert fan["key"].n_unique() == fan.height == 2 * charts.FAN_ROWS
    assert (fan["lower_90"] <= fan["lower_50"]).all() and (fan["upper_50"] <= fan["upper_90"]).all()
    widget = mon.widget()
    assert widget._chart_order == charts.chart_kinds(mon)


def test_bad_input_is_refused_and_changes_nothing(streamed):
    mon, _ = streamed
    status = mon.status()
    with pytest.raises(ValueError, match="pass either X"):
        mon.observe()
    with pytest.raises(ValueError, match="y contains NaN"):
        mon.label(["3-0"], [np.nan])
    with pytest.raises(ValueError, match=r"y must hold one true value per row \(5\)"):
        mon.observe(pred=np.zeros(5), ids=[f"bad-{i}" for i in range(5)], y=np.zeros(4))
    assert mon.status() == status
    with pytest.raises(TypeError, match="must be a ModularConformalCalibrator"):
        cw.Monitor(task="regression", calibrators={"lac": cw.SplitConformalClassifier()})
