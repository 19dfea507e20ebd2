"""Shift monitors: the betting test by hand, each monitor's statistic on a tiny case, hysteresis."""

import math

import numpy as np
import pytest
from scipy.stats import chi2, norm

from calwatch.engine.errors import NotFittedError
from calwatch.engine.shift.monitors import (
    BET_FRACTIONS,
    BernoulliBetting,
    CoverageDrop,
    EpisodeTracker,
    MonitorResult,
    PredictionMix,
    ReferenceExceedance,
    RiskJump,
    calibration_null_rate,
    chi_square_two_sample,
)

# ---------------------------------------------------------------- the betting test


def test_shiryaev_roberts_by_hand_with_reset():
    # ε₀ = .1, one bet u = .5 (λ = 5): an event multiplies by 1 + 5·.9 = 5.5, a non-event by
    # 1 − 5·.1 = .5. R = 5.5(1 + 0) = 5.5; 5.5(1 + 5.5) = 35.75 ≥ c = 30: alarm at row 1, reset
    # to 0; then .5(1 + 0) = .5; 5.5(1 + .5) = 8.25.
    t = BernoulliBetting(0.1, threshold=30.0, bet_fractions=(0.5,))
    out = 10 ** t.update(np.array([1, 1, 0, 1]))
    np.testing.assert_allclose(out, [5.5, 35.75, 0.5, 8.25], rtol=1e-12)
    assert t.alarms_ == [1] and t.rows_ == 4 and t.events_ == 3
    assert t.log10_threshold == pytest.approx(math.log10(30))


def test_ville_mixture_by_hand():
    # Two bets, u = .5 (λ = 5: ×5.5 / ×.5) and u = .1 (λ = 1: ×1.9 / ×.9), events 1, 1, 0:
    # K = 5.5·5.5·.5 = 15.125 and 1.9·1.9·.9 = 3.249; the mixture is their mean 9.187.
    t = BernoulliBetting(0.1, detector="ville", threshold=9.0, bet_fractions=(0.5, 0.1))
    out = 10 ** t.update(np.array([True, True, False]))
    np.testing.assert_allclose(out, [(5.5 + 1.9) / 2, (30.25 + 3.61) / 2, (15.125 + 3.249) / 2], rtol=1e-12)
    assert t.alarms_ == [1]  # 16.93 ≥ 9 at row 1; Ville's alarm is sticky (no reset)
    t.update(np.zeros(50, dtype=bool))
    assert t.alarmed_ and t.alarms_ == [1]


def reference_sr(events, eps, fractions, c):
    """Shiryaev-Roberts with reset, one row at a time, for comparison."""
    lam = np.asarray(fractions) / eps
    R = np.zeros(lam.size)
    out, alarms = [], []
    for t, e in enumerate(events):
        R = (1 + lam * (e - eps)) * (1 + R)
        stat = R.mean()
        out.append(stat)
        if stat >= c:
            alarms.append(t)
            R = np.zeros(lam.size)
    return np.log10(out), alarms


def test_vectorised_shiryaev_roberts_matches_a_loop_across_batches():
    rng = np.random.default_rng(1)
    events = np.r_[rng.uniform(size=600) < 0.1, rng.uniform(size=900) < 0.35, rng.uniform(size=500) < 0.1]
    expected, alarms = reference_sr(events.astype(float), 0.12, BET_FRACTIONS, 1e4)
    t = BernoulliBetting(0.12, threshold=1e4)
    got = np.concatenate([t.update(events[a:b]) for a, b in [(0, 1), (1, 700), (700, 701), (701, 2000)]])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)
    assert t.alarms_ == alarms and len(alarms) >= 2  # repeated detection during the bad stretch


def test_ville_false_alarm_rate_is_at_most_one_over_c():
    # 400 clean streams of 3,000 rows at exactly the null rate; Ville promises P(alarm) ≤ 1/c =
    # .05. Binomial tolerance: 3 sd of a rate of .05 over 400 streams = .033.
    rng = np.random.default_rng(2)
    alarms = 0
    for _ in range(400):
        t = BernoulliBetting(0.1, detector="ville", threshold=20.0)
        t.update(rng.uniform(size=3000) < 0.1)
        alarms += t.alarmed_
    assert alarms / 400 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


