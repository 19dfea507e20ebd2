"""Monte Carlo validity of the conformal test martingale on real data (SHIFT.md §1, ALGORITHMS.md §8).

Data: NYC flights 2013 and the late-arrival model of ``calwatch.datasets.flights_task(seed=0)``
(gradient boosting trained on January-March). Score: the label-free ``1 − max p`` of that
model, so only the inputs' distribution is watched.

1. False alarms. July's 28,293 flights, permuted R = 1,000 times with
   ``numpy.random.default_rng(SEED)``; in stream ``r`` the first 2,000 permuted rows calibrate
   and the other 26,293 stream in batches of 1,000 through
   ``ConformalTestMartingale(threshold=100, jump=0.01, seed=r)``. A random permutation of a
   fixed multiset is exchangeable, so Ville's inequality bounds, for every ``c``, the share of
   streams whose martingale ever reaches ``c`` by ``1/c``; it is checked at c = 2, 5, 10, 100
   (the simple jumper is nearly tight there: ~0.45 at c = 2 on uniform p-values, so a
   dependent or biased p-value would show). Tolerance: the count of alarmed streams is
   Binomial(R, q) with q ≤ 1/c, so it exceeds the 0.999 quantile of Binomial(R, 1/c) with
   probability ≤ 0.001 per threshold.
2. Uniform p-values. Given the multiset, the smoothed conformal p-values of a random
   permutation are i.i.d. U(0, 1) (Vovk et al., ALRW §8.1), and those of independent
   permutations are independent: the pooled p-values pass a Kolmogorov-Smirnov
   test (the first 200 streams, 5.3 million p-values) and a 20-bin chi-square test (all 26.3
   million) at level 0.001 each. July has 23,510 distinct scores in
   28,293 rows, so the ties (θ) are exercised.
3. Power on the real shift. April calibrates (5,000 random rows), 3,000 other April rows stream
   in random order (no shift), then December's flights in their real order (December has the
   most late flights of the year, 33%, and the largest shift in ``1 − max p``: KS distance
   0.10 to April). CUSUM at c = 10⁶ (a false alarm within the 3,000 clean rows has probability
   ≤ 3,000/10⁶ = 0.3%) must stay quiet on the clean rows and alarm within December's first
   5,000 rows, for each of 5 seeds. Detection delays of CUSUM, Shiryaev–Roberts (c = 10⁶) and
   Ville (c = 100) are printed, with the same stream with December shuffled (a pure
   distribution shift) and the whole May-December stream, month by month.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy.stats import binom, chisquare, kstest

from calwatch.datasets import flights_task
from calwatch.engine.shift.detectors import ConformalTestMartingale

pytestmark = pytest.mark.slow

FloatArray = npt.NDArray[np.float64]
SEED = 20240701
STREAMS = 1_000
KS_STREAMS = 200  # the KS test reads the p-values of the first 200 streams (5.3 million)
N_CAL = 2_000
BATCH = 1_000
VILLE_BATCH = 13_000  # the statistics do not depend on the batch size (checked on stream 0 below)
VILLE_LEVELS = (2.0, 5.0, 10.0, 100.0)
FAIL_RATE = 0.001  # per check: how often a correct implementation fails it
POWER_SEEDS = 5
CHANGE_THRESHOLD = 1e6
N_CAL_POWER, N_CLEAN = 5_000, 3_000
MAX_DELAY = 5_000


@dataclass(frozen=True)
class FlightScores:
    """``1 − max p`` of the flights model, per month (April calibrates the model's stream)."""

    april: FloatArray
    months: dict[str, FloatArray]  # May … December, rows in the data's (chronological) order


@pytest.fixture(scope="module")
def scores() -> FlightScores:
    task = flights_task(seed=0)

    def score(X: Any) -> FloatArray:
        P = np.asarray(task.model.predict_proba(X), dtype=np.float64)
        top: FloatArray = P.max(axis=1)
        return 1.0 - top

    return FlightScores(
        april=score(task.X_cal),
        months={batch.name: score(batch.X) for batch in task.stream},
    )


def _run(m: ConformalTestMartingale, stream: FloatArray, batch: int = BATCH) -> list[FloatArray]:
    """Stream in batches of ``batch`` rows; return the p-values of each batch."""
    return [m.update(stream[i : i + batch])["p_value"].to_numpy() for i in range(0, stream.shape[0], batch)]


def test_ville_false_alarms_and_uniform_p_values_on_exchangeable_flights(scores: FlightScores) -> None:
    july = scores.months["July"]
    n = july.shape[0]
    rng = np.random.default_rng(SEED)
    sup_log10 = np.empty(STREAMS)
    alarmed = np.zeros(STREAMS, dtype=bool)
    p_values: list[FloatArray] = []
    bins = np.zeros(20, dtype=np.int64)
    for r in range(STREAMS):
        perm = rng.permutation(n)
        m = ConformalTestMartingale(threshold=100.0, jump=0.01, seed=r).fit(july[perm[:N_CAL]])
        stream_p = np.concatenate(_run(m, july[perm[N_CAL:]], VILLE_BATCH))
        if r == 0:  # the same stream in the monitor's 1,000-row batches gives the same p-values and path
            small = ConformalTestMartingale(threshold=100.0, jump=0.01, seed=r).fit(july[perm[:N_CAL]])
            assert np.array_equal(np.concatenate(_run(small, july[perm[N_CAL:]])), stream_p)
            assert small.max_log10_martingale_ == m.max_log10_martingale_
        bins += np.bincount(np.minimum((stream_p * 20).astype(np.intp), 19), minlength=20)
        if r < KS_STREAMS:
            p_values.append(stream_p)
        sup_log10[r] = m.max_log10_martingale_
        alarmed[r] = m.alarmed_
    print(f"\nJuly flights: {n} rows ({np.unique(july).size} distinct scores), {STREAMS} permutations")
    for c in VILLE_LEVELS:
        count = int((sup_log10 >= math.log10(c)).sum())
        limit = int(binom.ppf(1.0 - FAIL_RATE, STREAMS, 1.0 / c))
        share = count / STREAMS
        print(
            f"  sup S ≥ {c:>5g}: {count:3d}/{STREAMS} = {share:.4f}  (≤ 1/c = {1 / c:.3f}; allowed ≤ {limit})"
        )
        assert count <= limit, f"Ville's bound broken at c={c}: {count}/{STREAMS} > {limit}"
    # The alarm flag is the c = 100 crossing itself.
    assert np.array_equal(alarmed, sup_log10 >= 2.0 - 1e-12)

    pooled = np.concatenate(p_values)
    assert pooled.shape[0] == KS_STREAMS * (n - N_CAL) and bins.sum() == STREAMS * (n - N_CAL)
    ks = kstest(pooled, "uniform")
    chi = chisquare(bins)
    shares = bins / bins.sum()
    print(
        f"  p-values: KS on {pooled.shape[0]:,}: D = {ks.statistic:.2e} (p = {ks.pvalue:.3f}); "
        f"20-bin chi-square on {bins.sum():,}: p = {chi.pvalue:.3f}, bin shares "
        f"{shares.min():.5f}-{shares.max():.5f} (0.05 each)"
    )
    assert ks.pvalue >= FAIL_RATE, f"p-values not uniform: KS D={ks.statistic:.3g}, p={ks.pvalue:.3g}"
    assert chi.pvalue >= FAIL_RATE, f"p-values not uniform: chi-square p={chi.pvalue:.3g}"


def _alarms(
    statistic: str, threshold: float, cal: FloatArray, stream: FloatArray, seed: int
) -> npt.NDArray[np.int64]:
    m = ConformalTestMartingale(threshold=threshold, jump=0.01, statistic=statistic, seed=seed)  # type: ignore[arg-type]
    m.fit(cal)
    _run(m, stream)
    return np.asarray(m.alarm_indices_, dtype=np.int64)


DETECTORS = (("cusum", CHANGE_THRESHOLD), ("shiryaev-roberts", CHANGE_THRESHOLD), ("ville", 100.0))


def _delays(
    cal: FloatArray, clean: FloatArray, shifted: FloatArray, seed: int
) -> dict[str, tuple[int, int | None]]:
    """Per detector: alarms on the clean rows, and rows from the shift to the first alarm after it."""
    stream = np.concatenate([clean, shifted])
    out: dict[str, tuple[int, int | None]] = {}
    for statistic, threshold in DETECTORS:
        alarms = _alarms(statistic, threshold, cal, stream, seed)
        after = alarms[alarms >= clean.shape[0]]
        delay = int(after[0]) - clean.shape[0] + 1 if after.size else None
        out[statistic] = (int((alarms < clean.shape[0]).sum()), delay)
    return out


def _fmt(result: tuple[int, int | None]) -> str:
    false_alarms, delay = result
    when = "none" if delay is None else f"{delay:5d} rows ({math.ceil(delay / BATCH)} batches)"
    return f"{when}, {false_alarms} before"


def test_cusum_detects_the_december_shift(scores: FlightScores) -> None:
    december = scores.months["December"]
    real_order = december[: 2 * MAX_DELAY]
    print(f"\nApril → December (c = {CHANGE_THRESHOLD:g} for CUSUM/SR, 100 for Ville): delay after the shift")
    for seed in range(POWER_SEEDS):
        rng = np.random.default_rng([SEED, seed])
        perm = rng.permutation(scores.april.shape[0])
        cal = scores.april[perm[:N_CAL_POWER]]
        clean = scores.april[perm[N_CAL_POWER : N_CAL_POWER + N_CLEAN]]
        real = _delays(cal, clean, real_order, seed)
        shuffled = _delays(cal, clean, rng.permutation(december)[: 2 * MAX_DELAY], seed)
        for name, result in (("real order", real), ("shuffled", shuffled)):
            print(f"  seed {seed} {name:<10} " + " | ".join(f"{k}: {_fmt(v)}" for k, v in result.items()))
        false_alarms, delay = real["cusum"]
        assert false_alarms == 0, f"seed {seed}: CUSUM alarmed {false_alarms} times on clean April rows"
        assert delay is not None and delay <= MAX_DELAY, f"seed {seed}: CUSUM delay {delay}"


def test_month_by_month_stream_is_reported(scores: FlightScores) -> None:
    rng = np.random.default_rng([SEED, 99])
    perm = rng.permutation(scores.april.shape[0])
    cal = scores.april[perm[:N_CAL_POWER]]
    clean = scores.april[perm[N_CAL_POWER : N_CAL_POWER + N_CLEAN]]
    names = list(scores.months)
    stream = np.concatenate([clean, *scores.months.values()])
    edges = np.cumsum([N_CLEAN, *(scores.months[k].shape[0] for k in names)])
    print(f"\nApril (calibration) → {N_CLEAN} clean April rows → May … December in real order:")
    for statistic, threshold in DETECTORS:
        alarms = _alarms(statistic, threshold, cal, stream, seed=0)
        per_month = np.bincount(np.searchsorted(edges, alarms, side="right"), minlength=len(edges))
        cells = ", ".join(f"{name[:3]} {int(k)}" for name, k in zip(["Apr", *names], per_month, strict=True))
        print(f"  {statistic:<16} alarms: {cells}")
        assert per_month[0] == 0, f"{statistic} alarmed on the clean April rows"
