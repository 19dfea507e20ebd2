"""Tests of whole buckets against the calibration data, with a false-alarm bound over every look.

A prediction log monitored on Spark or out of core arrives as buckets (a day, an hour) whose rows
have no order the detectors could follow, and whose statistics are sums (``calwatch.scale``). Two
tests need nothing more than such sums, so they run on any path:

* **Confidence against calibration** (label-free): the Mann–Whitney rank-sum of a bucket's
  confidence scores ``s = 1 − max p`` against the calibration set's,
  ``U = Σ_i [#{cal < s_i} + ½·#{cal = s_i}]``, a sum over rows. Under the null (the bucket's rows
  exchangeable with the calibration rows) ``E U = m n / 2`` and
  ``Var U = m n (m + n + 1) / 12`` less a tie correction, so the standardised ``z`` with the
  untied variance is conservative; it alarms, two-sided, when ``|z|`` passes the normal quantile
  at the look's level. The variance includes the calibration sample's own randomness, so the
  test holds for buckets of any size.
* **Coverage against its promise** (labelled rows): a set calibrator promising ``1 − α`` misses
  at most the rate ``α'`` that its calibration size allows with probability ``1 − δ_cal``
  (:func:`~calwatch.engine.shift.betting.calibration_null_rate`); a bucket whose labelled rows
  miss ``x`` of ``n`` alarms when ``P(Bin(n, α') ≥ x)`` falls below the look's level.

**Anytime control.** Look ``k`` (counting every look of every test, each bucket and each new
batch of labels) is tested at level ``α_k = 6δ / (π² k²)``; since ``Σ_k α_k = δ``, the
probability of any false alarm, over every look however many there are, is at most ``δ`` (plus
``δ_cal`` for the coverage test's null rate). The union bound needs no independence between
looks, which share the calibration set.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
#: The default bound on any false alarm over all looks.
DEFAULT_DELTA = 0.01
#: Rows a bucket needs before its rank test is trusted (the normal approximation).
MIN_ROWS = 20


def mid_rank_sum(reference_sorted: FloatArray, scores: FloatArray) -> float:
    """``Σ_i [#{r < s_i} + ½·#{r = s_i}]`` over ``scores`` against the sorted reference.

    Every term is a multiple of ½, so sums of up to 2⁵² stay exact in float64: a bucket's value
    is the same however its rows were split and summed.

    Examples
    --------
    >>> mid_rank_sum(np.array([0.1, 0.2, 0.2, 0.5]), np.array([0.2, 0.6, 0.0]))
    6.0
    """
    left = np.searchsorted(reference_sorted, scores, side="left")
    right = np.searchsorted(reference_sorted, scores, side="right")
    return float(left.sum() + 0.5 * (right - left).sum())


def confidence_rank_sums(
    reference_sorted: FloatArray, P: FloatArray, groups: npt.NDArray[np.intp], n_groups: int
) -> FloatArray:
    """:func:`mid_rank_sum` of each group's confidence scores ``1 − max_c P`` in one pass.

    ``out[g] == mid_rank_sum(reference_sorted, 1 − P[groups == g].max(axis=1))`` exactly (the
    doubled mid-ranks are integers, summed in int64), for every group ``g < n_groups`` at once:
    a compiled scan (:func:`calwatch.engine.shift.kernels.confidence_mid_ranks`) instead of a
    score array and two ``searchsorted`` calls per group.

    Examples
    --------
    >>> P = np.array([[0.8, 0.2], [0.4, 0.6], [1.0, 0.0]])
    >>> confidence_rank_sums(np.array([0.1, 0.2, 0.2, 0.5]), P, np.array([0, 0, 1]), 2).tolist()
    [4.0, 0.0]
    """
    from calwatch.engine.shift.kernels import confidence_mid_ranks  # compiled on first use

    doubled = np.zeros(n_groups, dtype=np.int64)
    reference = np.ascontiguousarray(reference_sorted, dtype=np.float64)
    bins = int(min(1 << 22, max(1024, 4 * reference.shape[0])))  # about one value a bin, at most
    confidence_mid_ranks(reference, bins, np.ascontiguousarray(P, dtype=np.float64), groups, doubled)
    out: FloatArray = doubled / 2.0
    return out


def rank_sum_z(u: float, m: int, n: int) -> float:
    """The standardised rank-sum: ``(U − mn/2) / sqrt(mn(m + n + 1)/12)`` (untied variance).

    Examples
    --------
    >>> round(rank_sum_z(6.0, 3, 4), 4)
    0.0
    """
    variance = m * n * (m + n + 1) / 12.0
    return (u - m * n / 2.0) / math.sqrt(variance)


def look_level(k: int, delta: float = DEFAULT_DELTA) -> float:
    """The level of look ``k`` (1-based): ``6δ / (π² k²)``, summing to ``δ`` over all looks.

    Examples
    --------
    >>> round(sum(look_level(k, 0.01) for k in range(1, 100_000)), 6)
    0.01
    """
    if k < 1:
        msg = f"k counts looks from 1; got {k}"
        raise ValueError(msg)
    return 6.0 * delta / (math.pi**2 * k * k)


def two_sided_threshold(level: float) -> float:
    """The ``|z|`` a two-sided normal test at ``level`` alarms past."""
    from scipy.special import ndtri  # on first use: `import calwatch` stays fast

    return float(-ndtri(level / 2.0))


def two_sided_log10_p(z: float) -> float:
    """``log10`` of the two-sided normal p-value of ``z``, finite however large ``|z|`` is.

    Examples
    --------
    >>> round(two_sided_log10_p(1.959963984540054), 6) == round(math.log10(0.05), 6)
    True
    >>> two_sided_log10_p(60.0) < -700
    True
    """
    from scipy.special import log_ndtr  # on first use

    return float((math.log(2.0) + log_ndtr(-abs(z))) / math.log(10.0))


def miss_tail(misses: int, n: int, rate: float) -> float:
    """``P(Bin(n, rate) ≥ misses)``: how surprising ``misses`` of ``n`` are at the null miss rate.

    Examples
    --------
    >>> round(miss_tail(3, 10, 0.1), 4)
    0.0702
    """
    from scipy.special import bdtrc  # on first use

    if misses <= 0:
        return 1.0
    return float(bdtrc(misses - 1, n, rate))


__all__ = [
    "DEFAULT_DELTA",
    "MIN_ROWS",
    "confidence_rank_sums",
    "look_level",
    "mid_rank_sum",
    "miss_tail",
    "rank_sum_z",
    "two_sided_log10_p",
    "two_sided_threshold",
]