def test_calibration_null_rate_by_hand():
    assert calibration_null_rate(0.1, 1000, None) == 0.1
    # n = 9, α = .1: k = ⌈10·.9⌉ = 9, ε ~ Beta(1, 9) with CDF 1 − (1 − x)^9; its 1 − δ
    # quantile solves (1 − x)^9 = δ: x = 1 − δ^(1/9) = 1 − .01^(1/9) = .40052
    assert calibration_null_rate(0.1, 9, 0.01) == pytest.approx(1 - 0.01 ** (1 / 9), rel=1e-9)
    with pytest.raises(ValueError, match="no finite threshold"):
        calibration_null_rate(0.1, 8, 0.01)  # ⌈9·.9⌉ = 9 > 8: full sets


# ---------------------------------------------------------------- the monitors


def test_coverage_drop_statistic_by_hand():
    # Ville against ε₀ = α = .1 (no calibration margin); 100 rows, 25 missed.
    covered = np.ones(100, dtype=bool)
    covered[::4] = False
    m = CoverageDrop(alpha=0.1, calibration_delta=None, detector="ville")
    r = m.update(covered)
    u = np.asarray(BET_FRACTIONS)
    log_k = 25 * np.log1p(u * 0.9 / 0.1) + 75 * np.log1p(-u)
    assert m.test_.log10_statistic_ == pytest.approx(math.log10(np.exp(log_k).mean()), rel=1e-12)
    # the result reports the window's highest evidence: after row t, with e_t misses so far
    t = np.arange(1, 101)
    e = np.cumsum(~covered)
    log_kt = e[:, None] * np.log1p(u * 0.9 / 0.1) + (t - e)[:, None] * np.log1p(-u)
    peak = np.log10(np.exp(log_kt).mean(axis=1)).max()
    assert r.statistic == pytest.approx(peak, rel=1e-12)
    assert r.threshold == 2.0 and r.alarm  # 10^statistic ≈ 1545 ≥ 100
    assert r.estimate == 0.75 and r.rows_seen == 100
    assert r.interval[0] < 0.75 < r.interval[1]
    assert "1/c = 0.01" in r.guarantee and "coverage" in r.threatens


def test_coverage_drop_is_quiet_on_clean_rows_and_detects_a_drop():
    rng = np.random.default_rng(3)
    m = CoverageDrop(alpha=0.1, n_calibration=2000)
    assert 0.1 < m.null_rate < 0.125  # Beta(200, 1801) 99% quantile ≈ .1161
    quiet = [m.update(rng.uniform(size=1000) >= 0.1).alarm for _ in range(20)]
    assert not any(quiet)
    bad = m.update(rng.uniform(size=2000) >= 0.3)  # coverage falls to .7
    assert bad.alarm and bad.alarm_rows[0] >= 20_000
    assert bad.alarm_rows[0] - 20_000 < 1000  # detected within a thousand rows
    with pytest.raises(ValueError, match="n_calibration"):
        CoverageDrop(alpha=0.1)


def test_reference_exceedance_by_hand():
    # 39 calibration distances 1..39: ⌈40·.95⌉ = 38 -> threshold 38
    m = ReferenceExceedance(calibration_delta=None, detector="ville", threshold=1e3).fit(np.arange(1.0, 40.0))
    assert m.distance_threshold_ == 38.0 and m.test_.null_rate == 0.05
    r = m.update(np.array([10.0, 38.0, 38.5, 100.0]))  # 38 is not above 38: 2 of 4 far
    assert r.estimate == 0.5
    u = np.asarray(BET_FRACTIONS)
    expected = np.exp(2 * np.log1p(u * 0.95 / 0.05) + 2 * np.log1p(-u)).mean()
    assert 10**r.statistic == pytest.approx(expected, rel=1e-12)
    assert not r.alarm  # ≈ 8.3 < 1000
    with pytest.raises(ValueError, match="too few"):
        ReferenceExceedance().fit(np.arange(10.0))  # ⌈11·.95⌉ = 11 > 10
    with pytest.raises(NotFittedError):
        ReferenceExceedance().update([1.0])


