"""The bucket tests' statistics by hand and against scipy (calwatch.engine.shift.bucket_tests)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from calwatch.engine.shift.bucket_tests import (
    look_level,
    mid_rank_sum,
    miss_tail,
    rank_sum_z,
    two_sided_threshold,
)


def test_mid_rank_sum_by_hand() -> None:
    reference = np.array([0.1, 0.2, 0.2, 0.5])
    # 0.3 beats 0.1, 0.2, 0.2 -> 3; 0.2 beats 0.1 and ties two -> 1 + 1; 0.05 beats none -> 0
    assert mid_rank_sum(reference, np.array([0.3, 0.2, 0.05])) == 5.0


def test_rank_sum_is_scipys_mann_whitney_u_and_its_z() -> None:
    rng = np.random.default_rng(0)
    reference = np.sort(rng.normal(size=400))
    bucket = rng.normal(0.2, size=150)
    u = mid_rank_sum(reference, bucket)
    scipy_u = stats.mannwhitneyu(bucket, reference, method="asymptotic", use_continuity=False)
    assert u == scipy_u.statistic
    z = rank_sum_z(u, 150, 400)
    assert math.isclose(2 * stats.norm.sf(abs(z)), scipy_u.pvalue, rel_tol=1e-9)


def test_rank_sum_splits_exactly() -> None:
    rng = np.random.default_rng(1)
    reference = np.sort(np.round(rng.random(1000), 3))  # ties on purpose
    scores = np.round(rng.random(10_001), 3)
    whole = mid_rank_sum(reference, scores)
    parts = sum(mid_rank_sum(reference, part) for part in np.array_split(scores, 7))
    assert whole == parts  # halves add exactly


def test_look_levels_spend_delta_and_thresholds() -> None:
    assert look_level(1, 0.01) == pytest.approx(6 * 0.01 / math.pi**2)
    assert sum(look_level(k, 0.05) for k in range(1, 200_000)) < 0.05
    assert two_sided_threshold(0.05) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError, match="k counts looks from 1"):
        look_level(0)


def test_miss_tail_is_the_binomial_upper_tail() -> None:
    for misses, n, rate in [(0, 10, 0.1), (1, 10, 0.1), (30, 200, 0.1), (200, 200, 0.5)]:
        expected = 1.0 if misses == 0 else stats.binom.sf(misses - 1, n, rate)
        assert miss_tail(misses, n, rate) == pytest.approx(expected, rel=1e-12)
