"""Comparing two runs on the same panels: cw.compare(a, b)."""

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch import charts

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
