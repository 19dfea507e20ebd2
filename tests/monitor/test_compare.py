"""Comparing two runs on the same panels: cw.compare(a, b)."""

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.views import charts

from ..synthetic import pets_monitor


@pytest.fixture(scope="module")
def runs():
    a = pets_monitor(0)
    b = pets_monitor(1, calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.2)})
    return a, b


def test_overlays_both_runs_batch_by_batch(runs, tmp_path):
    a, b = runs
    b.save(tmp_path / "b")
    both = cw.compare(a, tmp_path / "b", names=("old", "new"), show=False)
    assert list(both.calibrators) == [f"old: {k}" for k in a.calibrators] + ["new: lac"]
    summary = both.summary()
    for name, run in (("old", a), ("new", b)):
        part = summary.filter(pl.col("calibrator").str.starts_with(f"{name}: "))
        original = run.summary().with_columns(calibrator=pl.lit(f"{name}: ") + pl.col("calibrator"))
        columns = ["batch", "calibrator", "n_labelled", "coverage", "mean_set_size", "target"]
        assert_frame_equal(
            part.select(columns).sort("calibrator", "batch"),
            original.select(columns).sort("calibrator", "batch"),
        )
    warnings = both.warnings()
    assert warnings.height == a.warnings().height + b.warnings().height
    assert warnings["episode"].to_list() == list(range(warnings.height))
    assert all(n.startswith(("old: ", "new: ")) for n in warnings["name"])
    for kind in charts.chart_kinds(both):
        charts.build(kind, both).to_dict()
    assert both.widget()._calibrators == list(both.calibrators)
    assert both.rows().is_empty()  # raw rows are not merged


def test_a_comparison_is_read_only_and_needs_the_same_classes(runs):
    a, b = runs
    both = cw.compare(a, b, show=False)
    with pytest.raises(TypeError, match="read-only"):
        both.observe(probs=[[1.0, 0, 0, 0]])
    other = cw.Monitor(classes=["x", "y"])
    from ..synthetic import softmax_data

    P, y = softmax_data(300, K=2, seed=0)
    other.calibrate(probs=P, y=[["x", "y"][i] for i in y])
    with pytest.raises(ValueError, match="different classes"):
        cw.compare(a, other, show=False)
    with pytest.raises(ValueError, match="two different non-empty strings"):
        cw.compare(a, b, names=("A", "A"), show=False)
    assert a.n_batches == 6 and "old: lac" not in a.calibrators  # the runs are untouched


def _regression_run(interpolation, *, seed=0, ids="same", levels=(0.5, 0.9)):
    """A regression monitor on one stream (the same rows for every run unless ids="own")."""
    from calwatch.engine.regression.calibrator import ModularConformalCalibrator

    rng = np.random.default_rng(seed)
    x = rng.normal(size=1000)
    mon = cw.Monitor(
        task="regression",
        calibrators={"mcc": ModularConformalCalibrator(prediction="point", interpolation=interpolation)},
        levels=levels,
        name=f"{interpolation} run",
    )
    mon.calibrate(pred=2 * x, y=2 * x + rng.normal(size=1000))
    stream = np.random.default_rng(7)
    for b in range(3):
        xb = stream.normal(size=100)
        yb = 2 * xb + (1 + b) * stream.normal(size=100)
        names = [f"{b}-{i}" if ids == "same" else f"{ids}-{b}-{i}" for i in range(100)]
        mon.observe(pred=2 * xb, ids=names)
        mon.label(names[: 100 - 30 * b], yb[: 100 - 30 * b])
    return mon


@pytest.fixture(scope="module")
def regression_runs():
    return _regression_run("linear", seed=0), _regression_run("random", seed=1)


def test_regression_runs_overlay_on_the_regression_panels(regression_runs, tmp_path):
    from calwatch.monitor.regression import RegressionMonitor

    a, b = regression_runs
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    both = cw.compare(tmp_path / "a", tmp_path / "b", names=("old", "new"), show=False)
    assert type(both) is RegressionMonitor
    assert list(both.calibrators) == ["old: mcc", "new: mcc"]
    for name, run in (("old", a), ("new", b)):
        part = both.summary().filter(pl.col("calibrator").str.starts_with(f"{name}: ")).drop("observed_at")
        original = run.summary().with_columns(calibrator=pl.lit(f"{name}: mcc")).drop("observed_at")
        assert_frame_equal(part, original)
        pit = both.pit_histogram().filter(pl.col("calibrator") == f"{name}: mcc")
        assert_frame_equal(pit, run.pit_histogram().with_columns(calibrator=pl.lit(f"{name}: mcc")))
        rows = both.rows(batch=2)  # both runs watched the same rows: their results side by side
        for column in ("median", "lower_90", "upper_90", "pit"):
            assert rows[f"{column}_{name}: mcc"].to_list() == run.rows(batch=2)[f"{column}_mcc"].to_list()
    assert both.rows()["label"].null_count() == 30 + 60  # labels of the rows either run labelled
    assert charts.chart_kinds(both) == [*charts.REGRESSION_CHARTS, "labels"]
    for kind in charts.chart_kinds(both):
        charts.build(kind, both).to_dict()
    fan = charts.datasets(both)["fan"]
    counts = fan.filter(pl.col("median").is_not_null()).group_by("calibrator").len().sort("calibrator")
    assert counts.rows() == [("new: mcc", charts.FAN_ROWS), ("old: mcc", charts.FAN_ROWS)]
    with pytest.raises(TypeError, match="read-only"):
        both.observe(pred=[1.0])
    both.save(tmp_path / "both")  # a comparison is a snapshot too: two base predictions per row
    again = cw.Monitor.load(tmp_path / "both")
    assert_frame_equal(again.summary(), both.summary())
    assert_frame_equal(again.rows(), both.rows())
    with pytest.raises(TypeError, match="read-only"):
        again.label(["0-0"], [1.0])
    assert a.n_batches == 3 and list(a.calibrators) == ["mcc"]  # the runs are untouched


def test_regression_runs_on_other_rows_keep_no_merged_rows():
    a = _regression_run("linear", ids="a")
    b = _regression_run("linear", ids="b")
    both = cw.compare(a, b, show=False)
    assert both.rows().is_empty()
    assert charts.datasets(both)["fan"].filter(pl.col("median").is_not_null()).is_empty()
    assert both.summary().height == 6


def test_mixing_tasks_or_levels_is_refused(regression_runs):
    a, _ = regression_runs
    classification = pets_monitor(0)
    with pytest.raises(
        ValueError,
        match=r"cannot compare a regression run with a classification run: "
        r"A \('linear run'\) is regression, B \('pets'\) is classification",
    ):
        cw.compare(a, classification, show=False)
    with pytest.raises(ValueError, match="cannot compare a classification run with a regression run"):
        cw.compare(classification, a, show=False)
    other = _regression_run("linear", levels=(0.8,))
    with pytest.raises(ValueError, match=r"different interval levels: \[0.5, 0.9\] vs \[0.8\]"):
        cw.compare(a, other, show=False)
