"""The vectorised detectors give the statistics the one-test-at-a-time versions recorded.

``tests/fixtures/detector_traces.npz`` was written by ``tests/fixtures/make_detector_traces.py``
with the detectors as they were before they were vectorised (commit ``ca762fb``: one betting
test per class, scipy per call). Replaying the same streams must give the same statistics: log
statistics to 1e-12 (the mixture's log-sum-exp is now numpy's, not scipy's: last-bit
differences), alarms, row counts and every word of the results identical.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from calwatch.engine.shift.betting import BernoulliBetting, GroupedBetting
from calwatch.engine.shift.detectors import ConformalTestMartingale
from calwatch.shift import CalibrationData, ClassCoverageDropDetector, CoverageDropDetector

FIXTURES = Path(__file__).parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from make_detector_traces import _Cal  # noqa: E402

RECORDED = np.load(FIXTURES / "detector_traces.npz")
BETTING_CASES = [(0.1, "sr", 1e6), (0.1, "sr", 1e3), (0.05, "ville", 100.0), (0.2, "sr", 50.0)]


@pytest.mark.parametrize("case", range(len(BETTING_CASES)))
def test_betting_test_replays_its_recorded_trace(case):
    eps, detector, threshold = BETTING_CASES[case]
    events = RECORDED[f"betting{case}_events"]
    test = BernoulliBetting(eps, detector=detector, threshold=threshold)
    trace = np.concatenate([test.update(part) for part in np.split(events, RECORDED[f"betting{case}_cuts"])])
    np.testing.assert_allclose(trace, RECORDED[f"betting{case}_trace"], rtol=1e-12, atol=1e-12)
    assert test.alarms_ == RECORDED[f"betting{case}_alarms"].tolist()


@pytest.mark.parametrize("case", range(len(BETTING_CASES)))
def test_grouped_betting_equals_one_test_per_group(case):
    # The recorded stream dealt to three groups at random, in one grouped test and in three
    # one-group tests: the same values, the same alarms.
    eps, detector, threshold = BETTING_CASES[case]
    events = RECORDED[f"betting{case}_events"]
    groups = np.random.default_rng(case).integers(0, 3, events.size)
    grouped = GroupedBetting([eps, eps / 2, eps], detector=detector, threshold=threshold)
    single = [BernoulliBetting(r, detector=detector, threshold=threshold) for r in (eps, eps / 2, eps)]
    for part_e, part_g in zip(
        *(np.split(a, RECORDED[f"betting{case}_cuts"]) for a in (events, groups)), strict=True
    ):
        look = grouped.update(part_e, part_g)
        for g in range(3):
            mine = part_g == g
            if not mine.any():
                assert g not in look.groups
                continue
            before = len(single[g].alarms_)
            trace = single[g].update(part_e[mine])
            i = int(np.flatnonzero(look.groups == g)[0])
            assert look.rows[i] == mine.sum() and look.events[i] == part_e[mine].sum()
            np.testing.assert_allclose(
                [look.peak[i], look.last[i]], [trace.max(), trace[-1]], rtol=1e-12, atol=1e-12
            )
            assert look.alarms_of(g) == single[g].alarms_[before:]
    for g in range(3):
        assert grouped.rows[g] == single[g].rows_ and grouped.events[g] == single[g].events_
        if detector == "sr":
            np.testing.assert_allclose(grouped.sr[g], np.exp(single[g]._log_sr), rtol=1e-12, atol=1e-12)


def test_class_coverage_drop_replays_its_recorded_looks():
    looks = json.loads(str(RECORDED["class_looks_json"]))
    K = 6
    labels_cal = np.r_[np.repeat(np.arange(K), [5, 9, 40, 200, 300, 446])]
    data = CalibrationData(
        probs=np.full((labels_cal.size, K), 1.0 / K),
        labels=labels_cal,
        calibrators={"c": _Cal(0.1, K, labels_cal.size)},
    )
    # The recording ran the constant thresholds that were the defaults then (c = 10⁶, K·c per class).
    by_class = ClassCoverageDropDetector("c", threshold=1e6)
    marginal = CoverageDropDetector("c", threshold=1e6)
    by_class.calibrate(data)
    marginal.calibrate(data)
    assert by_class.untested_ == [0]  # 5 calibration rows: ⌈6·0.9⌉ = 6 > 5, its sets always hold it
    replayed = []
    for b in range(60):
        labels, covered = RECORDED[f"class_labels_{b}"], RECORDED[f"class_covered_{b}"]
        for detector in (by_class, marginal):
            replayed.append(detector.labelled(np.empty((labels.size, K)), labels, {"c": covered}))
    assert sum(1 for r in replayed if r is not None and r.alarm) >= 10  # the recording has alarms to match
    for want, got in zip(looks, replayed, strict=True):
        if want is None:
            assert got is None
            continue
        for field in ("name", "alarm", "rows_seen", "guarantee", "threatens", "explanation"):
            assert getattr(got, field) == want[field], field
        assert list(got.alarm_rows) == want["alarm_rows"]
        for field in ("statistic", "threshold", "estimate"):
            assert math.isclose(getattr(got, field), want[field], rel_tol=1e-12, abs_tol=1e-12), field
        np.testing.assert_allclose(got.interval, want["interval"], rtol=1e-12)


@pytest.mark.parametrize("case", range(3))
def test_martingale_replays_its_recorded_trace(case):
    resolution, statistic = [(1e-4, "cusum"), (None, "ville"), (1e-2, "shiryaev-roberts")][case]
    m = ConformalTestMartingale(threshold=1e4, statistic=statistic, resolution=resolution, seed=case)
    m.fit(RECORDED[f"martingale{case}_cal"])
    stream = RECORDED[f"martingale{case}_stream"]
    frames = [m.update(part) for part in np.split(stream, RECORDED[f"martingale{case}_cuts"])]
    for column in ("p_value", "log10_martingale", "log10_cusum", "log10_sr"):
        got = np.concatenate([f[column].to_numpy() for f in frames])
        np.testing.assert_allclose(got, RECORDED[f"martingale{case}_{column}"], rtol=1e-12, atol=1e-12)
    alarms = np.concatenate([f["alarm"].to_numpy() for f in frames])
    np.testing.assert_array_equal(alarms, RECORDED[f"martingale{case}_alarm"])
    assert m.alarm_indices_ == RECORDED[f"martingale{case}_alarm_indices"].tolist()
