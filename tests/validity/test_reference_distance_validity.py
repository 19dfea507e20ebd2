"""Monte Carlo validity of the reference distance martingale on real embeddings (SHIFT.md §1).

Data: the flights MLP of ``calwatch.datasets.embeddings.flights_mlp_task(seed=0)`` (trained on
January-June 2013; 64-d embedding: its last hidden layer). Score: each row's distance to the
nearest of half the calibration embeddings (:class:`ReferenceDistanceMartingale`).

1. False alarms. R = 200 streams; in stream ``r`` (``numpy.random.default_rng([SEED, r])``)
   4,000 random calibration flights calibrate and 3,000 random in-distribution test flights
   (January-June, disjoint from the training and calibration rows) stream in batches of 500.
   Both are random draws from the same pool, so the stream is exchangeable with the
   calibration rows and Ville's inequality bounds the share of streams whose martingale ever
   reaches c = 20 by 1/c = 0.05. Tolerance: the number of alarmed streams is
   Binomial(R, q) with q ≤ 0.05; it must not exceed the 0.999 quantile of Binomial(200, 0.05)
   (= 22, i.e. 11%), a failure probability ≤ 0.001 for a valid detector.
2. Power, on a real covariate shift: the MNIST CNN of ``calwatch.datasets.digits.digits_task``
   (256-d penultimate layer) calibrated on 2,000 real MNIST digits, then 500 other MNIST
   digits (clean), then scikit-learn's 8×8 digits upsampled to MNIST's format (median
   distance to the reference 17.8 against 13.2 in domain). CUSUM at c = 10⁶ must stay quiet
   on the clean rows (a false alarm there has probability ≤ 500/10⁶) and alarm within the
   first 1,000 shifted rows, for each of 3 seeds (stream order and reference split).
   The flights' October-December shift is not one the distance sees: its distances to the
   reference have the same quantiles as January-June's (0.21 / 0.32 / 0.44 at 10/50/90%), so
   it is not used here; the label-based detectors are the ones for it.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from calwatch.datasets.digits import digits_task
from calwatch.datasets.embeddings import flights_mlp_task
from calwatch.shift import CalibrationData, ReferenceDistanceMartingale

pytestmark = pytest.mark.slow
SEED = 20261122


@pytest.fixture(scope="module")
def task():
    return flights_mlp_task(progress=False)


def _calibrated(task, rng, *, statistic, threshold, seed):
    rows = rng.choice(task.calibration.n, size=4000, replace=False)
    det = ReferenceDistanceMartingale(statistic=statistic, threshold=threshold, seed=seed)
    P = np.full((rows.size, 2), 0.5)
    det.calibrate(CalibrationData(P, task.calibration.y[rows], {}, task.calibration.E[rows]))
    return det


def _alarmed(det, E, batch=500):
    for start in range(0, E.shape[0], batch):
        result = det.observe(np.zeros((min(batch, E.shape[0] - start), 1)), E[start : start + batch])
        if result.alarm:
            return start + batch
    return None


def test_false_alarm_rate_on_exchangeable_streams_is_within_villes_bound(task):
    R, c = 200, 20.0
    alarms = 0
    for r in range(R):
        rng = np.random.default_rng([SEED, r])
        det = _calibrated(task, rng, statistic="ville", threshold=c, seed=r)
        test = task.tests["in-distribution"]
        rows = rng.choice(test.n, size=3000, replace=False)
        alarms += _alarmed(det, test.E[rows]) is not None
    limit = binom.ppf(0.999, R, 1 / c)
    print(f"reference distance: {alarms}/{R} exchangeable streams alarmed at c={c:g} (bound {R / c:.0f})")
    assert alarms <= limit


def test_alarms_on_a_real_covariate_shift():
    digits = digits_task()
    K = len(digits.classes)
    for seed in range(3):
        rng = np.random.default_rng([SEED, 1000 + seed])
        det = ReferenceDistanceMartingale(statistic="cusum", threshold=1e6, seed=seed)
        cal = digits.calibration
        det.calibrate(CalibrationData(np.full((cal.n, K), 1 / K), cal.y, {}, cal.E))
        clean = digits.tests["in-distribution"].E[rng.permutation(digits.tests["in-distribution"].n)[:500]]
        assert _alarmed(det, clean, batch=100) is None
        shifted = digits.tests["shifted"].E[rng.permutation(digits.tests["shifted"].n)]
        delay = _alarmed(det, shifted, batch=100)
        print(f"seed {seed}: CUSUM alarm after {delay} upsampled scikit-learn digits")
        assert delay is not None and delay <= 1000
