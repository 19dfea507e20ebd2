"""Conformal test martingales (SHIFT.md §1): hand-computed cases, a per-row reference, state, errors."""

from __future__ import annotations

import bisect
import json
import math

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest

from calwatch.engine.errors import NotFittedError
from calwatch.engine.shift.betting import EPOCH_ROWS, threshold_table, thresholds_at
from calwatch.engine.shift.detectors import MAX_CHUNK, STATISTICS, ConformalTestMartingale
from calwatch.engine.shift.kernels import epoch_of
from calwatch.engine.shift.martingale import (
    MERGE_RATIO,
    GridScoreBag,
    ScoreBag,
    cusum,
    earlier_counts,
    shiryaev_roberts,
    simple_jumper,
)

FloatArray = npt.NDArray[np.float64]
LN10 = math.log(10.0)


# ------------------------------------------------------------------------ reference, per row
class ReferenceMartingale:
    """The straightforward per-row loop: a sorted Python list, one bet at a time, log space."""

    def __init__(self, cal: FloatArray, *, threshold: float, jump: float, seed: int, statistic: str) -> None:
        self.bag = sorted(cal.tolist())
        self.rng = np.random.default_rng(seed)
        self.jump = jump
        self.log_c = math.log(threshold)
        self.statistic = statistic
        self.capital = [1 / 3, 1 / 3, 1 / 3]  # ε = −1, 0, 1, normalised to sum 1
        self.log_s = 0.0
        self.log_cusum = 0.0
        self.log_sr = -math.inf
        self.row = 0
        self.alarms: list[int] = []

    def step(self, score: float) -> tuple[float, float, float, float, bool]:
        theta = float(self.rng.random())
        bisect.insort(self.bag, score)
        n = len(self.bag)
        lo, hi = bisect.bisect_left(self.bag, score), bisect.bisect_right(self.bag, score)
        p = ((n - hi) + theta * (hi - lo)) / n
        total = sum(self.capital)
        mixed = [(1 - self.jump) * c + self.jump / 3 * total for c in self.capital]
        bet = [c * (1 + eps * (p - 0.5)) for c, eps in zip(mixed, (-1, 0, 1), strict=True)]
        factor = sum(bet)  # S_n / S_{n−1}: the capital before the row summed to 1
        self.capital = [c / factor for c in bet]
        log_f = math.log(factor)
        self.log_s += log_f
        self.log_cusum = log_f + max(0.0, self.log_cusum)
        previous = self.log_sr
        self.log_sr = log_f + (0.0 if previous == -math.inf else float(np.logaddexp(0.0, previous)))
        out_cusum, out_sr = self.log_cusum, self.log_sr
        cusum_alarm, sr_alarm = out_cusum >= self.log_c, out_sr >= self.log_c
        if cusum_alarm:
            self.log_cusum = 0.0
        if sr_alarm:
            self.log_sr = -math.inf
        alarm = {"ville": self.log_s >= self.log_c, "cusum": cusum_alarm, "shiryaev-roberts": sr_alarm}[
            self.statistic
        ]
        if alarm and (self.statistic != "ville" or not self.alarms):
            self.alarms.append(self.row)
        self.row += 1
        return p, self.log_s, out_cusum, out_sr, alarm


# ------------------------------------------------------------------------ p-values by hand
def test_p_values_by_hand_with_ties_and_theta() -> None:
    # Bag: calibration 0.1, 0.2, 0.2, 0.3; then the stream 0.2, 0.25, 0.2 (seed 7).
    theta = np.random.default_rng(7).random(3)  # 0.62509547, 0.89721380, 0.77568569
    m = ConformalTestMartingale(seed=7).fit([0.1, 0.2, 0.2, 0.3])
    out = m.update([0.2, 0.25, 0.2])
    # row 0: bag {.1 .2 .2 .3 .2}: one above (.3), three equal (itself too): (1 + 3θ)/5
    # row 1: bag + .25: one above, one equal: (1 + θ)/6
    # row 2: bag + .2: two above (.3, .25), four equal: (2 + 4θ)/7
    expected = [(1 + 3 * theta[0]) / 5, (1 + theta[1]) / 6, (2 + 4 * theta[2]) / 7]
    assert out["p_value"].to_list() == pytest.approx(expected, abs=1e-15)
    assert out["p_value"].to_list() == pytest.approx([0.57505728, 0.31620230, 0.72896325], abs=1e-8)
    assert out["row"].to_list() == [0, 1, 2]