def test_risk_jump_by_hand():
    # calibration risks .1 .2 .1 .2: mean .15, variance (ddof 1) 4·.05²/3 = 1/300; the window
    # .4 .5 .4 .5: mean .45, same variance. Jump .3, se = sqrt(2·(1/300)/4) = sqrt(1/600).
    m = RiskJump(delta=0.01).fit(np.array([0.1, 0.2, 0.1, 0.2]))
    r = m.update(np.array([0.4, 0.5, 0.4, 0.5]))
    se = math.sqrt(1 / 600)
    z1 = norm.isf(6 * 0.01 / math.pi**2)  # look 1 spends 6δ/π² = .00608: z ≈ 2.51
    assert r.statistic == pytest.approx(0.3)
    assert r.threshold == pytest.approx(z1 * se)
    assert r.alarm and r.interval == pytest.approx((0.3 - z1 * se, 0.3 + z1 * se))
    r2 = m.update(np.array([0.1, 0.2, 0.1, 0.2]))  # look 2: level δ_1/4, no jump
    assert r2.threshold == pytest.approx(norm.isf(6 * 0.01 / (math.pi**2 * 4)) * se)
    assert r2.statistic == pytest.approx(0.0, abs=1e-12) and not r2.alarm
    assert RiskJump(min_jump=0.5).fit([0.1, 0.2, 0.1, 0.2]).update([0.4, 0.5, 0.4, 0.5]).alarm is False


def test_prediction_mix_by_hand():
    # 2 × 2 table (50, 50 | 30, 10): every cell is 50/7 off its expected count, chi² = 175/24.
    m = PredictionMix(delta=0.01).fit(np.r_[np.zeros(50, int), np.ones(50, int)], n_classes=3)
    r = m.update(np.r_[np.zeros(30, int), np.ones(10, int)])
    assert r.statistic == pytest.approx(175 / 24)
    assert r.threshold == pytest.approx(chi2.isf(6 * 0.01 / math.pi**2, 1))  # ≈ 7.52: no alarm
    assert not r.alarm
    assert r.estimate == pytest.approx(0.25)  # total variation: |.75 − .5|
    assert m.update(np.zeros(200, int)).alarm  # look 2: only class 0 predicted
    assert chi_square_two_sample([5, 5], [0, 0]) == (0.0, 1)  # an empty window: nothing to test


def test_monitor_argument_errors():
    with pytest.raises(ValueError, match="detector"):
        BernoulliBetting(0.1, detector="cusum")
    with pytest.raises(ValueError, match="threshold"):
        BernoulliBetting(0.1, threshold=1.0)
    with pytest.raises(ValueError, match="0/1"):
        BernoulliBetting(0.1).update(np.array([0, 2]))
    with pytest.raises(ValueError, match="1-D"):
        RiskJump().fit(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="class indices"):
        PredictionMix().fit([0, 1]).update([2])


# ---------------------------------------------------------------- warnings


def look(name, alarm, statistic=1.0):
    return MonitorResult(name, statistic, 0.5, alarm, "P ≤ .01", "coverage", "rows missed", "recalibrate")


def test_one_warning_per_episode_with_hysteresis():
    tracker = EpisodeTracker(patience=2)
    pattern = [False, True, True, False, True, False, False, False, True]
    new = [
        tracker.observe(look("cov", a, b), batch=b, rows=(100 * b, 100 * b + 99))
        for b, a in enumerate(pattern)
    ]
    # batch 1 opens an episode; 2 and 4 extend it (one quiet look at 3 is not enough to close);
    # 5 and 6 close it; 8 opens a second one.
    assert [w is not None for w in new] == [False, True, False, False, False, False, False, False, True]
    first, second = tracker.warnings_
    assert (first.first_batch, first.last_batch, first.rows, first.open) == (1, 4, (100, 499), False)
    assert (second.first_batch, second.rows, second.open, second.episode) == (8, (800, 899), True, 1)
    assert first.statistic == 1.0 and first.false_alarm_control == "P ≤ .01"
    assert first.threatens == "coverage" and first.action == "recalibrate"
    assert tracker.active("cov")


def test_episodes_are_kept_per_monitor():
    tracker = EpisodeTracker(patience=1)
    assert tracker.observe(look("a", True), batch=0, rows=(0, 9)) is not None
    assert tracker.observe(look("b", True), batch=0, rows=(0, 9)) is not None
    assert tracker.observe(look("a", True), batch=1, rows=(10, 19)) is None
    tracker.observe(look("b", False), batch=1, rows=(10, 19))
    assert tracker.active("a") and not tracker.active("b")
    with pytest.raises(ValueError, match="patience"):
        EpisodeTracker(patience=0)
