"""Recomputing the window's sets and coverage at another level α, without refitting."""

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw

from ..synthetic import pets_monitor, softmax_data


@pytest.fixture(scope="module")
def monitor():
    return pets_monitor()


def test_at_the_calibrators_own_level_it_reproduces_the_stream(monitor):
    got = monitor.what_if(0.1, ["lac", "by-class"]).sort("calibrator", "batch")
    want = (
        monitor.summary().filter(pl.col("calibrator").is_in(["lac", "by-class"])).sort("calibrator", "batch")
    )
    columns = ["batch", "calibrator", "n_rows", "n_labelled", "n_covered", "coverage", "mean_set_size"]
    assert_frame_equal(got.select(columns), want.select(columns))


def test_coverage_and_size_fall_as_alpha_grows(monitor):
    frames = [monitor.what_if(a, ["lac"]) for a in (0.02, 0.1, 0.3)]
    covered = [f["n_covered"].sum() for f in frames]
    sizes = [f["mean_set_size"].mean() for f in frames]
    assert covered[0] >= covered[1] >= covered[2] and covered[0] > covered[2]
    assert sizes[0] > sizes[1] > sizes[2]
    assert frames[2]["target"].unique().to_list() == [pytest.approx(0.7)]


def test_hand_computed_thresholds():
    """Four calibration rows, LAC scores .3 .4 .5 .6 (n = 4): α = 0.4 keeps classes with
    1 − p ≤ s_(3) = .5; α = 0.6 keeps 1 − p ≤ s_(2) = .4 (the top class always stays)."""
    P_cal = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.4)}, shift=None)
    mon.calibrate(probs=P_cal, y=[0, 1, 2, 0])
    # row a: scores 1 − p = (.5, .5, 1), label 1; row b: (.3, .7, 1), label 0
    mon.observe(probs=np.array([[0.5, 0.5, 0.0], [0.7, 0.3, 0.0]]), ids=["a", "b"], y=[1, 0])
    wide = mon.what_if(0.4)  # q = .5: a -> {0, 1} (covered), b -> {0} (covered)
    narrow = mon.what_if(0.6)  # q = .4: a -> {0} (top class by the lowest index; missed), b -> {0}
    assert (wide["n_covered"][0], wide["mean_set_size"][0]) == (2, 1.5)
    assert (narrow["n_covered"][0], narrow["mean_set_size"][0]) == (1, 1.0)


def test_only_recomputable_calibrators_and_valid_levels(monitor):
    assert monitor.what_if_calibrators() == ["lac", "aps-random", "by-class", "aci"]
    with pytest.raises(ValueError, match=r"calibrators: 'risk' cannot be recomputed"):
        monitor.what_if(0.1, ["risk"])
    with pytest.raises(ValueError, match="alpha"):
        monitor.what_if(1.5)
    P, y = softmax_data(500, seed=4)
    cats = np.where(P[:, 0] > 0.3, "hi", "lo")
    mon = cw.Monitor(calibrators={"cat": cw.SplitConformalClassifier(mondrian="category")}, shift=None)
    mon.calibrate(probs=P, y=y, categories=cats)
    assert mon.what_if_calibrators() == []


def test_a_randomised_calibrator_draws_each_rows_u_from_its_id():
    """What-if sets use the same per-row u as the rows' own sets: repeatable, and at the
    calibrator's level equal to the stream's; reading never moves the calibrator's stream."""
    rng = np.random.default_rng(3)
    P = rng.dirichlet(np.full(4, 0.7), size=3_000)
    y = np.array([rng.choice(4, p=p) for p in P])
    aps = cw.SplitConformalClassifier(score="aps", alpha=0.1)
    assert aps.randomized
    mon = cw.Monitor(calibrators={"aps": aps}).calibrate(probs=P[:2_000], y=y[:2_000])
    for lo in range(2_000, 3_000, 250):
        mon.observe(probs=P[lo : lo + 250], y=y[lo : lo + 250])
    first, second = mon.what_if(0.25), mon.what_if(0.25)
    assert_frame_equal(first, second)
    own = mon.what_if(0.1).sort("batch")
    stream = mon.summary().sort("batch")
    assert own["n_covered"].to_list() == stream["n_covered"].to_list()
    assert own["mean_set_size"].to_list() == pytest.approx(stream["mean_set_size"].to_list(), rel=1e-12)