def test_score_bag_with_given_theta() -> None:
    bag = ScoreBag(np.array([0.3, 0.2, 0.1, 0.2]))
    p = bag.p_values(np.array([0.2, 0.25, 0.2]), np.array([0.5, 0.25, 1.0]))
    assert p.tolist() == pytest.approx([2.5 / 5, 1.25 / 6, 6 / 7], abs=1e-15)
    values, counts = bag.counts()
    assert values.tolist() == [0.1, 0.2, 0.25, 0.3]
    assert counts.tolist() == [1, 4, 1, 1]
    assert bag.size == 7


def test_earlier_counts_match_brute_force() -> None:
    rng = np.random.default_rng(3)
    for b in (1, 2, 3, 7, 16, 17, 100, 1000, 1025):
        a = rng.integers(0, 12, size=b).astype(np.float64)  # many ties
        greater, equal, distinct, inverse = earlier_counts(a)
        assert greater.tolist() == [int((a[:j] > a[j]).sum()) for j in range(b)]
        assert equal.tolist() == [int((a[:j] == a[j]).sum()) for j in range(b)]
        assert np.array_equal(distinct[inverse], a)
        assert np.all(np.diff(distinct) > 0)


def test_bag_matches_a_sorted_list_over_many_batches() -> None:
    rng = np.random.default_rng(4)
    cal = rng.integers(0, 40, size=300).astype(np.float64)
    stream = np.concatenate([rng.integers(0, 50, size=6000), rng.normal(20, 5, size=3000)])
    theta = rng.random(int(stream.shape[0]))
    bag, ref = ScoreBag(cal), sorted(cal.tolist())
    got, want = [], []
    i = 0
    while i < stream.shape[0]:
        k = int(rng.integers(0, 700))
        got.append(bag.p_values(stream[i : i + k], theta[i : i + k]))
        i += k
    for x, t in zip(stream.tolist(), theta.tolist(), strict=True):
        bisect.insort(ref, x)
        lo, hi = bisect.bisect_left(ref, x), bisect.bisect_right(ref, x)
        want.append(((len(ref) - hi) + t * (hi - lo)) / len(ref))
    np.testing.assert_allclose(np.concatenate(got), want, rtol=0, atol=1e-15)
    # The runs shrink geometrically: at most log_{MERGE_RATIO}(N) + 1 of them.
    assert bag.n_runs <= math.log(bag.size, MERGE_RATIO) + 1
    values, counts = bag.counts()
    assert counts.sum() == len(ref) and bag.n_runs == 1
    assert np.array_equal(np.repeat(values, counts), ref)


# --------------------------------------------------------------------- simple jumper by hand
def test_simple_jumper_two_steps_by_hand() -> None:
    # J = 0.01, capital ⅓ each. Row 1, p = 0.2: mixing keeps ⅓ each; f = (1.3, 1, 0.7) → S_1 = 1.
    # Row 2, p = 0.1: C = (1.3, 1, 0.7)/3 → 0.99·C + 0.01/3 = (1.297, 1, 0.703)/3;
    # f = (1.4, 1, 0.6) → (1.8158, 1, 0.4218)/3, S_2 = 3.2376/3 = 1.0792.
    growth, capital = simple_jumper(np.array([0.2, 0.1]), jump=0.01, capital=np.full(3, 1 / 3))
    assert growth.tolist() == pytest.approx([0.0, math.log(1.0792)], abs=1e-15)
    assert capital.tolist() == pytest.approx([1.8158 / 3.2376, 1 / 3.2376, 0.4218 / 3.2376], abs=1e-15)


def test_martingale_first_rows_by_hand() -> None:
    # One calibration score 0 and stream scores 1, 2: each new row is the largest so far, so
    # p_n = θ_n / N_n; S_1 = 1 always (the three bets average to 1).
    theta = np.random.default_rng(0).random(2)
    out = ConformalTestMartingale(jump=0.0, seed=0).fit([0.0]).update([1.0, 2.0])
    p1, p2 = theta[0] / 2, theta[1] / 3
    assert out["p_value"].to_list() == pytest.approx([p1, p2], abs=1e-15)
    # J = 0: each bet keeps its own capital: S_2 = ⅓ Σ_ε f_ε(p1) f_ε(p2).
    s2 = sum((1 + e * (p1 - 0.5)) * (1 + e * (p2 - 0.5)) for e in (-1, 0, 1)) / 3
    assert out["log10_martingale"].to_list() == pytest.approx([0.0, math.log10(s2)], abs=1e-14)


@pytest.mark.parametrize("b", [1, 2, 31, 32, 33, 64, 65, 1000, 4097])
@pytest.mark.parametrize("jump", [0.0, 0.01, 1.0])
def test_simple_jumper_matches_the_loop(b: int, jump: float) -> None:
    rng = np.random.default_rng(b)
    p = rng.random(b) ** 3  # mostly small p-values: the martingale grows
    start = rng.dirichlet(np.ones(3))
    growth, capital = simple_jumper(p, jump=jump, capital=start)
    c, log_s, want = start.tolist(), 0.0, []
    for x in p.tolist():
        total = sum(c)
        c = [
            ((1 - jump) * ci + jump / 3 * total) * (1 + e * (x - 0.5))
            for ci, e in zip(c, (-1, 0, 1), strict=True)
        ]
        s = sum(c)
        log_s += math.log(s)
        c = [ci / s for ci in c]
        want.append(log_s)
    np.testing.assert_allclose(growth, want, rtol=0, atol=1e-9)
    np.testing.assert_allclose(capital, c, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- CUSUM and Shiryaev–Roberts
def test_cusum_and_sr_by_hand() -> None:
    log_f = np.log([2.0, 0.5, 3.0, 0.25])
    # CUSUM γ_n = F_n·max(1, γ_{n−1}): 2, 1, 3, 0.75; with c = 2.5 row 2 alarms and the last
    # row restarts: 0.25·max(1, 1) = 0.25.
    g, alarm = cusum(log_f, start=0.0, log_threshold=math.log(100))
    assert np.exp(g).tolist() == pytest.approx([2, 1, 3, 0.75], rel=1e-14) and not alarm.any()
    g, alarm = cusum(log_f, start=0.0, log_threshold=math.log(2.5))
    assert np.exp(g).tolist() == pytest.approx([2, 1, 3, 0.25], rel=1e-14)
    assert alarm.tolist() == [False, False, True, False]
    # SR R_n = F_n (1 + R_{n−1}), R_0 = 0: 2, 1.5, 7.5, 2.125; with c = 5: 2, 1.5, 7.5, 0.25.
    r, alarm = shiryaev_roberts(log_f, start=-math.inf, log_threshold=math.log(100))
    assert np.exp(r).tolist() == pytest.approx([2, 1.5, 7.5, 2.125], rel=1e-14) and not alarm.any()
    r, alarm = shiryaev_roberts(log_f, start=-math.inf, log_threshold=math.log(5))
    assert np.exp(r).tolist() == pytest.approx([2, 1.5, 7.5, 0.25], rel=1e-14)
    assert alarm.tolist() == [False, False, True, False]
    # Carried state: γ_0 = 4 gives γ_1 = 2·4 = 8; R_0 = 3 gives R_1 = 2·(1 + 3) = 8.
    assert math.exp(cusum(log_f[:1], start=math.log(4), log_threshold=9.0)[0][0]) == pytest.approx(8)
    assert math.exp(shiryaev_roberts(log_f[:1], start=math.log(3), log_threshold=9.0)[0][0]) == pytest.approx(
        8
    )


@pytest.mark.parametrize("drift", [0.0, 0.2])
def test_cusum_and_sr_match_the_loop_with_restarts(drift: float) -> None:
    rng = np.random.default_rng(11)
    log_f = np.log(rng.uniform(0.5, 1.5, size=5000)) + drift * rng.random(5000)
    log_c = math.log(50.0)
    for start in (0.0, 1.5, -2.0):
        g, g_alarm = cusum(log_f, start=start, log_threshold=log_c)
        r, r_alarm = shiryaev_roberts(log_f, start=start, log_threshold=log_c)
        gamma, big_r, want_g, want_r, want_ga, want_ra = start, start, [], [], [], []
        for x in log_f.tolist():
            gamma = x + max(0.0, gamma)
            big_r = x + float(np.logaddexp(0.0, big_r))
            want_g.append(gamma)
            want_r.append(big_r)
            want_ga.append(gamma >= log_c)
            want_ra.append(big_r >= log_c)
            gamma = 0.0 if gamma >= log_c else gamma
            big_r = -math.inf if big_r >= log_c else big_r
        np.testing.assert_allclose(g, want_g, rtol=0, atol=1e-9)
        np.testing.assert_allclose(r, want_r, rtol=0, atol=1e-9)
        assert g_alarm.tolist() == want_ga and r_alarm.tolist() == want_ra
        if drift:
            assert g_alarm.sum() > 10 and r_alarm.sum() > 10  # restarts were exercised


# ------------------------------------------------------------- vectorised = per-row reference
def _stream(seed: int) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    cal = np.round(rng.normal(size=500), 1)  # rounded: ties between and within batches
    quiet = np.round(rng.normal(size=4000), 1)
    shifted = np.round(rng.normal(0.8, 1.0, size=5000), 1)  # larger scores: the bets pay
    return cal, np.concatenate([quiet, shifted])


@pytest.mark.parametrize("statistic", STATISTICS)
@pytest.mark.parametrize(("seed", "threshold"), [(0, 100.0), (1, 1e4)])
def test_update_matches_the_per_row_reference(statistic: str, seed: int, threshold: float) -> None:
    cal, stream = _stream(seed)
    m = ConformalTestMartingale(threshold=threshold, jump=0.02, statistic=statistic, seed=seed)  # type: ignore[arg-type]
    m.fit(cal)
    ref = ReferenceMartingale(cal, threshold=threshold, jump=0.02, seed=seed, statistic=statistic)
    sizes = [0, 1, 7, 1000, MAX_CHUNK + 3, 33, 2]  # batch boundaries anywhere, chunks inside one
    frames, i = [], 0
    for size in sizes * 3:
        frames.append(m.update(stream[i : i + size]))
        i += size
    frames.append(m.update(stream[i:]))
    out = pl.concat(frames)
    want = np.array([ref.step(x)[:4] for x in stream.tolist()])
    assert out.height == stream.shape[0] and out["row"].to_list() == list(range(stream.shape[0]))
    np.testing.assert_allclose(out["p_value"].to_numpy(), want[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["log10_martingale"].to_numpy() * LN10, want[:, 1], rtol=0, atol=1e-9)
    np.testing.assert_allclose(out["log10_cusum"].to_numpy() * LN10, want[:, 2], rtol=0, atol=1e-9)
    np.testing.assert_allclose(out["log10_sr"].to_numpy() * LN10, want[:, 3], rtol=0, atol=1e-9)
    ref_alarm = {"ville": want[:, 1], "cusum": want[:, 2], "shiryaev-roberts": want[:, 3]}[statistic]
    assert out["alarm"].to_list() == (ref_alarm >= math.log(threshold)).tolist()
    assert m.alarm_indices_ == ref.alarms and len(ref.alarms) >= 1  # the shift is detected
    assert m.alarmed_ and m.first_alarm_index_ == ref.alarms[0]
    if statistic != "ville":
        assert len(ref.alarms) > 1  # restarts inside batches were exercised
    assert m.n_seen_ == stream.shape[0]
    assert m.log10_martingale_ * LN10 == pytest.approx(ref.log_s, abs=1e-9)
    assert m.max_log10_martingale_ * LN10 == pytest.approx(max(0.0, want[:, 1].max()), abs=1e-9)
    assert m.anytime_p_value_ == pytest.approx(math.exp(-max(0.0, want[:, 1].max())), rel=1e-8)


def test_batching_does_not_change_the_output() -> None:
    cal, stream = _stream(5)
    whole = ConformalTestMartingale(seed=3).fit(cal).update(stream)
    m = ConformalTestMartingale(seed=3).fit(cal)
    pieces = pl.concat([m.update(stream[i : i + 999]) for i in range(0, stream.shape[0], 999)])
    assert pieces["alarm"].to_list() == whole["alarm"].to_list()
    for column in ("p_value", "log10_martingale", "log10_cusum", "log10_sr"):
        np.testing.assert_allclose(pieces[column].to_numpy(), whole[column].to_numpy(), rtol=0, atol=1e-10)


def test_output_frame_schema_and_empty_update() -> None:
    m = ConformalTestMartingale().fit(np.arange(10.0))
    empty = m.update(np.empty(0))
    assert empty.height == 0 and m.n_seen_ == 0
    assert empty.schema == pl.Schema(
        {
            "row": pl.Int64,
            "p_value": pl.Float64,
            "log10_martingale": pl.Float64,
            "log10_cusum": pl.Float64,
            "log10_sr": pl.Float64,
            "alarm": pl.Boolean,
        }
    )
    assert m.update([3]).schema == empty.schema
    assert not m.alarmed_ and m.first_alarm_index_ is None and m.alarm_indices_ == []
    assert m.log10_sr_ == pytest.approx(m.log10_martingale_)  # R_1 = F_1 = S_1 from R_0 = 0


def test_ville_alarm_is_sticky_and_counted_once() -> None:
    m = ConformalTestMartingale(threshold=10.0, seed=0).fit(np.linspace(0, 1, 50))
    out = m.update(np.full(200, 5.0))
    first = m.first_alarm_index_
    assert first is not None and m.alarm_indices_ == [first]
    assert out["alarm"].to_list()[first:] == [True] * (200 - first)  # S keeps growing here
    m.update(np.full(10, 6.0))
    assert m.alarm_indices_ == [first]


def test_resolution_is_a_fixed_grid() -> None:
    cal, stream = _stream(2)
    cal, stream = cal + np.random.default_rng(0).normal(0, 0.03, cal.shape), stream * 1.01
    m = ConformalTestMartingale(resolution=0.25, seed=1).fit(cal)
    grid = ConformalTestMartingale(seed=1).fit(np.floor(cal / 0.25))
    a, b = m.update(stream), grid.update(np.floor(stream / 0.25))
    assert a.equals(b)
    values, counts = m._bag.counts()
    assert values.shape[0] <= np.unique(np.floor(np.concatenate([cal, stream]) / 0.25)).shape[0]
    assert counts.sum() == cal.shape[0] + stream.shape[0]


# ------------------------------------------------------------------------------ state
@pytest.mark.parametrize("statistic", STATISTICS)
def test_state_round_trip_continues_exactly(statistic: str) -> None:
    cal, stream = _stream(7)
    kwargs = {"threshold": 1e3, "jump": 0.05, "statistic": statistic, "resolution": 0.01, "seed": 9}
    straight = ConformalTestMartingale(**kwargs).fit(cal)  # type: ignore[arg-type]
    first = straight.update(stream[:6000])
    rest = straight.update(stream[6000:])
    paused = ConformalTestMartingale(**kwargs).fit(cal)  # type: ignore[arg-type]
    assert paused.update(stream[:6000]).equals(first)
    arrays, info = paused.state()
    info = json.loads(json.dumps(info))  # plain JSON survives
    arrays = {k: np.array(v) for k, v in arrays.items()}
    assert set(arrays) == {"bag_values", "bag_counts", "capital", "alarm_indices"}
    restored = ConformalTestMartingale.from_state(arrays, info)
    assert repr(restored) == repr(straight)
    assert restored.update(stream[6000:]).equals(rest)
    for name in ("n_seen_", "alarmed_", "first_alarm_index_", "alarm_indices_", "log10_martingale_"):
        assert getattr(restored, name) == getattr(straight, name)


def test_state_of_a_fresh_test() -> None:
    m = ConformalTestMartingale(seed=4).fit([1.0, 1.0, 2.0])
    arrays, info = m.state()
    assert arrays["bag_values"].tolist() == [1.0, 2.0] and arrays["bag_counts"].tolist() == [2, 1]
    assert info["log_sr"] is None and info["first_alarm_index"] is None
    restored = ConformalTestMartingale.from_state(arrays, info)
    assert restored.update([1.5, 3.0]).equals(m.update([1.5, 3.0]))


def test_from_state_rejects_bad_input() -> None:
    arrays, info = ConformalTestMartingale().fit([1.0, 2.0]).state()
    with pytest.raises(ValueError, match="not a ConformalTestMartingale state"):
        ConformalTestMartingale.from_state(arrays, {**info, "version": 99})
    with pytest.raises(ValueError, match="missing"):
        ConformalTestMartingale.from_state({"capital": arrays["capital"]}, info)
    with pytest.raises(ValueError, match="sorted bag"):
        ConformalTestMartingale.from_state({**arrays, "bag_counts": np.array([1, 2])}, info)
    with pytest.raises(ValueError, match="sorted bag"):
        ConformalTestMartingale.from_state({**arrays, "bag_values": np.array([2.0, 1.0])}, info)
    with pytest.raises(ValueError, match="capital"):
        ConformalTestMartingale.from_state({**arrays, "capital": np.array([0.5, 0.5, 0.5])}, info)


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"threshold": 1.0}, ValueError, "threshold must be a finite number > 1"),
        ({"threshold": math.inf}, ValueError, "threshold"),
        ({"threshold": "100"}, TypeError, "threshold must be a real number"),
        ({"threshold": True}, TypeError, "threshold"),
        ({"jump": -0.1}, ValueError, r"jump must be in \[0, 1\]"),
        ({"jump": 1.5}, ValueError, "jump"),
        ({"statistic": "page"}, ValueError, "statistic must be one of"),
        ({"resolution": 0.0}, ValueError, "resolution must be None or a finite number > 0"),
        ({"seed": -1}, ValueError, "seed must be an integer"),
        ({"seed": 1.5}, ValueError, "seed"),
    ],
)
def test_options_are_checked(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ConformalTestMartingale(**kwargs)  # type: ignore[arg-type]


def test_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        ConformalTestMartingale(c=100)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ConformalTestMartingale(100.0)  # type: ignore[call-arg]


def test_scores_are_checked() -> None:
    m = ConformalTestMartingale()
    with pytest.raises(NotFittedError, match=r"call fit\(scores_cal\) first"):
        m.update([0.1])
    with pytest.raises(NotFittedError):
        m.state()
    with pytest.raises(NotFittedError):
        _ = m.log10_martingale_
    with pytest.raises(ValueError, match="scores_cal is empty"):
        m.fit([])
    with pytest.raises(ValueError, match="1-D"):
        m.fit([[0.1, 0.2]])
    with pytest.raises(ValueError, match=r"NaN \(first in row 1\)"):
        m.fit([0.1, math.nan])
    with pytest.raises(TypeError, match="numeric"):
        m.fit(["a", "b"])
    m.fit([0.1, math.inf])  # infinite scores are allowed: they are simply the least conforming
    with pytest.raises(ValueError, match="scores contains NaN"):
        m.update([0.2, math.nan])
    assert m.n_seen_ == 0  # a rejected batch leaves the test untouched
    assert m.update([math.inf])["p_value"][0] <= 2 / 3


# ------------------------------------------------------------------ the fused grid path
def test_threshold_table_gives_each_row_its_anytime_threshold() -> None:
    edges = EPOCH_ROWS * 2 ** np.arange(12)
    rows = np.unique(np.r_[np.arange(1, 5_000, 7), (edges[:, None] + np.arange(-2, 3)).ravel()])
    for threshold, false_alarm in [(None, 0.01), (None, 0.01 / 7), (1e6, None), (None, None)]:
        table, epoch_rows = threshold_table(threshold, false_alarm)
        got = np.array([table[epoch_of(int(n), epoch_rows)] for n in rows])
        np.testing.assert_array_equal(got, thresholds_at(rows, threshold, false_alarm))  # the same bits


@pytest.mark.parametrize("statistic", STATISTICS)
def test_grid_batches_in_one_call_equal_the_general_path(
    statistic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Epochs crossed (anytime threshold), the grid's range grown, an infinite score moving the
    # bag to sorted runs: the fused call and the step by step path give the same bits.
    def run() -> list[tuple[npt.NDArray[np.float64], ...]]:
        rng = np.random.default_rng(3)
        m = ConformalTestMartingale(threshold=None, statistic=statistic, resolution=1e-3, seed=1)  # type: ignore[arg-type]
        m.fit(rng.uniform(size=500))
        out = []
        for b in range(40):
            x = rng.uniform(size=int(rng.integers(1, 8_000)))
            if 10 <= b < 16:
                x = 0.6 + 0.4 * x  # a shift: alarms
            if b == 20:
                x = 3 * x - 1  # off the grid's range: it grows
            if b == 30:
                x[3] = math.inf  # sorted runs from here
            step = m.step(x)
            out.append((*step, np.array(m.alarm_indices_), np.array(m.state()[0]["capital"])))
        return out

    fused = run()
    monkeypatch.setattr(GridScoreBag, "run_martingale", lambda self, *a, **k: None)
    general = run()
    assert sum(int(rows[4].sum()) for rows in fused) > 0
    for got, want in zip(fused, general, strict=True):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
